// Offline change-point detection for `trainscope detect --input FILE`: parse a file of values and
// split the whole series into segments by penalised likelihood (PELT). Unlike the online
// detectors, it sees the whole series at once, so it can place every change exactly and judge
// each segment by all of its values. Pure functions; any thread.
//
// Why it works on series it was not tuned for:
// - Each segment is a statistical model (a level; a level and a spread; or a straight line and a
//   spread) and the segmentation is the one with the best likelihood after paying a penalty per
//   change point: the BIC, (parameters per segment + 1) x ln n. PELT finds that optimum
//   exactly, in about linear time (series over 5,000 values: on a grid first, then exactly
//   near what the grid found).
// - The scale comes from the data: values are standardised by a robust noise estimate taken from
//   differences of neighbours, which level shifts and slow trends barely move.
// - Lone outliers do not make segments: a value far from the running median of its neighbours
//   (and from the noise level) is left out of the fits, as a missing value; a running median
//   follows steps, so real shifts stay.
// - Autocorrelated noise wanders like small shifts, and the BIC assumes independent values: the
//   penalty is scaled by the effective-sample-size factor (1 + phi) / (1 - phi), phi the lag-1
//   autocorrelation of what the segments leave unexplained, refitted until phi settles.
// - A trend is not a staircase: the automatic model also fits a line per segment and keeps lines
//   where the penalised likelihood says they explain the series better than levels.
// - A seasonal pattern (a period the series repeats) is removed first when segments and season
//   together beat segments alone in the BIC, so a season's peaks are not change points.
#pragma once

#include <cstddef>
#include <istream>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainscope::detect {

// What one segment is, for the likelihood.
enum class SegmentModel {
  kMean,     // a level; one noise level for the whole series: only level shifts are changes
  kMeanVar,  // a level and a spread: level shifts and changes of noise
  kTrend,    // a straight line and a spread: jumps and changes of slope; a trend is one segment
  kAuto,     // kMeanVar or kTrend, whichever has the better penalised likelihood
};

// "mean", "meanvar", "trend", "auto".
const char* segmentModelName(SegmentModel model);
// The inverse; an error naming the accepted words.
Result<SegmentModel> parseSegmentModel(const std::string& name);

struct OfflineOptions {
  SegmentModel model = SegmentModel::kAuto;  // see SegmentModel
  double penalty = 0.0;        // penalty per change point (2 x log-likelihood units); 0 = the
                               // BIC default above. Higher = fewer changes, small ones missed
  double penaltyScale = 1.0;   // multiplies the default penalty (ignored with `penalty`)
  size_t minSegment = 5;       // fewest values in a segment; shorter episodes count as outliers
                               // (raised to 3 for meanvar, 4 for trend, which need the spread)
  double outlierSigmas = 5.0;  // values further than this many robust sds from the running
                               // median of their 7 neighbours are outliers; 0 = keep all
  double maxAutocorr = 0.9;    // cap of the lag-1 autocorrelation the penalty is scaled for
                               // (by up to 19x); 0 = assume independent values
  bool seasonal = true;        // look for and remove a repeating pattern before segmenting
};

// One stretch of the series between change points, [start, end).
struct Segment {
  size_t start = 0;
  size_t end = 0;
  double mean = 0.0;   // of the values, outliers left out (see above)
  double sd = 0.0;     // sample standard deviation around the segment's fit (level or line)
  double slope = 0.0;  // per value; 0 unless the segment is a line
};

struct ChangePoint {
  size_t index = 0;       // first value (0-based) of the new segment
  double before = 0.0;    // mean of the segment that ends here
  double after = 0.0;     // mean of the segment that starts here
  double jump = 0.0;      // the fit after minus the fit before, at `index` (after - before
                          // for levels; for lines, the discontinuity)
  double sdBefore = 0.0;  // spreads of the two segments
  double sdAfter = 0.0;
  double ratio() const { return before != 0.0 ? after / before : 0.0; }
};

struct Segmentation {
  std::vector<Segment> segments;                // cover the series in order; at least one
  std::vector<ChangePoint> changePoints;        // segments.size() - 1 of them
  SegmentModel model = SegmentModel::kMeanVar;  // the one used (never kAuto)
  double penalty = 0.0;                         // per change point, as used
  double noiseSd = 0.0;                         // robust noise estimate (differences of neighbours)
  double autocorr = 0.0;  // lag-1 autocorrelation estimate, as used for the penalty
  size_t period = 0;      // seasonal period removed; 0 = none
  size_t outliers = 0;    // values left out as outliers
};

// Segments `series` (see the header comment). Any length; fewer than 2 x minSegment values give
// one segment. Deterministic.
Segmentation segmentSeries(const std::vector<double>& series, const OfflineOptions& options = {});

// One value per line, or CSV `step,value` (the value is the last field); an optional header
// line (first line not numeric) is skipped, as are blank lines and lines starting with '#'.
// Fails on empty input, non-numeric values and NaN/inf, naming the line number.
Result<std::vector<double>> parseSeries(std::istream& in);

}  // namespace trainscope::detect
