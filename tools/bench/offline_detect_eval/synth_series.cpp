#include "tools/bench/offline_detect_eval/synth_series.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

namespace trainscope::bench {

namespace {

constexpr double kPi = 3.14159265358979323846;

using Rng = std::mt19937_64;

double uniform(Rng& rng, double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(rng);
}
size_t uniformInt(Rng& rng, size_t lo, size_t hi) {  // inclusive
  return std::uniform_int_distribution<size_t>(lo, hi)(rng);
}
double sign(Rng& rng) {
  return std::bernoulli_distribution(0.5)(rng) ? 1.0 : -1.0;
}

// k change positions in (0, n) with every segment at least minGap long (k shrinks if the
// series is too short for k of them).
std::vector<size_t> changePositions(Rng& rng, size_t n, size_t k, size_t minGap) {
  while (k > 0 && (k + 1) * minGap > n) --k;
  const size_t slack = n - (k + 1) * minGap;
  std::vector<size_t> u;
  for (size_t i = 0; i < k; ++i) u.push_back(uniformInt(rng, 0, slack));
  std::sort(u.begin(), u.end());
  std::vector<size_t> out;
  for (size_t i = 0; i < k; ++i) out.push_back(u[i] + (i + 1) * minGap);
  return out;
}

// Per-value segment number for the change positions.
std::vector<size_t> segmentOf(size_t n, const std::vector<size_t>& changes) {
  std::vector<size_t> seg(n, 0);
  size_t s = 0;
  for (size_t i = 0; i < n; ++i) {
    while (s < changes.size() && i >= changes[s]) ++s;
    seg[i] = s;
  }
  return seg;
}

// Levels of k + 1 segments, each a jump of +-[lo, hi] from the previous.
std::vector<double> jumpLevels(Rng& rng, size_t segments, double lo, double hi) {
  std::vector<double> level{0.0};
  for (size_t i = 1; i < segments; ++i)
    level.push_back(level.back() + sign(rng) * uniform(rng, lo, hi));
  return level;
}

std::vector<double> gaussian(Rng& rng, size_t n) {
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<double> out(n);
  for (double& v : out) v = g(rng);
  return out;
}

// Shifts of +-[lo, hi] noise sds at k positions on top of `noise`.
SyntheticSeries shifts(Rng& rng, std::vector<double> noise, size_t k, size_t minGap, double lo,
                       double hi) {
  SyntheticSeries s;
  const size_t n = noise.size();
  s.changes = changePositions(rng, n, k, minGap);
  const auto level = jumpLevels(rng, s.changes.size() + 1, lo, hi);
  const auto seg = segmentOf(n, s.changes);
  s.values = std::move(noise);
  for (size_t i = 0; i < n; ++i) s.values[i] += level[seg[i]];
  return s;
}

// The shapes' generators, in noise-sd units (the caller rescales).
SyntheticSeries noChange(Rng& rng) {
  SyntheticSeries s;
  s.values = gaussian(rng, uniformInt(rng, 50, 1000));
  return s;
}

SyntheticSeries singleShift(Rng& rng) {
  const size_t n = uniformInt(rng, 100, 1000);
  SyntheticSeries s;
  s.values = gaussian(rng, n);
  const size_t at = uniformInt(rng, n / 5, 4 * n / 5);
  const double delta = sign(rng) * uniform(rng, 1.0, 3.0);
  for (size_t i = at; i < n; ++i) s.values[i] += delta;
  s.changes = {at};
  return s;
}

SyntheticSeries multiShift(Rng& rng) {
  const size_t n = uniformInt(rng, 200, 2000);
  return shifts(rng, gaussian(rng, n), uniformInt(rng, 2, 6), 30, 1.5, 4.0);
}

SyntheticSeries varianceChanges(Rng& rng) {
  const size_t n = uniformInt(rng, 200, 1500);
  SyntheticSeries s;
  s.changes = changePositions(rng, n, uniformInt(rng, 1, 3), 50);
  std::vector<double> sd{1.0};
  for (size_t i = 0; i < s.changes.size(); ++i) {
    const double f = uniform(rng, 2.5, 5.0);
    // Up or down, staying within [1/5, 5] of the start.
    sd.push_back(sd.back() * f > 5.0   ? sd.back() / f
                 : sd.back() / f < 0.2 ? sd.back() * f
                 : sign(rng) > 0       ? sd.back() * f
                                       : sd.back() / f);
  }
  const auto seg = segmentOf(n, s.changes);
  s.values = gaussian(rng, n);
  for (size_t i = 0; i < n; ++i) s.values[i] *= sd[seg[i]];
  return s;
}

SyntheticSeries meanAndVariance(Rng& rng) {
  const size_t n = uniformInt(rng, 200, 1500);
  SyntheticSeries s;
  s.changes = changePositions(rng, n, uniformInt(rng, 1, 4), 40);
  std::vector<double> sd{1.0}, level{0.0};
  for (size_t i = 0; i < s.changes.size(); ++i) {
    const double f = uniform(rng, 1.5, 3.0);
    sd.push_back(std::clamp(sign(rng) > 0 ? sd.back() * f : sd.back() / f, 0.25, 4.0));
    // The jump in units of the larger of the two spreads, so it is as visible going up as down.
    level.push_back(level.back() +
                    sign(rng) * uniform(rng, 1.0, 3.0) * std::max(sd.back(), sd[sd.size() - 2]));
  }
  const auto seg = segmentOf(n, s.changes);
  s.values = gaussian(rng, n);
  for (size_t i = 0; i < n; ++i) s.values[i] = level[seg[i]] + s.values[i] * sd[seg[i]];
  return s;
}

void addTrend(Rng& rng, std::vector<double>& v, double lo, double hi) {
  const double rise = sign(rng) * uniform(rng, lo, hi);
  for (size_t i = 0; i < v.size(); ++i) v[i] += rise * static_cast<double>(i) / v.size();
}

SyntheticSeries trendOnly(Rng& rng) {
  SyntheticSeries s;
  s.values = gaussian(rng, uniformInt(rng, 100, 1000));
  addTrend(rng, s.values, 3.0, 15.0);
  return s;
}

SyntheticSeries trendShifts(Rng& rng) {
  const size_t n = uniformInt(rng, 200, 1500);
  SyntheticSeries s = shifts(rng, gaussian(rng, n), uniformInt(rng, 1, 3), 30, 2.0, 4.0);
  addTrend(rng, s.values, 3.0, 15.0);
  return s;
}

// Continuous piecewise-linear: the slope changes, the level does not jump.
SyntheticSeries slopeChanges(Rng& rng) {
  const size_t n = uniformInt(rng, 300, 1500);
  SyntheticSeries s;
  s.changes = changePositions(rng, n, uniformInt(rng, 1, 3), 60);
  std::vector<double> slope{uniform(rng, -0.05, 0.05)};
  for (size_t i = 0; i < s.changes.size(); ++i)
    slope.push_back(slope.back() + sign(rng) * uniform(rng, 0.05, 0.2));
  const auto seg = segmentOf(n, s.changes);
  s.values = gaussian(rng, n);
  double level = 0.0;
  for (size_t i = 0; i < n; ++i) {
    level += slope[seg[i]];
    s.values[i] += level;
  }
  return s;
}

SyntheticSeries withOutliers(Rng& rng) {
  const size_t n = uniformInt(rng, 200, 1500);
  SyntheticSeries s = shifts(rng, gaussian(rng, n), uniformInt(rng, 1, 3), 30, 2.0, 4.0);
  const size_t count = n / 50;  // 2 %
  for (size_t j = 0; j < count; ++j) {
    s.values[uniformInt(rng, 0, n - 1)] += sign(rng) * uniform(rng, 5.0, 15.0);
  }
  return s;
}

SyntheticSeries heavyTails(Rng& rng) {
  const size_t n = uniformInt(rng, 200, 1500);
  std::student_t_distribution<double> t(3.0);
  std::vector<double> noise(n);
  for (double& v : noise) v = t(rng) / std::sqrt(3.0);  // sd 1
  return shifts(rng, std::move(noise), uniformInt(rng, 1, 3), 30, 2.0, 4.0);
}

SyntheticSeries seasonal(Rng& rng) {
  const size_t periods[] = {7, 12, 24, 52};
  const size_t period = periods[uniformInt(rng, 0, 3)];
  const size_t n = std::max<size_t>(uniformInt(rng, 300, 1500), 8 * period);
  SyntheticSeries s =
      shifts(rng, gaussian(rng, n), uniformInt(rng, 1, 3), std::max<size_t>(30, period), 2.0, 4.0);
  const double amp = uniform(rng, 1.0, 3.0), amp2 = uniform(rng, 0.0, 1.0);
  const double phase = uniform(rng, 0.0, 2.0 * kPi);
  for (size_t i = 0; i < n; ++i) {
    const double a = 2.0 * kPi * static_cast<double>(i) / static_cast<double>(period) + phase;
    s.values[i] += amp * std::sin(a) + amp2 * std::sin(2.0 * a);
  }
  return s;
}

SyntheticSeries autocorrelated(Rng& rng) {
  const size_t n = uniformInt(rng, 200, 1500);
  const double phi = uniform(rng, 0.3, 0.7);
  std::vector<double> noise = gaussian(rng, n);
  const double innovation = std::sqrt(1.0 - phi * phi);  // marginal sd 1
  double prev = noise[0];
  for (size_t i = 1; i < n; ++i) {
    prev = phi * prev + innovation * noise[i];
    noise[i] = prev;
  }
  return shifts(rng, std::move(noise), uniformInt(rng, 1, 3), 40, 2.0, 4.0);
}

SyntheticSeries shortSeries(Rng& rng) {
  const size_t n = uniformInt(rng, 20, 60);
  return shifts(rng, gaussian(rng, n), uniformInt(rng, 0, 2), 8, 2.0, 4.0);
}

SyntheticSeries longSeries(Rng& rng) {
  const size_t n = uniformInt(rng, 5000, 20000);
  return shifts(rng, gaussian(rng, n), uniformInt(rng, 3, 10), 200, 0.7, 2.0);
}

// A training job's step times: 100 ms, 3 % noise, a checkpoint spike every K steps, and
// regimes of slower (or recovered) steps.
SyntheticSeries stepTimes(Rng& rng) {
  const size_t n = uniformInt(rng, 500, 3000);
  SyntheticSeries s;
  s.changes = changePositions(rng, n, uniformInt(rng, 1, 4), 50);
  std::vector<double> factor{1.0};
  for (size_t i = 0; i < s.changes.size(); ++i) {
    double f;
    do {
      f = factor.back() > 1.0 && sign(rng) > 0 ? 1.0 : uniform(rng, 1.0, 1.5);
    } while (std::fabs(f / factor.back() - 1.0) < 0.1);
    factor.push_back(f);
  }
  const size_t every[] = {50, 100, 200};
  const size_t checkpoint = every[uniformInt(rng, 0, 2)];
  const double spike = uniform(rng, 2.0, 4.0);
  const auto seg = segmentOf(n, s.changes);
  std::normal_distribution<double> g(0.0, 0.03);
  s.values.resize(n);
  for (size_t i = 0; i < n; ++i) {
    s.values[i] = 100.0 * factor[seg[i]] * (1.0 + g(rng));
    if (i % checkpoint == checkpoint - 1) s.values[i] *= spike;
  }
  return s;
}

struct Generator {
  Shape shape;
  std::function<SyntheticSeries(Rng&)> make;
  bool rescale;  // put the series on a random scale and offset (not for step times in ms)
};

const std::vector<Generator>& generators() {
  static const std::vector<Generator> kGenerators = {
      {{"no_change", "Gaussian noise, no change, 50-1,000 values"}, noChange, true},
      {{"single_shift", "one mean shift of 1-3 sd, 100-1,000 values"}, singleShift, true},
      {{"multi_shift", "2-6 mean shifts of 1.5-4 sd, 200-2,000 values"}, multiShift, true},
      {{"variance", "1-3 changes of the sd by 2.5-5x, same mean"}, varianceChanges, true},
      {{"mean_var", "1-4 changes of mean (1-3 sd) and sd (1.5-3x) together"},
       meanAndVariance,
       true},
      {{"trend", "a linear trend rising 3-15 sd, no change"}, trendOnly, true},
      {{"trend_shifts", "1-3 shifts of 2-4 sd on a linear trend of 3-15 sd"}, trendShifts, true},
      {{"slope_changes", "1-3 slope changes of a continuous line (0.05-0.2 sd/value)"},
       slopeChanges,
       true},
      {{"outliers", "1-3 shifts of 2-4 sd, 2 % outliers of 5-15 sd"}, withOutliers, true},
      {{"heavy_tails", "1-3 shifts of 2-4 sd in Student-t(3) noise"}, heavyTails, true},
      {{"seasonal", "1-3 shifts of 2-4 sd on a season (period 7-52, amplitude 1-3 sd)"},
       seasonal,
       true},
      {{"autocorrelated", "1-3 shifts of 2-4 sd in AR(1) noise, phi 0.3-0.7"},
       autocorrelated,
       true},
      {{"short", "0-2 shifts of 2-4 sd in 20-60 values"}, shortSeries, true},
      {{"long", "3-10 shifts of 0.7-2 sd in 5,000-20,000 values"}, longSeries, true},
      {{"step_times", "step times: 3 % noise, checkpoint spikes, 1-4 slowdowns of 10-50 %"},
       stepTimes,
       false},
  };
  return kGenerators;
}

}  // namespace

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> kShapes = [] {
    std::vector<Shape> out;
    for (const auto& g : generators()) out.push_back(g.shape);
    return out;
  }();
  return kShapes;
}

SyntheticSeries makeSeries(const std::string& shape, uint64_t seed, size_t index) {
  const auto& gens = generators();
  for (size_t k = 0; k < gens.size(); ++k) {
    if (shape != gens[k].shape.name) continue;
    std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                      static_cast<uint32_t>(k), static_cast<uint32_t>(index)};
    Rng rng(seq);
    SyntheticSeries s = gens[k].make(rng);
    s.shape = shape;
    if (gens[k].rescale) {
      // Units are arbitrary: a detector must not depend on them.
      const double scale = std::pow(10.0, uniform(rng, -2.0, 3.0));
      const double offset = scale * uniform(rng, -10.0, 100.0);
      for (double& v : s.values) v = offset + scale * v;
    }
    return s;
  }
  return {};
}

}  // namespace trainscope::bench
