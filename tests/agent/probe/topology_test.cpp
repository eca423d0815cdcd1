// The probe's parallel-layout calls: ts_declare_group (checked, carried in hellos until the
// agent acknowledged one), ts_p2p (folded into the step report) and ts_set_flops (stamped into
// every report), through the C ABI and the C++ API, against an in-test agent.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "agent/probe/probe.h"
#include "tests/agent/probe/fake_agent.h"

using namespace trainscope::probe;
using trainscope::probe::testing::FakeAgent;
using trainscope::probe::testing::TempDir;
using trainscope::tests::waitFor;
using trainscope::wire::RankHello;

namespace {

// Every hello the agent received that carried groups, in arrival order.
std::vector<RankHello> groupHellos(FakeAgent& agent) {
  std::vector<RankHello> out;
  for (const auto& b : agent.batches()) {
    for (const auto& item : b.batch.items()) {
      if (item.has_rank_hello() && item.rank_hello().groups_declared_ns() != 0) {
        out.push_back(item.rank_hello());
      }
    }
  }
  return out;
}

size_t hellos(FakeAgent& agent) {
  return agent.count(trainscope::wire::Envelope::kRankHello);
}

ts_probe_config foldOnly(int rank, int world) {
  ts_probe_config c;
  ts_config_init(&c);
  c.job = "topology-test";
  c.rank = rank;
  c.world_size = world;
  c.connect_agent = 1;
  return c;
}

// The step reports a probe delivers, as its onReport hook sees them (any thread).
class Reports {
 public:
  explicit Reports(Probe& p) {
    p.onReport([this](const trainscope::wire::StepReport& rep) {
      std::lock_guard<std::mutex> lock(mu_);
      got_.push_back(rep);
    });
  }
  std::vector<trainscope::wire::StepReport> all() {
    std::lock_guard<std::mutex> lock(mu_);
    return got_;
  }

 private:
  std::mutex mu_;
  std::vector<trainscope::wire::StepReport> got_;  // guarded by mu_
};

}  // namespace

TEST_CASE(
    "declared groups reach the agent in a hello at once, in group order, and stop once acked") {
  TempDir dir;
  const std::string ep = "ipc://" + dir.path() + "/agent.sock";
  FakeAgent agent(ep);
  REQUIRE(agent.bound());
  ts_probe_config c = testing::agentConfig(ep, "topology-test", 5, 8);
  ts_probe* p = ts_probe_create(&c);
  REQUIRE(p != nullptr);
  // Rank 5 of tp2 x pp2 x dp2: tp {4, 5}, pp stage 1 of {1, 5}, dp {5, 7}.
  const int32_t tp[] = {4, 5};
  const int32_t pp[] = {1, 5};
  const int32_t dp[] = {5, 7};
  ts_declare_group(p, ts_intern("tp"), TS_GROUP_TP, tp, 2);
  ts_declare_group(p, ts_intern("pp"), TS_GROUP_PP, pp, 2);
  ts_declare_group(p, ts_intern("dp"), TS_GROUP_DP, dp, 2);
  REQUIRE(waitFor(
      [&] {
        auto h = groupHellos(agent);
        return !h.empty() && h.back().groups_size() == 3;
      },
      5000));
  RankHello first = groupHellos(agent).back();
  CHECK(first.rank().rank() == 5);
  CHECK(first.groups(0).name() == "tp");
  CHECK(first.groups(0).kind() == trainscope::wire::GROUP_TP);
  CHECK(first.groups(1).name() == "pp");
  CHECK(first.groups(1).kind() == trainscope::wire::GROUP_PP);
  CHECK(std::vector<uint32_t>(first.groups(1).ranks().begin(), first.groups(1).ranks().end()) ==
        std::vector<uint32_t>{1, 5});
  CHECK(first.groups(2).kind() == trainscope::wire::GROUP_DP);

  // The same group again is no news: nothing new is sent for it.
  ts_declare_group(p, ts_intern("tp"), TS_GROUP_TP, tp, 2);
  // A changed group replaces its namesake, with a later declaration time.
  const int32_t tp2[] = {5, 4};
  ts_declare_group(p, ts_intern("tp"), TS_GROUP_TP, tp2, 2);
  REQUIRE(waitFor(
      [&] { return groupHellos(agent).back().groups_declared_ns() > first.groups_declared_ns(); },
      5000));
  const RankHello second = groupHellos(agent).back();
  REQUIRE(second.groups_size() == 3);
  CHECK(second.groups(0).ranks(0) == 5);
  CHECK(second.groups(0).ranks(1) == 4);

  // Once acknowledged, the periodic hellos (every 2 s) carry no groups.
  const size_t withGroups = groupHellos(agent).size();
  const size_t before = hellos(agent);
  REQUIRE(waitFor([&] { return hellos(agent) >= before + 1; }, 5000));
  CHECK(groupHellos(agent).size() == withGroups);
  ts_probe_destroy(p, 1000);
}

TEST_CASE("a declaration the probe refuses names the reason and declares nothing") {
  Probe p(foldOnly(2, 4));
  REQUIRE(p.ok());
  const Name g("g");
  const int32_t notMember[] = {0, 1};
  const int32_t outside[] = {2, 4};
  const int32_t twice[] = {2, 2};
  const int32_t negative[] = {-1, 2};
  const int32_t ok[] = {0, 2};
  CHECK_FALSE(p.declareGroup(g, TS_GROUP_DP, notMember));
  CHECK(p.declareGroup(g, TS_GROUP_DP, notMember).message().find("not in") != std::string::npos);
  CHECK(p.declareGroup(g, TS_GROUP_DP, outside).message().find("world size 4") !=
        std::string::npos);
  CHECK(p.declareGroup(g, TS_GROUP_DP, twice).message().find("twice") != std::string::npos);
  CHECK(p.declareGroup(g, TS_GROUP_DP, negative).message().find("negative") != std::string::npos);
  CHECK(p.declareGroup(Name(""), TS_GROUP_DP, ok).message().find("name") != std::string::npos);
  CHECK(p.declareGroup(g, TS_GROUP_DP, std::span<const int32_t>()).message().find("0 ranks") !=
        std::string::npos);
  // Through the C ABI: ts_last_error says why. (An unknown kind only through it: the C++ API
  // takes the enum, and a value outside it is undefined behaviour, which UBSan reports.)
  ts_declare_group(p.handle(), g.id(), 9, ok, 2);
  CHECK(std::strstr(ts_last_error(), "unknown kind 9") != nullptr);
  ts_declare_group(p.handle(), g.id(), TS_GROUP_DP, notMember, 2);
  CHECK(std::strstr(ts_last_error(), "ts_declare_group: group 'g'") != nullptr);
  ts_declare_group(p.handle(), g.id(), TS_GROUP_DP, nullptr, 2);
  CHECK(std::strstr(ts_last_error(), "NULL") != nullptr);
  ts_declare_group(nullptr, g.id(), TS_GROUP_DP, ok, 2);  // no crash
  CHECK(p.groups().empty());
  CHECK(p.declareGroup(g, TS_GROUP_DP, ok));
  REQUIRE(p.groups().size() == 1);
  CHECK(p.groups()[0].kind() == trainscope::wire::GROUP_DP);
}

TEST_CASE("p2p transfers and the stated FLOPs reach the step report; bad p2p calls are dropped") {
  Probe p(foldOnly(1, 4));
  REQUIRE(p.ok());
  Reports reports(p);
  p.setFlops(3e12, 4e12, 1e15);
  const Name pp("pp");
  const int64_t t = 1'000'000'000;
  p.stepBegin(0, t);
  p.p2p(TS_COLL_RECV, pp, 0, 1 << 20, t + 100, t + 600);  // waits 500 before any compute
  p.op(Name("fwd"), t + 600, 1000);
  p.p2p(TS_COLL_SEND, pp, 2, 1 << 20, t + 1600, t + 1700);
  p.p2p(TS_COLL_SEND, pp, -1, 1, t + 1700, t + 1800);                // negative peer: dropped
  p.p2p(TS_COLL_ALL_REDUCE, pp, 2, 1, t + 1700, t + 1800);           // not a send or recv: dropped
  ts_p2p(nullptr, TS_COLL_SEND, pp.id(), 2, 1, t + 1700, t + 1800);  // no probe: nothing
  p.stepEnd(0, t + 2000);
  REQUIRE(p.flush(5000) == 0);
  const auto got = reports.all();
  REQUIRE(got.size() == 1);
  const auto& rep = got[0];
  REQUIRE(rep.p2p_size() == 2);
  CHECK(rep.p2p(0).peer() == 0);
  CHECK(rep.p2p(0).op() == trainscope::wire::RECV);
  CHECK(rep.p2p(0).group() == "pp");
  CHECK(rep.p2p(0).total_ns() == 500);
  CHECK(rep.p2p(1).peer() == 2);
  CHECK(rep.p2p(1).op() == trainscope::wire::SEND);
  CHECK(rep.p2p_ns() == 600);
  CHECK(rep.bubble_ns() == 600);
  CHECK(rep.model_flops() == 3e12);
  CHECK(rep.hardware_flops() == 4e12);
  CHECK(rep.peak_flops() == 1e15);
  CHECK(rep.device().empty());  // operators on the host
  CHECK(p.stats().records == 5);
}

TEST_CASE("TRAINSCOPE_DEVICE reaches every step report") {
  ::setenv("TRAINSCOPE_DEVICE", "cuda", 1);
  Probe p(foldOnly(0, 1));
  ::unsetenv("TRAINSCOPE_DEVICE");
  REQUIRE(p.ok());
  Reports reports(p);
  const int64_t t = 1'000'000'000;
  for (int64_t s = 0; s < 2; ++s) {
    p.stepBegin(s, t + s * 1000);
    p.op(Name("fwd"), t + s * 1000 + 10, 500);
    p.stepEnd(s, t + s * 1000 + 1000);
  }
  REQUIRE(p.flush(5000) == 0);
  const auto got = reports.all();
  REQUIRE(got.size() == 2);
  for (const auto& rep : got) CHECK(rep.device() == "cuda");
}

TEST_CASE(
    "groups declared while the first hello waits for its ack reach the agent before the "
    "goodbye of a rank that ends at once") {
  // A short job on a slow agent: the rank declared its groups after its first hello went out
  // and ended before that hello was acknowledged. No hello may follow a goodbye, so the
  // declaration rides in one last hello ahead of it.
  TempDir dir;
  const std::string ep = "ipc://" + dir.path() + "/agent.sock";
  FakeAgent agent(ep);
  REQUIRE(agent.bound());
  agent.setAutoAck(false);
  uint64_t byeSeq = 0;
  {
    Probe p(testing::agentConfig(ep, "topology-test", 1, 2), 1500);
    REQUIRE(p.ok());
    REQUIRE(waitFor([&] { return hellos(agent) >= 1; }, 5000));
    const int32_t pp[] = {0, 1};
    REQUIRE(p.declareGroup(Name("pp"), TS_GROUP_PP, pp).isOk());
    p.stepBegin(0, 1'000'000'000);
    p.stepEnd(0, 1'000'100'000);
  }
  for (const auto& b : agent.batches()) {
    for (const auto& item : b.batch.items()) {
      if (item.has_rank_goodbye() && byeSeq == 0) byeSeq = b.seq;
    }
  }
  REQUIRE(byeSeq != 0);
  bool declaredBeforeBye = false;
  for (const auto& b : agent.batches()) {
    for (const auto& item : b.batch.items()) {
      if (b.seq <= byeSeq && item.has_rank_hello() && item.rank_hello().groups_size() == 1) {
        CHECK(item.rank_hello().groups(0).name() == "pp");
        declaredBeforeBye = true;
      }
    }
  }
  CHECK(declaredBeforeBye);
}
