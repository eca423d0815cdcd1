// Direct tests of the robust statistics and the persistence tracker every detector builds on
// (collector/detect/robust.h): medians, MAD, the least-squares split, the ring, and the
// tracker's warm-up, baseline, opening, onset, resolution and outlier tolerance.
#include "collector/detect/robust.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

using namespace trainscope::detect;
using Transition = PersistenceTracker::Transition;

namespace {

// A steady series around `level` with +-1 % deterministic noise (no RNG: the same every run).
double steady(int64_t step, double level = 100.0) {
  const double noise[] = {-0.01, 0.005, 0.0, -0.005, 0.01};
  return level * (1.0 + noise[step % 5]);
}

struct Pushed {
  int64_t openedAt = -1;
  int64_t resolvedAt = -1;
  int opened = 0;
  int resolved = 0;
};

// Pushes value(step) for steps [from, to) and records the transitions.
template <typename F>
Pushed pushRange(PersistenceTracker& t, int64_t from, int64_t to, F value) {
  Pushed p;
  for (int64_t s = from; s < to; ++s) {
    switch (t.push(s, value(s))) {
      case Transition::kOpened:
        ++p.opened;
        p.openedAt = s;
        break;
      case Transition::kResolved:
        ++p.resolved;
        p.resolvedAt = s;
        break;
      case Transition::kNone:
        break;
    }
  }
  return p;
}

}  // namespace

TEST_CASE("robust: median of odd, even and empty inputs; the in-place form reorders only") {
  CHECK(median({}) == 0.0);
  CHECK(median({7.0}) == 7.0);
  CHECK(median({3.0, 1.0, 2.0}) == 2.0);
  CHECK(median({4.0, 1.0, 3.0, 2.0}) == 2.5);
  std::vector<double> v{5.0, 9.0, 1.0, 3.0, 7.0};
  CHECK(medianInPlace(v) == 5.0);
  CHECK(v.size() == 5u);
  // A median ignores how far the outliers are.
  CHECK(median({1.0, 2.0, 3.0, 1e12, -1e12}) == 2.0);
}

TEST_CASE("robust: MAD around a centre, and its Gaussian scale") {
  CHECK(mad({}, 0.0) == 0.0);
  // |x - 3| = 2 1 0 1 2 -> median 1.
  CHECK(mad({1.0, 2.0, 3.0, 4.0, 5.0}, 3.0) == 1.0);
  // One wild value moves the MAD by at most one rank.
  CHECK(mad({1.0, 2.0, 3.0, 4.0, 1e9}, 3.0) == 1.0);
  CHECK(kMadToSigma == Approx(1.4826));
}

TEST_CASE("robust: bestSplit finds the break of a step, honouring the direction asked") {
  CHECK(bestSplit({}, 0) == 0u);
  CHECK(bestSplit({1.0}, 0) == 0u);
  // The second segment starts at index 3.
  const std::vector<double> up{1.0, 1.0, 1.0, 5.0, 5.0, 5.0, 5.0};
  CHECK(bestSplit(up, 0) == 3u);
  CHECK(bestSplit(up, +1) == 3u);
  CHECK(bestSplit(up, -1) == 0u);  // no split where the second segment is lower
  const std::vector<double> down{9.0, 9.0, 2.0, 2.0, 2.0};
  CHECK(bestSplit(down, -1) == 2u);
  CHECK(bestSplit(down, +1) == 0u);
  // Least squares: a lone spike at the end does not pull the break of a clear step.
  CHECK(bestSplit({1.0, 1.0, 1.0, 1.0, 4.0, 4.0, 4.0, 4.0, 4.0, 6.0}, +1) == 4u);
}

TEST_CASE("robust: Ring keeps the newest values in order, oldest at index 0") {
  Ring<int> r(3);
  CHECK(r.empty());
  CHECK(r.capacity() == 3u);
  for (int i = 1; i <= 5; ++i) r.push(i);
  CHECK(r.full());
  CHECK(r.size() == 3u);
  CHECK(r.values() == std::vector<int>{3, 4, 5});
  CHECK(r.front() == 3);
  CHECK(r.back() == 5);
  CHECK(r.latest(2) == std::vector<int>{4, 5});
  CHECK(r.latest(10) == std::vector<int>{3, 4, 5});
  r.clear();
  CHECK(r.empty());
  r.push(9);
  CHECK(r.values() == std::vector<int>{9});
  // A zero capacity is one slot, not a division by zero or an empty buffer.
  Ring<int> one(0);
  one.push(1);
  one.push(2);
  CHECK(one.capacity() == 1u);
  CHECK(one.values() == std::vector<int>{2});
}

TEST_CASE("robust: warm-up samples are ignored and a baseline needs baselineMin samples") {
  PersistenceOptions o;
  PersistenceTracker t(o);
  // Warm-up values far off (compilation, cold caches) leave no trace in the baseline.
  for (int64_t s = 0; s < o.warmupSamples; ++s) CHECK(t.push(s, 1000.0) == Transition::kNone);
  int64_t s = o.warmupSamples;
  for (int i = 0; i < o.baselineMin - 1; ++i, ++s) t.push(s, steady(s));
  CHECK_FALSE(t.ready());
  t.push(s, steady(s));
  ++s;
  CHECK(t.ready());
  CHECK(t.baseline() == Approx(100.0).epsilon(0.01));
  // +-1 % noise: a relative sigma of about 1 %, never below the floor.
  CHECK(t.relSigma() >= o.minRelSigma);
  CHECK(t.relSigma() < 0.03);
  CHECK(t.exceedLevel() == Approx(t.baseline() * (1.0 + o.minExcess)).epsilon(0.01));
}

TEST_CASE("robust: a steady series never opens, and non-finite values are ignored") {
  PersistenceOptions o;
  PersistenceTracker t(o);
  Pushed p = pushRange(t, 0, 5000, [](int64_t s) { return steady(s); });
  CHECK(p.opened == 0);
  CHECK_FALSE(t.active());
  const double last = t.lastValue();
  CHECK(t.push(5000, std::numeric_limits<double>::quiet_NaN()) == Transition::kNone);
  CHECK(t.push(5001, std::numeric_limits<double>::infinity()) == Transition::kNone);
  CHECK(t.lastValue() == last);
  CHECK_FALSE(t.active());
}

TEST_CASE("robust: up to three outliers in a row do not open an episode") {
  PersistenceOptions o;
  PersistenceTracker t(o);
  pushRange(t, 0, 200, [](int64_t s) { return steady(s); });
  // Each sample's CUSUM increment is capped (cusumClip), so three 5x outliers add 9 < cusumH.
  Pushed p =
      pushRange(t, 200, 400, [](int64_t s) { return (s >= 250 && s < 253) ? 500.0 : steady(s); });
  CHECK(p.opened == 0);
  CHECK_FALSE(t.active());
}

TEST_CASE("robust: a sustained 30% rise opens at its onset and resolves where it ended") {
  PersistenceOptions o;
  PersistenceTracker t(o);
  pushRange(t, 0, 300, [](int64_t s) { return steady(s); });
  REQUIRE(t.ready());
  const int64_t rise = 300;
  const int64_t back = 360;
  auto series = [&](int64_t s) { return s >= rise && s < back ? steady(s, 130.0) : steady(s); };
  Pushed up = pushRange(t, 300, back, series);
  REQUIRE(up.opened == 1);
  CHECK(up.resolved == 0);
  // Decided a few samples in (the CUSUM needs cusumH / cusumClip of them), dated to the change.
  CHECK(up.openedAt >= rise);
  CHECK(up.openedAt <= rise + 8);
  CHECK(t.onsetStep() == rise);
  CHECK(t.active());
  CHECK(t.rising());
  CHECK(t.level() == Approx(130.0).epsilon(0.02));
  CHECK(t.confidence() > 0.0);
  CHECK(t.confidence() <= 1.0);
  // While it lasts it stays one episode; the baseline did not absorb the new level.
  CHECK(t.baseline() == Approx(100.0).epsilon(0.02));

  Pushed down = pushRange(t, back, back + 100, series);
  CHECK(down.opened == 0);
  REQUIRE(down.resolved == 1);
  CHECK_FALSE(t.active());
  // Hysteresis: not before a window of samples was seen back at the baseline level...
  CHECK(down.resolvedAt > back);
  CHECK(down.resolvedAt <= back + o.window);
  // ...but dated to where the values came down.
  CHECK(t.resolvedStep() == back);
}

TEST_CASE("robust: a rise below minExcess is tolerated") {
  PersistenceOptions o;
  PersistenceTracker t(o);
  pushRange(t, 0, 300, [](int64_t s) { return steady(s); });
  Pushed p = pushRange(t, 300, 2000, [](int64_t s) { return steady(s, 103.0); });
  CHECK(p.opened == 0);
}

TEST_CASE("robust: a fixed baseline is judged at once with the noise it is given") {
  PersistenceOptions o;
  PersistenceTracker t(o, 1.0);
  t.setExternalNoise(0.01);
  CHECK(t.ready());
  CHECK(t.baseline() == 1.0);
  CHECK(t.relSigma() == Approx(0.01));
  // The external noise is floored like a learned one.
  PersistenceTracker floored(o, 1.0);
  floored.setExternalNoise(0.0);
  CHECK(floored.relSigma() == o.minRelSigma);

  Pushed quiet = pushRange(t, 0, 100, [](int64_t s) { return steady(s, 1.0); });
  CHECK(quiet.opened == 0);
  Pushed slow = pushRange(t, 100, 140, [](int64_t s) { return steady(s, 1.5); });
  REQUIRE(slow.opened == 1);
  CHECK(t.onsetStep() == 100);
  CHECK(t.baseline() == 1.0);  // fixed: never learned from the samples
}

TEST_CASE("robust: forgetEpisode leaves silently and a condition that holds reopens") {
  PersistenceOptions o;
  PersistenceTracker t(o);
  pushRange(t, 0, 300, [](int64_t s) { return steady(s); });
  Pushed up = pushRange(t, 300, 330, [](int64_t s) { return steady(s, 150.0); });
  REQUIRE(up.opened == 1);
  t.forgetEpisode();
  CHECK_FALSE(t.active());
  // Still 50 % above the baseline: the next sample opens it again.
  CHECK(t.push(330, steady(330, 150.0)) == Transition::kOpened);
  CHECK(t.active());
}

TEST_CASE("robust: mediansOfOthers gives each value the median of the rest") {
  const std::vector<double> v = {5.0, 1.0, 3.0, 2.0};
  // Without 5: {1, 2, 3} -> 2; without 1: {2, 3, 5} -> 3; without 3: {1, 2, 5} -> 2; without 2:
  // {1, 3, 5} -> 3.
  CHECK(mediansOfOthers(v) == std::vector<double>{2.0, 3.0, 2.0, 3.0});
  // Odd count: the others are even, their median the mean of the middle two.
  CHECK(mediansOfOthers({1.0, 2.0, 4.0}) == std::vector<double>{3.0, 2.5, 1.5});
  CHECK(mediansOfOthers({7.0}).empty());
}
