// StepModel::pipelineStep: the --parallel timeline (see step_model.h). Kept apart from the flat
// data-parallel model, which it shares the random draws and fault factors with.
#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "tools/simtrain/step_model.h"

namespace trainscope::sim {
namespace {

int64_t toNs(double ns) {
  return static_cast<int64_t>(std::llround(ns));
}

// One forward or backward of one microbatch on one stage of one replica.
struct PipeOp {
  bool backward = false;
  uint32_t micro = 0;
};

// The 1F1B order of a stage: warm-up forwards (as many as stages after it), then one forward
// and one backward in turn, then the remaining backwards.
std::vector<PipeOp> oneFOneB(uint32_t stage, uint32_t stages, uint32_t micro) {
  std::vector<PipeOp> out;
  const uint32_t warm = std::min(stages - stage - 1, micro);
  uint32_t f = 0;
  uint32_t b = 0;
  for (; f < warm; ++f) out.push_back({false, f});
  while (f < micro) {
    out.push_back({false, f++});
    out.push_back({true, b++});
  }
  while (b < micro) out.push_back({true, b++});
  return out;
}

}  // namespace

StepTimeline StepModel::pipelineStep(int64_t step, int64_t beginNs) {
  const ParallelLayout& L = *options_.parallel;
  const uint32_t P = L.pp;
  const uint32_t M = options_.microbatches > 0 ? options_.microbatches : 2 * P;
  const double stepNs = options_.stepMs * 1e6;
  const double sigma = options_.noise;
  const double warm = step < options_.warmup ? kWarmupFactor : 1.0;
  // A healthy step is about --step-ms: the pipeline runs M + P - 1 slots of one forward and
  // one backward (the P - 1 extra are the bubble).
  const double slots = static_cast<double>(M + P - 1);
  const double fwdNs = stepNs * kForwardShare / slots;
  const double bwdNs = stepNs * kBackwardShare / slots;
  const int64_t tpXfer = L.tp > 1 ? toNs(0.04 * fwdNs) : 0;  // per layer-group all_reduce
  const int64_t ppXfer = toNs(options_.latencyUs * 1e3 + 0.01 * fwdNs);
  const uint64_t actBytes = options_.bucketBytes / 4;  // one microbatch's activations
  const uint32_t fwdOp = static_cast<uint32_t>(
      std::find(opNames_.begin(), opNames_.end(), "aten::linear") - opNames_.begin());
  const uint32_t bwdOp = static_cast<uint32_t>(
      std::find(opNames_.begin(), opNames_.end(), "aten::linear_backward") - opNames_.begin());

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

  std::vector<int64_t> pipeEnd(options_.ranks, 0);  // end of each rank's last backward
  for (uint32_t d = 0; d < L.dp; ++d) {
    // Per stage: its ops in schedule order, the next one to run, when the stage is free.
    std::vector<std::vector<PipeOp>> order(P);
    std::vector<size_t> next(P, 0);
    std::vector<int64_t> ready(P, 0);
    // When stage s finished forward / backward of microbatch m (0: not yet).
    std::vector<std::vector<int64_t>> fwdEnd(P, std::vector<int64_t>(M, 0));
    std::vector<std::vector<int64_t>> bwdEnd(P, std::vector<int64_t>(M, 0));
    for (uint32_t s = 0; s < P; ++s) {
      order[s] = oneFOneB(s, P, M);
      // Data loading first, the same on the stage's tensor-parallel ranks.
      const int64_t t0 = beginNs + kLoopOverheadNs;
      const int64_t dataEnd = t0 + toNs(stepNs * kDataShare * warm * lognormal(sigma));
      for (uint32_t t = 0; t < L.tp; ++t) {
        tl.ranks[L.rankAt(s, d, t)].ranges.push_back({Phase::kData, t0, dataEnd});
      }
      ready[s] = dataEnd;
    }
    // Run whichever stage's next op has its input, until every stage is done: the schedule's
    // dependencies (forward from the stage before, backward from the stage after) in order.
    size_t left = static_cast<size_t>(P) * M * 2;
    while (left > 0) {
      bool progressed = false;
      for (uint32_t s = 0; s < P; ++s) {
        if (next[s] >= order[s].size()) continue;
        const PipeOp op = order[s][next[s]];
        int64_t avail = ready[s];  // the input is here by then (first stage: already)
        int64_t sentAt = 0;
        std::optional<uint32_t> from;
        if (!op.backward && s > 0) {
          if (fwdEnd[s - 1][op.micro] == 0) continue;
          sentAt = fwdEnd[s - 1][op.micro];
          from = s - 1;
        } else if (op.backward && s + 1 < P) {
          if (bwdEnd[s + 1][op.micro] == 0) continue;
          sentAt = bwdEnd[s + 1][op.micro];
          from = s + 1;
        }
        const double base = op.backward ? bwdNs : fwdNs;
        const double noise = lognormal(sigma);
        int64_t latest = avail;
        for (uint32_t t = 0; t < L.tp; ++t) {
          const uint32_t r = L.rankAt(s, d, t);
          RankStep& rs = tl.ranks[r];
          // Each tensor-parallel rank receives its own shard from its peer: a slow link
          // (--inject p2p) delays that rank alone, and its group waits for it below.
          int64_t start = avail;
          if (from) {
            const uint32_t peer = L.rankAt(*from, d, t);
            const int64_t xfer = p2pTransferNs(ppXfer, peer, r, step);
            start = std::max(ready[s], sentAt + xfer);
            // The receive waits from when the stage was ready; the sender's send is eager.
            rs.p2ps.push_back({false, peer, actBytes, ready[s], start});
            tl.ranks[peer].p2ps.push_back({true, r, actBytes, sentAt, sentAt + xfer});
          }
          const uint32_t opIndex = op.backward ? bwdOp : fwdOp;
          const int64_t len =
              std::max<int64_t>(1, toNs(base * cf[r] * opFactor(opIndex, r, step) * noise));
          rs.ops.push_back({opIndex, start, len});
          latest = std::max(latest, start + len);
        }
        // Tensor-parallel ranks meet in an all_reduce: the others wait for the slowest.
        const int64_t end = latest + tpXfer;
        for (uint32_t t = 0; t < L.tp; ++t) {
          RankStep& rs = tl.ranks[L.rankAt(s, d, t)];
          const OpExec& o = rs.ops.back();
          if (L.tp > 1) {
            CollExec c;
            c.bucket = op.micro;
            c.bytes = actBytes;
            c.arriveNs = o.startNs + o.durationNs;
            c.completeNs = end;
            c.group = CollExec::Group::kTp;
            rs.colls.push_back(c);
          }
          rs.ranges.push_back({op.backward ? Phase::kBackward : Phase::kForward, o.startNs,
                               o.startNs + o.durationNs});
        }
        (op.backward ? bwdEnd : fwdEnd)[s][op.micro] = end;
        ready[s] = end;
        ++next[s];
        --left;
        progressed = true;
      }
      if (!progressed) break;  // cannot happen with 1F1B; guards against a schedule bug
    }
    for (uint32_t s = 0; s < P; ++s) {
      for (uint32_t t = 0; t < L.tp; ++t) pipeEnd[L.rankAt(s, d, t)] = ready[s];
    }
  }

  // Replicas all_reduce each stage's gradients (one collective per dp group), then optimize.
  const int64_t dpXfer = L.dp > 1 ? transferNs(commFactor(step)) : 0;
  const uint64_t gradBytes = options_.bucketBytes * std::max<uint32_t>(options_.buckets, 1) / P;
  std::vector<int64_t> gradsReady(pipeEnd);
  for (uint32_t r = 0; r < options_.ranks && L.dp > 1; ++r) {
    int64_t last = 0;
    for (uint32_t q : L.dpGroup(r)) last = std::max(last, pipeEnd[q]);
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
