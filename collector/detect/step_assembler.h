// Collects one job's step reports, which arrive from different ranks in any order and late,
// into complete steps handed out in step order. A step is complete when every rank reported
// it. Otherwise it is handed out without the missing ranks once a report `graceSteps` later
// arrived and every missing rank either reported a later step (its report for this one was
// lost) or has been silent for graceSteps typical step times (at least silentFloorNs) while
// other ranks of its node kept arriving (collector clock). A rank that is merely behind and
// still reporting is waited for: a probe that drains in bursts (the simulator's --fast mode, a
// busy node) sends dozens of steps at once, and judging the step without it would drop its
// reports as late. A rank whose whole node is quiet is waited for too (up to
// maxPendingSteps): one agent's batch that lags the other's, a spool replaying after a
// reconnect, is late delivery, not a silent rank; judged without that node's ranks a step
// reads as slower collectives on the other node's.
// Memory is bounded by maxPendingSteps. A job restarted from a checkpoint under the same id
// reports steps below those already handed out, but with end times later than any seen (a
// replay's are older); after max(16, 2 x world size) such reports in a row the assembler
// starts over from there.
// Used from the caller's thread only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "collector/detect/anomaly.h"
#include "collector/detect/options.h"
#include "schema/trainscope.pb.h"

namespace trainscope::detect {

struct RankStep {
  wire::StepReport report;
  RankContext ctx;
};

struct AssembledStep {
  std::string job;
  int64_t step = 0;
  uint32_t worldSize = 0;
  std::vector<RankStep> ranks;  // sorted by rank; fewer than worldSize when some were late
  std::vector<uint8_t> seen;    // while pending: 1 for each rank already in `ranks`
  int64_t nowNs = 0;            // collector clock of the latest report of the step
  bool partial() const { return ranks.size() < worldSize; }
};

// Median compute_ns over the step's ranks that report compute (0 when none): the job's
// compute this step, which op_regression and slow_comm both compare against. `scratch` is the
// caller's buffer (capacity kept between steps).
double medianComputeNs(const AssembledStep& step, std::vector<double>* scratch);

struct AssemblyStats {
  uint64_t reports = 0;
  uint64_t duplicates = 0;    // same (rank, step) twice (replays)
  uint64_t late = 0;          // for a step already handed out
  uint64_t partialSteps = 0;  // handed out without every rank
  uint64_t droppedSteps = 0;  // forced out with too few ranks to judge
  uint64_t rewinds = 0;       // the job started over at a lower step (restart from checkpoint)
};

class StepAssembler {
 public:
  StepAssembler(std::string job, const AssemblyOptions& options);

  // Adds one report; appends the steps this completes, in order, to `out`.
  void add(const wire::StepReport& report, const RankContext& ctx, uint32_t worldSize,
           std::vector<AssembledStep>* out);
  // The same, taking the report over instead of copying it.
  void add(wire::StepReport&& report, const RankContext& ctx, uint32_t worldSize,
           std::vector<AssembledStep>* out);
  // Hands out every pending step (e.g. when the job ended).
  void flush(std::vector<AssembledStep>* out);
  // Takes judged steps back and empties `done`: their reports are freed, and the rank arrays
  // are kept for the next steps. At 1,024 ranks an array is ~300 KiB; allocating and freeing
  // one per step (and growing it report by report) made glibc consolidate its free lists
  // every step, a third of the detectors' cost per report.
  void recycle(std::vector<AssembledStep>& done);

  const AssemblyStats& stats() const { return stats_; }
  // Latest end time of an accepted report (collector clock); 0 before the first.
  int64_t latestEndNs() const { return maxEndNs_; }
  size_t pendingSteps() const { return pending_.size(); }

 private:
  void release(std::map<int64_t, AssembledStep>::iterator it, std::vector<AssembledStep>* out);

  std::string job_;
  AssemblyOptions o_;
  std::map<int64_t, AssembledStep> pending_;
  int64_t lastReleased_ = -1;  // steps at or below were handed out
  int64_t maxSeen_ = -1;
  uint64_t consecutiveLate_ = 0;  // restart-like reports in a row (see add)
  int64_t maxEndNs_ = 0;          // latest end time of an accepted report (collector clock)
  bool missingMayBeLeftOut(const AssembledStep& s) const;
  // Notes that a report of `rank` from `node` arrived at `nowNs`.
  void noteArrival(uint32_t rank, const std::string& node, int64_t nowNs);
  std::vector<std::vector<RankStep>> spare_;  // emptied rank arrays, capacity kept (<= 2)
  std::vector<int64_t> rankMax_;              // per rank: highest step it reported (-1: none)
  std::vector<int64_t> rankLastNs_;           // per rank: collector clock of its latest report
  std::vector<int32_t> rankNode_;             // per rank: index in nodeNames_ (-1: none yet)
  std::vector<std::string> nodeNames_;        // nodes seen ("" for reports without one)
  std::vector<int64_t> nodeLastNs_;           // per node: collector clock of its latest report
  int64_t firstNs_ = 0;                       // collector clock of the job's first report
  int64_t latestNs_ = 0;                      // collector clock of the job's latest report
  double stepNs_ = 0.0;                       // typical step duration (moving average)
  AssemblyStats stats_;
};

}  // namespace trainscope::detect
