#include "collector/topology/schedule.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "common/median.h"

namespace trainscope::topology {
namespace {

namespace pl = trainscope::pipeline;

// The most model chunks per stage an interleaved candidate is tried with at two stages.
constexpr uint32_t kMaxChunks = 4;

int32_t stageAt(const std::vector<int32_t>& stageOf, uint32_t rank) {
  return rank < stageOf.size() ? stageOf[rank] : -1;
}

template <typename Range>
std::vector<std::pair<uint32_t, uint64_t>> transfersIn(const Range& p2p) {
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> byPeer;  // (sends, receives)
  for (const auto& p : p2p) {
    if (p.op() == wire::SEND) byPeer[p.peer()].first += p.count();
    if (p.op() == wire::RECV) byPeer[p.peer()].second += p.count();
  }
  std::vector<std::pair<uint32_t, uint64_t>> out;
  out.reserve(byPeer.size());
  for (const auto& [peer, n] : byPeer) out.emplace_back(peer, std::max(n.first, n.second));
  return out;
}

}  // namespace

std::vector<std::pair<uint32_t, uint64_t>> transfersOf(
    const google::protobuf::RepeatedPtrField<wire::P2pTotal>& p2p) {
  return transfersIn(p2p);
}

std::vector<std::pair<uint32_t, uint64_t>> transfersOf(const std::vector<wire::P2pTotal>& p2p) {
  return transfersIn(p2p);
}

std::string guessName(const ScheduleGuess& g) {
  return g.schedule ? pl::scheduleName(*g.schedule) : "unknown";
}

ScheduleGuess inferSchedule(const std::vector<int32_t>& stageOf, uint32_t stages,
                            std::span<const RankPipe> ranks) {
  ScheduleGuess out;
  if (stages < 2) return out;
  const int32_t last = static_cast<int32_t>(stages) - 1;
  std::vector<uint64_t> toNext;
  std::vector<uint64_t> toLast;
  // Per data-parallel replica (its own pipeline) and stage: the stage's work (its slowest
  // rank's compute: tensor-parallel ranks wait for each other) and its bubble over its compute.
  struct Cell {
    double work = 0;
    std::vector<double> bubble;
  };
  std::map<int32_t, std::vector<Cell>> replicas;
  for (const RankPipe& r : ranks) {
    const int32_t s = stageAt(stageOf, r.rank);
    if (s < 0 || s > last || r.sends.empty()) continue;
    if (r.computeNs > 0) {
      auto& cells = replicas[r.replica];
      cells.resize(stages);
      Cell& c = cells[static_cast<size_t>(s)];
      c.work = std::max(c.work, r.computeNs);
      c.bubble.push_back(std::max(0.0, r.bubbleNs) / r.computeNs);
    }
    if (s != 0) continue;
    uint64_t next = 0;
    uint64_t wrap = 0;
    for (const auto& [peer, n] : r.sends) {
      const int32_t ps = stageAt(stageOf, peer);
      if (ps == 1) next += n;
      if (ps == last && last > 1) wrap += n;
    }
    toNext.push_back(next);
    toLast.push_back(wrap);
  }
  const uint64_t a = lowerMedianInPlace(toNext);
  const uint64_t b = lowerMedianInPlace(toLast);
  if (a == 0) return out;
  if (b > 0) {
    if (b >= a || a % (a - b) != 0) return out;  // not a pattern we know
    const uint64_t m = a - b;
    out.schedule = pl::Schedule{pl::Kind::kInterleaved, static_cast<uint32_t>(a / m)};
    out.microbatches = static_cast<uint32_t>(m);
    return out;
  }
  out.schedule = pl::Schedule{};
  out.microbatches = static_cast<uint32_t>(std::min<uint64_t>(a, 1u << 20));
  // The candidates the counts allow besides 1F1B over a: a V over a / 2 and, with two stages
  // (where the wrap is the next stage), interleaved:V over a / (2V - 1) (stage 0 sends chunk
  // v's activations and chunk v + 1's gradients to stage 1: V + V - 1 per microbatch).
  std::vector<std::pair<pl::Schedule, uint64_t>> candidates;
  if (a % 2 == 0) {
    candidates.push_back({pl::Schedule{pl::Kind::kZbV, 2}, a / 2});
    candidates.push_back({pl::Schedule{pl::Kind::kDualPipeV, 2}, a / 2});
  }
  for (uint32_t v = 2; stages == 2 && v <= kMaxChunks; ++v) {
    if (a % (2 * v - 1) == 0) {
      candidates.push_back({pl::Schedule{pl::Kind::kInterleaved, v}, a / (2 * v - 1)});
    }
  }
  std::erase_if(candidates, [&](const auto& c) {
    return !pl::microbatchProblem(c.first, stages, static_cast<uint32_t>(c.second)).empty();
  });
  if (candidates.empty()) return out;
  // 1F1B over a microbatches, or another schedule over fewer: the counts are the same, the
  // bubble over the stages is not. 1F1B's first stage waits longest (each backward comes back
  // through the whole pipeline) and its last stage least; ZB-V's first stage holds the loss and
  // fills its waits with W, so its bubble grows towards the last stage; DualPipe-V's is about
  // even; interleaved's first stage waits longest, as 1F1B's, by a different share. Each
  // candidate is replayed on each replica's measured stage work, and the one whose per-stage
  // bubble (a share of the stage's work) is nearest the measured one, up to an offset common
  // to a replica's stages (transfers and collectives add to every measured wait), wins. Per
  // replica, as a slow worker changes the waits of its own pipeline only. At most kReplicas
  // replicas are replayed: the rule needs only a few, and a step's view stays cheap.
  constexpr size_t kReplicas = 4;
  std::vector<std::pair<std::vector<double>, std::vector<double>>> views;  // (work, bubble)
  for (auto& [d, cells] : replicas) {
    (void)d;
    std::vector<double> work(stages), bubble(stages);
    bool complete = true;
    double sum = 0;
    for (uint32_t s = 0; s < stages; ++s) {
      work[s] = cells[s].work;
      bubble[s] = lowerMedianInPlace(cells[s].bubble);
      sum += bubble[s];
      complete = complete && work[s] > 0;
    }
    // bubble_ns 0 everywhere is a probe that does not report it (older ones), not a perfect V.
    if (complete && sum > 0) views.emplace_back(std::move(work), std::move(bubble));
    if (views.size() == kReplicas) break;
  }
  if (views.empty()) return out;  // nothing to tell them apart: 1F1B, as before
  auto distance = [&](const pl::Schedule& s, uint32_t m) {
    double d = 0;
    for (const auto& [work, measured] : views) {
      std::vector<double> diff;
      pl::makespanNs(s, work, m, &diff);
      double mean = 0;
      for (uint32_t i = 0; i < stages; ++i) {
        diff[i] = measured[i] - diff[i] / work[i];
        mean += diff[i] / stages;
      }
      for (double x : diff) d += (x - mean) * (x - mean);
    }
    return d;
  };
  // Another schedule must fit clearly better than 1F1B (the common schedule, and the one
  // assumed before): with two stages the shape is one number, and noise or a slow stage can
  // tilt it.
  constexpr double kMargin = 0.5;
  double best = kMargin * distance(*out.schedule, out.microbatches);
  for (const auto& [c, m] : candidates) {
    const double d = distance(c, static_cast<uint32_t>(m));
    if (d < best) {
      best = d;
      out.schedule = c;
      out.microbatches = static_cast<uint32_t>(m);
    }
  }
  return out;
}

ScheduleGuess mostCommon(std::span<const ScheduleGuess> guesses) {
  std::map<std::pair<std::string, uint32_t>, size_t> votes;
  const ScheduleGuess* best = nullptr;
  size_t bestVotes = 0;
  for (const ScheduleGuess& g : guesses) {
    if (!g.schedule) continue;
    const size_t n = ++votes[{pl::scheduleName(*g.schedule), g.microbatches}];
    if (n > bestVotes) {
      bestVotes = n;
      best = &g;
    }
  }
  return best ? *best : ScheduleGuess{};
}

}  // namespace trainscope::topology
