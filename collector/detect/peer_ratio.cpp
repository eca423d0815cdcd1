#include "collector/detect/peer_ratio.h"

#include <algorithm>
#include <cmath>

namespace trainscope::detect {

void fillOpened(const PersistenceTracker& tracker, const AssembledStep& step, Anomaly* a) {
  a->onsetStep = tracker.onsetStep();
  a->detectedStep = step.step;
  a->detectedNs = step.nowNs;
  a->magnitude = tracker.level();
  a->confidence = tracker.confidence();
}

PeerRatioSet::PeerRatioSet(const PersistenceOptions& options, int noiseWindow)
    : o_(options), sigmas_(static_cast<size_t>(std::max(1, noiseWindow))) {}

void PeerRatioSet::judge(size_t unit, Unit& u, int64_t step, double ratio,
                         std::vector<Event>* events) {
  u.tracker.setExternalNoise(noise_);
  auto t = u.tracker.push(step, ratio);
  if (t != PersistenceTracker::Transition::kNone) events->push_back({unit, t});
}

void PeerRatioSet::push(int64_t step, const std::vector<std::pair<size_t, double>>& ratios,
                        std::vector<Event>* events) {
  std::vector<double> changes;
  changes.reserve(ratios.size());
  for (const auto& [unit, ratio] : ratios) {
    auto it = units_.find(unit);
    if (it == units_.end()) it = units_.emplace(unit, Unit(o_)).first;
    if (it->second.last > 0) changes.push_back(std::fabs(ratio - it->second.last));
    it->second.last = ratio;
  }
  if (!changes.empty()) {
    sigmas_.push(kMadToSigma * medianInPlace(changes) / std::sqrt(2.0));
    if (sigmas_.size() >= kMinNoiseSteps) {
      noise_ = median(sigmas_.values());
      ready_ = true;
    }
  }
  for (const auto& [unit, ratio] : ratios) {
    Unit& u = units_.at(unit);
    if (!ready_) {
      // Bounded: a job whose ratios never change twice in a row has nothing to judge anyway.
      if (u.queued.size() >= static_cast<size_t>(std::max(o_.window, 1)) * 4) u.queued.pop_front();
      u.queued.emplace_back(step, ratio);
      continue;
    }
    while (!u.queued.empty()) {
      judge(unit, u, u.queued.front().first, u.queued.front().second, events);
      u.queued.pop_front();
    }
    judge(unit, u, step, ratio, events);
  }
}

}  // namespace trainscope::detect
