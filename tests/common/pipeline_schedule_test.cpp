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
double bubble(const Schedule& s, uint32_t pp, uint32_t micros) {
  const double span = makespanNs(s, std::vector<double>(pp, 300.0), micros);
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
    for (uint32_t pp : {1u, 2u, 3u, 4u, 8u}) {
      for (uint32_t micros : {1u, 2u, 4u, 8u, 12u, 16u, 24u}) {
        if (!microbatchProblem(s, pp, micros).empty()) continue;
        INFO(name << " pp=" << pp << " micro=" << micros);
        const auto lists = opLists(s, pp, micros);
        REQUIRE(lists.size() == pp);
        for (uint32_t r = 0; r < pp; ++r) {
          std::set<std::tuple<int, uint32_t, uint32_t>> seen;
          for (const Op& op : lists[r]) {
            CHECK(op.chunk < s.chunks);
            CHECK(op.micro < micros);
            CHECK(seen.insert({static_cast<int>(op.pass), op.chunk, op.micro}).second);
          }
          const size_t passes = splitsBackward(s) ? 3 : 2;
          CHECK(lists[r].size() == passes * s.chunks * micros);
        }
        // The replay runs every op only if each one's input came first in some rank's order.
        size_t ran = 0;
        replay(s, pp, micros, lists, [&](uint32_t, const Op&) {
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
  for (uint32_t pp : {2u, 4u, 8u}) {
    const uint32_t micros = 2 * pp;
    INFO("pp=" << pp << " micro=" << micros);
    const double one = bubble(parsed("1f1b"), pp, micros);
    const double il2 = bubble(parsed("interleaved:2"), pp, micros);
    const double zbv = bubble(parsed("zb-v"), pp, micros);
    const double dpv = bubble(parsed("dualpipe-v"), pp, micros);
    // 1F1B's bubble is (pp - 1) / (micros + pp - 1) of each rank's step.
    CHECK(one == Approx(static_cast<double>(pp - 1) / (micros + pp - 1)).epsilon(1e-9));
    CHECK(il2 < one);
    CHECK(zbv <= il2 + 0.02);
    CHECK(dpv < one);
    // The work each rank does is the same under every schedule: only idle time differs.
    for (const char* n : {"1f1b", "interleaved:2", "zb-v", "dualpipe-v"}) {
      const Schedule s = parsed(n);
      std::vector<double> idle;
      const auto lists = opLists(s, pp, micros);
      const auto ends = replay(
          s, pp, micros, lists,
          [&](uint32_t, const Op& op) { return 300.0 / micros * workShare(s, op.pass); }, &idle);
      for (uint32_t r = 0; r < pp; ++r) CHECK(ends[r] - idle[r] == Approx(300.0));
    }
  }
}
