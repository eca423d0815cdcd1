// The simulator's --parallel faults: stage:pp=S (every rank of a pipeline stage computes longer),
// worker:dp=I,pp=S (one replica's tensor-parallel group at stage S), gpu:rank=R (one rank of a
// tp group), p2p:from=R,to=Q (a slow pipeline link), seqlen:cv=X (work that moves between
// replicas) and --edge-load (a naturally unbalanced pipeline): parsing, validation, which ranks
// slow down, the truth file's ranks, and how much the step lengthens.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

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
  // The gain of fixing it: the same job without the fault, (T - T without) / T; without noise
  // every step alike. A hang has none (no step to compare).
  o.steps = 20;
  const double slow = static_cast<double>(stepNs(o, 5));
  REQUIRE(truth[0].contains("gain"));
  CHECK(truth[0]["gain"].get<double>() == Approx((slow - static_cast<double>(healthy)) / slow));
  CHECK(truthGains(o)[0] == Approx(truth[0]["gain"].get<double>()));
  o.injects.push_back(*parseInject("hang:rank=0,at=10"));
  CHECK_FALSE(truthJson(o)[1].contains("gain"));
  CHECK(std::isnan(truthGains(o)[1]));
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

TEST_CASE("simtrain faults: seqlen, p2p and gpu parse, from defaults to 0, errors name the key") {
  auto sq = parseInject("seqlen:cv=0.2");
  REQUIRE(sq.isOk());
  CHECK(sq->kind == Inject::Kind::kSeqlen);
  CHECK(sq->cv == 0.2);
  CHECK(sq->fromStep == 0);
  CHECK(parseInject("seqlen:cv=0,from=3").message().find("cv='0'") != std::string::npos);
  CHECK(parseInject("seqlen:cv=x").message().find("cv='x'") != std::string::npos);
  CHECK(parseInject("seqlen:from=3").message().find("missing key 'cv'") != std::string::npos);
  // The first from= is the sending rank, a second one the first step.
  auto p = parseInject("p2p:from=1,to=5,factor=1.5,from=40");
  REQUIRE(p.isOk());
  CHECK(p->kind == Inject::Kind::kP2p);
  CHECK(p->rank == 1u);
  CHECK(p->to == 5u);
  CHECK(p->fromStep == 40);
  auto p0 = parseInject("p2p:to=5,from=1,factor=2");
  REQUIRE(p0.isOk());
  CHECK(p0->rank == 1u);
  CHECK(p0->fromStep == 0);
  CHECK(parseInject("p2p:to=5,factor=2").message().find("missing key 'from'") != std::string::npos);
  CHECK(parseInject("p2p:from=1,factor=2").message().find("missing key 'to'") != std::string::npos);
  CHECK(parseInject("p2p:from=1,to=5,factor=2,from=3,from=4").message().find("given three times") !=
        std::string::npos);
  auto g = parseInject("gpu:rank=3,factor=1.4");
  REQUIRE(g.isOk());
  CHECK(g->kind == Inject::Kind::kGpu);
  CHECK(g->rank == 3u);
  CHECK(g->fromStep == 0);
  CHECK(parseInject("gpu:factor=1.4").message().find("missing key 'rank'") != std::string::npos);

  SimOptions o = job(2, 2, 2);
  o.injects = {*parseInject("p2p:from=0,to=3,factor=2")};
  CHECK(validate(o, true).message().find("not neighbouring stages") != std::string::npos);
  o.injects = {*parseInject("p2p:from=0,to=4,factor=2")};  // stage 0 -> 1, same dp and tp
  CHECK(validate(o, true).isOk());
  o.injects = {*parseInject("p2p:from=5,to=1,factor=2")};  // stage 1 -> 0: gradients
  CHECK(validate(o, true).isOk());
  o.injects = {*parseInject("p2p:from=0,to=8,factor=2")};
  CHECK(validate(o, true).message().find("to=8 is not below") != std::string::npos);
  o.injects = {*parseInject("gpu:rank=9,factor=2")};
  CHECK(validate(o, true).message().find("rank=9 is not below") != std::string::npos);
  SimOptions flat;
  flat.agents = o.agents;
  flat.injects = {*parseInject("gpu:rank=1,factor=2")};
  CHECK(validate(flat, true).message().find("need --parallel") != std::string::npos);
  flat.injects = {*parseInject("p2p:from=0,to=1,factor=2")};
  CHECK(validate(flat, true).message().find("need --parallel") != std::string::npos);
  flat.injects = {*parseInject("seqlen:cv=0.1")};
  CHECK(validate(flat, true).isOk());
}

TEST_CASE("simtrain faults: seqlen gives each replica its own work per step, moving at random") {
  SimOptions o = job(2, 2, 4);
  o.injects.push_back(*parseInject("seqlen:cv=0.2,from=2"));
  SimOptions h = job(2, 2, 4);
  StepModel m(o);
  StepModel ref(h);
  std::vector<uint32_t> slowest;
  int64_t a = 0, b = 0;
  for (int64_t s = 0; s < 12; ++s) {
    StepTimeline tl = m.step(s, a);
    StepTimeline hl = ref.step(s, b);
    a = tl.endNs;
    b = hl.endNs;
    // Per replica one factor: every rank of replica d (both stages, both tp ranks) has the same
    // forward work ratio against the healthy job.
    std::vector<double> ratio(4, 0.0);
    for (uint32_t r = 0; r < 16; ++r) {
      const auto fwd = [](const RankStep& rs) {
        int64_t sum = 0;
        for (const auto& rg : rs.ranges) {
          if (rg.phase == Phase::kForward) sum += rg.endNs - rg.startNs;
        }
        return static_cast<double>(sum);
      };
      const double x = fwd(tl.ranks[r]) / fwd(hl.ranks[r]);
      const uint32_t d = o.parallel->dpIndex(r);
      if (ratio[d] == 0.0) ratio[d] = x;
      INFO("step " << s << " rank " << r);
      CHECK(x == Approx(ratio[d]).epsilon(1e-3));
      if (s < 2) CHECK(x == Approx(1.0).epsilon(1e-3));
    }
    if (s >= 2) {
      slowest.push_back(
          static_cast<uint32_t>(std::max_element(ratio.begin(), ratio.end()) - ratio.begin()));
      CHECK(tl.endNs - tl.beginNs != hl.endNs - hl.beginNs);
    }
  }
  // The slowest replica changes: over 10 steps of 4 replicas, more than one is slowest.
  std::sort(slowest.begin(), slowest.end());
  CHECK(std::unique(slowest.begin(), slowest.end()) - slowest.begin() >= 2);
  // The same seed draws the same work (a split job's processes agree).
  StepModel again(o);
  StepTimeline x = StepModel(o).step(5, 0), y = again.step(5, 0);
  CHECK(x.endNs == y.endNs);
  auto truth = truthJson(o);
  CHECK(truth[0]["kind"] == "workload_imbalance");
  CHECK(truth[0]["ranks"].size() == 16);
  CHECK(truth[0]["cv"] == 0.2);
}

TEST_CASE("simtrain faults: a p2p fault slows one link's sends; the receiver waits longer") {
  SimOptions o = job(2, 2, 2);
  o.injects.push_back(*parseInject("p2p:from=1,to=5,factor=3"));
  StepTimeline tl = StepModel(o).step(0, 0);
  StepTimeline ref = StepModel(job(2, 2, 2)).step(0, 0);
  auto sendNs = [](const StepTimeline& t, uint32_t from, uint32_t to) {
    int64_t most = 0;
    for (const auto& p : t.ranks[from].p2ps) {
      if (p.send && p.peer == to) most = std::max(most, p.completeNs - p.postedNs);
    }
    return most;
  };
  CHECK(sendNs(tl, 1, 5) == Approx(3.0 * static_cast<double>(sendNs(ref, 1, 5))).epsilon(0.01));
  CHECK(sendNs(tl, 0, 4) == sendNs(ref, 0, 4));  // the other tp rank's link
  CHECK(sendNs(tl, 5, 1) == sendNs(ref, 5, 1));  // the way back
  CHECK(tl.endNs - tl.beginNs > ref.endNs - ref.beginNs);
  auto truth = truthJson(o);
  CHECK(truth[0]["kind"] == "slow_comm");
  CHECK(truth[0]["ranks"] == nlohmann::json::array({1, 5}));
}

TEST_CASE("simtrain faults: a gpu fault slows one rank; its tp peers wait for it") {
  SimOptions o = job(2, 2, 2);
  o.injects.push_back(*parseInject("gpu:rank=3,factor=1.5"));
  StepTimeline tl = StepModel(o).step(0, 0);
  StepTimeline ref = StepModel(job(2, 2, 2)).step(0, 0);
  for (uint32_t r = 0; r < 8; ++r) {
    INFO("rank " << r);
    CHECK(static_cast<double>(tl.ranks[r].computeNs) /
              static_cast<double>(ref.ranks[r].computeNs) ==
          Approx(r == 3 ? 1.5 : 1.0).epsilon(0.01));
  }
  // Rank 2 (its tp peer) waits in every tp all_reduce; rank 3 arrives last.
  int64_t wait2 = 0, wait3 = 0;
  for (const auto& c : tl.ranks[2].colls) {
    if (c.group == CollExec::Group::kTp) wait2 += c.completeNs - c.arriveNs;
  }
  for (const auto& c : tl.ranks[3].colls) {
    if (c.group == CollExec::Group::kTp) wait3 += c.completeNs - c.arriveNs;
  }
  CHECK(wait2 > 2 * wait3);
  auto truth = truthJson(o);
  CHECK(truth[0]["kind"] == "straggler");
  CHECK(truth[0]["ranks"] == nlohmann::json::array({3}));
  CHECK(truth[0]["coords"] == nlohmann::json({{"pp", 0}, {"dp", 1}, {"tp", 1}}));
}
