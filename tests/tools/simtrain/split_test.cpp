// The simulator split over processes (--first-rank, --world-size): validation names the flag,
// the model runs the whole job whatever a process hosts (so every process of a split job draws
// the same timeline), and the truth file lists the whole job's ranks.
#include <catch2/catch.hpp>

#include "tools/simtrain/sim_options.h"
#include "tools/simtrain/step_model.h"
#include "tools/simtrain/truth.h"

using namespace trainscope::sim;

namespace {

SimOptions split(uint32_t first, uint32_t ranks, uint32_t world) {
  SimOptions o;
  o.agents = {"ipc:///tmp/x.sock"};
  o.firstRank = first;
  o.ranks = ranks;
  o.worldSize = world;
  o.stepMs = 10;
  o.seed = 7;
  return o;
}

}  // namespace

TEST_CASE("simtrain split: hosted ranks must lie inside --world-size", "[sim]") {
  CHECK(validate(split(4, 4, 8), true).isOk());
  CHECK(worldSizeOf(split(4, 4, 8)) == 8);
  CHECK(worldSizeOf(split(4, 4, 0)) == 8);  // 0: first + ranks
  CHECK(worldSizeOf(SimOptions{}) == 16);   // the defaults are unchanged: 16 ranks, one process
  auto st = validate(split(6, 4, 8), true);
  REQUIRE_FALSE(st.isOk());
  CHECK_THAT(st.message(), Catch::Contains("--first-rank 6 + --ranks 4 exceeds --world-size 8"));

  // An injected rank may be hosted by another process, but must be inside the job.
  SimOptions o = split(0, 4, 8);
  auto in = parseInject("hang:rank=6,at=10");
  REQUIRE(in.isOk());
  o.injects.push_back(*in);
  CHECK(validate(o, true).isOk());
  o.injects[0].rank = 8;
  CHECK_THAT(validate(o, true).message(), Catch::Contains("rank=8 is not below --world-size 8"));
}

TEST_CASE("simtrain split: every process models the whole job and draws the same timeline",
          "[sim]") {
  SimOptions a = split(0, 4, 8);
  SimOptions b = split(4, 4, 8);
  for (SimOptions* o : {&a, &b})
    o->injects.push_back(*parseInject("straggler:rank=5,from=2,factor=2"));
  StepModel ma(a);
  StepModel mb(b);
  for (int64_t s = 0; s < 4; ++s) {
    const auto ta = ma.step(s, 1'000'000'000);
    const auto tb = mb.step(s, 1'000'000'000);
    REQUIRE(ta.ranks.size() == 8);
    REQUIRE(tb.ranks.size() == 8);
    CHECK(ta.endNs == tb.endNs);  // the straggler (hosted by b) slows a's collectives too
    for (size_t r = 0; r < 8; ++r)
      CHECK(ta.ranks[r].ops.back().startNs == tb.ranks[r].ops.back().startNs);
  }
  // The hang at step 3 stops both processes' ranks at the same step.
  SimOptions ha = split(0, 4, 8);
  ha.injects.push_back(*parseInject("hang:rank=6,at=3"));
  StepModel mh(ha);
  for (int64_t s = 0; s < 3; ++s) CHECK_FALSE(mh.step(s, 0).hung);
  const auto hung = mh.step(3, 0);
  CHECK(hung.hung);
  CHECK(hung.ranks[1].colls.size() == 1);  // a rank of this process waits in the collective
  CHECK(hung.ranks[1].colls[0].completeNs == 0);
}

TEST_CASE("simtrain split: the truth names the whole job's ranks for job-wide faults", "[sim]") {
  SimOptions o = split(4, 4, 8);
  o.injects.push_back(*parseInject("shift:from=5,factor=1.5"));
  const auto t = truthJson(o);
  REQUIRE(t.size() == 1);
  CHECK(t[0]["ranks"].size() == 8);
}
