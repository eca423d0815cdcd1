#include "collector/detect/step_shift.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "collector/detect/cpu_contention.h"

namespace trainscope::detect {

namespace {
constexpr size_t kRecent = 128;
constexpr size_t kOutliers = 16;
}  // namespace

StepShiftCore::StepShiftCore(const StepShiftOptions& options)
    : o_(options),
      ref_(static_cast<size_t>(std::max(1, options.baselineSize))),
      recentSteps_(kRecent),
      recentValues_(kRecent),
      outlierSteps_(kOutliers),
      outlierValues_(kOutliers) {}

void StepShiftCore::refreshReference() {
  std::vector<double> v = ref_.values();
  refMedian_ = median(v);
  refSigma_ = std::max(kMadToSigma * mad(v, refMedian_), o_.minRelSigma * std::fabs(refMedian_));
  if (refSigma_ <= 0.0) refSigma_ = 1e-9;
}

bool StepShiftCore::predictedSpike(int64_t step) const {
  if (period_ <= 0 || lastSpike_ < 0) return false;
  // Near a multiple of the period after the last spike, never right after it: a step next to
  // a spike must not count as the next one (that would chain through a real shift).
  int64_t d = step - lastSpike_;
  if (d < period_ - o_.spikeJitter) return false;
  int64_t r = d % period_;
  return r <= o_.spikeJitter || period_ - r <= o_.spikeJitter;
}

StepShiftCore::Event StepShiftCore::notePossibleSpike(int64_t step, double value) {
  Event ev;
  outlierSteps_.push(step);
  outlierValues_.push(value);
  size_t need = static_cast<size_t>(std::max(3, o_.spikeRepeats));
  if (period_ > 0 || outlierSteps_.size() < need) return ev;
  size_t n = outlierSteps_.size();
  int64_t firstGap = outlierSteps_[n - need + 1] - outlierSteps_[n - need];
  if (firstGap < o_.spikeMinPeriod) return ev;
  std::vector<double> gaps;
  for (size_t i = n - need + 1; i < n; ++i) {
    int64_t g = outlierSteps_[i] - outlierSteps_[i - 1];
    if (std::llabs(g - firstGap) > o_.spikeJitter) return ev;
    gaps.push_back(static_cast<double>(g));
  }
  period_ = static_cast<int64_t>(std::llround(median(gaps)));
  lastSpike_ = step;
  std::vector<double> vals;
  for (size_t i = n - need; i < n; ++i) vals.push_back(outlierValues_[i]);
  ev.type = EventType::kPeriodicSpike;
  ev.onsetStep = outlierSteps_[n - need];
  ev.period = period_;
  ev.spikeValue = median(vals);
  ev.before = refMedian_;
  ev.after = ev.spikeValue;
  ev.spikes = static_cast<int>(need);
  return ev;
}

void StepShiftCore::rebaseline() {
  ref_.clear();
  lagged_.clear();
  shifted_ = false;
  sPlus_ = sMinus_ = 0.0;
  seen_ = o_.warmupSteps;  // the next steps learn the new reference
}

StepShiftCore::Event StepShiftCore::push(int64_t step, double value) {
  Event none;
  ++seen_;
  if (seen_ <= o_.warmupSteps || !std::isfinite(value)) return none;
  if (ref_.size() < static_cast<size_t>(std::max(2, o_.baselineSteps))) {
    ref_.push(value);
    refreshReference();
    return none;
  }

  double level = shifted_ ? shiftLevel_ : refMedian_;
  double z = (value - refMedian_) / refSigma_;
  bool outlier = shifted_ ? value > o_.spikeMinRatio * std::max(level, refMedian_)
                          : (z > o_.spikeZ && value > o_.spikeMinRatio * refMedian_);

  // A known checkpoint step: neither a shift nor part of the reference.
  if (outlier && predictedSpike(step)) {
    lastSpike_ = step;
    return none;
  }
  Event stopped;
  if (period_ > 0 && lastSpike_ >= 0 && step - lastSpike_ > 3 * period_ + o_.spikeJitter) {
    period_ = 0;
    outlierSteps_.clear();
    outlierValues_.clear();
    stopped.type = EventType::kSpikesStopped;
    stopped.onsetStep = step;
  }
  if (outlier && !shifted_) {
    Event ev = notePossibleSpike(step, value);
    if (ev.type != EventType::kNone) return ev;  // this outlier completed the pattern
  }
  recentSteps_.push(step);
  recentValues_.push(value);

  if (!shifted_) {
    double zc = std::clamp(z, -o_.zClip, o_.zClip);
    if (sPlus_ <= 0.0 && zc - o_.cusumK > 0.0) plusStart_ = step;
    if (sMinus_ <= 0.0 && -zc - o_.cusumK > 0.0) minusStart_ = step;
    sPlus_ = std::max(0.0, sPlus_ + zc - o_.cusumK);
    sMinus_ = std::max(0.0, sMinus_ - zc - o_.cusumK);
    int dir = sPlus_ > o_.cusumH ? +1 : (sMinus_ > o_.cusumH ? -1 : 0);
    if (dir != 0) {
      // The CUSUM start is where the excursion began, which a noisy step just before the
      // change can pull early; a least-squares split around it places the onset.
      int64_t start = dir > 0 ? plusStart_ : minusStart_;
      std::vector<double> around;
      std::vector<int64_t> aroundSteps;
      for (size_t i = 0; i < recentSteps_.size(); ++i) {
        if (recentSteps_[i] >= start - 10) {
          around.push_back(recentValues_[i]);
          aroundSteps.push_back(recentSteps_[i]);
        }
      }
      // A checkpoint step inside the excursion (a small real shift plus one 2.5x spike can
      // cross cusumH at the spike) must not place the split or set the level: steps above
      // spikeMinRatio x the excursion's median are left out, which keeps a real large shift
      // (whose steps are all high) whole.
      std::vector<double> excursion;
      for (size_t i = 0; i < around.size(); ++i) {
        if (aroundSteps[i] >= start) excursion.push_back(around[i]);
      }
      if (dir > 0 && !excursion.empty()) {
        const double cap = o_.spikeMinRatio * std::max(median(excursion), refMedian_);
        size_t kept = 0;
        for (size_t i = 0; i < around.size(); ++i) {
          if (around[i] > cap) continue;
          around[kept] = around[i];
          aroundSteps[kept] = aroundSteps[i];
          ++kept;
        }
        around.resize(kept);
        aroundSteps.resize(kept);
      }
      size_t split = bestSplit(around, dir);
      int64_t onset = aroundSteps.empty() ? start : aroundSteps[split];
      std::vector<double> since(around.begin() + static_cast<std::ptrdiff_t>(split), around.end());
      double after = median(since);
      double ratio = refMedian_ != 0.0 ? after / refMedian_ : 1.0;
      if (since.empty()) {
        // Nothing but outliers to place it (cannot happen with a non-empty excursion): wait.
      } else if (std::fabs(ratio - 1.0) < o_.minShift) {
        // Statistically clear but too small to matter (a very steady job): start over.
        (dir > 0 ? sPlus_ : sMinus_) = 0.0;
      } else {
        Event ev;
        ev.type = EventType::kShift;
        ev.onsetStep = onset;
        ev.before = refMedian_;
        ev.after = after;
        ev.cusum = dir > 0 ? sPlus_ : sMinus_;
        ev.direction = dir;
        shifted_ = true;
        shiftLevel_ = after;
        shiftOnset_ = onset;
        direction_ = dir;
        lagged_.clear();
        outlierSteps_.clear();
        outlierValues_.clear();
        return ev;
      }
    }
    if (!outlier) {
      lagged_.push_back(value);
      if (lagged_.size() > static_cast<size_t>(std::max(0, o_.baselineLag))) {
        double v = lagged_.front();
        lagged_.pop_front();
        // Only steps from a calm stretch join the reference.
        if (std::max(sPlus_, sMinus_) < o_.cusumH / 2) {
          ref_.push(v);
          if (seen_ % 8 == 0) refreshReference();
        }
      }
    }
    return stopped;
  }

  // Shifted: follow the new level and watch for the way back.
  std::vector<double> since;
  std::vector<int64_t> sinceSteps;
  for (size_t i = 0; i < recentSteps_.size(); ++i) {
    if (recentSteps_[i] >= shiftOnset_) {
      since.push_back(recentValues_[i]);
      sinceSteps.push_back(recentSteps_[i]);
    }
  }
  size_t r = static_cast<size_t>(std::max(3, o_.resolveWindow));
  if (since.size() < r + 1) return stopped;
  std::vector<double> last(since.end() - static_cast<std::ptrdiff_t>(r), since.end());
  double m = median(last);
  shiftLevel_ = median(since);
  if (std::fabs(m - refMedian_) < 0.5 * std::fabs(shiftLevel_ - refMedian_)) {
    size_t from = since.size() > 2 * r ? since.size() - 2 * r : 0;
    std::vector<double> tail(since.begin() + static_cast<std::ptrdiff_t>(from), since.end());
    size_t split = bestSplit(tail, -direction_);
    Event ev;
    ev.type = EventType::kShiftResolved;
    ev.onsetStep = sinceSteps[from + split];
    // The level left behind: the shifted steps before the return, not the mixed window.
    std::vector<double> shiftedPart(since.begin(),
                                    since.begin() + static_cast<std::ptrdiff_t>(from + split));
    ev.before = shiftedPart.empty() ? shiftLevel_ : median(shiftedPart);
    ev.after = refMedian_;
    ev.direction = -direction_;
    shifted_ = false;
    sPlus_ = sMinus_ = 0.0;
    lagged_.clear();
    return ev;
  }
  return stopped;
}

StepShiftDetector::StepShiftDetector(std::string job, const StepShiftOptions& options,
                                     EventLog* log)
    : job_(std::move(job)), o_(options), log_(log), core_(options) {}

void StepShiftDetector::onStep(const AssembledStep& step) {
  std::vector<double> durations;
  std::vector<uint32_t> ranks;
  std::vector<std::string> nodes;
  // The wait for a CPU of the rank the others waited for: the one with the longest own time
  // (the step less its exposed communication). In a synchronous job the step goes at that
  // rank's pace, so its wait is the part of the step the host took (the median rank's is not:
  // with one of two ranks starved it is half the starved rank's).
  double criticalWait = 0;
  double criticalOwn = -1;
  for (const RankStep& r : step.ranks) {
    if (r.report.duration_ns() > 0) {
      durations.push_back(static_cast<double>(r.report.duration_ns()));
      const double own = static_cast<double>(r.report.duration_ns() - r.report.exposed_comm_ns());
      if (own > criticalOwn) {
        criticalOwn = own;
        criticalWait = static_cast<double>(r.report.cpu_wait_ns());
      }
      anyWait_ = anyWait_ || r.report.cpu_wait_ns() > 0;
    }
    nodes.push_back(r.ctx.node);
  }
  if (durations.empty()) return;
  waitSteps_.push(step.step);
  waits_.push(criticalWait);
  for (uint32_t i = 0; i < std::max<uint32_t>(step.worldSize, 1); ++i) ranks.push_back(i);
  StepShiftCore::Event ev = core_.push(step.step, median(durations));
  switch (ev.type) {
    case StepShiftCore::EventType::kNone:
      return;
    case StepShiftCore::EventType::kShift: {
      if (ev.direction < 0) {
        core_.rebaseline();  // faster: nothing to act on (see step_shift.h)
        return;
      }
      // The ranks' wait for a CPU before the onset and since (cpu_contention.h).
      std::vector<double> before;
      std::vector<double> since;
      for (size_t i = 0; i < waits_.size(); ++i) {
        (waitSteps_[i] < ev.onsetStep ? before : since).push_back(waits_[i]);
      }
      const double waitBefore = before.empty() ? 0.0 : median(std::move(before));
      const double waitSince = since.empty() ? 0.0 : median(std::move(since));
      const double added = ev.after - ev.before;
      if (anyWait_ &&
          hostWeather(added, waitSince - waitBefore, ev.after - waitSince, ev.before - waitBefore,
                      ev.before > 0 ? waitBefore / ev.before : 0.0)) {
        ++hostWeather_;
        core_.rebaseline();
        return;
      }
      Anomaly a;
      a.job = job_;
      a.kind = AnomalyKind::kStepShift;
      a.ranks = ranks;
      a.nodes = nodes;
      a.onsetStep = ev.onsetStep;
      a.detectedStep = step.step;
      a.detectedNs = step.nowNs;
      a.magnitude = ev.before > 0 ? ev.after / ev.before : 1.0;
      double sizeInSigmas =
          std::fabs(ev.after - ev.before) / std::max(core_.referenceSigma(), 1e-9);
      a.confidence = std::min(1.0, 0.5 + sizeInSigmas / 20.0);
      a.evidence = {{"baseline_ms", ev.before / 1e6},
                    {"current_ms", ev.after / 1e6},
                    {"ratio", a.magnitude},
                    {"sigma_ms", core_.referenceSigma() / 1e6},
                    {"cusum", ev.cusum},
                    {"direction", ev.direction},
                    {"added_ms_per_step", added / 1e6}};
      a.labels = {{"direction", ev.direction > 0 ? "slower" : "faster"}};
      a.summary = std::string("job step time ") + (ev.direction > 0 ? "rose" : "fell") + " from " +
                  formatMs(ev.before) + " to " + formatMs(ev.after) + " (" +
                  formatRatio(a.magnitude) + ") from step " + std::to_string(ev.onsetStep);
      if (anyWait_) {
        a.evidence["cpu_wait_ms"] = waitSince / 1e6;
        a.evidence["baseline_cpu_wait_ms"] = waitBefore / 1e6;
        if (waitExplains(added, waitSince - waitBefore)) {
          a.labels["cause"] = "cpu_contention";
          a.summary += "; the ranks waited " + formatMs(waitSince - waitBefore) +
                       " more a step for a CPU: their hosts got busier";
        }
      }
      open_ = log_->open(std::move(a), ev.direction > 0 ? "up" : "down");
      hasOpen_ = true;
      return;
    }
    case StepShiftCore::EventType::kShiftResolved:
      if (hasOpen_) {
        open_.evidence["resolved_ms"] = ev.after / 1e6;
        log_->resolve(open_, ev.onsetStep, step.nowNs);
        hasOpen_ = false;
      }
      return;
    case StepShiftCore::EventType::kPeriodicSpike: {
      if (spikeReported_) return;
      Anomaly a;
      a.job = job_;
      a.kind = AnomalyKind::kSpike;
      a.ranks = ranks;
      a.nodes = nodes;
      a.onsetStep = ev.onsetStep;
      a.detectedStep = step.step;
      a.detectedNs = step.nowNs;
      a.magnitude = ev.before > 0 ? ev.spikeValue / ev.before : 1.0;
      a.confidence = std::min(1.0, 0.5 + 0.1 * ev.spikes);
      a.evidence = {{"period_steps", static_cast<double>(ev.period)},
                    {"spike_ms", ev.spikeValue / 1e6},
                    {"baseline_ms", ev.before / 1e6},
                    {"ratio", a.magnitude},
                    {"spikes", ev.spikes}};
      a.summary = "periodic spike every " + std::to_string(ev.period) +
                  " steps: " + formatMs(ev.spikeValue) + " vs " + formatMs(ev.before) + " (" +
                  formatRatio(a.magnitude) + "); left out of regression baselines";
      // 'p', not "p": GCC 12 at -O3 reports a false -Wrestrict for a one-character literal
      // prepended to a temporary string (GCC PR105651), which breaks release builds.
      spike_ = log_->open(std::move(a), 'p' + std::to_string(ev.period));
      spikeReported_ = true;
      spikeOpen_ = true;
      return;
    }
    case StepShiftCore::EventType::kSpikesStopped:
      if (spikeOpen_) {
        log_->resolve(spike_, ev.onsetStep, step.nowNs);
        spikeOpen_ = false;
      }
      return;
  }
}

}  // namespace trainscope::detect
