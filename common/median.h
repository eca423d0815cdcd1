// Medians of a few numbers, found on the caller's buffer (which they reorder: no copy, for
// scratch vectors). Shared by the detectors (collector/detect/robust.h wraps medianInPlace),
// the topology inference, the capture manager, the importer and the simulator's truth. Which
// middle a caller takes for an even count is part of its meaning, so each says it by name.
// Pure; any thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace trainscope {

// The lower median: the ((n - 1) / 2)-th smallest, so with an even count the smaller middle
// (with two replicas the faster one: a slow one never sets it). T{} for none.
template <typename T>
T lowerMedianInPlace(std::vector<T>& values) {
  if (values.empty()) return T{};
  const auto at = values.begin() + static_cast<std::ptrdiff_t>((values.size() - 1) / 2);
  std::nth_element(values.begin(), at, values.end());
  return *at;
}

// The upper median: the (n / 2)-th smallest, so with an even count the larger middle. T{} for
// none.
template <typename T>
T upperMedianInPlace(std::vector<T>& values) {
  if (values.empty()) return T{};
  const auto at = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), at, values.end());
  return *at;
}

// The median proper: the mean of the two middles for an even count; 0 for none.
inline double medianInPlace(std::vector<double>& values) {
  if (values.empty()) return 0.0;
  const double hi = upperMedianInPlace(values);
  if (values.size() % 2 == 1) return hi;
  // nth_element left the lower half before the upper middle: the lower middle is its largest.
  const auto at = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  return (*std::max_element(values.begin(), at) + hi) / 2.0;
}

}  // namespace trainscope
