// The parallel layout derived from declared groups: coordinates per rank along each axis,
// inferred for ranks that declared nothing, axis sizes, and the problems a user must see.
#include <catch2/catch.hpp>

#include <vector>

#include "collector/topology/topology.h"
#include "tests/collector/topology/group_fixture.h"

using namespace trainscope;
using topology::RankGroups;
using trainscope::testing::group;

namespace {

// Megatron's order for tp2 x pp2 x dp2: rank = pp * 4 + dp * 2 + tp.
std::vector<RankGroups> megatron(uint32_t skipRank = 99) {
  std::vector<RankGroups> out;
  for (uint32_t r = 0; r < 8; ++r) {
    if (r == skipRank) continue;
    const uint32_t pp = r / 4, dp = (r / 2) % 2, tp = r % 2;
    RankGroups rg;
    rg.rank = r;
    rg.declaredNs = 1;
    rg.groups.push_back(group("tp", wire::GROUP_TP, {pp * 4 + dp * 2, pp * 4 + dp * 2 + 1}));
    rg.groups.push_back(group("pp", wire::GROUP_PP, {dp * 2 + tp, 4 + dp * 2 + tp}));
    rg.groups.push_back(group("dp", wire::GROUP_DP, {pp * 4 + tp, pp * 4 + 2 + tp}));
    rg.groups.push_back(group("embedding", wire::GROUP_OTHER, {dp * 2 + tp, 4 + dp * 2 + tp}));
    out.push_back(std::move(rg));
  }
  return out;
}

}  // namespace

TEST_CASE("topology: every rank of tp2 x pp2 x dp2 gets its stage, replica and tp index") {
  auto t = topology::derive(megatron());
  CHECK(t.declared);
  CHECK(t.ranksDeclared == 8);
  CHECK(t.problems.empty());
  CHECK(t.sizes == std::array<uint32_t, 5>{2, 2, 2, 0, 0});
  REQUIRE(t.coords.size() == 8);
  for (uint32_t r = 0; r < 8; ++r) {
    INFO("rank " << r);
    const auto& c = t.coords.at(r);
    CHECK(c.along(wire::GROUP_PP) == r / 4);
    CHECK(c.along(wire::GROUP_DP) == (r / 2) % 2);
    CHECK(c.along(wire::GROUP_TP) == r % 2);
    CHECK_FALSE(c.along(wire::GROUP_CP).has_value());
    CHECK_FALSE(c.along(wire::GROUP_OTHER).has_value());
  }
  // 4 groups per axis and 4 embedding groups, each distinct group once, declared by all its
  // members; axes first (pp, dp, tp), then other.
  REQUIRE(t.groups.size() == 16);
  CHECK(t.groups.front().kind == wire::GROUP_PP);
  CHECK(t.groups.back().kind == wire::GROUP_OTHER);
  CHECK(t.groups.front().ranks == std::vector<uint32_t>{0, 4});
  CHECK(t.groups.front().declaredBy == std::vector<uint32_t>{0, 4});
}

TEST_CASE("topology: a rank that declared nothing takes its place in the groups others declared") {
  auto t = topology::derive(megatron(/*skipRank=*/6));
  CHECK(t.ranksDeclared == 7);
  REQUIRE(t.coords.count(6) == 1);
  CHECK(t.coords.at(6).along(wire::GROUP_PP) == 1);
  CHECK(t.coords.at(6).along(wire::GROUP_DP) == 1);
  CHECK(t.coords.at(6).along(wire::GROUP_TP) == 0);
}

TEST_CASE("topology: nothing declared is no layout; ranks with empty sets count as undeclared") {
  CHECK_FALSE(topology::derive({}).declared);
  std::vector<RankGroups> none(2);
  none[1].rank = 1;
  auto t = topology::derive(none);
  CHECK_FALSE(t.declared);
  CHECK(t.coords.empty());
  CHECK(t.groups.empty());
}

TEST_CASE("topology: members that disagree about a group, and unequal sizes, are problems") {
  std::vector<RankGroups> in(3);
  in[0].rank = 0;
  in[0].groups.push_back(group("pp", wire::GROUP_PP, {0, 1}));
  in[1].rank = 1;
  in[1].groups.push_back(group("pp", wire::GROUP_PP, {1, 0}));  // another stage order
  in[2].rank = 2;
  in[2].groups.push_back(group("pp", wire::GROUP_PP, {2, 3, 4}));  // disjoint: no conflict
  auto t = topology::derive(in);
  REQUIRE(t.problems.size() == 2);
  CHECK(t.problems[0].find("pp group 'pp': rank 0 declared [0, 1], rank 1 declared [1, 0]") !=
        std::string::npos);
  CHECK(t.problems[1].find("different sizes (2, 3)") != std::string::npos);
  CHECK(t.sizes[0] == 3);
  // Each rank's own declaration gives its coordinate.
  CHECK(t.coords.at(0).along(wire::GROUP_PP) == 0);
  CHECK(t.coords.at(1).along(wire::GROUP_PP) == 0);
  CHECK(t.coords.at(3).along(wire::GROUP_PP) == 1);  // inferred from rank 2's group
}

TEST_CASE("topology: a rank's first group of a kind gives its coordinate") {
  std::vector<RankGroups> in(1);
  in[0].rank = 3;
  in[0].groups.push_back(group("dp", wire::GROUP_DP, {1, 3}));
  in[0].groups.push_back(group("dp_cp", wire::GROUP_DP, {1, 2, 3, 5}));
  auto t = topology::derive(in);
  CHECK(t.coords.at(3).along(wire::GROUP_DP) == 1);
}
