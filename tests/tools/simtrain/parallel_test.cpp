// The simulator's --parallel model (tools/simtrain/pipeline_model.cpp): Megatron's rank order
// and groups, a 1F1B pipeline whose receives wait for the previous stage (the bubble), p2p
// sends and receives that pair up, tensor-parallel ranks that wait for their slowest member,
// and flag errors that name the flag.
#include <algorithm>
#include <map>
#include <tuple>

#include <catch2/catch.hpp>

#include "tools/simtrain/sim_options.h"
#include "tools/simtrain/step_model.h"

using namespace trainscope::sim;

namespace {

SimOptions parallelJob(uint32_t tp, uint32_t pp, uint32_t dp, uint32_t micro = 4) {
  SimOptions o;
  o.agents = {"ipc:///tmp/x.sock"};
  o.parallel = ParallelLayout{tp, pp, dp};
  o.ranks = tp * pp * dp;
  o.microbatches = micro;
  o.stepMs = 100;
  o.warmup = 0;
  o.noise = 0;
  o.seed = 3;
  return o;
}

int64_t waited(const RankStep& rs) {
  int64_t t = 0;
  for (const auto& x : rs.p2ps) {
    if (!x.send) t += x.completeNs - x.postedNs;
  }
  return t;
}

}  // namespace

TEST_CASE("simtrain --parallel: Megatron rank order and the groups each rank declares") {
  auto par = parseParallel("pp=2,tp=2,dp=2");
  REQUIRE(par.isOk());
  CHECK(par->world() == 8);
  // rank 5 = pp 1, dp 0, tp 1
  CHECK(par->ppIndex(5) == 1);
  CHECK(par->dpIndex(5) == 0);
  CHECK(par->tpIndex(5) == 1);
  CHECK(par->tpGroup(5) == std::vector<uint32_t>{4, 5});
  CHECK(par->ppGroup(5) == std::vector<uint32_t>{1, 5});
  CHECK(par->dpGroup(5) == std::vector<uint32_t>{5, 7});
  CHECK(parseParallel("tp=4")->world() == 4);
  CHECK(parseParallel("tp=2,cp=1")->tp == 2);
}

TEST_CASE("simtrain --parallel: flag errors name the key or flag") {
  CHECK(parseParallel("tp=0").message().find("tp='0' must be an integer in 1..4096") !=
        std::string::npos);
  CHECK(parseParallel("tp=2,tp=2").message().find("given twice") != std::string::npos);
  CHECK(parseParallel("xp=2").message().find("unknown key 'xp'") != std::string::npos);
  CHECK(parseParallel("ep=0").message().find("ep='0' must be an integer") != std::string::npos);
  CHECK(parseParallel("tp").message().find("not key=value") != std::string::npos);
  SimOptions o = parallelJob(2, 2, 2);
  o.ranks = 6;
  CHECK(validate(o, true).message().find("makes 8 ranks, but the job has 6") != std::string::npos);
  o = parallelJob(2, 2, 2);
  o.schedule = "gpipe";
  CHECK(validate(o, true).message().find("--schedule 'gpipe' is not a schedule") !=
        std::string::npos);
  o.schedule = "interleaved:2";
  o.microbatches = 3;
  CHECK(validate(o, true).message().find("--microbatches 3: interleaved") != std::string::npos);
  o.schedule = "dualpipe-v";
  CHECK(validate(o, true).message().find("2 * pp = 4") != std::string::npos);
  o = parallelJob(2, 2, 2);
  o.injects.push_back(*parseInject("hang:rank=1,at=3"));
  CHECK(validate(o, true).message().find("hang is not modelled with --parallel") !=
        std::string::npos);
  SimOptions flat;
  flat.agents = {"ipc:///tmp/x.sock"};
  flat.microbatches = 4;
  CHECK(validate(flat, true).message().find("need --parallel") != std::string::npos);
  CHECK(validate(parallelJob(2, 2, 2), true).isOk());
}

TEST_CASE("simtrain --parallel: 1F1B stages pass microbatches by paired p2p; later stages wait") {
  const uint32_t micros = 4;
  StepModel model(parallelJob(2, 2, 2, micros));
  StepTimeline tl = model.step(10, 1'000'000'000);
  REQUIRE(tl.ranks.size() == 8);
  REQUIRE(tl.endNs > tl.beginNs);
  // Every send has the matching receive on its peer: same bytes, peer of each other.
  std::multimap<std::tuple<uint32_t, uint32_t>, P2pExec> sends;
  size_t recvs = 0;
  for (const auto& rs : tl.ranks) {
    for (const auto& x : rs.p2ps) {
      if (x.send) {
        sends.insert({{rs.rank, x.peer}, x});
      } else {
        ++recvs;
      }
      CHECK(x.completeNs >= x.postedNs);
    }
  }
  CHECK(sends.size() == recvs);
  // Each stage-0 rank sends micros activations forward and gets micros gradients back.
  for (uint32_t r : {0u, 1u, 2u, 3u}) {
    const auto& rs = tl.ranks[r];
    CHECK(std::count_if(rs.p2ps.begin(), rs.p2ps.end(),
                        [&](const P2pExec& x) { return x.send && x.peer == r + 4; }) == micros);
    CHECK(std::count_if(rs.p2ps.begin(), rs.p2ps.end(),
                        [&](const P2pExec& x) { return !x.send && x.peer == r + 4; }) == micros);
  }
  // The last stage waits for its first microbatch while stage 0 computes it: a bubble.
  CHECK(waited(tl.ranks[4]) > 0);
  // Tensor-parallel all_reduces run in the tp group, the gradient all_reduce in dp.
  const auto& r0 = tl.ranks[0];
  CHECK(std::count_if(r0.colls.begin(), r0.colls.end(), [](const CollExec& c) {
          return c.group == CollExec::Group::kTp;
        }) == std::ptrdiff_t{2} * micros);
  CHECK(std::count_if(r0.colls.begin(), r0.colls.end(),
                      [](const CollExec& c) { return c.group == CollExec::Group::kDp; }) == 1);
  // Every rank ends the step together.
  for (const auto& rs : tl.ranks) CHECK(rs.endNs == tl.endNs);
}

TEST_CASE("simtrain --parallel: a slow rank makes its tensor-parallel peer wait in all_reduce") {
  SimOptions o = parallelJob(2, 2, 1);
  o.injects.push_back(*parseInject("straggler:rank=1,from=0,factor=1.5"));
  StepModel model(o);
  StepTimeline tl = model.step(5, 1'000'000'000);
  auto tpWait = [&](uint32_t r) {
    int64_t t = 0;
    for (const auto& c : tl.ranks[r].colls) {
      if (c.group == CollExec::Group::kTp) t += c.completeNs - c.arriveNs;
    }
    return t;
  };
  CHECK(tl.ranks[1].computeNs > tl.ranks[0].computeNs);
  CHECK(tpWait(0) > tpWait(1));
  // Without the fault the step is shorter.
  StepModel healthy(parallelJob(2, 2, 1));
  CHECK(healthy.step(5, 1'000'000'000).endNs < tl.endNs);
}
