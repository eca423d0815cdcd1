// The median of a few numbers, shared by the detectors (collector/detect/robust.h wraps it)
// and the simulator's truth. Pure; any thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace trainscope {

// The median of `values` (the mean of the middle two for an even count; 0 for none), found
// on the caller's buffer, which it reorders: no copy, for scratch vectors.
inline double medianInPlace(std::vector<double>& values) {
  if (values.empty()) return 0.0;
  const size_t mid = values.size() / 2;
  const auto at = values.begin() + static_cast<std::ptrdiff_t>(mid);
  std::nth_element(values.begin(), at, values.end());
  const double hi = *at;
  if (values.size() % 2 == 1) return hi;
  return (*std::max_element(values.begin(), at) + hi) / 2.0;
}

}  // namespace trainscope
