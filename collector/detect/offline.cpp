#include "collector/detect/offline.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "collector/detect/robust.h"

namespace trainscope::detect {

namespace {

using Real = long double;  // prefix sums of t*x over a million values need the extra digits

// Half-width of the running median that outliers are judged against: 7 values, so a run of up
// to 3 outliers cannot move it, and a step is followed within 4 values.
constexpr size_t kOutlierHalfWindow = 3;
// Variances are floored at this fraction of the noise variance, so a run of equal values (a
// quantised or stuck series) is a cheap segment but not an infinitely cheap one.
constexpr double kVarianceFloor = 0.05 * 0.05;
// Seasonal periods tried: 2 .. min(n / kMinPeriods, kMaxPeriod).
constexpr size_t kMinPeriods = 4;
constexpr size_t kMaxPeriod = 200;
// Series longer than this are segmented on a grid of about this many boundaries first.
constexpr size_t kExactPoints = 5000;
// Refits with the residuals' autocorrelation: at most this many, until it moves less than this.
constexpr int kAutocorrRounds = 4;
constexpr double kAutocorrTolerance = 0.02;

double sq(double v) {
  return v * v;
}

// Robust noise sd from differences of neighbours: sd(x[t] - x[t-1]) = sqrt(2) sd(noise) for
// independent noise, and a level shift or a trend moves only one difference, or all by the
// same amount (which the MAD ignores). Falls back to the plain sd of the differences when more
// than half of them are zero (quantised series); 0 for a constant series.
double diffNoiseSd(const std::vector<double>& x, size_t lag) {
  if (x.size() <= lag) return 0.0;
  std::vector<double> d;
  d.reserve(x.size() - lag);
  for (size_t i = lag; i < x.size(); ++i) d.push_back(x[i] - x[i - lag]);
  const double sigma = kMadToSigma * mad(d, median(d)) / std::sqrt(2.0);
  if (sigma > 0.0) return sigma;
  double mean = 0.0;
  for (double v : d) mean += v;
  mean /= static_cast<double>(d.size());
  double ss = 0.0;
  for (double v : d) ss += sq(v - mean);
  return std::sqrt(ss / static_cast<double>(d.size()) / 2.0);
}

// Marks values further than `sigmas` robust sds (at least minScale) from the running median
// of their neighbours (2 * kOutlierHalfWindow + 1 values, clipped at the ends) as outliers.
std::vector<bool> markOutliers(const std::vector<double>& x, double sigmas, double minScale) {
  const size_t n = x.size();
  std::vector<bool> out(n, false);
  if (sigmas <= 0.0 || n < 2 * kOutlierHalfWindow + 1) return out;
  std::vector<double> resid(n), window;
  for (size_t i = 0; i < n; ++i) {
    const size_t from = i >= kOutlierHalfWindow ? i - kOutlierHalfWindow : 0;
    const size_t to = std::min(n, i + kOutlierHalfWindow + 1);
    window.assign(x.begin() + static_cast<std::ptrdiff_t>(from),
                  x.begin() + static_cast<std::ptrdiff_t>(to));
    resid[i] = x[i] - medianInPlace(window);
  }
  const double scale = std::max(kMadToSigma * mad(resid, 0.0), minScale);
  if (scale <= 0.0) return out;
  for (size_t i = 0; i < n; ++i) out[i] = std::fabs(resid[i]) > sigmas * scale;
  return out;
}

std::vector<Real> prefixSums(const std::vector<double>& x) {
  std::vector<Real> prefix(x.size() + 1, 0.0L);
  for (size_t i = 0; i < x.size(); ++i) prefix[i + 1] = prefix[i] + x[i];
  return prefix;
}

// The centred moving average over one period at i (for an even period, the mean of the two
// windows that straddle i), shrunk symmetrically near the ends: it removes a season's pattern
// and keeps levels and trends, so x - it is the season plus noise.
double periodAverage(const std::vector<Real>& prefix, size_t period, size_t i) {
  const size_t n = prefix.size() - 1;
  const size_t half = period / 2;
  const size_t reach = std::min({half, i, n - 1 - i});
  if (period % 2 == 1 || reach < half) {
    return static_cast<double>((prefix[i + reach + 1] - prefix[i - reach]) /
                               static_cast<Real>(2 * reach + 1));
  }
  return static_cast<double>(
      ((prefix[i + half] - prefix[i - half]) + (prefix[i + half + 1] - prefix[i - half + 1])) /
      static_cast<Real>(2 * period));
}

// A repeating pattern: per phase, the median over periods of x minus its period average.
// Zero mean.
std::vector<double> seasonalProfile(const std::vector<double>& x, size_t period) {
  const std::vector<Real> prefix = prefixSums(x);
  std::vector<std::vector<double>> byPhase(period);
  for (size_t i = 0; i < x.size(); ++i) {
    byPhase[i % period].push_back(x[i] - periodAverage(prefix, period, i));
  }
  std::vector<double> profile(period);
  double mean = 0.0;
  for (size_t p = 0; p < period; ++p) {
    profile[p] = medianInPlace(byPhase[p]);
    mean += profile[p];
  }
  mean /= static_cast<double>(period);
  for (double& v : profile) v -= mean;
  return profile;
}

// Seasonal periods tried: 2 .. maxPeriod(n).
size_t maxPeriod(size_t n) {
  return std::min(n / kMinPeriods, kMaxPeriod);
}

// What a season of `period` values costs in the BIC: a value per phase but one (the mean is
// the segments'), and naming the period among the ones tried.
double seasonPrice(size_t n, size_t period) {
  return static_cast<double>(period - 1) * std::log(static_cast<double>(n)) +
         2.0 * std::log(static_cast<double>(maxPeriod(n) - 1));
}

// Finds the period whose seasonal pattern buys the most likelihood after its seasonPrice,
// scored on its phase means (cheap: O(n) per period), and returns its robust profile; empty
// when no period pays for itself.
std::vector<double> findSeason(const std::vector<double>& x) {
  const size_t n = x.size();
  if (maxPeriod(n) < 2) return {};
  const std::vector<Real> prefix = prefixSums(x);
  double bestGain = 0.0;
  size_t bestPeriod = 0;
  std::vector<double> sums, counts;
  for (size_t period = 2; period <= maxPeriod(n); ++period) {
    sums.assign(period, 0.0);
    counts.assign(period, 0.0);
    double total = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const double d = x[i] - periodAverage(prefix, period, i);
      total += sq(d);
      sums[i % period] += d;
      counts[i % period] += 1.0;
    }
    if (total <= 0.0) continue;
    double explained = 0.0;  // sum over phases of count * (phase mean)^2
    for (size_t k = 0; k < period; ++k) explained += sq(sums[k]) / counts[k];
    // The average also takes out part of the noise (all but 1 - 1/p of its variance, less
    // for short even periods) but none of the pattern: the residual noise is scaled back up
    // before the pattern is weighed against it, or a 2-value "season" would fit white noise.
    const double p = static_cast<double>(period);
    const double kept = period % 2 == 1 ? 1.0 - 1.0 / p : 1.0 - 1.0 / p - 0.5 / (p * p);
    const double remaining = std::max(total - explained, total * 1e-12) / kept;
    const double gain =
        static_cast<double>(n) * std::log1p(explained / remaining) - seasonPrice(n, period);
    if (gain > bestGain) {
      bestGain = gain;
      bestPeriod = period;
    }
  }
  if (bestPeriod == 0) return {};
  return seasonalProfile(x, bestPeriod);
}

// Prefix sums of a standardised series for O(1) segment fits. Values marked missing (the
// outliers) are left out of every sum: a segment's fit and spread are those of its other
// values. (Replacing them by a median instead would leave runs of equal values, which look
// like a quiet segment.)
class PrefixSums {
 public:
  PrefixSums() = default;
  PrefixSums(const std::vector<double>& z, const std::vector<bool>& missing) {
    const size_t n = z.size();
    w_.assign(n + 1, 0.0L);
    s_.assign(n + 1, 0.0L);
    ss_.assign(n + 1, 0.0L);
    st_.assign(n + 1, 0.0L);
    mt_.assign(n + 1, 0.0L);
    mtt_.assign(n + 1, 0.0L);
    for (size_t i = 0; i < n; ++i) {
      const bool gone = i < missing.size() && missing[i];
      const Real v = gone ? 0.0L : z[i];
      const Real t = static_cast<Real>(i);
      w_[i + 1] = w_[i] + (gone ? 0.0L : 1.0L);
      s_[i + 1] = s_[i] + v;
      ss_[i + 1] = ss_[i] + v * v;
      st_[i + 1] = st_[i] + v * t;
      mt_[i + 1] = mt_[i] + (gone ? t : 0.0L);
      mtt_[i + 1] = mtt_[i] + (gone ? t * t : 0.0L);
    }
  }

  // Values kept in [from, to), and their sum.
  double count(size_t from, size_t to) const { return static_cast<double>(w_[to] - w_[from]); }
  double sum(size_t from, size_t to) const { return static_cast<double>(s_[to] - s_[from]); }
  // Sum of squares around the segment's mean.
  double sse(size_t from, size_t to) const {
    const Real m = w_[to] - w_[from];
    if (m <= 0.0L) return 0.0;
    const Real s = s_[to] - s_[from];
    return std::max(0.0, static_cast<double>((ss_[to] - ss_[from]) - s * s / m));
  }
  // Sum of squares around the segment's least-squares line, and its slope. Positions are
  // taken from the segment's middle c: over all its positions sum (t - c) = 0 and
  // sum (t - c)^2 = m (m^2 - 1) / 12 exactly, and the missing ones (few) are taken off.
  double rss(size_t from, size_t to, double* slope = nullptr) const {
    const Real w = w_[to] - w_[from];
    if (w < 3.0L) return sse(from, to);
    const Real m = static_cast<Real>(to - from);
    const Real c = static_cast<Real>(from + to - 1) / 2.0L;
    const Real gone = m - w;
    const Real goneT = (mt_[to] - mt_[from]) - gone * c;  // sum over missing of (t - c)
    const Real goneTT = (mtt_[to] - mtt_[from]) - 2.0L * c * (mt_[to] - mt_[from]) + gone * c * c;
    const Real sumT = -goneT;                                // sum over kept of (t - c)
    const Real sumTT = m * (m * m - 1.0L) / 12.0L - goneTT;  // sum over kept of (t - c)^2
    const Real stt = sumTT - sumT * sumT / w;
    const Real s = s_[to] - s_[from];
    const Real sxt = (st_[to] - st_[from]) - c * s - sumT * s / w;  // sum (t - tbar)(x - xbar)
    if (stt <= 0.0L) return sse(from, to);
    if (slope != nullptr) *slope = static_cast<double>(sxt / stt);
    return std::max(0.0, sse(from, to) - static_cast<double>(sxt * sxt / stt));
  }
  // The mean of the kept positions' offsets from the segment's middle (0 without missing).
  double positionOffset(size_t from, size_t to) const {
    const Real w = w_[to] - w_[from];
    if (w <= 0.0L) return 0.0;
    const Real c = static_cast<Real>(from + to - 1) / 2.0L;
    const Real gone = static_cast<Real>(to - from) - w;
    return static_cast<double>(-((mt_[to] - mt_[from]) - gone * c) / w);
  }

 private:
  // Prefix sums over kept values of 1, z, z^2 and t z; over missing ones of t and t^2.
  std::vector<Real> w_, s_, ss_, st_, mt_, mtt_;
};

// A segment's -2 log-likelihood under one model (constants common to every segmentation
// dropped; the mean model's noise variance is known, the others' fitted, at least varFloor):
// sub-additive, as PELT's pruning needs.
struct SegmentCost {
  const PrefixSums* sums;
  SegmentModel model;
  double noiseVar;
  double varFloor;

  double operator()(size_t from, size_t to) const {
    const double m = sums->count(from, to);
    if (m <= 0.0) return 0.0;
    if (model == SegmentModel::kMean) return sums->sse(from, to) / noiseVar;
    const double rs = model == SegmentModel::kTrend ? sums->rss(from, to) : sums->sse(from, to);
    const double var = std::max(rs / m, varFloor);
    return m * std::log(var) + rs / var;
  }
};

// Pruned exact linear-time optimal partitioning (PELT; Killick, Fearnhead & Eckley 2012): the
// boundaries minimising the sum of segment costs + `penalty` per change, every segment at
// least minSeg long, boundaries only at `pos` (ascending, from 0 to n). Returns the segment
// ends (the last is n) and the optimum in *total.
std::vector<size_t> pelt(const SegmentCost& cost, const std::vector<size_t>& pos, double penalty,
                         size_t minSeg, double* total) {
  const double inf = std::numeric_limits<double>::infinity();
  const size_t m = pos.size();
  std::vector<double> best(m, inf);
  std::vector<size_t> prev(m, 0);
  best[0] = -penalty;
  std::vector<size_t> candidates, kept;  // indices into pos
  std::vector<double> value;  // best[s] + cost(s, t) per candidate, for the choice and the pruning
  size_t next = 0;            // the next boundary to become a candidate start
  for (size_t j = 1; j < m; ++j) {
    while (next < j && pos[j] - pos[next] >= minSeg) {
      if (best[next] < inf) candidates.push_back(next);
      ++next;
    }
    double bestHere = inf;
    size_t arg = 0;
    value.resize(candidates.size());
    for (size_t k = 0; k < candidates.size(); ++k) {
      value[k] = best[candidates[k]] + cost(pos[candidates[k]], pos[j]);
      if (value[k] + penalty < bestHere) {
        bestHere = value[k] + penalty;
        arg = candidates[k];
      }
    }
    best[j] = bestHere;
    prev[j] = arg;
    // PELT's pruning: a start that is already worse than the optimum without paying for a
    // change can never be the best start again (costs are sub-additive).
    kept.clear();
    for (size_t k = 0; k < candidates.size(); ++k) {
      if (value[k] <= bestHere) kept.push_back(candidates[k]);
    }
    candidates.swap(kept);
  }
  std::vector<size_t> ends;
  for (size_t j = m - 1; j > 0; j = prev[j]) ends.push_back(pos[j]);
  std::reverse(ends.begin(), ends.end());
  *total = best[m - 1];
  return ends;
}

// The optimal segmentation of n values: exact when n <= kExactPoints; longer series first on
// a grid of about kExactPoints boundaries (PELT's work grows with the square of the segments'
// length when changes are rare), then exactly among the positions within one grid step of
// the boundaries found (so a change is placed to the value, and two grid boundaries that
// bracket one change become one).
std::vector<size_t> segmentOptimally(const SegmentCost& cost, size_t n, double penalty,
                                     size_t minSeg, double* total) {
  const size_t grid = (n + kExactPoints - 1) / kExactPoints;
  std::vector<size_t> pos;
  for (size_t p = 0; p < n; p += grid) pos.push_back(p);
  pos.push_back(n);
  std::vector<size_t> ends = pelt(cost, pos, penalty, minSeg, total);
  if (grid == 1) return ends;
  pos.assign(1, 0);
  for (size_t k = 0; k + 1 < ends.size(); ++k) {
    const size_t from = std::max(pos.back() + 1, ends[k] > grid ? ends[k] - grid : 1);
    for (size_t p = from; p <= std::min(n - 1, ends[k] + grid); ++p) pos.push_back(p);
  }
  pos.push_back(n);
  return pelt(cost, pos, penalty, minSeg, total);
}

// A segment's least-squares fit: its mean (the fit at its middle) and, for lines, its slope.
struct SegmentFit {
  double mean = 0.0;
  double slope = 0.0;
  double mid = 0.0;  // the mean position of the values fitted (the line passes there)
  double rss = 0.0;  // residual sum of squares
  double dof = 0.0;  // values minus parameters fitted
  double at(double i) const { return mean + slope * (i - mid); }
};

SegmentFit fitSegment(const PrefixSums& costs, size_t from, size_t to, bool line) {
  SegmentFit f;
  const double m = costs.count(from, to);
  line = line && m >= 3.0;
  f.mean = m > 0.0 ? costs.sum(from, to) / m : 0.0;
  f.mid = (static_cast<double>(from + to) - 1.0) / 2.0 + costs.positionOffset(from, to);
  f.rss = line ? costs.rss(from, to, &f.slope) : costs.sse(from, to);
  f.dof = m - (line ? 2.0 : 1.0);
  return f;
}

// Lag-1 autocorrelation of the residuals of a segmentation (pooled over pairs of neighbours in
// the same segment): what the segments leave unexplained, and how smooth it is.
double residualAutocorr(const std::vector<double>& z, const std::vector<bool>& missing,
                        const PrefixSums& costs, const std::vector<size_t>& ends,
                        SegmentModel model) {
  double num = 0.0, den = 0.0;
  size_t from = 0;
  for (size_t to : ends) {
    const SegmentFit f = fitSegment(costs, from, to, model == SegmentModel::kTrend);
    bool hasPrev = false;
    double prev = 0.0;
    for (size_t i = from; i < to; ++i) {
      if (missing[i]) {
        hasPrev = false;
        continue;
      }
      const double r = z[i] - f.at(static_cast<double>(i));
      den += r * r;
      if (hasPrev) num += r * prev;
      prev = r;
      hasPrev = true;
    }
    from = to;
  }
  return den > 0.0 ? num / den : 0.0;
}

// Parameters a segment fits (kAuto never reaches here: it is one of the others by then).
size_t parameterCount(SegmentModel model) {
  return model == SegmentModel::kMean ? 1 : model == SegmentModel::kTrend ? 3 : 2;
}

// The series as the segmentation sees it: standardised, season and outliers out.
struct Prepared {
  std::vector<double> z;       // (value - center) / scale, season removed
  std::vector<bool> outlier;   // left out of every fit
  PrefixSums sums;             // of z without the outliers
  std::vector<double> season;  // per phase, in z units; empty = none
  double center = 0.0;
  double scale = 1.0;
  double noiseVar = 1.0;  // of z's noise, from differences of neighbours
  size_t outliers = 0;
};

Prepared prepare(const std::vector<double>& series, const OfflineOptions& options,
                 bool withSeason) {
  Prepared p;
  const size_t n = series.size();
  // Centre on the median, scale by the differences' robust noise sd, so costs and the variance
  // floor are in noise units and the prefix sums keep their digits.
  p.center = median(series);
  const double sd = diffNoiseSd(series, 1);
  p.scale = sd > 0.0 ? sd : 1.0;
  p.z.resize(n);
  for (size_t i = 0; i < n; ++i) p.z[i] = (series[i] - p.center) / p.scale;
  // A seasonal pattern first: its peaks would otherwise be outliers or segments.
  if (withSeason) {
    p.season = findSeason(p.z);
    for (size_t i = 0; i < n && !p.season.empty(); ++i) p.z[i] -= p.season[i % p.season.size()];
  }
  // An outlier must stand out from the noise as neighbours' differences show it too, not only
  // from the running median: on a smooth curve that median fits almost exactly, and every
  // small bump would look like an outlier.
  p.outlier = markOutliers(p.z, options.outlierSigmas, diffNoiseSd(p.z, 1));
  p.outliers = static_cast<size_t>(std::count(p.outlier.begin(), p.outlier.end(), true));
  std::vector<double> kept;
  for (size_t i = 0; i < n; ++i) {
    if (!p.outlier[i]) kept.push_back(p.z[i]);
  }
  p.noiseVar = std::max(sq(diffNoiseSd(kept, 1)), 1e-12);
  p.sums = PrefixSums(p.z, p.outlier);
  return p;
}

struct Fit {
  std::vector<size_t> ends;  // segment ends, the last is n
  SegmentModel model = SegmentModel::kMeanVar;
  double penalty = 0.0;       // per change, as used (scaled for autocorrelation)
  double total = 0.0;         // costs + penalties
  double plainPenalty = 0.0;  // per change, for independent values
  // The BIC with the plain penalty: how two fits made at different autocorrelations compare.
  double bic() const {
    const double changes = static_cast<double>(ends.size() - 1);
    return total - changes * (penalty - plainPenalty);
  }
};

// The optimal segmentation of p.z under `model` with the penalty for autocorrelation phi.
Fit fitModel(const Prepared& p, SegmentModel model, double phi, const OfflineOptions& options) {
  const size_t n = p.z.size();
  Fit f;
  f.model = model;
  // Values that are autocorrelated carry less information than independent ones: the BIC's
  // penalty scaled by the effective-sample-size factor; the mean model's noise variance is
  // the noise's own (sigma_d^2 / (1 - phi)), not that of its innovations.
  const SegmentCost cost{&p.sums, model, p.noiseVar / (1.0 - phi), kVarianceFloor * p.noiseVar};
  const double logN = std::log(static_cast<double>(std::max<size_t>(n, 3)));
  f.plainPenalty =
      options.penalty > 0.0
          ? options.penalty
          : options.penaltyScale * static_cast<double>(parameterCount(model) + 1) * logN;
  f.penalty = options.penalty > 0.0 ? options.penalty : f.plainPenalty * (1.0 + phi) / (1.0 - phi);
  // A spread needs 3 values to be judged, a line with a spread 4.
  const size_t least = model == SegmentModel::kTrend ? 4 : model == SegmentModel::kMeanVar ? 3 : 1;
  const size_t minSeg = std::max(options.minSegment, least);
  if (n < 2 * minSeg) {
    f.ends = {n};
    f.total = cost(0, n);
  } else {
    f.ends = segmentOptimally(cost, n, f.penalty, minSeg, &f.total);
  }
  // The first segment's parameters count too (the penalty per change pays for the others):
  // without them a line through a short series' one step would beat the step.
  f.total += static_cast<double>(parameterCount(model)) * logN;
  // The mean model's -2 log-likelihood also has n ln(noise variance), which differs between
  // a series with and without its season removed.
  if (model == SegmentModel::kMean) {
    f.total += static_cast<double>(n) * std::log(p.noiseVar / (1.0 - phi));
  }
  return f;
}

// The options' model; for kAuto, levels or lines, whichever has the lower penalised cost (both
// are -2 log-likelihoods of the same values, so the BIC compares them).
Fit fitBest(const Prepared& p, double phi, const OfflineOptions& options) {
  if (options.model != SegmentModel::kAuto) return fitModel(p, options.model, phi, options);
  Fit levels = fitModel(p, SegmentModel::kMeanVar, phi, options);
  Fit lines = fitModel(p, SegmentModel::kTrend, phi, options);
  return lines.total < levels.total ? lines : levels;
}

// The noise's autocorrelation is what the segments leave unexplained, so it is estimated from
// the residuals of a fit and the fit redone with it, until it settles: from independence
// (phi = 0), a smooth wander first cut into many segments leaves smooth residuals, which raise
// the penalty and merge the cuts; real shifts leave white residuals.
Fit settle(const Prepared& p, const OfflineOptions& options, double* phi) {
  const double cap = std::clamp(options.maxAutocorr, 0.0, 0.99);
  *phi = 0.0;
  Fit fit = fitBest(p, *phi, options);
  for (int round = 0; round < kAutocorrRounds && cap > 0.0; ++round) {
    const double next =
        std::clamp(residualAutocorr(p.z, p.outlier, p.sums, fit.ends, fit.model), 0.0, cap);
    if (std::fabs(next - *phi) < kAutocorrTolerance) break;
    *phi = next;
    fit = fitBest(p, *phi, options);
  }
  return fit;
}

// Fills out's segments and change points in the input's units: outliers left out, the season
// kept in the mean (it averages out over whole periods) but out of the
// spread, the slope and the jump.
void describe(const Prepared& p, const Fit& fit, Segmentation* out) {
  const PrefixSums& costs = p.sums;
  const bool lines = fit.model == SegmentModel::kTrend;
  std::vector<SegmentFit> fits;
  size_t from = 0;
  for (size_t to : fit.ends) {
    const SegmentFit f = fitSegment(costs, from, to, lines);
    double seasonSum = 0.0;
    for (size_t i = from; i < to && !p.season.empty(); ++i) {
      seasonSum += p.season[i % p.season.size()];
    }
    Segment seg;
    seg.start = from;
    seg.end = to;
    seg.mean = p.center + (f.mean + seasonSum / static_cast<double>(to - from)) * p.scale;
    seg.sd = f.dof > 0.0 ? std::sqrt(f.rss / f.dof) * p.scale : 0.0;
    seg.slope = f.slope * p.scale;
    out->segments.push_back(seg);
    fits.push_back(f);
    from = to;
  }
  for (size_t k = 1; k < out->segments.size(); ++k) {
    const Segment& a = out->segments[k - 1];
    const Segment& b = out->segments[k];
    ChangePoint cp;
    cp.index = b.start;
    cp.before = a.mean;
    cp.after = b.mean;
    // This segment's fit at its first value against the previous one's, extended there.
    const double at = static_cast<double>(b.start);
    cp.jump = (fits[k].at(at) - fits[k - 1].at(at)) * p.scale;
    cp.sdBefore = a.sd;
    cp.sdAfter = b.sd;
    out->changePoints.push_back(cp);
  }
}

}  // namespace

const char* segmentModelName(SegmentModel model) {
  switch (model) {
    case SegmentModel::kMean:
      return "mean";
    case SegmentModel::kMeanVar:
      return "meanvar";
    case SegmentModel::kTrend:
      return "trend";
    case SegmentModel::kAuto:
      return "auto";
  }
  return "auto";
}

Result<SegmentModel> parseSegmentModel(const std::string& name) {
  for (SegmentModel m :
       {SegmentModel::kMean, SegmentModel::kMeanVar, SegmentModel::kTrend, SegmentModel::kAuto}) {
    if (name == segmentModelName(m)) return m;
  }
  return Result<SegmentModel>::error("unknown model '" + name +
                                     "' (one of: mean, meanvar, trend, auto)");
}

Segmentation segmentSeries(const std::vector<double>& series, const OfflineOptions& options) {
  Segmentation out;
  const size_t n = series.size();
  if (n == 0) return out;
  Prepared p = prepare(series, options, false);
  double phi = 0.0;
  Fit fit = settle(p, options, &phi);
  // With a season only when the whole model (segments and season) beats the segments alone in
  // the BIC: a few irregular alternations can look periodic, and are changes.
  if (options.seasonal) {
    Prepared seasonal = prepare(series, options, true);
    if (!seasonal.season.empty()) {
      double seasonalPhi = 0.0;
      Fit seasonalFit = settle(seasonal, options, &seasonalPhi);
      if (seasonalFit.bic() + seasonPrice(n, seasonal.season.size()) < fit.bic()) {
        p = std::move(seasonal);
        fit = std::move(seasonalFit);
        phi = seasonalPhi;
      }
    }
  }
  // An outlier next to a change fits either side equally (it is in no fit): the change is put
  // at the first value that is not one, so INDEX is a value seen at the new level.
  for (size_t k = 0; k + 1 < fit.ends.size(); ++k) {
    while (p.outlier[fit.ends[k]] && fit.ends[k] + 1 < fit.ends[k + 1]) ++fit.ends[k];
  }
  out.noiseSd = diffNoiseSd(series, 1);
  out.period = p.season.size();
  out.outliers = p.outliers;
  out.autocorr = phi;
  out.model = fit.model;
  out.penalty = fit.penalty;
  describe(p, fit, &out);
  return out;
}

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// Parses the whole of `text` as a double; false when anything is left over.
bool parseNumber(const std::string& text, double* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0') return false;
  *out = v;
  return true;
}

}  // namespace

Result<std::vector<double>> parseSeries(std::istream& in) {
  std::vector<double> values;
  std::string line;
  size_t lineNo = 0;
  bool sawData = false;
  while (std::getline(in, line)) {
    ++lineNo;
    std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    size_t comma = t.rfind(',');
    std::string field = trim(comma == std::string::npos ? t : t.substr(comma + 1));
    double v = 0.0;
    bool ok = parseNumber(field, &v);
    if (!ok) {
      // The first non-blank line may be a header ("step,value").
      if (!sawData) {
        sawData = true;
        continue;
      }
      return Result<std::vector<double>>::error("line " + std::to_string(lineNo) + ": value '" +
                                                field + "' is not a number");
    }
    if (!std::isfinite(v)) {
      return Result<std::vector<double>>::error("line " + std::to_string(lineNo) + ": value '" +
                                                field + "' is not finite (NaN or inf)");
    }
    sawData = true;
    values.push_back(v);
  }
  if (values.empty()) {
    return Result<std::vector<double>>::error("input has no values (" + std::to_string(lineNo) +
                                              " lines read)");
  }
  return values;
}

}  // namespace trainscope::detect
