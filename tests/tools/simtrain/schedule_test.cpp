// The simulator under every pipeline schedule (--schedule, tools/simtrain/pipeline_model.cpp
// running the op lists of common/pipeline_schedule.h): sends and receives pair up with the
// peers of the next and previous virtual stage (the wrap of interleaved, none at the V's turn),
// each rank does the same work as under 1F1B while the step gets shorter, and every --parallel
// fault still slows what it names.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <catch2/catch.hpp>

#include "tools/simtrain/sim_options.h"
#include "tools/simtrain/step_model.h"
#include "tools/simtrain/truth.h"

using namespace trainscope::sim;

namespace {

const char* const kSchedules[] = {"1f1b", "interleaved:2", "zb-v", "dualpipe-v"};

// tp2 pp4 dp2, 8 microbatches: rank = (pp * 2 + dp) * 2 + tp.
SimOptions job(const std::string& schedule, const std::string& inject = "") {
  SimOptions o;
  o.agents = {"ipc:///tmp/x.sock"};
  o.parallel = ParallelLayout{2, 4, 2};
  o.ranks = 16;
  o.microbatches = 8;
  o.schedule = schedule;
  o.stepMs = 100;
  o.warmup = 0;
  o.noise = 0;
  o.seed = 3;
  if (!inject.empty()) o.injects.push_back(*parseInject(inject));
  REQUIRE(validate(o, true).isOk());
  return o;
}

StepTimeline run(const SimOptions& o, int64_t step = 10) {
  StepModel model(o);
  return model.step(step, 1'000'000'000);
}

// (peer, send) -> count, for one rank.
std::map<std::pair<uint32_t, bool>, size_t> p2pCounts(const RankStep& rs) {
  std::map<std::pair<uint32_t, bool>, size_t> out;
  for (const auto& x : rs.p2ps) ++out[{x.peer, x.send}];
  return out;
}

}  // namespace

TEST_CASE("simtrain --schedule: p2p peers follow the virtual stages of each schedule") {
  // Rank 0 is stage 0 (dp 0, tp 0); its stage-1 peer is rank 4, the last stage's rank 12.
  using Counts = std::map<std::pair<uint32_t, bool>, size_t>;
  const Counts oneF = {{{4, true}, 8}, {{4, false}, 8}};
  // Interleaved, 2 chunks: forwards of both chunks go to stage 1; backwards of chunk 1 go back
  // over the wrap to the last stage, whose chunk-0 forwards arrive over it.
  const Counts inter = {{{4, true}, 16}, {{4, false}, 16}, {{12, true}, 8}, {{12, false}, 8}};
  // V: stage 1 gets chunk 0's forwards and chunk 1's backwards and sends the others back.
  const Counts vee = {{{4, true}, 16}, {{4, false}, 16}};
  const std::map<std::string, Counts> want = {
      {"1f1b", oneF}, {"interleaved:2", inter}, {"zb-v", vee}, {"dualpipe-v", vee}};
  for (const char* name : kSchedules) {
    INFO(name);
    const StepTimeline tl = run(job(name));
    CHECK(p2pCounts(tl.ranks[0]) == want.at(name));
    // The last stage's rank (12) under a V turns on itself: it talks to stage 2 (rank 8) only.
    const auto last = p2pCounts(tl.ranks[12]);
    for (const auto& [k, n] : last) {
      CHECK(k.first != 12);
      if (std::string(name) != "interleaved:2") CHECK(k.first == 8);
    }
    // Every send has the matching receive on its peer.
    std::multiset<std::tuple<uint32_t, uint32_t>> sends, recvs;
    for (const auto& rs : tl.ranks) {
      for (const auto& x : rs.p2ps) {
        (x.send ? sends : recvs)
            .insert(x.send ? std::tuple{rs.rank, x.peer} : std::tuple{x.peer, rs.rank});
        CHECK(x.completeNs >= x.postedNs);
      }
    }
    CHECK(sends == recvs);
    for (const auto& rs : tl.ranks) CHECK(rs.endNs == tl.endNs);
  }
}

TEST_CASE("simtrain --schedule: the same work per rank as 1F1B, in a shorter step") {
  const StepTimeline base = run(job("1f1b"));
  for (const char* name : kSchedules) {
    INFO(name);
    const StepTimeline tl = run(job(name));
    for (size_t r = 0; r < tl.ranks.size(); ++r) {
      CHECK(static_cast<double>(tl.ranks[r].computeNs) ==
            Approx(static_cast<double>(base.ranks[r].computeNs)).epsilon(1e-4));
    }
    if (std::string(name) != "1f1b") CHECK(tl.endNs < base.endNs);
  }
  // Interleaving two chunks halves 1F1B's bubble; the V schedules fill more of it.
  const int64_t one = base.endNs - base.beginNs;
  const int64_t il = run(job("interleaved:2")).endNs - base.beginNs;
  const int64_t zb = run(job("zb-v")).endNs - base.beginNs;
  CHECK(zb <= il);
  CHECK(il < one);
}

TEST_CASE("simtrain --schedule: every --parallel fault slows what it names under each schedule") {
  for (const char* name : kSchedules) {
    INFO(name);
    const StepTimeline healthy = run(job(name));
    for (const char* f : {"stage:pp=1,factor=1.5", "worker:dp=1,pp=2,factor=1.5",
                          "gpu:rank=5,factor=1.5", "seqlen:cv=0.3"}) {
      INFO(f);
      const StepTimeline tl = run(job(name, f));
      CHECK(tl.endNs > healthy.endNs);
    }
    // A slow link: rank 4's sends to rank 8 take longer, the others' do not.
    const StepTimeline tl = run(job(name, "p2p:from=4,to=8,factor=3"));
    auto longest = [](const StepTimeline& t, uint32_t from, uint32_t to) {
      int64_t most = 0;
      for (const auto& x : t.ranks[from].p2ps) {
        if (x.send && x.peer == to) most = std::max(most, x.completeNs - x.postedNs);
      }
      return most;
    };
    CHECK(longest(tl, 4, 8) > 2 * longest(healthy, 4, 8));
    CHECK(longest(tl, 5, 9) == longest(healthy, 5, 9));
  }
}

TEST_CASE("simtrain --schedule: cp and ep layouts run under every schedule; truth names it") {
  for (const char* name : kSchedules) {
    INFO(name);
    SimOptions o = job(name);
    o.parallel = ParallelLayout{2, 2, 2, 2, 2};  // tp, pp, dp, cp, ep
    o.ranks = 16;
    o.microbatches = 4;
    o.injects.push_back(*parseInject("experts:skew=1.5"));
    REQUIRE(validate(o, true).isOk());
    const StepTimeline tl = run(o);
    REQUIRE(tl.endNs > tl.beginNs);
    for (const auto& rs : tl.ranks) {
      CHECK(rs.endNs == tl.endNs);
      CHECK(std::any_of(rs.colls.begin(), rs.colls.end(),
                        [](const CollExec& c) { return c.op == CollExec::Op::kAllToAll; }));
    }
    const auto truth = truthJson(o);
    REQUIRE(truth.size() == 1);
    CHECK(truth[0]["schedule"] == name);
    CHECK(truth[0]["microbatches"] == 4);
  }
}
