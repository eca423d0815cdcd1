// slow_comm: a collective key (op, group, bytes), or one link of a group, whose transfer got
// slower against its own baseline (and, for a link, against its peers) while the compute of
// its ranks did not.
//
// Method, collectives. In a synchronous collective every participant's measured time (arrival
// to completion) includes waiting for the last one to arrive, so a straggler inflates everyone
// else's comm time and bandwidth, and a slow link slows every participant alike. The signal
// used is therefore the key's transfer time: per step, the minimum over participating ranks
// of total_ns / count. The rank that arrived last waited for nobody, so its time is the pure
// transfer time (for several calls per step it is an upper bound, tight when the same rank is
// usually last). A straggler leaves it unchanged; a slow link or NIC raises it. It goes
// through a PersistenceTracker (own robust baseline, CUSUM on the excess over minExcess
// above it); on opening, the median compute of the job since the onset is compared with the
// compute before it, and a rise above maxComputeRise suppresses the report (the whole job
// slowed, not its communication).
//
// Method, links. A ring all-reduce goes at its slowest link, so every rank completes at the
// same moment and completion times cannot tell which link is slow. Per-peer transfer totals
// (StepReport.links: bytes and time in flight, posted to delivered, as NCCL's profiler plugin
// reports proxy sends) can: a slow link or NIC raises its sender's in-flight time per byte,
// while the other links of the ring keep theirs and only wait longer. Per (sender, peer,
// group) link the detector keeps its in-flight ns per byte divided by the median over the
// group's links in the same step ("to peers"), in a PersistenceTracker with its own baseline
// (so links that are always slower, e.g. the inter-node hops of a ring, are judged against
// themselves), and a short history of both values.
//
// Naming. When a key opens, the links of its group are judged over the steps since the onset:
// links whose time per byte rose against their own history AND against their peers (by
// linkRise, or half the collective's own rise when that is smaller) are slow; the slowest is
// named (sender and peer ranks, their nodes, labels["link"] =
// "rank R (nodeA) -> rank P (nodeB)", scope "link"). When at least fabricFraction of the
// links rose against their own history together, the fabric is slow: the group is named
// (scope "fabric"). A link that rises against its own baseline and its peers without its
// key opening (the collective did not slow enough, or another algorithm hides it) is reported
// on its own, unless the key's anomaly already named it. Without link data, ranks whose
// completion comes rankSkew (of the transfer time) later than their peers' after the last
// arrival (clock-aligned with RankContext.clockOffsetNs) are named as the slow end; the link
// is named for both ends of a SEND/RECV pair, or as the two nodes when the group spans
// exactly two; otherwise the group is named.
//
// Partial steps. A step judged without some ranks (their agent's reports came too late) has
// no transfer time for a key those ranks may take part in: its collective samples are skipped
// (see onStep), however many such steps come in a row.
//
// Cost: per report, one tracker push per link and no string building; per step, one median
// per group with links. Memory is bounded by maxKeysPerJob keys, maxLinkGroups groups,
// maxLinksPerJob links and maxLinkRank ranks. Used from the caller's thread only.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "collector/detect/events.h"
#include "collector/detect/options.h"
#include "collector/detect/robust.h"
#include "collector/detect/step_assembler.h"

namespace trainscope::detect {

class SlowCommDetector {
 public:
  SlowCommDetector(std::string job, const SlowCommOptions& options, EventLog* log);
  void onStep(const AssembledStep& step);
  size_t trackedKeys() const { return keys_.size(); }
  size_t trackedLinks() const { return links_; }

 private:
  // A link's verdict over the steps since an onset (see judgeLinks).
  struct LinkVerdict {
    int64_t sender = -1;  // the slowest link that rose against itself and its peers
    uint32_t peer = 0;
    double own = 1.0;      // its in-flight time per byte since the onset / before it
    double toPeers = 1.0;  // the same for its ratio to the group's median link
    double perByteBefore = 0.0;
    double perByteSince = 0.0;
    size_t judged = 0;     // links with enough history on both sides of the onset
    size_t slowed = 0;     // links that rose against themselves and their peers
    size_t ownSlowed = 0;  // links that rose against themselves
    bool fabric = false;   // ownSlowed reached fabricFraction of judged
  };

  struct KeyState {
    explicit KeyState(const SlowCommOptions& o) : tracker(o.persistence) {}
    PersistenceTracker tracker;
    int64_t lastSeenStep = -1;
    size_t participants = 0;  // ranks in its latest full sample (see onStep: partial steps)
    int fewerInARow = 0;      // steps since with fewer participants, not sampled
    // Per rank: completion lag after peers / transfer; skew[i] belongs to skewRanks[i]
    // (sorted).
    std::vector<uint32_t> skewRanks;
    std::vector<Ring<float>> skew;
    bool open = false;
    Anomaly anomaly;
    int op = 0;
    std::string group;
    uint64_t bytes = 0;
    int64_t namedSender = -1;  // the link its anomaly named (covered while it is open)
    uint32_t namedPeer = 0;
  };

  struct LinkSample {
    int64_t step;
    float perByte;  // in-flight ns per byte
    float toPeers;  // perByte / the group's median perByte in that step
  };
  struct LinkState {
    explicit LinkState(const SlowCommOptions& o);
    uint32_t peer = 0;
    int64_t lastSeenStep = -1;
    PersistenceTracker tracker;  // on toPeers
    double lastBytes = 0.0;      // bytes sent in its latest step
    Ring<LinkSample> history;
    bool open = false;     // its own anomaly is open
    bool covered = false;  // a key's open anomaly names it
    Anomaly anomaly;
  };
  struct LinkGroup {
    std::string name;
    int64_t lastSeenStep = -1;
    std::vector<std::vector<LinkState>> bySender;  // index: sender rank
    size_t links = 0;
    struct Pending {
      uint32_t sender;
      uint32_t slot;
      float perByte;
    };
    std::vector<Pending> batch;  // this step's samples (scratch)
    std::vector<float> scratch;  // for the median
  };

  // One rank's totals of a collective key in a step, times on the collector clock.
  struct CallSample {
    uint32_t rank;
    double perCall;  // ns per call
    double count;    // calls
    double arrival;
    double completion;
  };
  // A key's samples in one step (grouped without building the string key per report).
  struct KeySamples {
    std::vector<CallSample> list;
    const wire::CollectiveTotal* proto = nullptr;  // the first rank's total (op, group, bytes)
  };
  using StepKeys = std::map<std::tuple<int, std::string_view, uint64_t>, KeySamples>;
  // Without link data, the ranks whose completion lags their peers' (see slowEnd).
  struct SlowEnd {
    std::vector<uint32_t> ranks;  // lagging by more than rankSkew
    int64_t culprit = -1;         // the one lagging the most
    double culpritSkew = 0.0;
  };

  // onStep, in order: node names, collective samples by key, one key at a time.
  void rememberNodes(const AssembledStep& step);
  static StepKeys collectivesByKey(const AssembledStep& step);
  KeyState& keyFor(const std::string& key, const wire::CollectiveTotal& c, int64_t step);
  // Whether this step's samples of the key are judged (see onStep: partial steps).
  static bool takesSample(KeyState& ks, size_t participants, const AssembledStep& step);
  // The key's transfer time (minimum per-call time); records each rank's completion lag.
  double transferTime(KeyState& ks, const std::vector<CallSample>& list) const;
  void resolveKey(KeyState& ks, const AssembledStep& step);
  // The key's tracker opened: judge the links, name the slow link, fabric or end, and report.
  void onKeyOpened(KeyState& ks, const std::string& key, const std::vector<CallSample>& list,
                   const AssembledStep& step);
  LinkVerdict judgeKeyLinks(const KeyState& ks, const LinkGroup* g, int64_t step) const;
  SlowEnd slowEnd(const KeyState& ks, int64_t step) const;
  // The anomaly's figures (ranks, labels and summary are the naming's).
  Anomaly keyAnomaly(const KeyState& ks, const std::vector<CallSample>& list, size_t members,
                     double computeRatio, const AssembledStep& step) const;
  // Each names the anomaly's subject in its labels and evidence and returns the summary's "who".
  std::string nameLink(KeyState& ks, const LinkVerdict& lv, Anomaly* a);
  std::string nameFabric(const KeyState& ks, const LinkVerdict& lv, size_t members) const;
  std::string nameSlowEnd(const KeyState& ks, const std::vector<uint32_t>& members,
                          const SlowEnd& end, Anomaly* a) const;

  void observeLinks(const AssembledStep& step);
  LinkGroup* groupFor(const std::string& name, int64_t step);
  LinkGroup* findGroup(const std::string& name);
  void onLinkTransition(LinkGroup& g, uint32_t sender, LinkState& ls,
                        PersistenceTracker::Transition t, const AssembledStep& step);
  // Judges the group's links over the steps since `onset`: slow when the time per byte rose
  // `rise` against its own history (and against its peers, for the named link).
  LinkVerdict judgeLinks(const LinkGroup& g, int64_t onset, int64_t step, double rise) const;
  void setCovered(const std::string& group, int64_t sender, uint32_t peer, bool covered);
  double computeRatioSince(int64_t onset, int64_t step) const;
  // Steps since `onset` judged at `step`: at least 3, at most a persistence window.
  size_t stepsSince(int64_t onset, int64_t step) const;
  const std::string& nodeOf(uint32_t rank) const;
  std::string rankWithNode(uint32_t rank) const;  // "rank 5 (node1)"
  std::string linkLabel(uint32_t sender, uint32_t peer) const;
  void evict(int64_t step);

  std::string job_;
  SlowCommOptions o_;
  EventLog* log_;
  std::map<std::string, KeyState> keys_;
  Ring<double> compute_;            // median compute across ranks per step (job-wide)
  std::vector<double> computes_;    // scratch
  std::vector<std::string> nodes_;  // index: rank; "" unknown
  std::vector<LinkGroup> groups_;
  size_t links_ = 0;
  size_t lastGroup_ = 0;  // groups_ index of the previous lookup (links of a job share one)
};

}  // namespace trainscope::detect
