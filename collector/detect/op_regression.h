// op_regression: an operator whose time per call (total_ns / count) rose, on one rank or on
// all of them. A rank's series is its per-call time relative to the same op's median over the
// ranks of the step, divided by the rank's compute relative to the median compute (so a job
// that slows as a whole, or a straggler whose every op is slower, raises no op regression);
// the job's series is the op's median per-call time relative to the median compute (so a
// job-wide step-time shift does not either; an op that is a large share of compute shows a
// smaller rise there than it has). Each series has a PersistenceTracker (own baseline after
// warm-up, CUSUM on the excess over minExcess). When the job-level tracker opens, or at least
// jobWideFraction of the ranks rise together, the regression is reported once with every
// rank; otherwise per rank. Evidence gives the raw per-call times in microseconds. Ops missing
// from a report (top-N truncation) are simply not sampled that step. Memory is bounded by
// maxOpsPerJob. Reports whose operators run on a device (StepReport.device, e.g. "cuda") are
// not judged: the probe times their launches on the host, and on a healthy H200 job those
// rose 1.1-6x for stretches of steps while the step time stayed flat (tools/bench/gpu_replay);
// device timings (CUPTI) are not collected. Nor are a rank's operators judged in a step whose
// training thread waited for a CPU for more than maxCpuWaitShare of it (StepReport.cpu_wait_ns:
// an oversubscribed host), or over that share in the median of its last 32 steps, since a
// preemption lands in whichever operator runs. Used from the caller's thread only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collector/detect/cpu_contention.h"
#include "collector/detect/events.h"
#include "collector/detect/options.h"
#include "collector/detect/robust.h"
#include "collector/detect/step_assembler.h"

namespace trainscope::detect {

class OpRegressionDetector {
 public:
  OpRegressionDetector(std::string job, const OpRegressionOptions& options, EventLog* log);
  void onStep(const AssembledStep& step);
  size_t trackedOps() const { return ops_.size(); }
  // Rank steps not sampled: their thread waited for a CPU too long (maxCpuWaitShare).
  uint64_t cpuBoundSkipped() const { return cpuBoundSkipped_; }

 private:
  static constexpr size_t kPerCallHistory = 32;
  static double recentMedian(const Ring<double>& ring, int64_t n);
  struct Sample {
    uint32_t rank;
    double perCall;     // ns
    double count;       // calls this step
    double rankFactor;  // rank compute / median compute of the step
    const std::string* node;
  };
  struct RankSeries {
    explicit RankSeries(const PersistenceOptions& o) : tracker(o) {}
    PersistenceTracker tracker;
    double lastPerCall = 0.0;  // raw per-call ns of the latest sample, for the evidence
                               // (no history per series: memory touched per sample is the cost)
    double lastCount = 0.0;    // calls in the latest sample (added time per step)
    std::string node;
    bool open = false;
    Anomaly anomaly;
  };
  struct OpState {
    explicit OpState(const PersistenceOptions& o) : job(o) {}
    PersistenceTracker job;
    Ring<double> perCall{kPerCallHistory};  // median per-call ns across ranks
    bool jobOpen = false;
    Anomaly jobAnomaly;
    std::vector<std::unique_ptr<RankSeries>> ranks;  // by rank; null until it reports the op
    size_t rankCount = 0;                            // non-null entries of `ranks`
    int64_t lastSeenStep = -1;
    const std::string* name = nullptr;  // its key in ops_
    uint64_t sampledIn = 0;             // serial of the step `samples` is for
    std::vector<Sample> samples;        // this step's, capacity kept
  };

  // onStep, in order: every rank's ops into their OpState's samples, then each op judged.
  void gatherSamples(const AssembledStep& step, double medianCompute);
  // The op at position `at` of a report (see byPosition_), made on first sight.
  OpState& opAt(size_t at, const std::string& name);
  void judgeOp(OpState& op, const AssembledStep& step, double medianCompute);
  // Pushes each rank's sample into its series; returns the ranks whose series opened.
  std::vector<uint32_t> pushRankSeries(OpState& op, double medianCall, const AssembledStep& step);
  // Whether the ranks' rise is job-wide (reported once, by the job-level tracker).
  bool isJobWide(const OpState& op, PersistenceTracker::Transition jobTransition) const;
  void openJobWide(OpState& op, const AssembledStep& step);
  void openRank(OpState& op, uint32_t rank, double medianCall, const AssembledStep& step);

  void evict(int64_t step);
  // Whether this rank's step is not sampled: its thread waited for a CPU over maxCpuWaitShare
  // of it, or of its recent steps (the median of the last kWaitHistory).
  bool cpuBound(const wire::StepReport& r);
  static constexpr size_t kWaitHistory = 32;
  static constexpr uint32_t kMaxWaitRanks = 1u << 20;
  std::vector<WaitShares> waitShares_;  // by rank; empty until some rank waited
  std::vector<double> scratch_;         // per-step medians, capacity kept

  // Ops found by their position in the report: every rank lists them in the same order, so
  // a name compare at the cached position replaces a map search per op per report. Cleared
  // when ops are evicted (the pointers would dangle).
  std::vector<OpState*> byPosition_;
  std::vector<OpState*> touched_;  // ops sampled in the step being judged
  uint64_t serial_ = 0;            // steps judged (a restart may judge a step number again)
  uint64_t cpuBoundSkipped_ = 0;

  std::string job_;
  OpRegressionOptions o_;
  EventLog* log_;
  std::map<std::string, OpState, std::less<>> ops_;  // transparent: found by string_view
};

}  // namespace trainscope::detect
