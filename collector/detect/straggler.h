// straggler: the rank the others wait for. In a synchronous job every rank's step takes the
// same wall time and healthy ranks spend their extra time waiting inside collectives, so the
// step duration cannot tell who is slow; each rank's compute_ns can. Per step the detector
// takes ratio = rank compute / median compute of its peers (the other ranks) and runs a CUSUM
// on the ratio's excess over 1 + minExcess in units of sigma (PersistenceOptions), sigma
// being the job-wide robust spread of the ratios (median over recent steps of 1.4826*MAD
// across ranks) — so the level adapts to a noisier job. A job-wide slowdown moves every rank
// and its peers together and leaves the ratios at 1. The first collective arrival of the rank
// relative to the median arrival (node clocks aligned with RankContext.clockOffsetNs) is kept
// as supporting evidence (a straggler arrives last). Limits: needs compute_ns from the probe
// and at least minRanks ranks; a rank slow from its very first step is still found, since the
// baseline is its peers, not its own past. Used from the caller's thread only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "collector/detect/events.h"
#include "collector/detect/options.h"
#include "collector/detect/robust.h"
#include "collector/detect/step_assembler.h"

namespace trainscope::detect {

class StragglerDetector {
 public:
  StragglerDetector(std::string job, const StragglerOptions& options, EventLog* log);
  void onStep(const AssembledStep& step);

 private:
  struct RankState {
    explicit RankState(const StragglerOptions& o)
        : tracker(o.persistence, 1.0),
          compute(static_cast<size_t>(std::max(1, o.persistence.window))),
          peer(static_cast<size_t>(std::max(1, o.persistence.window))),
          arrivalLag(static_cast<size_t>(std::max(1, o.persistence.window))) {}
    PersistenceTracker tracker;
    Ring<double> compute;
    Ring<double> peer;
    Ring<double> arrivalLag;
    std::string node;
    bool open = false;
    Anomaly anomaly;
  };

  std::string job_;
  StragglerOptions o_;
  EventLog* log_;
  std::map<uint32_t, RankState> ranks_;
  Ring<double> noise_;
};

}  // namespace trainscope::detect
