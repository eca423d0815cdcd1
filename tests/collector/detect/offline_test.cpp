// The offline change-point detector (collector/detect/offline.h): series with known change
// points of each shape it claims to handle, the options, the segment statistics, and the
// parser of `trainscope detect --input`.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <random>
#include <sstream>

#include "collector/detect/offline.h"

using namespace trainscope::detect;

namespace {

trainscope::Result<std::vector<double>> parse(const std::string& text) {
  std::istringstream in(text);
  return parseSeries(in);
}

std::vector<size_t> indices(const Segmentation& s) {
  std::vector<size_t> out;
  for (const auto& cp : s.changePoints) out.push_back(cp.index);
  return out;
}

// Gaussian noise of sd 1 around `level(i)`.
template <typename Level>
std::vector<double> noisy(size_t n, uint64_t seed, Level level) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = level(i) + g(rng);
  return out;
}

bool near(size_t a, size_t b, size_t margin) {
  return (a > b ? a - b : b - a) <= margin;
}

}  // namespace

TEST_CASE("offline: parseSeries reads one value per line and CSV with or without a header") {
  auto plain = parse("1.5\n2\n\n# comment\n3e2\n");
  REQUIRE(plain.isOk());
  CHECK(*plain == std::vector<double>{1.5, 2.0, 300.0});
  auto csv = parse("step,value\n0,10\n1,11.5\n2,12\n");
  REQUIRE(csv.isOk());
  CHECK(*csv == std::vector<double>{10, 11.5, 12});
  auto noHeader = parse("0, 10\r\n1, 20\r\n");
  REQUIRE(noHeader.isOk());
  CHECK(*noHeader == std::vector<double>{10, 20});
}

TEST_CASE("offline: parseSeries rejects empty input, non-numbers and NaN/inf naming the line") {
  auto empty = parse("");
  REQUIRE_FALSE(empty.isOk());
  CHECK(empty.message().find("no values") != std::string::npos);
  CHECK_FALSE(parse("step,value\n").isOk());
  auto bad = parse("step,value\n0,1\n1,abc\n");
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.message().find("line 3") != std::string::npos);
  CHECK(bad.message().find("abc") != std::string::npos);
  auto nan = parse("1\n2\nnan\n");
  REQUIRE_FALSE(nan.isOk());
  CHECK(nan.message().find("line 3") != std::string::npos);
  auto inf = parse("1\n-inf\n");
  REQUIRE_FALSE(inf.isOk());
  CHECK(inf.message().find("line 2") != std::string::npos);
  auto trailing = parse("1\n2x\n");
  REQUIRE_FALSE(trailing.isOk());
  CHECK(trailing.message().find("line 2") != std::string::npos);
}

TEST_CASE("offline: a rise and the return are placed, with the levels, jumps and spreads") {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> n(0.0, 0.05);
  std::vector<double> series;
  series.reserve(2000);
  for (int i = 0; i < 2000; ++i)
    series.push_back((i >= 500 && i < 1200 ? 150.0 : 100.0) * (1 + n(rng)));
  const Segmentation s = segmentSeries(series);
  REQUIRE(s.changePoints.size() == 2);
  const ChangePoint& up = s.changePoints[0];
  CHECK(near(up.index, 500, 2));
  CHECK(up.before == Approx(100).margin(1));
  CHECK(up.after == Approx(150).margin(1.5));
  CHECK(up.ratio() == Approx(1.5).margin(0.03));
  CHECK(up.jump == Approx(50).margin(2));
  CHECK(up.sdBefore == Approx(5).margin(0.5));
  CHECK(up.sdAfter == Approx(7.5).margin(0.75));
  CHECK(near(s.changePoints[1].index, 1200, 2));
  CHECK(s.changePoints[1].after == Approx(100).margin(1));
  CHECK(s.changePoints[1].jump == Approx(-50).margin(2));
  // The segments tile the series and carry the same numbers.
  REQUIRE(s.segments.size() == 3);
  CHECK(s.segments[0].start == 0);
  CHECK(s.segments[0].end == up.index);
  CHECK(s.segments[1].start == up.index);
  CHECK(s.segments[2].end == series.size());
  CHECK(s.segments[1].mean == up.after);
  CHECK(s.segments[1].sd == up.sdAfter);
}

TEST_CASE("offline: several shifts of 2-3 sd are all found where they are") {
  const std::vector<size_t> truth{150, 260, 420, 700};
  const std::vector<double> level{0, 3, 0.5, 2.5, -0.5};
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    auto series = noisy(900, seed, [&](size_t i) {
      size_t k = 0;
      while (k < truth.size() && i >= truth[k]) ++k;
      return level[k];
    });
    const auto found = indices(segmentSeries(series));
    INFO("seed " << seed);
    REQUIRE(found.size() == truth.size());
    for (size_t k = 0; k < truth.size(); ++k) CHECK(near(found[k], truth[k], 5));
  }
}

TEST_CASE("offline: pure noise, autocorrelated noise and a lone trend have no change point") {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    INFO("seed " << seed);
    CHECK(segmentSeries(noisy(1000, seed, [](size_t) { return 7.0; })).changePoints.empty());
    // AR(1), phi 0.7: wanders that look like shifts to a detector assuming independence.
    auto ar = noisy(1000, seed, [](size_t) { return 0.0; });
    for (size_t i = 1; i < ar.size(); ++i) ar[i] = 0.7 * ar[i - 1] + std::sqrt(1 - 0.49) * ar[i];
    const Segmentation s = segmentSeries(ar);
    CHECK(s.changePoints.empty());
    CHECK(s.autocorr > 0.4);
    // A rise of 20 sd over the series: one line, not a staircase.
    const Segmentation t = segmentSeries(noisy(800, seed, [](size_t i) { return 0.025 * i; }));
    CHECK(t.changePoints.empty());
    CHECK(t.model == SegmentModel::kTrend);
    REQUIRE(t.segments.size() == 1);
    CHECK(t.segments[0].slope == Approx(0.025).margin(0.002));
  }
}

TEST_CASE("offline: a jump on a trend is found with its size, the trend is not") {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    INFO("seed " << seed);
    auto series = noisy(600, seed, [](size_t i) { return 0.02 * i + (i >= 380 ? 4.0 : 0.0); });
    const Segmentation s = segmentSeries(series);
    REQUIRE(s.changePoints.size() == 1);
    CHECK(near(s.changePoints[0].index, 380, 3));
    CHECK(s.model == SegmentModel::kTrend);
    CHECK(s.changePoints[0].jump == Approx(4.0).margin(0.6));
  }
}

TEST_CASE("offline: a change of spread is a change point for meanvar, not for the mean model") {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    INFO("seed " << seed);
    auto series = noisy(800, seed, [](size_t) { return 0.0; });
    for (size_t i = 300; i < series.size(); ++i) series[i] *= 4.0;
    const Segmentation s = segmentSeries(series);
    REQUIRE(s.changePoints.size() == 1);
    INFO("found at " << s.changePoints[0].index);
    CHECK(near(s.changePoints[0].index, 300, 15));  // a spread is placed less sharply than a level
    CHECK(s.changePoints[0].sdAfter / s.changePoints[0].sdBefore == Approx(4).margin(0.8));
    OfflineOptions mean;
    mean.model = SegmentModel::kMean;
    // The mean model judges levels against one noise level: a louder stretch is no shift.
    for (const auto& cp : segmentSeries(series, mean).changePoints) {
      CHECK(std::fabs(cp.jump) > 1.0);  // anything it reports is a level move, not noise
    }
  }
}

TEST_CASE("offline: outliers are replaced and make no change point; a shift among them is found") {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    INFO("seed " << seed);
    auto series = noisy(1000, seed, [](size_t i) { return i >= 600 ? 3.0 : 0.0; });
    std::mt19937_64 rng(seed + 100);
    for (int k = 0; k < 20; ++k) series[rng() % series.size()] += (k % 2 ? 12.0 : -9.0);
    const Segmentation s = segmentSeries(series);
    REQUIRE(s.changePoints.size() == 1);
    CHECK(near(s.changePoints[0].index, 600, 3));
    CHECK(s.outliers >= 15);
    OfflineOptions keep;
    keep.outlierSigmas = 0;
    CHECK(segmentSeries(series, keep).outliers == 0);
  }
}

TEST_CASE("offline: an outlier right before a change is left out; the change is after it") {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    INFO("seed " << seed);
    auto series = noisy(600, seed, [](size_t i) { return i >= 300 ? 6.0 : 0.0; });
    series[299] = 40.0;  // a checkpoint spike on the last value at the old level
    const Segmentation s = segmentSeries(series);
    CHECK(indices(s) == std::vector<size_t>{300});
    CHECK(s.outliers >= 1);
    CHECK(s.segments[0].mean == Approx(0.0).margin(0.2));  // the spike is in no mean
  }
}

TEST_CASE("offline: periodic spikes (checkpoints) are no change points") {
  std::mt19937_64 rng(4);
  std::normal_distribution<double> n(0.0, 0.05);
  std::vector<double> series;
  series.reserve(20000);
  for (int i = 0; i < 20000; ++i) series.push_back((i % 250 == 0 ? 400.0 : 100.0) * (1 + n(rng)));
  CHECK(segmentSeries(series).changePoints.empty());
}

TEST_CASE("offline: a season is found and removed; the shift on it is the only change") {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    INFO("seed " << seed);
    auto series = noisy(480, seed, [](size_t i) {
      return 3.0 * std::sin(2 * M_PI * static_cast<double>(i) / 12.0) + (i >= 300 ? 3.0 : 0.0);
    });
    const Segmentation s = segmentSeries(series);
    CHECK(s.period == 12);
    REQUIRE(s.changePoints.size() == 1);
    CHECK(near(s.changePoints[0].index, 300, 3));
    // The segment means carry the season's average over their values: about the levels.
    CHECK(s.changePoints[0].jump == Approx(3.0).margin(0.6));
    OfflineOptions plain;
    plain.seasonal = false;
    CHECK(segmentSeries(series, plain).period == 0);
  }
}

TEST_CASE("offline: units do not matter (scale and offset give the same change points)") {
  auto series = noisy(700, 9, [](size_t i) { return i >= 250 ? 2.5 : 0.0; });
  const auto base = indices(segmentSeries(series));
  REQUIRE(base.size() == 1);
  for (double& v : series) v = 1e9 + 1e6 * v;
  CHECK(indices(segmentSeries(series)) == base);
}

TEST_CASE("offline: a long series is placed exactly through the grid stage") {
  // 200,000 values: segmented on a grid of 40 first, then exactly near what was found.
  const std::vector<size_t> truth{31'337, 100'003, 100'250, 170'001};
  auto series = noisy(200'000, 11, [&](size_t i) {
    size_t k = 0;
    while (k < truth.size() && i >= truth[k]) ++k;
    return k % 2 == 1 ? 2.0 : 0.0;
  });
  const auto found = indices(segmentSeries(series));
  REQUIRE(found.size() == truth.size());
  for (size_t k = 0; k < truth.size(); ++k) CHECK(near(found[k], truth[k], 3));
}

TEST_CASE("offline: warm-up values are a segment of their own") {
  std::vector<double> series(300, 100.0);
  for (size_t i = 0; i < series.size(); ++i) series[i] += (i * 7 % 5) * 0.5;
  for (size_t i = 0; i < 10; ++i) series[i] = 1000.0;  // compile steps
  for (size_t i = 200; i < series.size(); ++i) series[i] += 30.0;
  CHECK(indices(segmentSeries(series)) == std::vector<size_t>{10, 200});
}

TEST_CASE("offline: short, constant and empty series are one segment (or none)") {
  const Segmentation shortOne = segmentSeries({1, 2, 30, 31, 1, 2, 30, 31});
  CHECK(shortOne.changePoints.empty());
  REQUIRE(shortOne.segments.size() == 1);
  CHECK(shortOne.segments[0].end == 8);
  const Segmentation flat = segmentSeries(std::vector<double>(50, 4.0));
  CHECK(flat.changePoints.empty());
  REQUIRE(flat.segments.size() == 1);
  CHECK(flat.segments[0].mean == 4.0);
  CHECK(flat.segments[0].sd == 0.0);
  CHECK(flat.noiseSd == 0.0);
  const Segmentation none = segmentSeries({});
  CHECK(none.segments.empty());
  CHECK(none.changePoints.empty());
  // A step in an otherwise constant series (all differences but one are zero).
  std::vector<double> step(40, 1.0);
  for (size_t i = 25; i < step.size(); ++i) step[i] = 2.0;
  CHECK(indices(segmentSeries(step)) == std::vector<size_t>{25});
}

TEST_CASE("offline: options: penalty, penalty scale, minimum segment and model") {
  auto series = noisy(600, 5, [](size_t i) { return i >= 400 ? 2.5 : 0.0; });
  REQUIRE(indices(segmentSeries(series)) == std::vector<size_t>{400});
  OfflineOptions huge;
  huge.penalty = 1e6;
  const Segmentation none = segmentSeries(series, huge);
  CHECK(none.changePoints.empty());
  CHECK(none.penalty == 1e6);
  OfflineOptions strict;
  strict.penaltyScale = 100;
  const Segmentation fewer = segmentSeries(series, strict);
  CHECK(fewer.changePoints.empty());
  CHECK(fewer.penalty >= 100 * 3 * std::log(600.0));  // BIC for a level and a spread, or more
  // Irregular blocks of 9-20 values: each is a segment, unless segments must be longer.
  const std::vector<size_t> blocks{12, 15, 9, 20, 11, 14, 17, 10, 13, 19, 16, 12, 18, 9, 15};
  std::vector<size_t> truth;
  truth.reserve(blocks.size());
  size_t at = 0;
  for (size_t b : blocks) truth.push_back(at += b);
  truth.pop_back();
  auto busy = noisy(at, 6, [&](size_t i) {
    size_t k = 0;
    while (k < truth.size() && i >= truth[k]) ++k;
    return k % 2 ? 6.0 : 0.0;
  });
  CHECK(indices(segmentSeries(busy)) == truth);
  OfflineOptions longSegments;
  longSegments.minSegment = 30;
  const Segmentation coarse = segmentSeries(busy, longSegments);
  REQUIRE_FALSE(coarse.segments.empty());
  for (const auto& seg : coarse.segments) CHECK(seg.end - seg.start >= 30);
  OfflineOptions lines;
  lines.model = SegmentModel::kTrend;
  CHECK(segmentSeries(series, lines).model == SegmentModel::kTrend);
  lines.model = SegmentModel::kMeanVar;
  CHECK(segmentSeries(noisy(500, 1, [](size_t i) { return 0.05 * i; }), lines).model ==
        SegmentModel::kMeanVar);
}

TEST_CASE("offline: model names parse both ways; an unknown one names the choices") {
  for (SegmentModel m :
       {SegmentModel::kMean, SegmentModel::kMeanVar, SegmentModel::kTrend, SegmentModel::kAuto}) {
    auto parsed = parseSegmentModel(segmentModelName(m));
    REQUIRE(parsed.isOk());
    CHECK(*parsed == m);
  }
  auto bad = parseSegmentModel("linear");
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.message().find("linear") != std::string::npos);
  CHECK(bad.message().find("meanvar") != std::string::npos);
}
