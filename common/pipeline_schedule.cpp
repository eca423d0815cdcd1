#include "common/pipeline_schedule.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <tuple>

namespace trainscope::pipeline {
namespace {

bool vShape(const Schedule& s) {
  return s.kind == Kind::kZbV || s.kind == Kind::kDualPipeV;
}

// 1F1B: warm-up forwards (as many as stages after this one), then one forward and one
// backward in turn, then the remaining backwards.
std::vector<Op> oneFOneB(uint32_t stage, uint32_t stages, uint32_t micro) {
  std::vector<Op> out;
  const uint32_t warm = std::min(stages - stage - 1, micro);
  uint32_t f = 0;
  uint32_t b = 0;
  for (; f < warm; ++f) out.push_back({Pass::kF, 0, f});
  while (f < micro) {
    out.push_back({Pass::kF, 0, f++});
    out.push_back({Pass::kB, 0, b++});
  }
  while (b < micro) out.push_back({Pass::kB, 0, b++});
  return out;
}

// Megatron-LM's interleaved 1F1B (forward_backward_pipelining_with_interleaving): the k-th
// forward of a rank runs chunk (k mod pp·V) / pp on microbatch (k / (pp·V)) * pp + k mod pp, so
// microbatches go through the chunks in groups of pp; the backwards go through the chunks in
// reverse. Warm-up: 2 (pp - s - 1) + (V - 1) pp forwards, then 1F1B, then the rest backwards.
std::vector<Op> interleaved(uint32_t stage, uint32_t stages, uint32_t micro, uint32_t chunks) {
  const uint32_t pp = stages;
  const uint32_t total = micro * chunks;
  auto at = [&](uint32_t k, bool backward) {
    const uint32_t inGroup = k % (pp * chunks);
    uint32_t chunk = inGroup / pp;
    if (backward) chunk = chunks - 1 - chunk;
    return Op{backward ? Pass::kB : Pass::kF, chunk, (k / (pp * chunks)) * pp + k % pp};
  };
  const uint32_t warm = std::min(2 * (pp - stage - 1) + (chunks - 1) * pp, total);
  std::vector<Op> out;
  for (uint32_t k = 0; k < warm; ++k) out.push_back(at(k, false));
  for (uint32_t i = 0; warm + i < total; ++i) {
    out.push_back(at(warm + i, false));
    out.push_back(at(i, true));
  }
  for (uint32_t k = total - warm; k < total; ++k) out.push_back(at(k, true));
  return out;
}

// DeepSeek's DualPipe-V (dualpipev.py, DualPipeV.step), rank s of pp stages over micros >= 2 pp
// microbatches in its eight phases. A backward "with zero bubble" runs B now and queues W for a
// later weight_chunk(); the others run B and W together. forward_backward_chunk(a, b) is a forward
// of chunk a overlapped with a backward of chunk b: DualPipe interleaves the two layer by
// layer on two streams so that one's communication (pipeline transfers, MoE all-to-all) runs
// under the other's compute. We approximate it as the forward then the backward, back to back,
// starting once both inputs are there: the order, dependencies and bubbles are DualPipe-V's,
// the time saved by hiding communication inside the pair is not modelled.
std::vector<Op> dualPipeV(uint32_t s, uint32_t pp, uint32_t micros) {
  std::vector<Op> out;
  uint32_t f[2] = {0, 0};
  uint32_t b[2] = {0, 0};
  std::deque<Op> weights;
  auto fwd = [&](uint32_t c, bool paired = false) { out.push_back({Pass::kF, c, f[c]++, paired}); };
  auto bwd = [&](uint32_t c, bool zb) {
    out.push_back({Pass::kB, c, b[c]});
    Op w{Pass::kW, c, b[c]++};
    if (zb) {
      weights.push_back(w);
    } else {
      out.push_back(w);
    }
  };
  auto weight = [&] {
    if (weights.empty()) return;
    out.push_back(weights.front());
    weights.pop_front();
  };
  auto pair = [&](uint32_t cf, uint32_t cb) {
    fwd(cf, true);
    bwd(cb, false);
  };
  for (uint32_t i = 0; i < 2 * (pp - s - 1); ++i) fwd(0);  // 1: nF0
  for (uint32_t i = 0; i < s + 1; ++i) {                   // 2: nF0F1
    fwd(0);
    fwd(1);
  }
  for (uint32_t i = 0; i < pp - s - 1; ++i) {  // 3: nB1W1F1 (zero bubble)
    bwd(1, true);
    weight();
    fwd(1);
  }
  const uint32_t main = micros - 2 * pp + s + 1;
  for (uint32_t i = 0; i < main; ++i) {  // 4: nF0B1F1B0
    if (i == 0 && s == pp - 1) {
      fwd(0);  // the last rank does not overlap these two, to shorten the bubble
      bwd(1, false);
    } else {
      pair(0, 1);
    }
    pair(1, 0);
  }
  for (uint32_t i = 0; i < pp - s - 1; ++i) {  // 5: nB1F1B0
    bwd(1, false);
    pair(1, 0);
  }
  bool zb = false;
  for (uint32_t i = 0; i < s + 1; ++i) {  // 6: nB1B0, the second half with zero bubble
    if (i == (s + 1) / 2 && s % 2 == 1) zb = true;
    bwd(1, zb);
    if (i == (s + 1) / 2 && s % 2 == 0) zb = true;
    bwd(0, zb);
  }
  for (uint32_t i = 0; i < pp - s - 1; ++i) {  // 7: nWB0 (zero bubble)
    weight();
    bwd(0, true);
  }
  while (!weights.empty()) weight();  // 8: nW
  return out;
}

// ZeroBubble's V schedule, built the way the ZB paper builds its schedules: a list scheduler
// run over unit-time F, B and W on every rank at once. A rank that is free runs a ready B
// (critical path, oldest microbatch first, chunk 1 before chunk 0 on ties), else a ready F
// while it holds fewer than 2 pp chunk activations (1F1B's peak memory; chunk 1 first, as it is
// nearer the loss), else a pending W (a weight gradient fills what would be a bubble). The
// per-rank orders it produces are what the replay and the simulator then run with real times.
std::vector<std::vector<Op>> zbV(uint32_t pp, uint32_t micros) {
  const Schedule sched{Kind::kZbV, 2};
  const uint32_t vstages = 2 * pp;
  std::vector<std::vector<Op>> out(pp);
  std::vector<std::vector<int64_t>> fEnd(vstages, std::vector<int64_t>(micros, -1));
  auto bEnd = fEnd;
  struct RankState {
    uint32_t f[2] = {0, 0};
    uint32_t b[2] = {0, 0};
    std::deque<Op> weights;
    int64_t freeAt = 0;
    uint32_t inFlight = 0;
    size_t done = 0;
  };
  std::vector<RankState> st(pp);
  const size_t perRank = static_cast<size_t>(micros) * 2 * 3;
  int64_t t = 0;
  auto readyAt = [](int64_t end, int64_t now) { return end >= 0 && end <= now; };
  for (;;) {
    bool left = false;
    for (uint32_t s = 0; s < pp; ++s) {
      RankState& r = st[s];
      if (r.done == perRank) continue;
      left = true;
      if (r.freeAt > t) continue;
      std::optional<Op> pick;
      // B: oldest microbatch first; chunk 1 (the earlier virtual stage backward) on ties.
      for (uint32_t c : {1u, 0u}) {
        if (r.b[c] >= micros || r.b[c] >= r.f[c]) continue;
        const uint32_t vs = virtualOf(sched, pp, s, c);
        const int64_t in = vs + 1 == vstages ? fEnd[vs][r.b[c]] : bEnd[vs + 1][r.b[c]];
        if (!readyAt(in, t)) continue;
        if (!pick || r.b[c] < pick->micro) pick = Op{Pass::kB, c, r.b[c]};
      }
      if (!pick && r.inFlight < 2 * pp) {
        for (uint32_t c : {1u, 0u}) {
          if (r.f[c] >= micros) continue;
          const uint32_t vs = virtualOf(sched, pp, s, c);
          if (vs > 0 && !readyAt(fEnd[vs - 1][r.f[c]], t)) continue;
          pick = Op{Pass::kF, c, r.f[c]};
          break;
        }
      }
      if (!pick && !r.weights.empty()) {
        pick = r.weights.front();
        r.weights.pop_front();
      }
      if (!pick) continue;
      const uint32_t vs = virtualOf(sched, pp, s, pick->chunk);
      r.freeAt = t + 1;
      if (pick->pass == Pass::kF) {
        fEnd[vs][pick->micro] = t + 1;
        ++r.f[pick->chunk];
        ++r.inFlight;
      } else if (pick->pass == Pass::kB) {
        bEnd[vs][pick->micro] = t + 1;
        ++r.b[pick->chunk];
        --r.inFlight;
        r.weights.push_back({Pass::kW, pick->chunk, pick->micro});
      }
      out[s].push_back(*pick);
      ++r.done;
    }
    if (!left) break;
    ++t;  // unit-time ops: every decision happens at an integer time
    if (t > static_cast<int64_t>(perRank) * pp * 4) break;  // guards against a policy bug
  }
  return out;
}

}  // namespace

Result<Schedule> parseSchedule(const std::string& text) {
  if (text == "1f1b") return Schedule{Kind::k1F1B, 1};
  if (text == "zb-v") return Schedule{Kind::kZbV, 2};
  if (text == "dualpipe-v") return Schedule{Kind::kDualPipeV, 2};
  const std::string prefix = "interleaved:";
  if (text.rfind(prefix, 0) == 0) {
    const std::string v = text.substr(prefix.size());
    if (!v.empty() && v.size() <= 3 &&
        std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      const uint32_t chunks = static_cast<uint32_t>(std::stoul(v));
      if (chunks >= 2 && chunks <= 64) return Schedule{Kind::kInterleaved, chunks};
    }
    return Result<Schedule>::error('\'' + text +
                                   "': interleaved:V needs V, the model chunks per rank, "
                                   "in 2..64");
  }
  return Result<Schedule>::error('\'' + text +
                                 "' is not a schedule (1f1b, interleaved:V, zb-v, dualpipe-v)");
}

std::string scheduleName(const Schedule& s) {
  switch (s.kind) {
    case Kind::k1F1B:
      return "1f1b";
    case Kind::kInterleaved:
      return "interleaved:" + std::to_string(s.chunks);
    case Kind::kZbV:
      return "zb-v";
    case Kind::kDualPipeV:
      return "dualpipe-v";
  }
  return "1f1b";
}

bool splitsBackward(const Schedule& s) {
  return vShape(s);
}

std::string microbatchProblem(const Schedule& s, uint32_t stages, uint32_t micro) {
  if (micro == 0) return "needs at least one microbatch";
  if (s.kind == Kind::kInterleaved && micro % stages != 0) {
    return "interleaved runs microbatches in groups of the pipeline's stages: " +
           std::to_string(micro) + " is not a multiple of pp=" + std::to_string(stages);
  }
  if (s.kind == Kind::kDualPipeV && micro < 2 * stages) {
    return "dualpipe-v needs at least 2 * pp = " + std::to_string(2 * stages) +
           " microbatches, not " + std::to_string(micro);
  }
  return "";
}

uint32_t rankOfVirtual(const Schedule& s, uint32_t stages, uint32_t vs) {
  if (vShape(s)) return vs < stages ? vs : 2 * stages - 1 - vs;
  return vs % stages;
}

uint32_t virtualOf(const Schedule& s, uint32_t stages, uint32_t stage, uint32_t chunk) {
  if (vShape(s)) return chunk == 0 ? stage : 2 * stages - 1 - stage;
  return chunk * stages + stage;
}

bool inputOf(const Schedule& s, uint32_t stages, uint32_t vs, Pass pass, uint32_t* from) {
  const uint32_t last = stages * s.chunks - 1;
  if (pass == Pass::kF && vs > 0) {
    *from = vs - 1;
    return true;
  }
  if (pass == Pass::kB && vs < last) {
    *from = vs + 1;
    return true;
  }
  return false;
}

double workShare(const Schedule& s, Pass pass) {
  const double perChunk = 1.0 / static_cast<double>(s.chunks);
  if (pass == Pass::kF) return perChunk / 3.0;
  if (!splitsBackward(s)) return pass == Pass::kB ? perChunk * 2.0 / 3.0 : 0.0;
  return perChunk / 3.0;
}

std::vector<std::vector<Op>> opLists(const Schedule& s, uint32_t stages, uint32_t micro) {
  std::vector<std::vector<Op>> out(stages);
  switch (s.kind) {
    case Kind::k1F1B:
      for (uint32_t r = 0; r < stages; ++r) out[r] = oneFOneB(r, stages, micro);
      break;
    case Kind::kInterleaved:
      for (uint32_t r = 0; r < stages; ++r) out[r] = interleaved(r, stages, micro, s.chunks);
      break;
    case Kind::kZbV:
      out = zbV(stages, micro);
      break;
    case Kind::kDualPipeV:
      for (uint32_t r = 0; r < stages; ++r) out[r] = dualPipeV(r, stages, micro);
      break;
  }
  return out;
}

std::vector<double> replay(const Schedule& s, uint32_t stages, uint32_t micro,
                           const std::vector<std::vector<Op>>& lists, const OpNs& opNs,
                           std::vector<double>* idleNs) {
  const uint32_t vstages = stages * s.chunks;
  std::vector<std::vector<double>> fEnd(vstages, std::vector<double>(micro, -1.0));
  auto bEnd = fEnd;
  std::vector<size_t> next(stages, 0);
  std::vector<double> ready(stages, 0.0);
  std::vector<double> busy(stages, 0.0);
  // When the input of `op` on `rank` is there; < 0: not yet.
  auto inputAt = [&](uint32_t rank, const Op& op) -> double {
    const uint32_t vs = virtualOf(s, stages, rank, op.chunk);
    if (op.micro >= micro) return -1.0;
    if (op.pass == Pass::kW) return bEnd[vs][op.micro];
    uint32_t from = 0;
    if (inputOf(s, stages, vs, op.pass, &from)) {
      return (op.pass == Pass::kF ? fEnd : bEnd)[from][op.micro];
    }
    return op.pass == Pass::kF ? 0.0 : fEnd[vs][op.micro];  // the loss: after its forward
  };
  for (;;) {
    bool progressed = false;
    bool left = false;
    for (uint32_t r = 0; r < stages; ++r) {
      while (next[r] < lists[r].size()) {
        left = true;
        const Op& op = lists[r][next[r]];
        double in = inputAt(r, op);
        if (in < 0) break;
        if (op.pairedWithNext && next[r] + 1 < lists[r].size()) {
          const double other = inputAt(r, lists[r][next[r] + 1]);
          // The paired backward may need this very forward (the loss): then it is no wait.
          const Op& nb = lists[r][next[r] + 1];
          const bool own = nb.chunk == op.chunk && nb.micro == op.micro;
          if (other < 0 && !own) break;
          if (!own) in = std::max(in, other);
        }
        const double len = opNs(r, op);
        const double end = std::max(ready[r], in) + len;
        const uint32_t vs = virtualOf(s, stages, r, op.chunk);
        if (op.pass == Pass::kF) fEnd[vs][op.micro] = end;
        if (op.pass == Pass::kB) bEnd[vs][op.micro] = end;
        ready[r] = end;
        busy[r] += len;
        ++next[r];
        progressed = true;
      }
    }
    if (!left || !progressed) break;  // !progressed: a list that is not dependency-ordered
  }
  if (idleNs) {
    idleNs->resize(stages);
    for (uint32_t r = 0; r < stages; ++r) (*idleNs)[r] = ready[r] - busy[r];
  }
  return ready;
}

double makespanNs(const Schedule& schedule, const std::vector<double>& stageNs, uint32_t micro,
                  std::vector<double>* idleNs) {
  const uint32_t pp = static_cast<uint32_t>(stageNs.size());
  if (pp == 0 || micro == 0) return 0.0;
  Schedule s = schedule;
  if (!microbatchProblem(s, pp, micro).empty()) s = Schedule{};
  // The what-if model replays the same few schedules every step (zb-v's lists come from a list
  // scheduler): each thread keeps the lists it built, a bounded handful.
  thread_local std::map<std::tuple<Kind, uint32_t, uint32_t, uint32_t>,
                        std::vector<std::vector<Op>>>
      cache;
  const auto key = std::make_tuple(s.kind, s.chunks, pp, micro);
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() >= 64) cache.clear();
    it = cache.emplace(key, opLists(s, pp, micro)).first;
  }
  const auto& lists = it->second;
  const double m = static_cast<double>(micro);
  const auto ends = replay(
      s, pp, micro, lists,
      [&](uint32_t r, const Op& op) { return stageNs[r] / m * workShare(s, op.pass); }, idleNs);
  return *std::max_element(ends.begin(), ends.end());
}

}  // namespace trainscope::pipeline
