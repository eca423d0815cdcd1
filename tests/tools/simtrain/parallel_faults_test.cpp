// The simulator's --parallel faults: stage:pp=S (every rank of a pipeline stage computes longer),
// worker:dp=I,pp=S (one replica's tensor-parallel group at stage S) and --edge-load (a naturally
// unbalanced pipeline): parsing, validation, which ranks slow down, the truth file's ranks, and
// how much the step lengthens.
#include <catch2/catch.hpp>

#include "tools/simtrain/sim_options.h"
#include "tools/simtrain/step_model.h"
#include "tools/simtrain/truth.h"

using namespace trainscope::sim;

namespace {

SimOptions job(uint32_t tp, uint32_t pp, uint32_t dp) {
  SimOptions o;
  o.agents = {"ipc:///tmp/x.sock"};
  o.parallel = ParallelLayout{tp, pp, dp};
  o.ranks = tp * pp * dp;
  o.microbatches = 4;
  o.stepMs = 100;
  o.warmup = 0;
  o.noise = 0;
  return o;
}

int64_t stepNs(const SimOptions& o, int64_t s) {
  StepModel m(o);
  int64_t begin = 0;
  for (int64_t i = 0;; ++i) {
    StepTimeline tl = m.step(i, begin);
    if (i == s) return tl.endNs - tl.beginNs;
    begin = tl.endNs;
  }
}

}  // namespace

TEST_CASE("simtrain faults: stage and worker parse, from defaults to 0, errors name the key") {
  auto st = parseInject("stage:pp=1,factor=1.3");
  REQUIRE(st.isOk());
  CHECK(st->kind == Inject::Kind::kStage);
  CHECK(st->pp == 1);
  CHECK(st->fromStep == 0);
  CHECK(st->factor == 1.3);
  auto wk = parseInject("worker:dp=2,pp=0,factor=1.5,from=40");
  REQUIRE(wk.isOk());
  CHECK(wk->kind == Inject::Kind::kWorker);
  CHECK(wk->dp == 2);
  CHECK(wk->fromStep == 40);
  CHECK(parseInject("stage:factor=1.3").message().find("missing key 'pp'") != std::string::npos);
  CHECK(parseInject("worker:pp=0,factor=2").message().find("missing key 'dp'") !=
        std::string::npos);
  CHECK(parseInject("stage:pp=x,factor=2").message().find("pp='x'") != std::string::npos);
  CHECK(parseInject("stage:pp=0,rank=1,factor=2").message().find("unknown key 'rank'") !=
        std::string::npos);

  SimOptions o = job(2, 2, 2);
  o.injects.push_back(*parseInject("stage:pp=2,factor=1.3"));
  CHECK(validate(o, true).message().find("pp=2 is not below the pipeline's 2 stages") !=
        std::string::npos);
  o.injects = {*parseInject("worker:dp=2,pp=0,factor=1.3")};
  CHECK(validate(o, true).message().find("dp=2 is not below the 2 data-parallel replicas") !=
        std::string::npos);
  SimOptions flat;
  flat.agents = o.agents;
  flat.injects = {*parseInject("stage:pp=0,factor=1.3")};
  CHECK(validate(flat, true).message().find("need --parallel") != std::string::npos);
  flat.injects.clear();
  flat.edgeLoad = 0.1;
  CHECK(validate(flat, true).message().find("--edge-load") != std::string::npos);
}

TEST_CASE("simtrain faults: a stage fault slows exactly that stage's ranks, from its step") {
  SimOptions o = job(2, 2, 2);
  o.injects.push_back(*parseInject("stage:pp=1,factor=1.5,from=3"));
  StepModel m(o);
  StepTimeline before = m.step(2, 0);
  StepTimeline after = m.step(3, before.endNs);
  for (uint32_t r = 0; r < 8; ++r) {
    const double ratio = static_cast<double>(after.ranks[r].computeNs) /
                         static_cast<double>(before.ranks[r].computeNs);
    INFO("rank " << r);
    CHECK(ratio == Approx(r >= 4 ? 1.5 : 1.0).epsilon(0.01));
  }
  auto truth = truthJson(o);
  REQUIRE(truth.size() == 1);
  CHECK(truth[0]["kind"] == "stage_imbalance");
  CHECK(truth[0]["ranks"] == nlohmann::json::array({4, 5, 6, 7}));
  CHECK(truth[0]["pp"] == 1);
  CHECK(truth[0]["from_step"] == 3);
}

TEST_CASE("simtrain faults: a worker fault slows one tp group; its replica and the job wait") {
  SimOptions o = job(2, 2, 2);
  const int64_t healthy = stepNs(o, 1);
  o.injects.push_back(*parseInject("worker:dp=1,pp=0,factor=1.5"));
  StepModel m(o);
  StepTimeline tl = m.step(0, 0);
  SimOptions h = job(2, 2, 2);
  StepTimeline ref = StepModel(h).step(0, 0);
  for (uint32_t r = 0; r < 8; ++r) {
    INFO("rank " << r);
    const bool slow = r == 2 || r == 3;
    CHECK(static_cast<double>(tl.ranks[r].computeNs) /
              static_cast<double>(ref.ranks[r].computeNs) ==
          Approx(slow ? 1.5 : 1.0).epsilon(0.01));
  }
  CHECK(stepNs(o, 1) > healthy);
  auto truth = truthJson(o);
  CHECK(truth[0]["kind"] == "straggler");
  CHECK(truth[0]["ranks"] == nlohmann::json::array({2, 3}));
  CHECK(truth[0]["coords"] == nlohmann::json({{"pp", 0}, {"dp", 1}}));
}

TEST_CASE("simtrain faults: a slower stage lengthens the 1F1B step by about its added work") {
  // Stage 1 at 1.5x: each of its forward and backward slots is half again as long; with 4
  // microbatches on 2 stages that is about 4 slots' worth added to the 5-slot pipeline.
  SimOptions o = job(1, 2, 1);
  const double healthy = static_cast<double>(stepNs(o, 1));
  o.injects.push_back(*parseInject("stage:pp=1,factor=1.5"));
  const double slow = static_cast<double>(stepNs(o, 1));
  const double slot = 100e6 * (0.30 + 0.55) / 5;             // one forward and one backward
  const double added = 4 * 0.5 * slot + 0.5 * 100e6 * 0.06;  // its slots and its optimizer
  CHECK(slow - healthy == Approx(added).epsilon(0.1));
}

TEST_CASE("simtrain --edge-load: the first stage works half the load more, the last the load") {
  SimOptions o = job(1, 4, 1);
  const StepTimeline ref = StepModel(o).step(0, 0);
  o.edgeLoad = 0.1;
  REQUIRE(validate(o, true).isOk());
  const StepTimeline tl = StepModel(o).step(0, 0);
  auto ratio = [&](uint32_t r) {
    return static_cast<double>(tl.ranks[r].computeNs) / static_cast<double>(ref.ranks[r].computeNs);
  };
  CHECK(ratio(0) == Approx(1.05).epsilon(0.005));
  CHECK(ratio(1) == Approx(1.0).epsilon(0.005));
  CHECK(ratio(2) == Approx(1.0).epsilon(0.005));
  CHECK(ratio(3) == Approx(1.1).epsilon(0.005));
  CHECK(truthJson(o).empty());  // part of the job's design, not a fault
}
