// Synthetic series with known change points for the offline detector's evaluation: one
// generator per shape (shifts, variance changes, trends, outliers, heavy tails, seasonality,
// autocorrelated noise, short and long series, step times with checkpoints), seeded, so every
// run of the evaluation sees the same series. Pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trainscope::bench {

struct SyntheticSeries {
  std::string shape;
  std::vector<double> values;
  std::vector<size_t> changes;  // truth: first index of each new regime, ascending
};

struct Shape {
  const char* name;
  const char* description;  // one line for the table's legend
};

// Every shape, in table order.
const std::vector<Shape>& shapes();

// Series `index` of `shape` (a name from shapes()) for `seed`; the same arguments give the
// same series. An unknown shape gives an empty series.
SyntheticSeries makeSeries(const std::string& shape, uint64_t seed, size_t index);

}  // namespace trainscope::bench
