// Pipeline schedules as op lists (common/pipeline_schedule.h): every schedule's lists hold each
// pass of each (chunk, microbatch) once, in an order the dependencies allow (the replay runs
// them all), over a range of stages and microbatches; virtual stages land on the right ranks;
// the bubbles shrink from 1F1B to interleaved to the V schedules; bad names and microbatch
// counts are refused with the reason.
#include <map>
#include <set>
#include <tuple>

#include <catch2/catch.hpp>

#include "common/pipeline_schedule.h"

using namespace trainscope::pipeline;

namespace {

Schedule parsed(const std::string& text) {
  auto s = parseSchedule(text);
  REQUIRE(s.isOk());
  return *s;
}

// Bubble ratio of a balanced pipeline: the share of the makespan a rank is not working.
double bubble(const Schedule& s, uint32_t P, uint32_t M) {
  const double span = makespanNs(s, std::vector<double>(P, 300.0), M);
  REQUIRE(span > 0);
  return 1.0 - 300.0 / span;
}

}  // namespace

TEST_CASE("pipeline schedules: names parse and print back; bad ones name the text") {
  for (const char* n : {"1f1b", "interleaved:2", "interleaved:4", "zb-v", "dualpipe-v"}) {
    CHECK(scheduleName(parsed(n)) == n);
  }
  CHECK(parsed("interleaved:3").chunks == 3);
  CHECK(parsed("zb-v").chunks == 2);
  for (const char* bad : {"gpipe", "interleaved:", "interleaved:1", "interleaved:x", "ZB-V"}) {
    auto s = parseSchedule(bad);
    REQUIRE_FALSE(s.isOk());
    CHECK(s.message().find(bad) != std::string::npos);
  }
  CHECK(microbatchProblem(parsed("interleaved:2"), 4, 6).find("multiple of pp=4") !=
        std::string::npos);
  CHECK(microbatchProblem(parsed("interleaved:2"), 4, 8).empty());
  CHECK(microbatchProblem(parsed("dualpipe-v"), 4, 6).find("2 * pp = 8") != std::string::npos);
  CHECK(microbatchProblem(parsed("zb-v"), 4, 1).empty());
}

TEST_CASE("pipeline schedules: virtual stages wrap (interleaved) or turn on the last rank (V)") {
  const Schedule il = parsed("interleaved:2");
  CHECK(virtualOf(il, 4, 3, 0) == 3);
  CHECK(virtualOf(il, 4, 0, 1) == 4);
  CHECK(rankOfVirtual(il, 4, 4) == 0);  // the last rank's chunk 0 feeds rank 0's chunk 1
  const Schedule v = parsed("zb-v");
  CHECK(virtualOf(v, 4, 3, 0) == 3);
  CHECK(virtualOf(v, 4, 3, 1) == 4);  // the turn: the same rank, no transfer
  CHECK(virtualOf(v, 4, 0, 1) == 7);  // the loss is on rank 0
  for (uint32_t vs = 0; vs < 8; ++vs)
    CHECK(virtualOf(v, 4, rankOfVirtual(v, 4, vs), vs < 4 ? 0 : 1) == vs);
}

TEST_CASE("pipeline schedules: op lists are complete and dependency-ordered") {
  for (const char* name : {"1f1b", "interleaved:2", "interleaved:3", "zb-v", "dualpipe-v"}) {
    const Schedule s = parsed(name);
    for (uint32_t P : {1u, 2u, 3u, 4u, 8u}) {
      for (uint32_t M : {1u, 2u, 4u, 8u, 12u, 16u, 24u}) {
        if (!microbatchProblem(s, P, M).empty()) continue;
        INFO(name << " pp=" << P << " micro=" << M);
        const auto lists = opLists(s, P, M);
        REQUIRE(lists.size() == P);
        for (uint32_t r = 0; r < P; ++r) {
          std::set<std::tuple<int, uint32_t, uint32_t>> seen;
          for (const Op& op : lists[r]) {
            CHECK(op.chunk < s.chunks);
            CHECK(op.micro < M);
            CHECK(seen.insert({static_cast<int>(op.pass), op.chunk, op.micro}).second);
          }
          const size_t passes = splitsBackward(s) ? 3 : 2;
          CHECK(lists[r].size() == passes * s.chunks * M);
        }
        // The replay runs every op only if each one's input came first in some rank's order.
        size_t ran = 0;
        replay(s, P, M, lists, [&](uint32_t, const Op&) {
          ++ran;
          return 1.0;
        });
        size_t all = 0;
        for (const auto& l : lists) all += l.size();
        CHECK(ran == all);
      }
    }
  }
}

TEST_CASE("pipeline schedules: same work per rank, smaller bubbles than 1F1B") {
  for (uint32_t P : {2u, 4u, 8u}) {
    const uint32_t M = 2 * P;
    INFO("pp=" << P << " micro=" << M);
    const double one = bubble(parsed("1f1b"), P, M);
    const double il2 = bubble(parsed("interleaved:2"), P, M);
    const double zbv = bubble(parsed("zb-v"), P, M);
    const double dpv = bubble(parsed("dualpipe-v"), P, M);
    // 1F1B's bubble is (P - 1) / (M + P - 1) of each rank's step.
    CHECK(one == Approx(static_cast<double>(P - 1) / (M + P - 1)).epsilon(1e-9));
    CHECK(il2 < one);
    CHECK(zbv <= il2 + 0.02);
    CHECK(dpv < one);
    // The work each rank does is the same under every schedule: only idle time differs.
    for (const char* n : {"1f1b", "interleaved:2", "zb-v", "dualpipe-v"}) {
      const Schedule s = parsed(n);
      std::vector<double> idle;
      const auto lists = opLists(s, P, M);
      const auto ends = replay(
          s, P, M, lists, [&](uint32_t, const Op& op) { return 300.0 / M * workShare(s, op.pass); },
          &idle);
      for (uint32_t r = 0; r < P; ++r) CHECK(ends[r] - idle[r] == Approx(300.0));
    }
  }
}
