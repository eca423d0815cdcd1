#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "collector/detect/detector_set.h"
#include "collector/detect/workload_imbalance.h"
#include "tests/collector/detect/parallel_synth.h"
#include "tests/collector/detect/synth.h"

using namespace trainscope;
using namespace trainscope::detect;
using namespace trainscope::detect::test;

TEST_CASE("workload_imbalance: the spread of the replicas' changes, from few replicas too") {
  // Changes +0.2 and -0.2: Gini mean difference 0.4, sigma 0.4 x sqrt(pi)/2, / sqrt(2).
  CHECK(WorkloadImbalanceDetector::changeSpread({1.1, 0.9}, {0.9, 1.1}) ==
        Approx(0.4 * 0.886226925 / std::sqrt(2.0)));
  // A persistent difference does not count: ratios that keep their level have no spread.
  CHECK(WorkloadImbalanceDetector::changeSpread({1.5, 1.0, 1.0}, {1.5, 1.0, 1.0}) == 0.0);
  // A replica without a previous ratio is left out; one change alone says nothing.
  const double nan = std::nan("");
  CHECK(std::isnan(WorkloadImbalanceDetector::changeSpread({1.2, 1.0}, {nan, 1.0})));
  CHECK(WorkloadImbalanceDetector::changeSpread({1.2, 1.0, 0.8}, {nan, 1.1, 0.9}) ==
        Approx(0.0).margin(1e-12));
}

TEST_CASE(
    "workload_imbalance: work moving between replicas from step 150 is one job-wide anomaly") {
  ParallelSynth job;
  job.seed = 41;
  job.dp = 4;
  job.workerFactor = [](int64_t s, uint32_t, uint32_t d) {
    return s >= 150 ? workload(41, s, d, 0.15) : 1.0;
  };
  auto events = runLayoutJob(job, 400);
  INFO(describe(events));
  auto opened = ofKind(events, AnomalyKind::kWorkloadImbalance);
  REQUIRE(opened.size() == 1);
  const Anomaly& a = opened[0];
  CHECK(a.ranks.size() == 16);  // job-wide
  CHECK(a.onsetStep >= 150);
  CHECK(a.onsetStep <= 152);
  CHECK(a.detectedStep - 150 <= 6 + FoldOptions{}.confirmSteps);
  CHECK(a.id == "pjob/workload_imbalance/" + std::to_string(a.onsetStep) + "/job");
  CHECK(a.labels.at("replicas") == "dp");
  CHECK(a.evidence.at("replicas") == 4);
  CHECK(a.evidence.at("spread") == Approx(0.15).margin(0.06));
  CHECK(a.evidence.at("slowest_changed") > 0.4);
  // Four replicas at cv 15 %: the heaviest is about 1.03 sigma over the mean, on most of a
  // step's time.
  CHECK(a.evidence.at("estimated_gain") > 0.05);
  CHECK(a.evidence.at("estimated_gain") < 0.3);
  CHECK(a.evidence.at("added_ms_per_step") > 0);
  CHECK(a.magnitude > 1.05);
  // While it lasts its figures are redone over the latest steps, under the same id and
  // detection: one refresh every 16 steps to the end of the job (no resolution).
  const auto refreshes = refreshesOf(events, a.id);
  CHECK(refreshes.size() >= (400 - static_cast<size_t>(a.detectedStep)) / 16 - 1);
  for (const Anomaly& r : refreshes) {
    CHECK(r.state == AnomalyState::kOpen);
    CHECK(r.kind == AnomalyKind::kWorkloadImbalance);
    CHECK(r.detectedStep == a.detectedStep);
    CHECK(r.onsetStep == a.onsetStep);
    CHECK(r.ranks == a.ranks);
    CHECK(r.evidence.at("estimated_gain") > 0.05);
    CHECK(r.evidence.at("estimated_gain") < 0.3);
  }
  REQUIRE_FALSE(refreshes.empty());
  // The last one judges a full window of the steps since the onset.
  CHECK(refreshes.back().evidence.at("steps_judged") == 64);
  CHECK(refreshes.back().evidence.at("steps_judged") > a.evidence.at("steps_judged"));
  CHECK(ofKind(events, AnomalyKind::kWorkloadImbalance, AnomalyState::kResolved).empty());
  // No replica stays slow, so no straggler; the step time's rise is this anomaly's.
  CHECK(ofKind(events, AnomalyKind::kStraggler).empty());
  CHECK(ofKind(events, AnomalyKind::kStageImbalance).empty());
  CHECK(ofKind(events, AnomalyKind::kStepShift).empty());
}

TEST_CASE("workload_imbalance: present from the first step it has onset 0; two replicas suffice") {
  ParallelSynth job;
  job.seed = 42;
  job.noise = 0.03;
  job.workerFactor = [](int64_t s, uint32_t, uint32_t d) { return workload(42, s, d, 0.2); };
  auto events = runLayoutJob(job, 200);
  INFO(describe(events));
  auto opened = ofKind(events, AnomalyKind::kWorkloadImbalance);
  REQUIRE(opened.size() == 1);
  CHECK(opened[0].onsetStep == 0);
  CHECK(opened[0].ranks.size() == 8);
  CHECK(opened[0].detectedStep <= 10 + FoldOptions{}.confirmSteps);
  CHECK(ofKind(events, AnomalyKind::kStraggler).empty());
}

TEST_CASE("workload_imbalance: resolves when the work is balanced again") {
  ParallelSynth job;
  job.seed = 43;
  job.dp = 8;
  job.pp = 4;
  job.workerFactor = [](int64_t s, uint32_t, uint32_t d) {
    return s >= 100 && s < 300 ? workload(43, s, d, 0.15) : 1.0;
  };
  auto events = runLayoutJob(job, 500);
  INFO(describe(events));
  REQUIRE(ofKind(events, AnomalyKind::kWorkloadImbalance).size() == 1);
  auto resolved = ofKind(events, AnomalyKind::kWorkloadImbalance, AnomalyState::kResolved);
  REQUIRE(resolved.size() == 1);
  CHECK(resolved[0].resolvedStep >= 295);
  CHECK(resolved[0].resolvedStep <= 315);
}

TEST_CASE("workload_imbalance: quiet on healthy, unbalanced and straggling layouts") {
  for (uint64_t seed : {44u, 45u, 46u}) {
    ParallelSynth job;
    job.seed = seed;
    job.dp = seed == 44 ? 2 : 8;
    job.pp = seed == 46 ? 4 : 2;
    job.stageLoad = {1.03, 1.0, 1.0, 1.06};  // first and last stage heavier, by design
    auto events = runLayoutJob(job, 1500);
    INFO(describe(events));
    CHECK(ofKind(events, AnomalyKind::kWorkloadImbalance).empty());
  }
  // A slow worker stays slow: a straggler, not moving work.
  ParallelSynth slow;
  slow.seed = 47;
  slow.dp = 2;
  slow.workerFactor = [](int64_t s, uint32_t st, uint32_t d) {
    return s >= 100 && st == 1 && d == 0 ? 1.5 : 1.0;
  };
  auto events = runLayoutJob(slow, 300);
  INFO(describe(events));
  CHECK(ofKind(events, AnomalyKind::kWorkloadImbalance).empty());
  CHECK(ofKind(events, AnomalyKind::kStraggler).size() == 1);
}

TEST_CASE("workload_imbalance: a job without a layout is not judged") {
  // Each rank's work varies 15 % per step at random; without declared tp/pp groups the
  // detector stays out (on a loaded host a plain job's ranks jitter like that too).
  SynthJob job;
  job.world = 16;
  job.seed = 48;
  job.noise = 0.02;
  job.computeFactor = [](int64_t s, uint32_t r) {
    return s >= 200 ? workload(48, s, r, 0.15) : 1.0;
  };
  DetectorSet set;
  std::vector<Anomaly> events;
  run(job, set, 0, 500, &events);
  INFO(describe(events));
  CHECK(ofKind(events, AnomalyKind::kWorkloadImbalance).empty());
}
