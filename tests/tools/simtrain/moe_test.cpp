// The simulator's context- and expert-parallel model (--parallel ...,cp=C,ep=E) and the experts
// skew fault (experts:skew=X[,ep=K][,from=N]): Megatron's rank order with cp, expert-parallel
// groups carved out of data parallelism, the two token all_to_alls per forward and backward in
// the expert-parallel group, the hot index's longer expert compute and bytes, its peers waiting
// in the all_to_all, the truth file, and the errors naming the flag.
#include <catch2/catch.hpp>

#include <algorithm>

#include "tools/simtrain/sim_options.h"
#include "tools/simtrain/step_model.h"
#include "tools/simtrain/truth.h"

using namespace trainscope::sim;

namespace {

SimOptions moeJob(uint32_t tp, uint32_t pp, uint32_t dp, uint32_t cp, uint32_t ep) {
  SimOptions o;
  o.agents = {"ipc:///tmp/x.sock"};
  o.parallel = ParallelLayout{tp, pp, dp, cp, ep};
  o.ranks = tp * pp * dp * cp;
  o.microbatches = 4;
  o.stepMs = 100;
  o.warmup = 0;
  o.noise = 0;
  return o;
}

struct A2a {
  uint64_t bytes = 0;
  int64_t waitNs = 0;  // arrival to completion, summed
  size_t calls = 0;
};

A2a allToAll(const RankStep& rs) {
  A2a a;
  for (const CollExec& c : rs.colls) {
    if (c.op != CollExec::Op::kAllToAll) continue;
    CHECK(c.group == CollExec::Group::kEp);
    a.bytes += c.bytes;
    a.waitNs += c.completeNs - c.arriveNs;
    ++a.calls;
  }
  return a;
}

int64_t opNs(const StepModel& m, const RankStep& rs, const char* name) {
  int64_t t = 0;
  for (const OpExec& o : rs.ops) {
    if (m.opNames()[o.op] == name) t += o.durationNs;
  }
  return t;
}

}  // namespace

TEST_CASE("simtrain moe: Megatron rank order with cp, ep groups from consecutive replicas") {
  auto par = parseParallel("tp=2,pp=2,dp=4,cp=2,ep=2");
  REQUIRE(par.isOk());
  CHECK(par->world() == 32);
  // rank = ((pp * dp + dp_index) * cp + cp_index) * tp + tp_index
  const uint32_t r = par->rankAt(1, 3, 1, 1);
  CHECK(r == ((1 * 4 + 3) * 2 + 1) * 2 + 1);
  CHECK(par->ppIndex(r) == 1);
  CHECK(par->dpIndex(r) == 3);
  CHECK(par->cpIndex(r) == 1);
  CHECK(par->tpIndex(r) == 1);
  CHECK(par->epIndex(r) == 1);
  CHECK(par->cpGroup(r) == std::vector<uint32_t>{r - 2, r});
  // dp 2 and 3 form one expert-parallel group (same pp, cp, tp).
  CHECK(par->epGroup(r) == std::vector<uint32_t>{par->rankAt(1, 2, 1, 1), r});
  CHECK(par->epGroup(par->rankAt(0, 0, 0, 0)) ==
        std::vector<uint32_t>{par->rankAt(0, 0, 0, 0), par->rankAt(0, 1, 0, 0)});
  CHECK(par->dpGroup(r).size() == 4);
}

TEST_CASE("simtrain moe: flag and inject errors name the key") {
  SimOptions o = moeJob(1, 1, 6, 1, 4);
  CHECK(validate(o, true).message().find("ep=4 must divide dp=6") != std::string::npos);
  o = moeJob(2, 2, 2, 1, 1);
  o.injects.push_back(*parseInject("experts:skew=1.5"));
  CHECK(validate(o, true).message().find("experts needs --parallel ep=E") != std::string::npos);
  o = moeJob(1, 1, 4, 1, 4);
  o.injects.push_back(*parseInject("experts:skew=1.5,ep=4"));
  CHECK(validate(o, true).message().find("ep=4 is not below the expert-parallel size 4") !=
        std::string::npos);
  CHECK(parseInject("experts:skew=0.5").message().find("must be >= 1") != std::string::npos);
  CHECK(parseInject("experts:ep=1").message().find("missing key 'skew'") != std::string::npos);
  CHECK(parseInject("experts:skew=2,rank=1").message().find("unknown key 'rank'") !=
        std::string::npos);
  auto in = parseInject("experts:skew=1.5,ep=2,from=30");
  REQUIRE(in.isOk());
  CHECK(in->kind == Inject::Kind::kExperts);
  CHECK(in->factor == 1.5);
  CHECK(in->ep == 2);
  CHECK(in->fromStep == 30);
  CHECK(parseInject("experts:skew=1.2")->fromStep == 0);
  SimOptions flat;
  flat.agents = {"ipc:///tmp/x.sock"};
  flat.injects.push_back(*parseInject("experts:skew=1.5"));
  CHECK(validate(flat, true).message().find("need --parallel") != std::string::npos);
}

TEST_CASE("simtrain moe: two token all_to_alls per forward and backward in the ep group") {
  SimOptions o = moeJob(2, 2, 4, 1, 2);
  REQUIRE(validate(o, true).isOk());
  StepModel m(o);
  StepTimeline tl = m.step(3, 1'000'000'000);
  const ParallelLayout& par = *o.parallel;
  for (const RankStep& rs : tl.ranks) {
    const A2a a = allToAll(rs);
    // 4 microbatches x (forward + backward) x (dispatch + combine).
    CHECK(a.calls == 16);
    CHECK(opNs(m, rs, kExpertOp) > 0);
    CHECK(opNs(m, rs, kExpertBackwardOp) > 0);
    CHECK(rs.endNs == tl.endNs);
  }
  // Both ranks of an expert-parallel group leave each all_to_all together.
  const uint32_t a = par.rankAt(1, 0, 1), b = par.rankAt(1, 1, 1);
  REQUIRE(par.epGroup(a) == std::vector<uint32_t>{a, b});
  std::vector<int64_t> ca, cb;
  for (const CollExec& c : tl.ranks[a].colls) {
    if (c.op == CollExec::Op::kAllToAll) ca.push_back(c.completeNs);
  }
  for (const CollExec& c : tl.ranks[b].colls) {
    if (c.op == CollExec::Op::kAllToAll) cb.push_back(c.completeNs);
  }
  CHECK(ca == cb);
  // Context parallelism adds a key/value all_gather in the cp group.
  SimOptions c = moeJob(1, 2, 2, 2, 1);
  REQUIRE(validate(c, true).isOk());
  StepModel mc(c);
  StepTimeline tc = mc.step(3, 1'000'000'000);
  size_t gathers = 0;
  for (const CollExec& x : tc.ranks[0].colls) {
    if (x.op == CollExec::Op::kAllGather) {
      CHECK(x.group == CollExec::Group::kCp);
      ++gathers;
    }
  }
  CHECK(gathers == 8);
}

TEST_CASE("simtrain moe: experts skew loads the hot index; its peers wait in the all_to_all") {
  SimOptions o = moeJob(1, 2, 4, 1, 4);
  o.injects.push_back(*parseInject("experts:skew=2,ep=1,from=5"));
  REQUIRE(validate(o, true).isOk());
  const ParallelLayout& par = *o.parallel;
  StepModel m(o);
  int64_t begin = 0;
  StepTimeline before, after;
  for (int64_t s = 0; s <= 6; ++s) {
    StepTimeline tl = m.step(s, begin);
    begin = tl.endNs;
    if (s == 4) before = tl;
    if (s == 6) after = tl;
  }
  const uint32_t hot = par.rankAt(0, 1, 0), cold = par.rankAt(0, 2, 0);
  REQUIRE(par.epIndex(hot) == 1);
  // Before the onset every rank receives the same bytes and computes as long on its experts.
  CHECK(allToAll(before.ranks[hot]).bytes == allToAll(before.ranks[cold]).bytes);
  CHECK(opNs(m, before.ranks[hot], kExpertOp) == opNs(m, before.ranks[cold], kExpertOp));
  // After: twice the tokens of each other index (4 indices: 2 * 4 / 5 vs 4 / 5 of the mean).
  const double ratio = static_cast<double>(allToAll(after.ranks[hot]).bytes) /
                       static_cast<double>(allToAll(after.ranks[cold]).bytes);
  CHECK(ratio == Approx(2.0).epsilon(0.02));
  CHECK(opNs(m, after.ranks[hot], kExpertOp) >
        1.9 * static_cast<double>(opNs(m, after.ranks[cold], kExpertOp)));
  CHECK(allToAll(after.ranks[cold]).waitNs > 2 * allToAll(after.ranks[hot]).waitNs);
  CHECK(after.endNs - after.beginNs > before.endNs - before.beginNs);

  const auto truth = truthJson(o);
  REQUIRE(truth.size() == 1);
  CHECK(truth[0]["kind"] == "expert_imbalance");
  CHECK(truth[0]["ep"] == 1);
  CHECK(truth[0]["from_step"] == 5);
  CHECK(truth[0]["factor"] == 2.0);
  std::vector<uint32_t> hotRanks;
  for (uint32_t r = 0; r < par.world(); ++r) {
    if (par.epIndex(r) == 1) hotRanks.push_back(r);
  }
  CHECK(truth[0]["ranks"].get<std::vector<uint32_t>>() == hotRanks);
}

TEST_CASE("simtrain moe: without cp and ep no all_to_all, no all_gather, no expert ops") {
  SimOptions a = moeJob(2, 2, 2, 1, 1);
  a.noise = 0.05;
  StepModel m(a);
  StepTimeline t = m.step(4, 0);
  for (const RankStep& rs : t.ranks) {
    CHECK(allToAll(rs).calls == 0);
    CHECK(opNs(m, rs, kExpertOp) == 0);
    for (const CollExec& c : rs.colls) CHECK(c.op == CollExec::Op::kAllReduce);
  }
}
