#include "tools/bench/offline_detect_eval/binseg_baseline.h"

#include <algorithm>
#include <cmath>

namespace trainscope::bench {

std::vector<size_t> binsegMeanChanges(const std::vector<double>& series,
                                      const BinsegOptions& options) {
  const size_t n = series.size();
  if (n < 2) return {};
  // Scale as TCPDBench's loader does (R's scale()): mean 0, sample sd 1.
  double mean = 0.0;
  for (double v : series) mean += v;
  mean /= static_cast<double>(n);
  double ss = 0.0;
  for (double v : series) ss += (v - mean) * (v - mean);
  const double sd = std::sqrt(ss / static_cast<double>(n - 1));
  if (!(sd > 0.0)) return {};
  std::vector<long double> prefix(n + 1, 0.0L), prefix2(n + 1, 0.0L);
  for (size_t i = 0; i < n; ++i) {
    const long double z = (series[i] - mean) / sd;
    prefix[i + 1] = prefix[i] + z;
    prefix2[i + 1] = prefix2[i] + z * z;
  }
  auto sse = [&](size_t from, size_t to) {
    const long double m = static_cast<long double>(to - from);
    const long double s = prefix[to] - prefix[from];
    return static_cast<double>((prefix2[to] - prefix2[from]) - s * s / m);
  };

  std::vector<size_t> bounds{0, n};  // segment boundaries so far, ascending
  std::vector<size_t> order;         // splits in the order they were made
  std::vector<double> drops;         // and the drop in the sum of squares each bought
  for (size_t q = 0; q < options.maxChanges; ++q) {
    double bestDrop = -1.0;
    size_t bestAt = 0;
    for (size_t b = 0; b + 1 < bounds.size(); ++b) {
      const size_t from = bounds[b], to = bounds[b + 1];
      if (to - from < 2) continue;
      const double whole = sse(from, to);
      for (size_t k = from + 1; k < to; ++k) {
        const double drop = whole - sse(from, k) - sse(k, to);
        if (drop > bestDrop) {
          bestDrop = drop;
          bestAt = k;
        }
      }
    }
    if (bestAt == 0) break;
    bounds.insert(std::upper_bound(bounds.begin(), bounds.end(), bestAt), bestAt);
    order.push_back(bestAt);
    drops.push_back(bestDrop);
  }
  const double penalty = options.penaltyPerLogN * std::log(static_cast<double>(n));
  size_t keep = 0;
  for (size_t q = 0; q < drops.size(); ++q) {
    if (drops[q] >= penalty) keep = q + 1;
  }
  std::vector<size_t> out(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace trainscope::bench
