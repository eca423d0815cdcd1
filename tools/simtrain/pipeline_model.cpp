// StepModel::pipelineStep: the --parallel timeline (see step_model.h). Kept apart from the flat
// data-parallel model, which it shares the random draws and fault factors with.
#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "common/pipeline_schedule.h"
#include "tools/simtrain/step_model.h"

namespace trainscope::sim {
namespace {

int64_t toNs(double ns) {
  return static_cast<int64_t>(std::llround(ns));
}

}  // namespace

StepTimeline StepModel::pipelineStep(int64_t step, int64_t beginNs) {
  const ParallelLayout& par = *options_.parallel;
  const uint32_t pp = par.pp;
  const uint32_t tp = par.tp;
  const uint32_t cp = par.cp;
  const uint32_t ep = par.ep;
  const bool moe = ep > 1;
  const uint32_t micros = options_.microbatches > 0 ? options_.microbatches : 2 * pp;
  const double stepNs = options_.stepMs * 1e6;
  const double sigma = options_.noise;
  const double warm = step < options_.warmup ? kWarmupFactor : 1.0;
  // A healthy step is about --step-ms: the pipeline runs micros + pp - 1 slots of one forward and
  // one backward (the pp - 1 extra are the bubble).
  const double slots = static_cast<double>(micros + pp - 1);
  const double fwdNs = stepNs * kForwardShare / slots;
  const double bwdNs = stepNs * kBackwardShare / slots;
  const int64_t tpXfer = tp > 1 ? toNs(0.04 * fwdNs) : 0;  // per layer-group all_reduce
  const int64_t cpXfer = cp > 1 ? toNs(0.04 * fwdNs) : 0;  // per layer-group KV all_gather
  const int64_t ppXfer = toNs(options_.latencyUs * 1e3 + 0.01 * fwdNs);
  const uint64_t actBytes = options_.bucketBytes / 4;  // one microbatch's activations
  auto opIndex = [&](const char* name) {
    return static_cast<uint32_t>(std::find(opNames_.begin(), opNames_.end(), name) -
                                 opNames_.begin());
  };
  const uint32_t fwdOp = opIndex("aten::linear");
  const uint32_t bwdOp = opIndex("aten::linear_backward");
  const uint32_t fwdExpertOp = opIndex(kExpertOp);
  const uint32_t bwdExpertOp = opIndex(kExpertBackwardOp);

  StepTimeline tl;
  tl.step = step;
  tl.beginNs = beginNs;
  tl.ranks.resize(options_.ranks);
  for (uint32_t r = 0; r < options_.ranks; ++r) {
    tl.ranks[r].rank = r;
    tl.ranks[r].beginNs = beginNs;
  }
  // Forward and backward only: the optimizer's work does not depend on the data (seqlen).
  drawWorkload(step);
  std::vector<double> cf(options_.ranks);
  for (uint32_t r = 0; r < options_.ranks; ++r) cf[r] = computeFactor(r, step) * workload_[r];
  // MoE: each expert-parallel index's share of the tokens this step (mean 1).
  const std::vector<double> load = moe ? drawExpertLoad(step) : std::vector<double>(1, 1.0);
  const double maxLoad = *std::max_element(load.begin(), load.end());

  // The schedule's op list per pipeline rank (validate() refused what it cannot run). Every
  // schedule does the same work per rank (a forward, a backward, per microbatch, split over the
  // chunks; zb-v and dualpipe-v split the backward in halves B and W): only the bubbles differ.
  namespace pl = trainscope::pipeline;
  const pl::Schedule sched = pl::parseSchedule(options_.schedule).value();
  const auto lists = pl::opLists(sched, pp, micros);
  const uint32_t chunks = sched.chunks;
  const uint32_t vstages = pp * chunks;  // virtual stages
  const bool split = pl::splitsBackward(sched);
  size_t opsPerBlock = 0;
  for (const auto& l : lists) opsPerBlock += l.size();

  std::vector<int64_t> pipeEnd(options_.ranks, 0);  // end of each rank's last backward
  // Replicas run their pipelines independently, except that an expert-parallel group's ep
  // replicas exchange tokens in every MoE layer: such a block of replicas runs in lockstep.
  for (uint32_t blk = 0; blk < par.dp / ep; ++blk) {
    // Per stage: the next op of its list to run; per stage and replica of the block, when it
    // is free.
    std::vector<size_t> next(pp, 0);
    std::vector<std::vector<int64_t>> ready(pp, std::vector<int64_t>(ep, 0));
    // When virtual stage u finished forward / backward of microbatch m (0: not yet), per
    // replica.
    std::vector<std::vector<std::vector<int64_t>>> fwdEnd(
        vstages, std::vector<std::vector<int64_t>>(micros, std::vector<int64_t>(ep, 0)));
    auto bwdEnd = fwdEnd;
    for (uint32_t e = 0; e < ep; ++e) {
      const uint32_t d = blk * ep + e;
      for (uint32_t s = 0; s < pp; ++s) {
        // Data loading first, the same on the stage's tensor- and context-parallel ranks.
        const int64_t t0 = beginNs + kLoopOverheadNs;
        const int64_t dataEnd = t0 + toNs(stepNs * kDataShare * warm * lognormal(sigma));
        for (uint32_t c = 0; c < cp; ++c) {
          for (uint32_t t = 0; t < tp; ++t) {
            tl.ranks[par.rankAt(s, d, t, c)].ranges.push_back({Phase::kData, t0, dataEnd});
          }
        }
        ready[s][e] = dataEnd;
      }
    }
    // The output an op waits for: the virtual stage before (forward) or after (backward), or,
    // for the loss's backward and W, the same virtual stage's forward / B on this rank.
    struct Input {
      std::optional<uint32_t> from;  // virtual stage whose output it needs, if any
      const std::vector<std::vector<std::vector<int64_t>>>* ends = nullptr;
      uint32_t vs = 0;
    };
    auto inputOf = [&](uint32_t s, const pl::Op& op) {
      Input in;
      in.vs = pl::virtualOf(sched, pp, s, op.chunk);
      uint32_t from = 0;
      if (op.pass != pl::Pass::kW && pl::inputOf(sched, pp, in.vs, op.pass, &from)) {
        in.from = from;
        in.ends = op.pass == pl::Pass::kF ? &fwdEnd : &bwdEnd;
      } else if (op.pass != pl::Pass::kF) {
        in.from = in.vs;  // same rank: no transfer
        in.ends = op.pass == pl::Pass::kB ? &fwdEnd : &bwdEnd;
      }
      return in;
    };
    // Run whichever stage's next op has its input, until every stage is done: the schedule's
    // dependencies in each rank's order.
    size_t left = opsPerBlock;
    std::vector<int64_t> pre(static_cast<size_t>(ep) * cp);  // by (e, c): after tp (and cp)
    while (left > 0) {
      bool progressed = false;
      for (uint32_t s = 0; s < pp; ++s) {
        if (next[s] >= lists[s].size()) continue;
        const pl::Op op = lists[s][next[s]];
        const Input in = inputOf(s, op);
        if (in.from && (*in.ends)[*in.from][op.micro][0] == 0) continue;
        // DualPipe-V's overlapped pair starts once the paired backward's input is there too;
        // that backward's receive then completes under this forward's compute.
        std::vector<int64_t> hold(ep, 0);
        if (op.pairedWithNext && next[s] + 1 < lists[s].size()) {
          const pl::Op& nb = lists[s][next[s] + 1];
          const Input pin = inputOf(s, nb);
          if (pin.from && pin.from != in.vs) {
            if ((*pin.ends)[*pin.from][nb.micro][0] == 0) continue;
            for (uint32_t e = 0; e < ep; ++e) hold[e] = (*pin.ends)[*pin.from][nb.micro][e];
          }
        }
        const bool backward = op.pass != pl::Pass::kF;
        // The peer rank the input comes from, when it is another rank.
        const std::optional<uint32_t> fromStage =
            in.from && op.pass != pl::Pass::kW && pl::rankOfVirtual(sched, pp, *in.from) != s
                ? std::optional<uint32_t>(pl::rankOfVirtual(sched, pp, *in.from))
                : std::nullopt;
        const double base = (op.pass == pl::Pass::kF ? fwdNs : split ? bwdNs / 2 : bwdNs) / chunks;
        // W (the weight gradient) needs no tensor-parallel exchange and no tokens: compute only.
        const bool wOnly = op.pass == pl::Pass::kW;
        // The dense part (attention, and the MLP without MoE) on every rank, then the
        // tensor-parallel all_reduce and the context-parallel all_gather.
        for (uint32_t e = 0; e < ep; ++e) {
          const uint32_t d = blk * ep + e;
          const int64_t sentAt = in.from ? (*in.ends)[*in.from][op.micro][e] : 0;
          const int64_t readyAt = std::max(ready[s][e], hold[e]);
          int64_t cpLatest = 0;
          for (uint32_t c = 0; c < cp; ++c) {
            const double noise = lognormal(sigma);
            int64_t latest = readyAt;
            for (uint32_t t = 0; t < tp; ++t) {
              const uint32_t r = par.rankAt(s, d, t, c);
              RankStep& rs = tl.ranks[r];
              // Each tensor-parallel rank receives its own shard from its peer: a slow link
              // (--inject p2p) delays that rank alone, and its group waits for it below.
              int64_t start = std::max(readyAt, sentAt);
              if (fromStage) {
                const uint32_t peer = par.rankAt(*fromStage, d, t, c);
                const int64_t xfer = p2pTransferNs(ppXfer, peer, r, step);
                start = std::max(readyAt, sentAt + xfer);
                // The receive waits from when the stage was ready; the sender's send is eager.
                rs.p2ps.push_back({false, peer, actBytes, ready[s][e], start});
                tl.ranks[peer].p2ps.push_back({true, r, actBytes, sentAt, sentAt + xfer});
              }
              const uint32_t opI = backward ? bwdOp : fwdOp;
              const double dense = moe && !wOnly ? 1.0 - kExpertShare : 1.0;
              const int64_t len =
                  std::max<int64_t>(1, toNs(base * dense * cf[r] * opFactor(opI, r, step) * noise));
              rs.ops.push_back({opI, start, len});
              rs.ranges.push_back(
                  {backward ? Phase::kBackward : Phase::kForward, start, start + len});
              latest = std::max(latest, start + len);
            }
            if (wOnly) {
              pre[e * cp + c] = latest;
              cpLatest = std::max(cpLatest, latest);
              continue;
            }
            // Tensor-parallel ranks meet in an all_reduce: the others wait for the slowest.
            const int64_t tpEnd = latest + tpXfer;
            for (uint32_t t = 0; t < tp && tp > 1; ++t) {
              RankStep& rs = tl.ranks[par.rankAt(s, d, t, c)];
              const OpExec& o = rs.ops.back();
              CollExec x;
              x.bucket = op.micro;
              x.bytes = actBytes;
              x.arriveNs = o.startNs + o.durationNs;
              x.completeNs = tpEnd;
              x.group = CollExec::Group::kTp;
              rs.colls.push_back(x);
            }
            pre[e * cp + c] = tpEnd;
            cpLatest = std::max(cpLatest, tpEnd);
          }
          // Context-parallel ranks gather each other's keys and values.
          for (uint32_t c = 0; c < cp && cp > 1 && !wOnly; ++c) {
            for (uint32_t t = 0; t < tp; ++t) {
              CollExec x;
              x.bucket = op.micro;
              x.bytes = actBytes / cp;
              x.arriveNs = pre[e * cp + c];
              x.completeNs = cpLatest + cpXfer;
              x.group = CollExec::Group::kCp;
              x.op = CollExec::Op::kAllGather;
              tl.ranks[par.rankAt(s, d, t, c)].colls.push_back(x);
            }
            pre[e * cp + c] = cpLatest + cpXfer;
          }
        }
        int64_t end = 0;
        if (!moe || wOnly) {
          for (int64_t x : pre) end = std::max(end, x);
        } else {
          // MoE layer: the expert-parallel group (same stage, cp and tp index, the block's ep
          // replicas) dispatches tokens to the experts' ranks in an all_to_all, each rank runs
          // its experts on the tokens it received, and a second all_to_all combines the
          // results. A rank holding hot experts receives more tokens: its transfer and its
          // expert compute take longer, and its peers wait for it in the combine.
          const int64_t a2aXfer = toNs(options_.latencyUs * 1e3 + kAllToAllShare * base * maxLoad);
          std::vector<double> noiseE(static_cast<size_t>(ep) * cp);
          for (double& x : noiseE) x = lognormal(sigma);
          for (uint32_t c = 0; c < cp; ++c) {
            for (uint32_t t = 0; t < tp; ++t) {
              int64_t dispatched = 0;
              for (uint32_t e = 0; e < ep; ++e) dispatched = std::max(dispatched, pre[e * cp + c]);
              dispatched += a2aXfer;
              int64_t combined = 0;
              std::vector<int64_t> expertEnd(ep);
              for (uint32_t e = 0; e < ep; ++e) {
                const uint32_t r = par.rankAt(s, blk * ep + e, t, c);
                const uint32_t opE = backward ? bwdExpertOp : fwdExpertOp;
                const int64_t len =
                    std::max<int64_t>(1, toNs(base * kExpertShare * cf[r] * load[e] *
                                              opFactor(opE, r, step) * noiseE[e * cp + c]));
                expertEnd[e] = dispatched + len;
                combined = std::max(combined, expertEnd[e]);
                RankStep& rs = tl.ranks[r];
                // Tokens this rank receives, in 1 % steps of a balanced share.
                const uint64_t bytes = static_cast<uint64_t>(static_cast<double>(actBytes) / 2 *
                                                             std::round(load[e] * 100.0) / 100.0);
                CollExec x;
                x.bucket = op.micro;
                x.bytes = bytes;
                x.arriveNs = pre[e * cp + c];
                x.completeNs = dispatched;
                x.group = CollExec::Group::kEp;
                x.op = CollExec::Op::kAllToAll;
                rs.colls.push_back(x);
                rs.ops.push_back({opE, dispatched, len});
                rs.ranges.push_back(
                    {backward ? Phase::kBackward : Phase::kForward, dispatched, dispatched + len});
              }
              combined += a2aXfer;
              for (uint32_t e = 0; e < ep; ++e) {
                RankStep& rs = tl.ranks[par.rankAt(s, blk * ep + e, t, c)];
                CollExec x = rs.colls.back();
                x.arriveNs = expertEnd[e];
                x.completeNs = combined;
                rs.colls.push_back(x);
              }
              end = std::max(end, combined);
            }
          }
        }
        for (uint32_t e = 0; e < ep; ++e) {
          if (op.pass == pl::Pass::kF) fwdEnd[in.vs][op.micro][e] = end;
          if (op.pass == pl::Pass::kB) bwdEnd[in.vs][op.micro][e] = end;
          ready[s][e] = end;
        }
        ++next[s];
        --left;
        progressed = true;
      }
      if (!progressed) break;  // cannot happen: the op lists are dependency-ordered
    }
    for (uint32_t e = 0; e < ep; ++e) {
      for (uint32_t s = 0; s < pp; ++s) {
        for (uint32_t c = 0; c < cp; ++c) {
          for (uint32_t t = 0; t < tp; ++t)
            pipeEnd[par.rankAt(s, blk * ep + e, t, c)] = ready[s][e];
        }
      }
    }
  }

  // Replicas all_reduce each stage's gradients (one collective per dp group), then optimize.
  const int64_t dpXfer = par.dp > 1 ? transferNs(commFactor(step)) : 0;
  const uint64_t gradBytes = options_.bucketBytes * std::max<uint32_t>(options_.buckets, 1) / pp;
  std::vector<int64_t> gradsReady(pipeEnd);
  for (uint32_t r = 0; r < options_.ranks && par.dp > 1; ++r) {
    int64_t last = 0;
    for (uint32_t q : par.dpGroup(r)) last = std::max(last, pipeEnd[q]);
    CollExec c;
    c.bytes = gradBytes;
    c.arriveNs = pipeEnd[r];
    c.completeNs = last + dpXfer;
    c.group = CollExec::Group::kDp;
    tl.ranks[r].colls.push_back(c);
    gradsReady[r] = c.completeNs;
  }
  optimizeAndEnd(tl, step, gradsReady);
  return tl;
}

}  // namespace trainscope::sim
