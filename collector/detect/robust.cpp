#include "collector/detect/robust.h"

#include <algorithm>
#include <cmath>

#include "common/median.h"

namespace trainscope::detect {

double median(std::vector<double> values) {
  return medianInPlace(values);
}

double medianInPlace(std::vector<double>& values) {
  return trainscope::medianInPlace(values);
}

std::vector<double> mediansOfOthers(const std::vector<double>& values) {
  const size_t n = values.size();
  if (n < 2) return {};
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a] < values[b]; });
  std::vector<double> sorted(n);
  std::vector<size_t> pos(n);
  for (size_t i = 0; i < n; ++i) {
    sorted[i] = values[order[i]];
    pos[order[i]] = i;
  }
  std::vector<double> out(n);
  const size_t m = n - 1;  // the others
  for (size_t i = 0; i < n; ++i) {
    const size_t p = pos[i];
    auto at = [&](size_t k) { return k < p ? sorted[k] : sorted[k + 1]; };
    out[i] = m % 2 == 1 ? at(m / 2) : (at(m / 2 - 1) + at(m / 2)) / 2.0;
  }
  return out;
}

double mad(const std::vector<double>& values, double center) {
  std::vector<double> dev;
  dev.reserve(values.size());
  for (double v : values) dev.push_back(std::fabs(v - center));
  return median(std::move(dev));
}

size_t bestSplit(const std::vector<double>& values, int rising) {
  size_t n = values.size();
  if (n < 2) return 0;
  double total = 0.0;
  for (double v : values) total += v;
  double prefix = 0.0;
  double bestScore = -1.0;
  size_t best = 0;
  for (size_t i = 1; i < n; ++i) {
    prefix += values[i - 1];
    double m1 = prefix / static_cast<double>(i);
    double m2 = (total - prefix) / static_cast<double>(n - i);
    double d = m2 - m1;
    if ((rising > 0 && d <= 0) || (rising < 0 && d >= 0)) continue;
    double score =
        static_cast<double>(i) * static_cast<double>(n - i) / static_cast<double>(n) * d * d;
    if (score > bestScore) {
      bestScore = score;
      best = i;
    }
  }
  return best;
}

PersistenceTracker::PersistenceTracker(const PersistenceOptions& options, double fixedBaseline)
    : o_(options),
      fixedBaseline_(fixedBaseline),
      base_(static_cast<size_t>(std::max(1, options.baselineSize))),
      hist_(static_cast<size_t>(std::max(2, 2 * options.window))),
      window_(static_cast<size_t>(std::max(1, options.window))) {}

std::vector<double> PersistenceTracker::recentValues() const {
  std::vector<double> v;
  size_t from = hist_.size() > window_ ? hist_.size() - window_ : 0;
  for (size_t i = from; i < hist_.size(); ++i) v.push_back(hist_[i].value);
  return v;
}

bool PersistenceTracker::ready() const {
  return fixedBaseline_ > 0.0 || base_.size() >= static_cast<size_t>(std::max(1, o_.baselineMin));
}

void PersistenceTracker::refreshBaseline() const {
  if (fixedBaseline_ > 0.0) return;
  // A median of 256 values per push would dominate the cost; the baseline moves slowly (one
  // value in 256 per sample), so refreshing every 32 additions (every 256 once the ring is
  // full) is as good.
  // While the ring fills, every time it grew by half (at least 32): a baseline of n samples
  // barely moves when n/2 more join, and refreshing every 32 made the first few hundred
  // steps of a big job cost several times the steady state.
  const int every = base_.full() ? 256 : std::max(32, static_cast<int>(base_.size() / 2));
  if (!dirty_ && sinceRefresh_ < every) return;
  // One scratch buffer per thread: a refresh allocated twice before.
  thread_local std::vector<double> v;
  v.resize(base_.size());
  for (size_t i = 0; i < base_.size(); ++i) v[i] = base_[i];
  baseMedian_ = medianInPlace(v);
  // A MAD of a few dozen samples is often a third too small, and a job has thousands of
  // series (ops x ranks): the rare under-estimate made CUSUMs fire on noisy single-call ops
  // from 6 % noise on. Widened by 1 + 2/sqrt(n): x1.35 at the 32 samples of a new baseline,
  // x1.13 once 256 are held.
  const double smallSample =
      1.0 + 2.0 / std::sqrt(static_cast<double>(std::max<size_t>(v.size(), 1)));
  for (double& x : v) x = std::fabs(x - baseMedian_);
  baseRelSigma_ =
      baseMedian_ > 0 ? smallSample * kMadToSigma * medianInPlace(v) / baseMedian_ : 0.0;
  dirty_ = false;
  sinceRefresh_ = 0;
}

double PersistenceTracker::baseline() const {
  if (fixedBaseline_ > 0.0) return fixedBaseline_;
  refreshBaseline();
  return baseMedian_;
}

double PersistenceTracker::relSigma() const {
  double s = fixedBaseline_ > 0.0 ? externalNoise_ : (refreshBaseline(), baseRelSigma_);
  return std::max(s, o_.minRelSigma);
}

double PersistenceTracker::exceedLevel() const {
  return baseline() * (1.0 + std::max(o_.minExcess, o_.noiseSigmas * relSigma()));
}

int PersistenceTracker::exceedCount() const {
  int n = 0;
  const size_t from = hist_.size() > window_ ? hist_.size() - window_ : 0;
  for (size_t i = from; i < hist_.size(); ++i) n += hist_[i].exceeds ? 1 : 0;
  return n;
}

double PersistenceTracker::level() const {
  std::vector<double> v;
  for (size_t i = 0; i < hist_.size(); ++i) {
    if (hist_[i].step >= onsetStep_) v.push_back(hist_[i].value);
  }
  if (v.empty()) v = recentValues();
  return median(std::move(v));
}

double PersistenceTracker::confidence() const {
  double h = std::max(1e-9, o_.cusumH);
  return std::clamp(0.6 + 0.4 * (cusum_ - h) / h, 0.0, 1.0);
}

bool PersistenceTracker::excursionAbove(double level) const {
  // Median of the samples since the CUSUM excursion began (at least 3): a few large outliers
  // can lift the CUSUM, but not the median of the stretch.
  std::vector<double> v;
  for (size_t i = hist_.size(); i-- > 0;) {
    if (hist_[i].step < cusumStart_ && v.size() >= 3) break;
    v.push_back(hist_[i].value);
  }
  return median(std::move(v)) >= level;
}

PersistenceTracker::Transition PersistenceTracker::push(int64_t step, double value) {
  ++seen_;
  if (seen_ <= o_.warmupSamples || !std::isfinite(value)) return Transition::kNone;
  if (!ready()) {
    base_.push(static_cast<float>(value));
    dirty_ = true;
    return Transition::kNone;
  }
  const double base = baseline();
  const double sigma = relSigma();
  const bool exceeds = value > exceedLevel();
  hist_.push(Sample{step, static_cast<float>(value), exceeds});
  if (firstJudged_ < 0) firstJudged_ = step;
  // Samples that left the recent window join the baseline a window at a time, once the
  // history ring (2 x window) is full and before they are overwritten: a push then touches
  // one slot of the history, not also the leaving sample and the baseline ring, which at
  // ~25,000 series per step (1,024 ranks x 25 operators) was a cache miss each. They join
  // only from a calm stretch: not in an open episode or a rising excursion (a regression is
  // judged against what came before it), and not while the series sits clearly below the
  // baseline (e.g. an op whose share fell while another op regressed), which would
  // otherwise read as a rise once that ends.
  if (++sinceBatch_ >= window_ && hist_.full()) {
    sinceBatch_ = 0;
    if (!active_ && fixedBaseline_ <= 0.0 && cusum_ < o_.cusumH / 2 && lowCusum_ < o_.cusumH / 2) {
      for (size_t i = 0; i < window_; ++i) base_.push(hist_[i].value);
      sinceRefresh_ += static_cast<int>(window_);
    }
  }

  // Sequential test: each sample adds its excess over minExcess in sigmas (capped, so a lone
  // outlier cannot open an episode), and a healthy sample pulls the sum back by minExcess/sigma.
  if (base > 0.0) {
    double k = std::max(o_.minExcess / sigma, o_.cusumMinK);
    double inc = std::min((value / base - 1.0) / sigma - k, o_.cusumClip);
    if (cusum_ <= 0.0 && inc > 0.0) cusumStart_ = step;
    cusum_ = std::max(0.0, cusum_ + inc);
    cusum_ = std::min(cusum_, 4.0 * std::max(o_.cusumH, 1.0));  // a long episode stays bounded
    double dec = std::min((1.0 - value / base) / sigma - k, o_.cusumClip);
    lowCusum_ = std::clamp(lowCusum_ + dec, 0.0, 4.0 * std::max(o_.cusumH, 1.0));
  }

  if (!active_ && cusum_ >= o_.cusumH && excursionAbove(base * (1.0 + o_.minExcess))) {
    active_ = true;
    // The excursion start can be pulled early by a noisy sample just before the change; a
    // least-squares split of the history around it places the onset.
    std::vector<double> hv;
    std::vector<int64_t> hs;
    for (size_t i = 0; i < hist_.size(); ++i) {
      if (hist_[i].step >= cusumStart_ - 10) {
        hv.push_back(hist_[i].value);
        hs.push_back(hist_[i].step);
      }
    }
    // An excursion from the first sample judged has no "before" to split against: it shows
    // from that sample on (a fault present from the start, against a fixed baseline).
    const bool fromFirst = cusumStart_ == firstJudged_;
    size_t split = bestSplit(hv, +1);
    onsetStep_ = hs.empty() ? step : fromFirst ? cusumStart_ : hs[split];
    resolvedStep_ = -1;
    sinceOpen_ = 0;
    return Transition::kOpened;
  }
  // Hysteresis: back to normal only when a whole window was seen since the opening, few of
  // its samples exceed and its median is within half of minExcess of the baseline.
  if (active_) ++sinceOpen_;
  if (active_ && sinceOpen_ >= o_.window && exceedCount() <= o_.releaseCount &&
      median(recentValues()) < base * (1.0 + o_.minExcess / 2)) {
    active_ = false;
    cusum_ = 0.0;
    // Only the part of the history after the onset can hold the way back down.
    std::vector<double> hv;
    std::vector<int64_t> hs;
    for (size_t i = 0; i < hist_.size(); ++i) {
      if (hist_[i].step >= onsetStep_) {
        hv.push_back(hist_[i].value);
        hs.push_back(hist_[i].step);
      }
    }
    size_t split = bestSplit(hv, -1);
    resolvedStep_ = hs.empty() ? step : hs[split];
    return Transition::kResolved;
  }
  return Transition::kNone;
}

}  // namespace trainscope::detect
