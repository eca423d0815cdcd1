// slow_comm: a collective key (op, group, bytes) whose transfer time per call rose against
// its own baseline while the compute of its ranks did not.
//
// Method. In a synchronous collective every participant's measured time (arrival to
// completion) includes waiting for the last one to arrive, so a straggler inflates everyone
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
// Naming. The anomaly names the key's participating ranks and their nodes. Within them, ranks
// whose completion comes rankSkew (of the transfer time) later than their peers' after the
// last arrival (clock-aligned with RankContext.clockOffsetNs) are named as the slow end when
// there are any. The link is named when it can be told: both ends of a SEND/RECV pair, or the
// two nodes when the group spans exactly two. Limits: a ring all-reduce over many nodes
// finishes at the same moment everywhere, so one bad link inside it is attributed to the whole
// group; comparing groups that share ranks (e.g. per-node and cross-node groups) narrows it
// down and is left to the reader of the evidence. Used from the caller's thread only.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

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

private:
  struct KeyState {
    explicit KeyState(const SlowCommOptions& o) : tracker(o.persistence) {}
    PersistenceTracker tracker;
    int64_t lastSeenStep = -1;
    std::map<uint32_t, Ring<double>> skew;   // per rank: completion lag after peers / transfer
    std::map<uint32_t, std::string> nodes;
    bool open = false;
    Anomaly anomaly;
    int op = 0;
    std::string group;
    uint64_t bytes = 0;
  };

  void evict(int64_t step);

  std::string job_;
  SlowCommOptions o_;
  EventLog* log_;
  std::map<std::string, KeyState> keys_;
  Ring<double> compute_;   // median compute across ranks per step (job-wide)
};

}  // namespace trainscope::detect
