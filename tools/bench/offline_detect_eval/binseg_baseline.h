// The "plain binary segmentation" baseline of the offline detector's evaluation, as the change
// point benchmark runs it with default settings (TCPDBench's default_binseg: R changepoint's
// cpt.mean, Normal statistic, MBIC penalty, BinSeg with Q = 5, on the series scaled to mean 0,
// sd 1). Pure function; any thread.
#pragma once

#include <cstddef>
#include <vector>

namespace trainscope::bench {

struct BinsegOptions {
  size_t maxChanges = 5;        // Q: splits considered
  double penaltyPerLogN = 3.0;  // MBIC for a mean change: 3 log n per change
};

// Greedy splits of the z-scored series by the largest drop of the sum of squares (a mean change
// with unit variance); each split's drop is its likelihood-ratio statistic, and the change
// points kept are the first k splits, k the largest with a drop of at least the penalty (as
// changepoint's BinSeg chooses). Returns the first index of each new segment, ascending.
std::vector<size_t> binsegMeanChanges(const std::vector<double>& series,
                                      const BinsegOptions& options = {});

}  // namespace trainscope::bench
