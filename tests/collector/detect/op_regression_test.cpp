#include <catch2/catch.hpp>

#include <cstdlib>
#include <utility>

#include "collector/detect/detector_set.h"
#include "collector/detect/op_regression.h"
#include "tests/collector/detect/synth.h"

using namespace trainscope::detect;
using namespace trainscope::detect::test;

namespace {
std::vector<Anomaly> runWith(std::function<double(int64_t, uint32_t, const std::string&)> f,
                             int64_t steps, uint64_t seed) {
  SynthJob job;
  job.seed = seed;
  job.rng.seed(seed);
  job.opFactor = std::move(f);
  DetectorSet set;
  std::vector<Anomaly> events;
  run(job, set, 0, steps, &events);
  return events;
}
}  // namespace

TEST_CASE("op_regression: no alarm on 20,000 healthy steps x 8 ranks x 3 ops with 5% noise") {
  for (uint64_t seed : {31u, 32u}) {
    auto events = runWith(nullptr, 20000, seed);
    INFO(describe(events));
    CHECK(ofKind(events, AnomalyKind::kOpRegression).empty());
  }
}

TEST_CASE("op_regression: one op 10% slower on one rank names the op and the rank, then resolves") {
  auto events = runWith(
      [](int64_t s, uint32_t r, const std::string& op) {
        return op == "attention" && r == 3 && s >= 2000 && s < 3000 ? 1.10 : 1.0;
      },
      4000, 33);
  INFO(describe(events));
  auto opened = ofKind(events, AnomalyKind::kOpRegression);
  REQUIRE(opened.size() == 1);
  const Anomaly& a = opened[0];
  CHECK(a.labels.at("op") == "attention");
  CHECK(a.labels.at("scope") == "rank");
  CHECK(a.ranks == std::vector<uint32_t>{3});
  CHECK(a.nodes == std::vector<std::string>{"node-0"});
  CHECK(a.magnitude == Approx(1.10).margin(0.05));  // estimated from the first steps
  CHECK(std::llabs(a.onsetStep - 2000) <= 8);
  auto resolved = ofKind(events, AnomalyKind::kOpRegression, AnomalyState::kResolved);
  REQUIRE(resolved.size() == 1);
  CHECK(resolved[0].id == a.id);
  CHECK(std::llabs(resolved[0].resolvedStep - 3000) <= 8);
}

TEST_CASE("op_regression: one op 2x slower on every rank is one anomaly listing all ranks") {
  auto events =
      runWith([](int64_t s, uint32_t,
                 const std::string& op) { return op == "matmul" && s >= 1500 ? 2.0 : 1.0; },
              1700, 34);
  INFO(describe(events));
  auto opened = ofKind(events, AnomalyKind::kOpRegression);
  REQUIRE(opened.size() == 1);
  CHECK(opened[0].labels.at("op") == "matmul");
  CHECK(opened[0].labels.at("scope") == "all_ranks");
  CHECK(opened[0].ranks == std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(opened[0].onsetStep == 1500);
  CHECK(opened[0].detectedStep <= 1505 + FoldOptions{}.confirmSteps);
  CHECK(opened[0].magnitude == Approx(2.0).margin(0.05));
}

TEST_CASE(
    "op_regression: a rank or a job slowing as a whole (every op alike) is no op regression") {
  for (bool wholeJob : {false, true}) {
    SynthJob job;
    job.seed = 35;
    job.rng.seed(35);
    auto factor = [wholeJob](int64_t s, uint32_t r) {
      return s >= 1000 && (wholeJob || r == 3) ? 1.5 : 1.0;
    };
    job.computeFactor = factor;
    job.opFactor = [factor](int64_t s, uint32_t r, const std::string&) { return factor(s, r); };
    DetectorSet set;
    std::vector<Anomaly> events;
    run(job, set, 0, 1300, &events);
    INFO(describe(events));
    CHECK(ofKind(events, AnomalyKind::kOpRegression).empty());
    // What it is instead.
    CHECK(ofKind(events, wholeJob ? AnomalyKind::kStepShift : AnomalyKind::kStraggler).size() == 1);
  }
}

TEST_CASE("op_regression: operators on a device (timed as launches) are not judged") {
  for (const std::string device : {"", "cuda"}) {
    SynthJob job;
    job.seed = 34;
    job.rng.seed(34);
    job.device = device;
    job.opFactor = [](int64_t s, uint32_t r, const std::string& op) {
      return op == "matmul" && (s >= 1500 || r == 3) && s >= 1000 ? 2.0 : 1.0;
    };
    DetectorSet set;
    std::vector<Anomaly> events;
    run(job, set, 0, 1700, &events);
    INFO("device '" << device << "'\n" << describe(events));
    CHECK(ofKind(events, AnomalyKind::kOpRegression).empty() == !device.empty());
  }
}

TEST_CASE("op_regression: ops that vanish are forgotten, keeping memory bounded") {
  OpRegressionOptions o;
  o.maxOpsPerJob = 8;
  EventLog log;
  OpRegressionDetector det("j", o, &log);
  for (int64_t s = 0; s < 200; ++s) {
    AssembledStep st;
    st.job = "j";
    st.step = s;
    st.worldSize = 1;
    RankStep rs;
    rs.report.set_rank(0);
    rs.report.set_step(s);
    for (int k = 0; k < 4; ++k) {
      auto* op = rs.report.add_ops();
      op->set_name("op" + std::to_string(s * 4 + k));  // a new name every time
      op->set_count(1);
      op->set_total_ns(100000);
    }
    st.ranks.push_back(rs);
    det.onStep(st);
    REQUIRE(det.trackedOps() <= 8 + 4);
  }
  CHECK(log.take().empty());
}

TEST_CASE("op_regression: a rank that waits for a CPU has its operators left unjudged") {
  // Operator 'attention' 1.5x slower on rank 3 from step 1,500; that rank's thread waits for a
  // CPU for 10 % of each step from then on (an oversubscribed host): its operator times carry
  // the host's scheduling, so they are not judged; the same rise without the wait is.
  auto withWait = [](int64_t waitFrom) {
    SynthJob job;
    job.seed = 35;
    job.rng.seed(35);
    job.opFactor = [](int64_t s, uint32_t r, const std::string& op) {
      return op == "attention" && r == 3 && s >= 1500 ? 1.5 : 1.0;
    };
    job.tamper = [waitFrom](trainscope::wire::StepReport& rep) {
      if (rep.rank() == 3 && rep.step() >= waitFrom) rep.set_cpu_wait_ns(rep.duration_ns() / 10);
    };
    DetectorSet set;
    std::vector<Anomaly> events;
    run(job, set, 0, 2000, &events);
    return std::make_pair(events, set.stats().opCpuBound);
  };
  auto [contended, skipped] = withWait(1000);
  INFO(describe(contended));
  CHECK(ofKind(contended, AnomalyKind::kOpRegression).empty());
  CHECK(skipped == 1000);  // rank 3's steps 1,000..1,999
  auto [clean, none] = withWait(1'000'000);
  INFO(describe(clean));
  CHECK(ofKind(clean, AnomalyKind::kOpRegression).size() == 1);
  CHECK(none == 0);
}
