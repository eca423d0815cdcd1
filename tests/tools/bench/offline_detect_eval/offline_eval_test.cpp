// The offline detector evaluation's own parts: the change-point benchmark's F1 (checked on
// TCPDBench's published examples), the binary segmentation baseline, and the synthetic series
// (seeded, with truths inside the series).
#include <catch2/catch.hpp>

#include <random>

#include "tools/bench/offline_detect_eval/binseg_baseline.h"
#include "tools/bench/offline_detect_eval/cpd_score.h"
#include "tools/bench/offline_detect_eval/synth_series.h"

using namespace trainscope::bench;

TEST_CASE("cpd score: true positives match each annotation once, closest first") {
  CHECK(truePositives({1, 10, 20, 23}, {3, 8, 20}, 5) == ChangePoints{1, 10, 20});
  CHECK(truePositives({1, 10, 20, 23}, {1, 3, 8, 20}, 5) == ChangePoints{1, 10, 20});
  CHECK(truePositives({1, 10, 20, 23}, {1, 3, 5, 8, 20}, 5) == ChangePoints{1, 10, 20});
  CHECK(truePositives({}, {1, 2, 3}, 5).empty());
  CHECK(truePositives({1, 2, 3}, {}, 5).empty());
  CHECK(truePositives({10}, {16}, 5).empty());  // outside the margin
}

TEST_CASE("cpd score: F1 is TCPDBench's f_measure (its documented examples)") {
  CHECK(f1Score({{10, 20}, {11, 20}, {10}, {0, 5}}, {10, 20}).f1 == Approx(1.0));
  CHECK(f1Score({{}, {10}, {50}}, {10}).f1 == Approx(0.9090909090909091));
  CHECK(f1Score({{}, {10}, {50}}, {}).f1 == Approx(0.8));
  // "No change points" against k true ones: P = 1, R = 1 / (k + 1), F1 = 2 / (k + 2).
  for (size_t k = 0; k < 5; ++k) {
    ChangePoints truth;
    for (size_t i = 1; i <= k; ++i) truth.push_back(100 * i);
    const F1Score s = f1Score({truth}, {});
    CHECK(s.precision == Approx(1.0));
    CHECK(s.recall == Approx(1.0 / static_cast<double>(k + 1)));
    CHECK(s.f1 == Approx(2.0 / static_cast<double>(k + 2)));
  }
  // A false alarm costs precision: truth {50}, found {50, 80}: P 2/3, R 1.
  const F1Score fa = f1Score({{50}}, {50, 80});
  CHECK(fa.precision == Approx(2.0 / 3.0));
  CHECK(fa.recall == Approx(1.0));
  CHECK(fa.f1 == Approx(0.8));
}

TEST_CASE("binseg baseline: finds clear shifts, nothing in noise, at most Q changes") {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<double> shift(400), noise(400), steps(600);
  for (size_t i = 0; i < shift.size(); ++i) shift[i] = g(rng) + (i >= 150 ? 5.0 : 0.0);
  for (double& v : noise) v = g(rng);
  for (size_t i = 0; i < steps.size(); ++i) steps[i] = g(rng) + ((i / 50) % 2 ? 8.0 : 0.0);
  CHECK(binsegMeanChanges(shift) == std::vector<size_t>{150});
  CHECK(binsegMeanChanges(noise).empty());
  CHECK(binsegMeanChanges(std::vector<double>(50, 3.0)).empty());
  CHECK(binsegMeanChanges(steps).size() == 5);  // 11 changes, Q = 5
  BinsegOptions more;
  more.maxChanges = 20;
  CHECK(binsegMeanChanges(steps, more).size() == 11);
}

TEST_CASE("synthetic series: seeded, every shape, truths inside the series and ascending") {
  REQUIRE(shapes().size() >= 10);
  for (const auto& shape : shapes()) {
    INFO(shape.name);
    for (size_t i = 0; i < 5; ++i) {
      const SyntheticSeries a = makeSeries(shape.name, 7, i);
      const SyntheticSeries b = makeSeries(shape.name, 7, i);
      CHECK(a.values == b.values);
      CHECK(a.changes == b.changes);
      CHECK(a.shape == shape.name);
      REQUIRE(a.values.size() >= 20);
      for (size_t k = 0; k < a.changes.size(); ++k) {
        CHECK(a.changes[k] > 0);
        CHECK(a.changes[k] < a.values.size());
        if (k > 0) CHECK(a.changes[k] > a.changes[k - 1]);
      }
    }
    CHECK(makeSeries(shape.name, 7, 0).values != makeSeries(shape.name, 8, 0).values);
  }
  CHECK(makeSeries("no_such_shape", 1, 0).values.empty());
}
