#include "agent/clock_offset.h"

#include <catch2/catch.hpp>

using trainscope::agent::ClockOffsetEstimator;

TEST_CASE("clock offset follows the NTP formulas") {
  // Collector 1 s ahead; 10 ms each way; 2 ms of collector processing.
  const int64_t ms = 1'000'000;
  int64_t t1 = 1'700'000'000'000'000'000;
  int64_t t2 = t1 + 1000 * ms + 10 * ms;
  int64_t t3 = t2 + 2 * ms;
  int64_t t4 = t1 + 10 * ms + 2 * ms + 10 * ms;
  auto s = ClockOffsetEstimator::compute(t1, t2, t3, t4);
  CHECK(s.offsetNs == 1000 * ms);
  CHECK(s.rttNs == 20 * ms);

  // Asymmetric paths bias the offset by half the asymmetry.
  auto a = ClockOffsetEstimator::compute(0, 30 * ms, 30 * ms, 40 * ms);
  CHECK(a.offsetNs == 10 * ms);
  CHECK(a.rttNs == 40 * ms);
}

TEST_CASE("clock offset keeps the lowest-rtt sample of the recent window") {
  const int64_t ms = 1'000'000;
  ClockOffsetEstimator est(3);
  CHECK_FALSE(est.hasEstimate());
  // offset 5 ms, rtt 20 ms
  REQUIRE(est.add(0, 15 * ms, 15 * ms, 20 * ms));
  // offset 7 ms, rtt 4 ms: the best so far
  REQUIRE(est.add(100 * ms, 109 * ms, 109 * ms, 104 * ms));
  // offset 50 ms, rtt 10 ms
  REQUIRE(est.add(200 * ms, 255 * ms, 255 * ms, 210 * ms));
  CHECK(est.best().rttNs == 4 * ms);
  CHECK(est.best().offsetNs == 7 * ms);
  // Two more samples push the 4 ms one out of a window of three.
  REQUIRE(est.add(300 * ms, 360 * ms, 360 * ms, 320 * ms));  // rtt 20
  REQUIRE(est.add(400 * ms, 460 * ms, 460 * ms, 430 * ms));  // rtt 30
  CHECK(est.size() == 3);
  CHECK(est.best().rttNs == 10 * ms);
  CHECK(est.best().offsetNs == 50 * ms);
}

TEST_CASE("clock offset ignores impossible timestamps") {
  ClockOffsetEstimator est;
  CHECK_FALSE(est.add(100, 50, 60, 90));  // t4 before t1
  CHECK_FALSE(est.add(0, 60, 50, 100));   // t3 before t2
  CHECK_FALSE(est.add(0, 10, 200, 100));  // collector held it longer than the round trip
  CHECK_FALSE(est.hasEstimate());
  CHECK(est.best().offsetNs == 0);
}
