// op_regression: an operator whose time per call (total_ns / count) rose against its own
// robust baseline, on one rank or on all of them. Each (op, rank) series has a
// PersistenceTracker (baseline = median of past healthy samples after warm-up; opens when
// fireCount of the last `window` samples exceed it by max(minExcess, noiseSigmas * sigma)); a
// job-level tracker follows the median across ranks. When at least jobWideFraction of the
// ranks move together the regression is reported once with every rank; otherwise per rank.
// Ops missing from a report (top-N truncation) are simply not sampled that step. Memory is
// bounded by maxOpsPerJob. Used from the caller's thread only.
#pragma once

#include <cstdint>
#include <map>
#include <string>

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

private:
  struct RankSeries {
    explicit RankSeries(const PersistenceOptions& o) : tracker(o) {}
    PersistenceTracker tracker;
    std::string node;
    bool open = false;
    Anomaly anomaly;
  };
  struct OpState {
    explicit OpState(const PersistenceOptions& o) : job(o) {}
    PersistenceTracker job;
    bool jobOpen = false;
    Anomaly jobAnomaly;
    std::map<uint32_t, RankSeries> ranks;
    int64_t lastSeenStep = -1;
  };

  void evict(int64_t step);

  std::string job_;
  OpRegressionOptions o_;
  EventLog* log_;
  std::map<std::string, OpState> ops_;
};

}  // namespace trainscope::detect
