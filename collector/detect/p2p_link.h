// Slow pipeline links: one point-to-point link (rank R's sends to rank Q in a pipeline
// group) whose transfers take longer than those of the other links of the job, reported as
// slow_comm with scope "link", naming both ranks. Used from the caller's thread only.
//
// Method. A pipeline stage posts its send when a microbatch is done; the send completes when
// the data is through, while the receiver's wait also holds the bubble (the time the data
// took to be produced), so the signal is the sender's side: per step and link (sender, peer,
// group) the shortest send of the step (StepReport.p2p min_ns: the one least delayed by the
// receiver not being ready yet, nearest the pure transfer time; total_ns / count when no
// minimum is reported) per byte. Every pipeline link of a job carries the same activations and
// gradients, so a link's peers are the other links of its group name whose ends are as far
// apart as its own (both on one node, or not: an inter-node hop is slower by design); its
// ratio to their median is judged against 1.0 with the persistence test, noise learned from
// the ratios' step-to-step changes (PeerRatioSet), so a link slow from the first step is
// found with its true onset, and a fabric-wide slowdown (every link alike) is not a slow link.
// A slower stage or straggler leaves the sends alone (they wait for nobody); a receiver that
// posts its receives late can lengthen a rendezvous send, which min_ns mostly avoids.
// Without p2p records (a job that does not call ts_p2p) the detector does nothing. Memory is
// bounded by maxLinks.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "collector/detect/events.h"
#include "collector/detect/options.h"
#include "collector/detect/peer_ratio.h"
#include "collector/detect/robust.h"
#include "collector/detect/step_assembler.h"

namespace trainscope::detect {

class P2pLinkDetector {
 public:
  P2pLinkDetector(std::string job, const P2pLinkOptions& options, EventLog* log);
  void onStep(const AssembledStep& step);
  size_t trackedLinks() const { return links_.size(); }

 private:
  struct Link {
    uint32_t sender = 0;
    uint32_t peer = 0;
    std::string group;
    size_t peerSet = 0;         // index into sets_
    Ring<double> perCall;       // send time per call (ns)
    Ring<double> peersPerCall;  // its peers' median per call (ns), the same steps
    double calls = 0;           // sends in its latest step
    double bytesPerCall = 0;
    bool open = false;
    Anomaly anomaly;
  };
  void onOpen(Link& link, const PersistenceTracker& tracker, const PeerRatioSet& set, size_t peers,
              const AssembledStep& step);

  std::string job_;
  P2pLinkOptions o_;
  EventLog* log_;
  std::map<std::tuple<uint32_t, uint32_t, std::string>, size_t> index_;  // -> links_
  std::vector<Link> links_;
  std::map<std::string, size_t> setIndex_;  // "group|intra" / "group|inter" -> sets_
  std::vector<std::unique_ptr<PeerRatioSet>> sets_;
  std::vector<std::string> nodes_;  // by rank: its node ("" unknown)
};

}  // namespace trainscope::detect
