// The step_shift algorithm on a whole series at once, for `trainscope detect --input FILE`:
// parse a file of values, find where the level changed. Pure functions; any thread.
#pragma once

#include <cstddef>
#include <istream>
#include <vector>

#include "collector/detect/options.h"
#include "common/status.h"

namespace trainscope::detect {

struct ChangePoint {
  size_t index = 0;     // first value (0-based position in the series) at the new level
  double before = 0.0;  // median level between the previous change point and this one
  double after = 0.0;   // median level from here to the next change point
  double ratio() const { return before != 0.0 ? after / before : 0.0; }
};

// Runs the online step_shift detector (options.stepShift) over the series as if value i
// were step i: every shift and every return to the reference becomes a change point, in
// order. Periodic spikes are recognised and ignored as online.
std::vector<ChangePoint> findChangePoints(const std::vector<double>& series,
                                          const DetectOptions& options = {});

// One value per line, or CSV `step,value` (the value is the last field); an optional header
// line (first line not numeric) is skipped, as are blank lines and lines starting with '#'.
// Fails on empty input, non-numeric values and NaN/inf, naming the line number.
Result<std::vector<double>> parseSeries(std::istream& in);

}  // namespace trainscope::detect
