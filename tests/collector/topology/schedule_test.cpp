// Schedule inference (collector/topology/schedule.h): a step whose p2p counts and bubbles are
// those a schedule's own replay gives (plus an overhead every wait carries) is named that
// schedule with its microbatches, over several stage counts; interleaved is told by the wrap
// (with two stages by the bubble), 1F1B from a V by the shape of the bubble over the stages,
// per replica; steps that show no pipeline, no p2p or no bubble are unknown or stay 1F1B.
#include <catch2/catch.hpp>

#include "collector/topology/schedule.h"
#include "common/pipeline_schedule.h"

using namespace trainscope;
using topology::RankPipe;

namespace {

// One replica per dp index, pp stages of tp ranks: rank = (s * dp + d) * tp + t.
struct Job {
  uint32_t tp = 2, pp = 4, dp = 2;
  uint32_t rankAt(uint32_t s, uint32_t d, uint32_t t) const { return (s * dp + d) * tp + t; }
  std::vector<int32_t> stageOf() const {
    std::vector<int32_t> out(size_t{tp} * pp * dp);
    for (uint32_t r = 0; r < out.size(); ++r) out[r] = static_cast<int32_t>(r / (tp * dp));
    return out;
  }
  // What the ranks report under `sched` over `micro` microbatches: per peer the transfers of
  // the op lists, the replay's idle as bubble (plus `overhead` of the compute), stage work
  // `work[s]` (replica `slowReplica` with stage `slowStage` 1.5x).
  std::vector<RankPipe> step(const std::string& sched, uint32_t micro, double overhead = 0.02,
                             int32_t slowReplica = -1, uint32_t slowStage = 0) const {
    const auto s = *pipeline::parseSchedule(sched);
    const auto lists = pipeline::opLists(s, pp, micro);
    std::vector<RankPipe> out;
    for (uint32_t d = 0; d < dp; ++d) {
      std::vector<double> work(pp, 100e6);
      if (static_cast<int32_t>(d) == slowReplica) work[slowStage] *= 1.5;
      std::vector<double> idle;
      pipeline::makespanNs(s, work, micro, &idle);
      for (uint32_t st = 0; st < pp; ++st) {
        // Transfers per peer stage: each op whose input is on another rank is one receive
        // from it; the sender sends as many.
        std::map<uint32_t, uint64_t> peers;
        for (uint32_t q = 0; q < pp; ++q) {
          for (const auto& op : lists[q]) {
            uint32_t from = 0;
            const uint32_t vs = pipeline::virtualOf(s, pp, q, op.chunk);
            if (!pipeline::inputOf(s, pp, vs, op.pass, &from)) continue;
            const uint32_t fr = pipeline::rankOfVirtual(s, pp, from);
            if (fr == q) continue;
            if (q == st) ++peers[fr];
            if (fr == st) ++peers[q];
          }
        }
        for (uint32_t t = 0; t < tp; ++t) {
          RankPipe p;
          p.rank = rankAt(st, d, t);
          p.replica = static_cast<int32_t>(d);
          p.computeNs = work[st];
          p.bubbleNs = idle[st] + overhead * work[st];
          for (const auto& [ps, n] : peers) p.sends.emplace_back(rankAt(ps, d, t), n / 2);
          out.push_back(std::move(p));
        }
      }
    }
    return out;
  }
};

std::string infer(const Job& j, const std::vector<RankPipe>& pipes) {
  const auto g = topology::inferSchedule(j.stageOf(), j.pp, pipes);
  return topology::guessName(g) + '/' + std::to_string(g.microbatches);
}

}  // namespace

TEST_CASE("schedule inference: each schedule's own step is named with its microbatches") {
  for (uint32_t pp : {2u, 3u, 4u, 8u}) {
    Job j;
    j.pp = pp;
    const uint32_t m = 2 * pp;
    // pp 2: interleaved's wrap is the next stage, told from 1F1B by the bubble alone.
    const std::vector<std::string> scheds = {"1f1b", "zb-v", "dualpipe-v", "interleaved:2",
                                             "interleaved:3"};
    for (const auto& s : scheds) {
      INFO(s << " pp=" << pp);
      CHECK(infer(j, j.step(s, m)) == s + '/' + std::to_string(m));
      CHECK(infer(j, j.step(s, 2 * m, 0.05)) == s + '/' + std::to_string(2 * m));
    }
  }
}

TEST_CASE("schedule inference: a slow stage in one replica does not change the verdict") {
  Job j;
  for (const std::string s : {"1f1b", "zb-v", "dualpipe-v", "interleaved:2"}) {
    for (uint32_t st = 0; st < j.pp; ++st) {
      INFO(s << " slow stage " << st);
      CHECK(infer(j, j.step(s, 8, 0.02, 1, st)) == s + "/8");
    }
  }
}

TEST_CASE("schedule inference: no pipeline, no p2p or no bubble measure") {
  Job j;
  auto pipes = j.step("zb-v", 8);
  CHECK(infer(j, {}) == "unknown/0");
  CHECK(topology::guessName(topology::inferSchedule(j.stageOf(), 1, pipes)) == "unknown");
  // An older probe reports no bubble: the counts alone say 1F1B over 16.
  for (auto& p : pipes) p.bubbleNs = 0;
  CHECK(infer(j, pipes) == "1f1b/16");
  // Counts that fit no schedule we know: the wrap carries as much as the next stage.
  auto odd = j.step("interleaved:2", 8);
  for (auto& p : odd) {
    for (auto& [peer, n] : p.sends) n = 8;
  }
  CHECK(infer(j, odd) == "unknown/0");
}

TEST_CASE("schedule inference: the most common guess of a window") {
  using G = topology::ScheduleGuess;
  const G v{pipeline::Schedule{pipeline::Kind::kZbV, 2}, 8};
  const G one{pipeline::Schedule{}, 16};
  std::vector<G> w = {G{}, v, one, v, G{}};
  CHECK(topology::guessName(topology::mostCommon(w)) == "zb-v");
  CHECK(topology::mostCommon(w).microbatches == 8);
  CHECK(topology::guessName(topology::mostCommon(std::vector<G>{G{}})) == "unknown");
}
