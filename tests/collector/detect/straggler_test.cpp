#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "collector/detect/detector_set.h"
#include "tests/collector/detect/synth.h"

using namespace trainscope::detect;
using namespace trainscope::detect::test;

namespace {
std::vector<Anomaly> runWith(std::function<double(int64_t, uint32_t)> f, int64_t steps,
                             uint64_t seed) {
  SynthJob job;
  job.seed = seed;
  job.rng.seed(seed);
  job.computeFactor = std::move(f);
  DetectorSet set;
  std::vector<Anomaly> events;
  run(job, set, 0, steps, &events);
  return events;
}
}  // namespace

TEST_CASE("straggler: no alarm on 20,000 healthy steps x 8 ranks with 5% noise") {
  for (uint64_t seed : {21u, 22u, 23u}) {
    auto events = runWith(nullptr, 20000, seed);
    INFO(describe(events));
    CHECK(ofKind(events, AnomalyKind::kStraggler).empty());
  }
}

TEST_CASE("straggler: a rank 10% slower is named with its node, factor and onset, then resolved") {
  auto events = runWith(
      [](int64_t s, uint32_t r) { return r == 5 && s >= 2000 && s < 4000 ? 1.10 : 1.0; }, 6000, 24);
  INFO(describe(events));
  auto opened = ofKind(events, AnomalyKind::kStraggler);
  REQUIRE(opened.size() == 1);
  const Anomaly& a = opened[0];
  CHECK(a.ranks == std::vector<uint32_t>{5});
  CHECK(a.nodes == std::vector<std::string>{"node-1"});
  CHECK(a.magnitude == Approx(1.10).margin(0.05));  // estimated from the first steps
  CHECK(std::llabs(a.onsetStep - 2000) <= 8);
  CHECK(a.detectedStep < 2060);
  // The peers' own time: compute (80 ms) and data (5 ms), everything but their waits.
  CHECK(a.evidence.at("peer_median_ms") == Approx(85.0).margin(2.0));
  // It arrives last at the all-reduce.
  CHECK(a.evidence.at("arrival_lag_ms") > 3.0);
  auto resolved = ofKind(events, AnomalyKind::kStraggler, AnomalyState::kResolved);
  REQUIRE(resolved.size() == 1);
  CHECK(resolved[0].id == a.id);
  CHECK(std::llabs(resolved[0].resolvedStep - 4000) <= 8);
}

TEST_CASE("straggler: two ranks: the one its peer waits for is named; healthy pairs stay quiet") {
  SECTION("rank 1 15% slower from step 500: rank 0 waits for it at the all-reduce") {
    SynthJob job;
    job.world = 2;
    job.seed = 41;
    job.rng.seed(41);
    job.computeFactor = [](int64_t s, uint32_t r) { return r == 1 && s >= 500 ? 1.15 : 1.0; };
    DetectorSet set;
    std::vector<Anomaly> events;
    run(job, set, 0, 1500, &events);
    INFO(describe(events));
    auto opened = ofKind(events, AnomalyKind::kStraggler);
    REQUIRE(opened.size() == 1);
    CHECK(opened[0].ranks == std::vector<uint32_t>{1});
    CHECK(std::llabs(opened[0].onsetStep - 500) <= 8);
    CHECK(opened[0].evidence.at("peer_exposed_comm_ms") >
          opened[0].evidence.at("exposed_comm_ms") + 5.0);
  }
  SECTION("20,000 healthy steps of two ranks with 5% noise") {
    for (uint64_t seed : {42u, 43u}) {
      SynthJob job;
      job.world = 2;
      job.seed = seed;
      job.rng.seed(seed);
      DetectorSet set;
      std::vector<Anomaly> events;
      run(job, set, 0, 20000, &events);
      INFO(describe(events));
      CHECK(ofKind(events, AnomalyKind::kStraggler).empty());
    }
  }
  SECTION("a compute rise its peer does not wait for (the waits stay flat) is not named") {
    SynthJob job;
    job.world = 2;
    job.seed = 44;
    job.rng.seed(44);
    job.computeFactor = [](int64_t s, uint32_t r) { return r == 1 && s >= 500 ? 1.15 : 1.0; };
    job.tamper = [](trainscope::wire::StepReport& rep) { rep.set_exposed_comm_ns(15'000'000); };
    DetectorSet set;
    std::vector<Anomaly> events;
    run(job, set, 0, 1500, &events);
    INFO(describe(events));
    CHECK(ofKind(events, AnomalyKind::kStraggler).empty());
  }
}

TEST_CASE("straggler: a rank 2x slower is found within a few steps of its onset") {
  auto events =
      runWith([](int64_t s, uint32_t r) { return r == 2 && s >= 1000 ? 2.0 : 1.0; }, 1200, 25);
  INFO(describe(events));
  auto opened = ofKind(events, AnomalyKind::kStraggler);
  REQUIRE(opened.size() == 1);
  CHECK(opened[0].ranks == std::vector<uint32_t>{2});
  CHECK(opened[0].onsetStep == 1000);
  CHECK(opened[0].detectedStep <= 1005 + FoldOptions{}.confirmSteps);
  CHECK(opened[0].magnitude == Approx((160.0 + 5.0) / (80.0 + 5.0)).margin(0.05));
}

TEST_CASE("straggler: a job-wide slowdown (every rank 1.5x) names no straggler") {
  auto events = runWith([](int64_t s, uint32_t) { return s >= 1000 ? 1.5 : 1.0; }, 3000, 26);
  INFO(describe(events));
  CHECK(ofKind(events, AnomalyKind::kStraggler).empty());
  CHECK(ofKind(events, AnomalyKind::kStepShift).size() == 1);
}

TEST_CASE("straggler: a rank slow from its first step is still found (peers are the baseline)") {
  auto events = runWith([](int64_t, uint32_t r) { return r == 7 ? 1.25 : 1.0; }, 300, 27);
  INFO(describe(events));
  auto opened = ofKind(events, AnomalyKind::kStraggler);
  REQUIRE(opened.size() == 1);
  CHECK(opened[0].ranks == std::vector<uint32_t>{7});
  CHECK(opened[0].onsetStep == 0);  // its true onset, not the end of a warm-up
}

TEST_CASE("straggler: a rank 2x its peers from step 0 or 3 is reported with that step as onset") {
  // Issue 10 (honest onsets): peer comparison needs no history of the job, so a fault present
  // from the first steps (here inside the job's 5x-slow warm-up) is judged from them.
  for (int64_t from : {int64_t{0}, int64_t{3}}) {
    auto events =
        runWith([from](int64_t s, uint32_t r) { return r == 2 && s >= from ? 2.0 : 1.0; }, 100, 28);
    INFO("from step " << from << "\n" << describe(events));
    auto opened = ofKind(events, AnomalyKind::kStraggler);
    REQUIRE(opened.size() == 1);
    CHECK(opened[0].ranks == std::vector<uint32_t>{2});
    CHECK(opened[0].onsetStep == from);
    CHECK(opened[0].detectedStep <= from + 5 + FoldOptions{}.confirmSteps);
  }
}

TEST_CASE("straggler: a rank always 2% slower than its peers (inside minExcess) raises nothing") {
  SynthJob job;
  job.seed = 28;
  job.rng.seed(28);
  job.computeFactor = [](int64_t, uint32_t r) { return r == 3 ? 1.02 : 1.0; };
  job.opFactor = [](int64_t, uint32_t r, const std::string&) { return r == 3 ? 1.02 : 1.0; };
  DetectorSet set;
  std::vector<Anomaly> events;
  run(job, set, 0, 20000, &events);
  INFO(describe(events));
  CHECK(ofKind(events, AnomalyKind::kStraggler).empty());
  CHECK(ofKind(events, AnomalyKind::kOpRegression).empty());
}

TEST_CASE("straggler: a rank 10% slower in a steady job (1% noise) is named within 5 steps") {
  SynthJob job;
  job.seed = 28;
  job.rng.seed(28);
  job.noise = 0.01;
  job.computeFactor = [](int64_t s, uint32_t r) { return r == 6 && s >= 1000 ? 1.10 : 1.0; };
  DetectorSet set;
  std::vector<Anomaly> events;
  run(job, set, 0, 1100, &events);
  INFO(describe(events));
  auto opened = ofKind(events, AnomalyKind::kStraggler);
  REQUIRE(opened.size() == 1);
  CHECK(opened[0].ranks == std::vector<uint32_t>{6});
  CHECK(std::llabs(opened[0].onsetStep - 1000) <= 2);
  CHECK(opened[0].detectedStep <= 1005 + FoldOptions{}.confirmSteps);
}

TEST_CASE("straggler: a rank that only waited longer for a CPU on a busy host is not raised") {
  // Rank 3 1.5x slower from step 500; `wait` gives each report its cpu_wait_ns.
  auto runWith = [](const std::function<int64_t(const trainscope::wire::StepReport&)>& wait) {
    SynthJob job;
    job.seed = 43;
    job.rng.seed(43);
    job.computeFactor = [](int64_t s, uint32_t r) { return r == 3 && s >= 500 ? 1.5 : 1.0; };
    job.tamper = [wait](trainscope::wire::StepReport& rep) { rep.set_cpu_wait_ns(wait(rep)); };
    DetectorSet set;
    std::vector<Anomaly> events;
    run(job, set, 0, 900, &events);
    return std::make_pair(ofKind(events, AnomalyKind::kStraggler), set.stats().hostWeather);
  };
  // Rank 3's extra time, all of it waiting for a CPU (its compute beyond the usual 80 ms).
  auto extra = [](const trainscope::wire::StepReport& r) {
    return r.rank() == 3 ? std::max<int64_t>(0, r.compute_ns() - 80'000'000) : 0;
  };
  // Every rank already waited 30 % of its step: the host's weather.
  auto [busy, busyHeld] = runWith(
      [&](const trainscope::wire::StepReport& r) { return r.duration_ns() * 3 / 10 + extra(r); });
  INFO(describe(busy));
  CHECK(busy.empty());
  // Held once here and once by step_shift: the job's step time rose with rank 3's wait.
  CHECK(busyHeld == 2);
  // The peers had their CPUs: rank 3's host is busy, and it is said.
  auto [quiet, quietHeld] = runWith(extra);
  INFO(describe(quiet));
  REQUIRE(quiet.size() == 1);
  CHECK(quiet[0].ranks == std::vector<uint32_t>{3});
  CHECK(quiet[0].labels.at("cause") == "cpu_contention");
  CHECK(quietHeld == 0);
  // A busy host, rank 3 doing more work (its wait unchanged): a straggler of its own.
  auto [own, ownHeld] =
      runWith([](const trainscope::wire::StepReport& r) { return r.duration_ns() * 3 / 10; });
  INFO(describe(own));
  REQUIRE(own.size() == 1);
  CHECK(own[0].ranks == std::vector<uint32_t>{3});
  CHECK(own[0].labels.count("cause") == 0);
  CHECK(ownHeld == 0);
}

// A busy host (every rank waits 30 % of its step for a CPU) where rank `starved` is short of a
// CPU from step 100 (its time 1.6x, the extra all waiting) and rank `slow` does 1.4x the work
// from step 500: the stragglers raised and the episodes held as the host's weather.
static std::pair<std::vector<Anomaly>, uint64_t> busyHostWithStarvedPeer(uint32_t world,
                                                                         uint32_t starved,
                                                                         uint32_t slow) {
  SynthJob job;
  job.world = world;
  job.ranksPerNode = world;
  job.seed = 61;
  job.rng.seed(61);
  job.noise = 0.02;
  job.computeFactor = [=](int64_t s, uint32_t r) {
    if (r == starved && s >= 100) return 1.6;
    return r == slow && s >= 500 ? 1.4 : 1.0;
  };
  job.tamper = [=](trainscope::wire::StepReport& rep) {
    const int64_t extra =
        rep.rank() == starved ? std::max<int64_t>(0, rep.compute_ns() - 80'000'000) : 0;
    rep.set_cpu_wait_ns(rep.duration_ns() * 3 / 10 + extra);
  };
  DetectorSet set;
  std::vector<Anomaly> events;
  run(job, set, 0, 900, &events);
  return {ofKind(events, AnomalyKind::kStraggler), set.stats().hostWeather};
}

TEST_CASE("straggler: on a busy host the rank doing more work is named, not its starved peer") {
  for (uint32_t world : {2U, 8U}) {
    INFO("world " << world);
    auto [opened, held] = busyHostWithStarvedPeer(world, 0, 1);
    INFO(describe(opened));
    // Rank 0 only waited for a CPU: held as the host's weather, once here and once by
    // step_shift (the job's step time rose with its wait).
    CHECK(held == 2);
    // Rank 1's work rose while rank 0, starved, arrived last at every collective.
    REQUIRE(opened.size() == 1);
    CHECK(opened[0].ranks == std::vector<uint32_t>{1});
    CHECK(std::llabs(opened[0].onsetStep - 500) <= 3);
    CHECK(opened[0].summary.find("work") != std::string::npos);
    CHECK(opened[0].evidence.count("host_cpu_wait_share") == 1);
  }
}
