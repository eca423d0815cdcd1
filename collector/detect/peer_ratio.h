// Ratio-to-peers series of a set of units (workers of one pipeline stage, or the stages of a
// pipeline), each judged against 1.0 by its own PersistenceTracker, with the noise learned from
// the step-to-step changes of the ratios. Used by the layout-aware straggler and the
// stage_imbalance detectors; one instance per peer set, used from the caller's thread.
//
// Why changes, not the spread across units: a peer set may hold two units only (two
// data-parallel replicas of a stage, two stages), and a slow one then doubles the spread
// across them for as long as it stays slow, so a spread-based sigma would hide the very fault
// it measures; a constant slowdown, from the first step or later, moves one change only. The
// sigma is 1.4826 * median |r_t - r_{t-1}| / sqrt(2) per step (median over units), and the
// median of that over the last noiseWindow steps. Until minNoiseSteps changes were seen, the
// ratios are queued and judged once the noise is known, so a fault present from the first step
// keeps its true onset.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "collector/detect/anomaly.h"
#include "collector/detect/options.h"
#include "collector/detect/robust.h"
#include "collector/detect/step_assembler.h"

namespace trainscope::detect {

// Onset, detection step and time, magnitude (the tracker's level) and confidence of a unit
// whose tracker opened while judging `step`, into `a`; the caller fills in the rest.
void fillOpened(const PersistenceTracker& tracker, const AssembledStep& step, Anomaly* a);

class PeerRatioSet {
 public:
  PeerRatioSet(const PersistenceOptions& options, int noiseWindow);

  struct Event {
    size_t unit;
    PersistenceTracker::Transition transition;
  };
  // One step's ratio (unit compute / its peers') of every unit that had peers in it. Appends
  // the units that opened or resolved, in unit order.
  void push(int64_t step, const std::vector<std::pair<size_t, double>>& ratios,
            std::vector<Event>* events);

  const PersistenceTracker& tracker(size_t unit) const { return units_.at(unit).tracker; }
  bool has(size_t unit) const { return units_.count(unit) != 0; }  // it had a ratio once
  double noise() const { return noise_; }                          // 0 until known
  bool ready() const { return ready_; }

  static constexpr size_t kMinNoiseSteps = 4;

 private:
  struct Unit {
    explicit Unit(const PersistenceOptions& o) : tracker(o, 1.0) {}
    PersistenceTracker tracker;
    double last = 0;                                // previous ratio; 0 before the first
    std::deque<std::pair<int64_t, double>> queued;  // judged once the noise is known
  };
  void judge(size_t unit, Unit& u, int64_t step, double ratio, std::vector<Event>* events);

  PersistenceOptions o_;
  std::map<size_t, Unit> units_;
  Ring<double> sigmas_;
  double noise_ = 0;
  bool ready_ = false;
};

}  // namespace trainscope::detect
