// Unit tests of the simulated job's step model, inject parsing and truth file (no probe).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>

#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tools/simtrain/sim_options.h"
#include "tools/simtrain/step_model.h"
#include "tools/simtrain/truth.h"

using namespace trainscope::sim;

namespace {

SimOptions base(uint32_t ranks = 8) {
  SimOptions o;
  o.agents = {"ipc:///tmp/x.sock"};
  o.ranks = ranks;
  o.stepMs = 100;
  o.warmup = 0;
  o.seed = 7;
  return o;
}

Inject must(const std::string& spec) {
  auto r = parseInject(spec);
  INFO(r.message());
  REQUIRE(r.isOk());
  return *r;
}

int64_t commNs(const RankStep& rs) {
  int64_t t = 0;
  for (const auto& c : rs.colls) t += c.completeNs - c.arriveNs;
  return t;
}

// Mean over steps [from, to) of a per-rank quantity.
template <typename F>
double mean(StepModel& m, int64_t from, int64_t to, uint32_t rank, F f) {
  double sum = 0;
  int64_t begin = 1'000'000'000;
  for (int64_t s = 0; s < to; ++s) {
    auto tl = m.step(s, begin);
    begin = tl.endNs;
    if (s >= from) sum += static_cast<double>(f(tl.ranks[rank]));
  }
  return sum / static_cast<double>(to - from);
}

}  // namespace

TEST_CASE("sim model: every rank ends a step at the same time and the next starts there") {
  SimOptions o = base();
  StepModel m(o);
  int64_t begin = 5'000'000'000;
  for (int64_t s = 0; s < 20; ++s) {
    auto tl = m.step(s, begin);
    REQUIRE(tl.ranks.size() == o.ranks);
    for (const auto& rs : tl.ranks) {
      CHECK(rs.beginNs == begin);
      CHECK(rs.endNs == tl.endNs);
      CHECK(rs.colls.size() == o.buckets);
      for (const auto& rg : rs.ranges) {
        CHECK(rg.startNs >= begin);
        CHECK(rg.endNs <= tl.endNs);
      }
    }
    // A healthy step is close to --step-ms.
    CHECK(static_cast<double>(tl.endNs - begin) == Approx(o.stepMs * 1e6).epsilon(0.15));
    begin = tl.endNs;
  }
}

TEST_CASE("sim model: a collective completes when the last rank arrives plus the transfer") {
  SimOptions o = base();
  o.noise = 0.1;  // spread the arrivals
  StepModel m(o);
  auto tl = m.step(4, 1'000'000'000);
  const int64_t transfer = m.transferNs(1.0);
  int64_t prev = 0;
  for (uint32_t b = 0; b < o.buckets; ++b) {
    int64_t last = 0, first = INT64_MAX;
    for (const auto& rs : tl.ranks) {
      last = std::max(last, rs.colls[b].arriveNs);
      first = std::min(first, rs.colls[b].arriveNs);
    }
    CHECK(first < last);  // somebody waited
    const int64_t expect = std::max(last, prev) + transfer;
    for (const auto& rs : tl.ranks) CHECK(rs.colls[b].completeNs == expect);
    prev = expect;
  }
}

TEST_CASE("sim model: same seed gives the same timeline, another seed a different one") {
  SimOptions o = base();
  StepModel a(o), b(o);
  o.seed = 8;
  StepModel c(o);
  auto ta = a.step(0, 0), tb = b.step(0, 0), tc = c.step(0, 0);
  CHECK(ta.endNs == tb.endNs);
  CHECK(ta.ranks[3].ops.back().durationNs == tb.ranks[3].ops.back().durationNs);
  CHECK(ta.endNs != tc.endNs);
}

TEST_CASE("sim model: warm-up steps are slower") {
  SimOptions o = base();
  o.warmup = 3;
  StepModel m(o);
  auto t0 = m.step(0, 0);
  int64_t b = t0.endNs;
  for (int s = 1; s < 3; ++s) b = m.step(s, b).endNs;
  auto t3 = m.step(3, b);
  CHECK(t0.endNs - t0.beginNs >
        static_cast<int64_t>(1.5 * static_cast<double>(t3.endNs - t3.beginNs)));
}

TEST_CASE("sim model: a straggler slows only that rank's compute and makes others wait") {
  SimOptions o = base();
  o.injects.push_back(must("straggler:rank=3,from=10,factor=1.5"));
  StepModel m(o);
  SimOptions h = base();
  StepModel healthy(h);
  auto compute = [](const RankStep& rs) { return rs.computeNs; };
  const double slow3 = mean(m, 10, 30, 3, compute);
  StepModel m2(o);
  const double slow0 = mean(m2, 10, 30, 0, compute);
  const double base3 = mean(healthy, 10, 30, 3, compute);
  StepModel healthy2(h);
  const double base0 = mean(healthy2, 10, 30, 0, compute);
  CHECK(slow3 / base3 == Approx(1.5).epsilon(0.05));
  CHECK(slow0 / base0 == Approx(1.0).epsilon(0.03));
  // Before `from` nothing changes.
  StepModel m3(o), healthy3(h);
  CHECK(mean(m3, 0, 10, 3, compute) / mean(healthy3, 0, 10, 3, compute) ==
        Approx(1.0).epsilon(0.03));
  // The others wait for the straggler in their collectives.
  StepModel m4(o), healthy4(h);
  CHECK(mean(m4, 10, 30, 0, commNs) > 2 * mean(healthy4, 10, 30, 0, commNs));
}

TEST_CASE("sim model: a slow link raises every rank's collective time, not compute") {
  SimOptions o = base();
  o.injects.push_back(must("comm:rank=2,from=5,factor=4"));
  SimOptions h = base();
  auto compute = [](const RankStep& rs) { return rs.computeNs; };
  for (uint32_t r : {0u, 2u, 7u}) {
    StepModel m(o), hm(h);
    CHECK(mean(m, 5, 25, r, commNs) > 2.5 * mean(hm, 5, 25, r, commNs));
    StepModel m2(o), hm2(h);
    CHECK(mean(m2, 5, 25, r, compute) / mean(hm2, 5, 25, r, compute) == Approx(1.0).epsilon(0.03));
  }
  StepModel m(o);
  CHECK(m.transferNs(4.0) == Approx(4 * m.transferNs(1.0)).epsilon(0.001));
}

TEST_CASE("sim model: each rank sends every bucket to its ring neighbour inside the transfer") {
  SimOptions o = base();
  o.noise = 0.05;
  StepModel m(o);
  const int64_t transfer = m.transferNs(1.0);
  int64_t begin = 1'000'000'000;
  for (int64_t s = 0; s < 20; ++s) {
    auto tl = m.step(s, begin);
    begin = tl.endNs;
    for (const auto& rs : tl.ranks) {
      REQUIRE(rs.links.size() == o.buckets);
      for (uint32_t b = 0; b < o.buckets; ++b) {
        const LinkExec& l = rs.links[b];
        CHECK(l.peer == (rs.rank + 1) % 8);
        CHECK(l.bucket == b);
        CHECK(l.bytes == o.bucketBytes * 2 * 7 / 8);
        // Posted when the bucket's transfer starts; delivered within it (jitter only
        // shortens), so never after the collective completes.
        CHECK(l.postedNs == rs.colls[b].completeNs - transfer);
        CHECK(l.postedNs >= rs.colls[b].arriveNs);
        CHECK(l.deliveredNs <= rs.colls[b].completeNs);
        CHECK(l.deliveredNs - l.postedNs > transfer * 3 / 4);
      }
    }
  }
  SimOptions one = base(1);
  StepModel m1(one);
  CHECK(m1.step(0, 1'000'000'000).ranks[0].links.empty());
}

TEST_CASE("sim model: a comm fault slows its rank's outgoing link; without rank, every link") {
  auto wire = [](const RankStep& rs) {
    int64_t t = 0;
    for (const auto& l : rs.links) t += l.deliveredNs - l.postedNs;
    return t;
  };
  SimOptions one = base();
  one.injects.push_back(must("comm:rank=2,from=5,factor=3"));
  SimOptions all = base();
  all.injects.push_back(must("comm:from=5,factor=3"));
  CHECK_FALSE(all.injects[0].rank.has_value());
  SimOptions h = base();
  for (uint32_t r = 0; r < 8; ++r) {
    StepModel m(one), ma(all), hm(h);
    const double healthy = mean(hm, 5, 25, r, wire);
    CHECK(mean(m, 5, 25, r, wire) / healthy == Approx(r == 2 ? 3.0 : 1.0).epsilon(0.01));
    CHECK(mean(ma, 5, 25, r, wire) / healthy == Approx(3.0).epsilon(0.01));
  }
  // The ring goes at its slowest link either way: the same step times, collectives and
  // operators for one slow link and a slow fabric (the links draw their jitter from their
  // own generator, so they move no other time of the timeline).
  StepModel m(one), ma(all);
  int64_t b1 = 1'000'000'000, b2 = b1;
  for (int64_t s = 0; s < 30; ++s) {
    auto t1 = m.step(s, b1);
    auto t2 = ma.step(s, b2);
    REQUIRE(t1.endNs == t2.endNs);
    for (uint32_t r = 0; r < 8; ++r) {
      REQUIRE(t1.ranks[r].colls.size() == t2.ranks[r].colls.size());
      for (size_t i = 0; i < t1.ranks[r].colls.size(); ++i) {
        CHECK(t1.ranks[r].colls[i].completeNs == t2.ranks[r].colls[i].completeNs);
      }
      CHECK(t1.ranks[r].ops.size() == t2.ranks[r].ops.size());
      CHECK(t1.ranks[r].ops.back().durationNs == t2.ranks[r].ops.back().durationNs);
    }
    b1 = t1.endNs;
    b2 = t2.endNs;
  }
  SimOptions quiet = base();
  quiet.noise = 0.0;
  StepModel q(quiet);
  auto tl = q.step(0, 1'000'000'000);
  CHECK(tl.ranks[3].links[0].deliveredNs - tl.ranks[3].links[0].postedNs == q.transferNs(1.0));
}

TEST_CASE("sim model: an operator regression slows that operator on the chosen rank only") {
  SimOptions o = base();
  o.injects.push_back(must("op:name=aten::gelu,from=0,factor=3,rank=1"));
  StepModel m(o);
  SimOptions h = base();
  StepModel hm(h);
  auto t = m.step(0, 0), th = hm.step(0, 0);
  const auto& names = m.opNames();
  auto opTotal = [&](const RankStep& rs, const std::string& name) {
    int64_t sum = 0;
    for (const auto& op : rs.ops) sum += names[op.op] == name ? op.durationNs : 0;
    return static_cast<double>(sum);
  };
  CHECK(opTotal(t.ranks[1], "aten::gelu") / opTotal(th.ranks[1], "aten::gelu") ==
        Approx(3.0).epsilon(0.05));
  CHECK(opTotal(t.ranks[0], "aten::gelu") / opTotal(th.ranks[0], "aten::gelu") ==
        Approx(1.0).epsilon(0.01));
  CHECK(opTotal(t.ranks[1], "aten::linear") / opTotal(th.ranks[1], "aten::linear") ==
        Approx(1.0).epsilon(0.01));
}

TEST_CASE("sim model: a spike repeats every N steps as a checkpoint range") {
  SimOptions o = base();
  o.noise = 0.0;
  o.injects.push_back(must("spike:every=10,factor=3"));
  StepModel m(o);
  int64_t begin = 0;
  std::set<int64_t> spiky;
  for (int64_t s = 0; s < 35; ++s) {
    auto tl = m.step(s, begin);
    const double len = static_cast<double>(tl.endNs - begin);
    bool ckpt = false;
    for (const auto& rg : tl.ranks[0].ranges) ckpt |= rg.phase == Phase::kCheckpoint;
    if (len > 2.5 * o.stepMs * 1e6) spiky.insert(s);
    CHECK(ckpt == (s % 10 == 0 && s > 0));
    begin = tl.endNs;
  }
  CHECK(spiky == std::set<int64_t>{10, 20, 30});
}

TEST_CASE("sim model: a hang leaves one rank short of the first collective, others waiting") {
  SimOptions o = base(4);
  o.injects.push_back(must("hang:rank=2,at=5"));
  StepModel m(o);
  int64_t begin = 0;
  for (int64_t s = 0; s < 5; ++s) {
    auto tl = m.step(s, begin);
    CHECK_FALSE(tl.hung);
    begin = tl.endNs;
  }
  auto tl = m.step(5, begin);
  CHECK(tl.hung);
  CHECK(tl.endNs == 0);
  for (const auto& rs : tl.ranks) {
    CHECK(rs.endNs == 0);
    CHECK_FALSE(rs.ops.empty());
    if (rs.rank == 2) {
      CHECK(rs.colls.empty());
    } else {
      REQUIRE(rs.colls.size() == 1);
      CHECK(rs.colls[0].completeNs == 0);
      CHECK(rs.colls[0].arriveNs > begin);
    }
  }
}

TEST_CASE("sim inject: specs parse and bad ones are refused naming the key") {
  auto s = must("straggler:rank=5,from=150,factor=1.4");
  CHECK(s.kind == Inject::Kind::kStraggler);
  CHECK(*s.rank == 5);
  CHECK(s.fromStep == 150);
  CHECK(s.factor == Approx(1.4));
  auto op = must("op:name=aten::linear,from=3,factor=2");
  CHECK_FALSE(op.rank.has_value());
  CHECK(op.op == "aten::linear");
  CHECK(must("hang:rank=1,at=7").atStep == 7);
  CHECK(must("spike:every=50,factor=2").every == 50);
  CHECK(must("shift:from=0,factor=1.2").kind == Inject::Kind::kShift);
  CHECK(must("comm:rank=0,from=0,factor=2").kind == Inject::Kind::kComm);
  CHECK_FALSE(must("comm:from=0,factor=2").rank.has_value());  // every link

  auto err = [](const std::string& spec) {
    auto r = parseInject(spec);
    REQUIRE_FALSE(r.isOk());
    return r.message();
  };
  CHECK_THAT(err("slow:rank=1"), Catch::Contains("unknown kind 'slow'"));
  CHECK_THAT(err("straggler:rank=1,from=2"), Catch::Contains("missing key 'factor'"));
  CHECK_THAT(err("straggler:rank=1,from=2,factor=2,speed=3"),
             Catch::Contains("unknown key 'speed'"));
  CHECK_THAT(err("straggler:rank=x,from=2,factor=2"), Catch::Contains("rank='x'"));
  CHECK_THAT(err("straggler:rank=-1,from=2,factor=2"), Catch::Contains("rank=-1"));
  CHECK_THAT(err("straggler:rank=1,from=2,factor=0"), Catch::Contains("factor='0'"));
  CHECK_THAT(err("straggler:rank=1,from=2,factor=2x"), Catch::Contains("factor='2x'"));
  CHECK_THAT(err("straggler:rank=1,rank=2,from=2,factor=2"), Catch::Contains("'rank' given twice"));
  CHECK_THAT(err("shift:from,factor=2"), Catch::Contains("'from' is not key=value"));
  CHECK_THAT(err("op:name=aten::nope,from=1,factor=2"), Catch::Contains("name='aten::nope'"));
  CHECK_THAT(err("spike:every=0,factor=2"), Catch::Contains("every=0"));
  CHECK_THAT(err("spike:every=5,factor=0.5"), Catch::Contains("factor=0.5"));

  SimOptions o = base(4);
  o.injects.push_back(must("straggler:rank=4,from=0,factor=2"));
  auto st = validate(o, true);
  REQUIRE_FALSE(st.isOk());
  CHECK_THAT(st.message(), Catch::Contains("rank=4 is not below --ranks 4"));
  SimOptions none = base();
  none.agents.clear();
  CHECK_THAT(validate(none, true).message(), Catch::Contains("--agent"));
  CHECK(validate(none, false).isOk());
}

TEST_CASE("sim truth: the JSON lists each injected fault with kind, ranks, step and factor") {
  SimOptions o = base(4);
  o.injects.push_back(must("straggler:rank=1,from=10,factor=1.5"));
  o.injects.push_back(must("shift:from=20,factor=1.2"));
  o.injects.push_back(must("comm:rank=3,from=30,factor=2"));
  o.injects.push_back(must("op:name=aten::gelu,from=40,factor=3"));
  o.injects.push_back(must("hang:rank=0,at=90"));
  o.injects.push_back(must("spike:every=25,factor=2"));
  auto j = truthJson(o);
  REQUIRE(j.size() == 6);
  // Every fault but the hang and the spike has the gain of fixing it (parallel_faults_test).
  for (int i : {0, 1, 2, 3}) CHECK(j[i].contains("gain"));
  CHECK_FALSE(j[4].contains("gain"));
  CHECK_FALSE(j[5].contains("gain"));
  j[0].erase("gain");
  CHECK(j[0] ==
        nlohmann::json::parse(R"({"kind":"straggler","ranks":[1],"from_step":10,"factor":1.5})"));
  CHECK(j[1]["kind"] == "step_shift");
  CHECK(j[1]["ranks"] == nlohmann::json::parse("[0,1,2,3]"));
  CHECK(j[2]["kind"] == "slow_comm");
  CHECK(j[2]["ranks"] == nlohmann::json::parse("[3]"));
  SimOptions fabric = base(4);
  fabric.injects.push_back(must("comm:from=30,factor=2"));
  CHECK(truthJson(fabric)[0]["ranks"] == nlohmann::json::parse("[0,1,2,3]"));
  CHECK(j[3]["kind"] == "op_regression");
  CHECK(j[3]["op"] == "aten::gelu");
  CHECK(j[3]["ranks"].size() == 4);
  CHECK(j[4]["kind"] == "hang");
  CHECK(j[4]["from_step"] == 90);
  CHECK(j[5]["kind"] == "spike");
  CHECK(j[5]["every"] == 25);

  char path[] = "/tmp/simtruthXXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(writeTruth(o, path, truthGains(o)).isOk());
  std::ifstream in(path);
  CHECK(nlohmann::json::parse(in) == truthJson(o));
  std::remove(path);
  CHECK_THAT(writeTruth(o, "/nonexistent/dir/t.json", {}).message(), Catch::Contains("--truth"));
}

TEST_CASE("sim truth: TruthWriter writes the faults at once and their gains from the background") {
  SimOptions o = base(4);
  o.steps = 200;
  o.injects.push_back(must("straggler:rank=1,from=10,factor=1.5"));
  o.injects.push_back(must("hang:rank=0,at=190"));
  char path[] = "/tmp/simtruthXXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  o.truthFile = path;
  auto read = [&] {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
  };
  SECTION("finish waits for the gains of every step") {
    TruthWriter w;
    REQUIRE(w.start(o).isOk());
    CHECK(w.finish(false).isOk());
    CHECK_FALSE(w.pending());
    CHECK(read() == truthJson(o));
    CHECK(read()[0]["gain"].get<double>() > 0.2);
  }
  SECTION("an early finish stops the replay and keeps what it has") {
    std::atomic<bool> stopped{true};
    const std::vector<double> none = truthGains(o, &stopped);
    CHECK(std::isnan(none[0]));
    TruthWriter w;
    REQUIRE(w.start(o).isOk());
    CHECK(w.finish(true).isOk());
    const auto j = read();
    REQUIRE(j.size() == 2);  // the faults are there whether or not the gain got computed
    CHECK(j[0]["kind"] == "straggler");
    CHECK_FALSE(j[1].contains("gain"));
  }
  SECTION("a run without faults that have a gain writes once and starts no replay") {
    o.injects.erase(o.injects.begin());
    TruthWriter w;
    REQUIRE(w.start(o).isOk());
    CHECK_FALSE(w.pending());
    CHECK(read() == truthJson(o));
  }
  close(fd);
  std::remove(path);
}
