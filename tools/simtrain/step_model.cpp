#include "tools/simtrain/step_model.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace trainscope::sim {
namespace {

// One transformer block's forward operators and their relative cost.
struct NamedWeight {
  const char* forward;
  const char* backward;
  double weight;
};
constexpr NamedWeight kEmbedding{"aten::embedding", "aten::embedding_backward", 1.0};
constexpr NamedWeight kBlock[] = {
    {"aten::layer_norm", "aten::layer_norm_backward", 1.0},
    {"aten::linear", "aten::linear_backward", 6.0},  // qkv projection
    {"aten::matmul", "aten::matmul_backward", 4.0},  // q @ k^T
    {"aten::softmax", "aten::softmax_backward", 2.0},
    {"aten::matmul", "aten::matmul_backward", 4.0},  // attn @ v
    {"aten::linear", "aten::linear_backward", 2.0},  // output projection
    {"aten::add", "aten::add_backward", 0.5},        // residual
    {"aten::layer_norm", "aten::layer_norm_backward", 1.0},
    {"aten::linear", "aten::linear_backward", 8.0},  // mlp up
    {"aten::gelu", "aten::gelu_backward", 1.5},
    {"aten::linear", "aten::linear_backward", 8.0},  // mlp down
    {"aten::add", "aten::add_backward", 0.5},        // residual
};
constexpr NamedWeight kHead[] = {
    {"aten::layer_norm", "aten::layer_norm_backward", 1.0},
    {"aten::linear", "aten::linear_backward", 6.0},  // lm head
    {"aten::cross_entropy_loss", "aten::cross_entropy_loss_backward", 1.0},
};
constexpr const char* kOptimizerOp = "aten::_fused_adamw_";

int64_t toNs(double ns) {
  return static_cast<int64_t>(std::llround(ns));
}

}  // namespace

void sumCompute(StepTimeline& tl) {
  for (auto& rs : tl.ranks) {
    for (const auto& rg : rs.ranges) {
      if (rg.phase == Phase::kForward || rg.phase == Phase::kBackward ||
          rg.phase == Phase::kOptimizer) {
        rs.computeNs += rg.endNs - rg.startNs;
      }
    }
  }
}

const char* phaseName(Phase phase) {
  switch (phase) {
    case Phase::kData:
      return "data_loading";
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kOptimizer:
      return "optimizer";
    case Phase::kCheckpoint:
      return "checkpoint";
  }
  return "unknown";
}

std::vector<RankEvent> eventOrder(const RankStep& rs) {
  struct Ev {
    int64_t t;
    RankEvent e;  // Kind's order breaks ties
  };
  std::vector<Ev> evs;
  evs.reserve(rs.ranges.size() + rs.ops.size() + rs.colls.size() + rs.links.size() +
              rs.p2ps.size());
  using K = RankEvent::Kind;
  for (size_t i = 0; i < rs.ranges.size(); ++i) {
    evs.push_back({rs.ranges[i].startNs, {K::kRange, i}});
  }
  for (size_t i = 0; i < rs.ops.size(); ++i) evs.push_back({rs.ops[i].startNs, {K::kOp, i}});
  for (size_t i = 0; i < rs.colls.size(); ++i) {
    evs.push_back({rs.colls[i].arriveNs, {K::kColl, i}});
  }
  for (size_t i = 0; i < rs.links.size(); ++i) {
    evs.push_back({rs.links[i].postedNs, {K::kLink, i}});
  }
  for (size_t i = 0; i < rs.p2ps.size(); ++i) evs.push_back({rs.p2ps[i].postedNs, {K::kP2p, i}});
  std::stable_sort(evs.begin(), evs.end(), [](const Ev& a, const Ev& b) {
    return a.t != b.t ? a.t < b.t : a.e.kind < b.e.kind;
  });
  std::vector<RankEvent> out;
  out.reserve(evs.size());
  for (const Ev& e : evs) out.push_back(e.e);
  return out;
}

std::vector<std::string> StepModel::knownOps() {
  std::vector<std::string> names;
  auto add = [&](const char* n) {
    if (std::find(names.begin(), names.end(), n) == names.end()) names.emplace_back(n);
  };
  add(kEmbedding.forward);
  for (const auto& b : kBlock) add(b.forward);
  for (const auto& h : kHead) add(h.forward);
  for (const auto& h : kHead) add(h.backward);
  for (const auto& b : kBlock) add(b.backward);
  add(kEmbedding.backward);
  add(kExpertOp);  // --parallel ep > 1 only
  add(kExpertBackwardOp);
  add(kOptimizerOp);  // last: optimizeAndEnd relies on it
  return names;
}

StepModel::StepModel(const SimOptions& options)
    : options_(options),
      rng_(options.seed),
      linkRng_(options.seed ^ 0x6c696e6b5f726e67ull),
      p2pRng_(options.seed ^ 0x7032705f726e6721ull),
      expertRng_(options.seed ^ 0x6578706572747321ull) {
  // The model always runs the whole job, whichever ranks this process hosts: every process of
  // a split job then draws the same timeline from the same seed.
  options_.ranks = worldSizeOf(options);
  opNames_ = knownOps();
  auto index = [&](const char* n) {
    return static_cast<uint32_t>(std::find(opNames_.begin(), opNames_.end(), n) - opNames_.begin());
  };
  forward_.push_back({index(kEmbedding.forward), kEmbedding.weight});
  for (uint32_t l = 0; l < options_.layers; ++l) {
    for (const auto& b : kBlock) forward_.push_back({index(b.forward), b.weight});
  }
  for (const auto& h : kHead) forward_.push_back({index(h.forward), h.weight});
  // Backward runs the forward graph in reverse.
  for (const auto& h : std::vector<NamedWeight>(std::rbegin(kHead), std::rend(kHead))) {
    backward_.push_back({index(h.backward), h.weight});
  }
  for (uint32_t l = 0; l < options_.layers; ++l) {
    for (auto it = std::rbegin(kBlock); it != std::rend(kBlock); ++it) {
      backward_.push_back({index(it->backward), it->weight});
    }
  }
  backward_.push_back({index(kEmbedding.backward), kEmbedding.weight});
  for (const auto& t : forward_) forwardWeight_ += t.weight;
  for (const auto& t : backward_) backwardWeight_ += t.weight;

  const double stepNs = options_.stepMs * 1e6;
  const double latencyNs = options_.latencyUs * 1e3;
  if (options_.bandwidthGBps > 0) {
    bucketBytesPerNs_ = options_.bandwidthGBps;  // GB/s == bytes/ns
  } else {
    const double wireNs = std::max(kBucketShare * stepNs - latencyNs, 1.0);
    bucketBytesPerNs_ = static_cast<double>(options_.bucketBytes) / wireNs;
  }
}

double StepModel::lognormal(double sigma) {
  if (sigma <= 0) return 1.0;
  // Mean 1: exp(sigma z - sigma^2 / 2).
  return std::exp(sigma * normal_(rng_) - sigma * sigma / 2);
}

double StepModel::computeFactor(uint32_t rank, int64_t step) const {
  double f = step < options_.warmup ? kWarmupFactor : 1.0;
  for (const auto& in : options_.injects) {
    if (step < in.fromStep) continue;
    if (in.kind == Inject::Kind::kShift) f *= in.factor;
    if (in.kind == Inject::Kind::kStraggler && in.rank == rank) f *= in.factor;
    if (!options_.parallel) continue;
    if (in.kind == Inject::Kind::kGpu && in.rank == rank) f *= in.factor;
    const ParallelLayout& par = *options_.parallel;
    if (in.kind == Inject::Kind::kStage && par.ppIndex(rank) == in.pp) f *= in.factor;
    if (in.kind == Inject::Kind::kWorker && par.ppIndex(rank) == in.pp &&
        par.dpIndex(rank) == in.dp)
      f *= in.factor;
  }
  // A naturally unbalanced pipeline (--edge-load): embedding on the first stage, head and
  // loss on the last; part of the job's design, present from the first step.
  if (options_.parallel && options_.parallel->pp > 1 && options_.edgeLoad > 0) {
    const uint32_t stage = options_.parallel->ppIndex(rank);
    if (stage == 0) f *= 1.0 + options_.edgeLoad / 2;
    if (stage + 1 == options_.parallel->pp) f *= 1.0 + options_.edgeLoad;
  }
  return f;
}

void StepModel::drawWorkload(int64_t step) {
  workload_.assign(options_.ranks, 1.0);
  const ParallelLayout* par = options_.parallel ? &*options_.parallel : nullptr;
  const uint32_t replicas = par != nullptr ? par->dp : options_.ranks;
  for (size_t i = 0; i < options_.injects.size(); ++i) {
    const Inject& in = options_.injects[i];
    if (in.kind != Inject::Kind::kSeqlen || step < in.fromStep) continue;
    // Log-normal of mean 1 and coefficient of variation cv: sigma^2 = ln(1 + cv^2).
    const double sigma = std::sqrt(std::log1p(in.cv * in.cv));
    std::mt19937_64 g(options_.seed ^ (0x7365716c656eull + i) ^
                      (static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull));
    std::normal_distribution<double> z(0.0, 1.0);
    std::vector<double> f(replicas);
    for (double& x : f) x = std::exp(sigma * z(g) - sigma * sigma / 2);
    for (uint32_t r = 0; r < options_.ranks; ++r)
      workload_[r] *= f[par != nullptr ? par->dpIndex(r) : r];
  }
}

std::vector<double> StepModel::drawExpertLoad(int64_t step) {
  const ParallelLayout& par = *options_.parallel;
  std::vector<double> w(par.ep, 1.0);
  std::normal_distribution<double> z(0.0, 1.0);
  for (double& x : w) {
    if (options_.noise > 0) x = std::exp(options_.noise * z(expertRng_));
  }
  for (const auto& in : options_.injects) {
    if (in.kind == Inject::Kind::kExperts && step >= in.fromStep && in.ep < par.ep) {
      w[in.ep] *= in.factor;
    }
  }
  double sum = 0;
  for (double x : w) sum += x;
  for (double& x : w) x *= static_cast<double>(par.ep) / sum;
  return w;
}

double StepModel::p2pFactor(uint32_t sender, uint32_t receiver, int64_t step) const {
  double f = 1.0;
  for (const auto& in : options_.injects) {
    if (in.kind == Inject::Kind::kP2p && step >= in.fromStep && in.rank == sender &&
        in.to == receiver) {
      f *= in.factor;
    }
  }
  return f;
}

int64_t StepModel::p2pTransferNs(int64_t healthyNs, uint32_t sender, uint32_t receiver,
                                 int64_t step) {
  double jitter = 1.0;
  if (options_.noise > 0) {
    jitter = std::exp(options_.noise * p2pNormal_(p2pRng_) - options_.noise * options_.noise / 2);
  }
  return std::max<int64_t>(
      1, toNs(static_cast<double>(healthyNs) * p2pFactor(sender, receiver, step) * jitter));
}

double StepModel::opFactor(uint32_t op, uint32_t rank, int64_t step) const {
  double f = 1.0;
  for (const auto& in : options_.injects) {
    if (in.kind != Inject::Kind::kOp || step < in.fromStep) continue;
    if (in.rank && *in.rank != rank) continue;
    if (opNames_[op] == in.op) f *= in.factor;
  }
  return f;
}

double StepModel::commFactor(int64_t step) const {
  // A slow link at one rank slows the whole ring: the pipelined ring goes at its slowest
  // link, so every rank's collective completes that much later.
  double f = 1.0;
  for (const auto& in : options_.injects) {
    if (in.kind == Inject::Kind::kComm && step >= in.fromStep) f = std::max(f, in.factor);
  }
  return f;
}

double StepModel::linkFactor(uint32_t rank, int64_t step) const {
  double f = 1.0;
  for (const auto& in : options_.injects) {
    if (in.kind != Inject::Kind::kComm || step < in.fromStep) continue;
    if (!in.rank || *in.rank == rank) f = std::max(f, in.factor);
  }
  return f;
}

int64_t StepModel::transferNs(double commFactor) const {
  const double ns =
      options_.latencyUs * 1e3 + static_cast<double>(options_.bucketBytes) / bucketBytesPerNs_;
  return toNs(ns * commFactor);
}

StepTimeline StepModel::step(int64_t step, int64_t beginNs) {
  if (options_.parallel) return pipelineStep(step, beginNs);
  StepTimeline tl;
  tl.step = step;
  tl.beginNs = beginNs;
  std::optional<uint32_t> hungRank;
  for (const auto& in : options_.injects) {
    if (in.kind == Inject::Kind::kHang && in.atStep == step && !hungRank) hungRank = in.rank;
  }
  tl.hung = hungRank.has_value();
  drawWorkload(step);

  const double stepNs = options_.stepMs * 1e6;
  const double sigma = options_.noise;
  const uint32_t buckets = std::max<uint32_t>(options_.buckets, 1);
  std::vector<std::vector<int64_t>> arrive(options_.ranks, std::vector<int64_t>(buckets, 0));
  std::vector<int64_t> backwardEnd(options_.ranks, 0);
  tl.ranks.resize(options_.ranks);

  for (uint32_t r = 0; r < options_.ranks; ++r) {
    RankStep& rs = tl.ranks[r];
    rs.rank = r;
    rs.beginNs = beginNs;
    // The optimizer's work does not depend on the data, so seqlen scales forward and backward.
    const double cf = computeFactor(r, step) * workload_[r];
    const double warm = step < options_.warmup ? kWarmupFactor : 1.0;
    int64_t t = beginNs + kLoopOverheadNs;

    const int64_t dataEnd = t + toNs(stepNs * kDataShare * warm * lognormal(sigma));
    rs.ranges.push_back({Phase::kData, t, dataEnd});
    t = dataEnd;

    auto runOps = [&](const std::vector<OpTemplate>& ops, double weight, double share,
                      auto&& afterOp) {
      double cum = 0;
      for (size_t i = 0; i < ops.size(); ++i) {
        const auto& op = ops[i];
        const int64_t d = std::max<int64_t>(1, toNs(stepNs * share * op.weight / weight * cf *
                                                    opFactor(op.op, r, step) * lognormal(sigma)));
        rs.ops.push_back({op.op, t, d});
        t += d;
        cum += op.weight;
        if (!afterOp(cum / weight, i + 1 == ops.size())) return false;
      }
      return true;
    };

    const int64_t fwdStart = t;
    runOps(forward_, forwardWeight_, kForwardShare, [](double, bool) { return true; });
    rs.ranges.push_back({Phase::kForward, fwdStart, t});

    const int64_t bwdStart = t;
    uint32_t nextBucket = 0;
    const bool hangsHere = hungRank && *hungRank == r;
    // Bucket b is ready once (b + 1) / buckets of the backward work is done.
    const bool finished =
        runOps(backward_, backwardWeight_, kBackwardShare, [&](double done, bool last) {
          while (nextBucket < buckets &&
                 (last || done + 1e-9 >= double(nextBucket + 1) / buckets)) {
            if (hangsHere) return false;  // stuck before it arrives
            arrive[r][nextBucket++] = t;
          }
          return true;
        });
    if (finished) rs.ranges.push_back({Phase::kBackward, bwdStart, t});
    backwardEnd[r] = t;
  }

  // Collectives: each completes when the last rank has arrived (and the previous bucket is
  // done: one communication stream), plus the transfer.
  const int64_t transfer = transferNs(commFactor(step));
  std::vector<int64_t> complete(buckets, 0);
  int64_t prev = 0;
  for (uint32_t b = 0; b < buckets; ++b) {
    int64_t last = 0;
    for (uint32_t r = 0; r < options_.ranks; ++r) last = std::max(last, arrive[r][b]);
    complete[b] = std::max(last, prev) + transfer;
    prev = complete[b];
  }

  if (tl.hung) {
    // Everyone but the hung rank arrives at the first collective and waits forever.
    for (uint32_t r = 0; r < options_.ranks; ++r) {
      if (r == *hungRank) continue;
      tl.ranks[r].colls.push_back({0, options_.bucketBytes, arrive[r][0], 0});
    }
    sumCompute(tl);
    return tl;
  }

  // Each rank sends every bucket to its ring neighbour. Its link is in flight for the healthy
  // transfer time (times its own slow-down and some jitter) from the moment the bucket's
  // transfer starts; the slowest link sets the completion above.
  const uint32_t world = options_.ranks;
  const int64_t healthyTransfer = transferNs(1.0);
  const double linkSigma = std::max(0.0, options_.noise);
  const uint64_t linkBytes =
      world > 1 ? options_.bucketBytes * 2 * (world - 1) / world : options_.bucketBytes;
  std::vector<double> linkF(world, 1.0);
  for (uint32_t r = 0; r < world; ++r) linkF[r] = linkFactor(r, step);

  std::vector<int64_t> optStart(options_.ranks, 0);
  for (uint32_t r = 0; r < options_.ranks; ++r) {
    RankStep& rs = tl.ranks[r];
    for (uint32_t b = 0; b < buckets; ++b) {
      rs.colls.push_back({b, options_.bucketBytes, arrive[r][b], complete[b]});
    }
    if (world > 1) {
      for (uint32_t b = 0; b < buckets; ++b) {
        const int64_t start = complete[b] - transfer;
        // Jitter only shortens: the modelled transfer is the slowest delivery, so no link
        // may deliver after the ring completed.
        const double jitter = std::exp(-linkSigma * std::fabs(linkNormal_(linkRng_)));
        const int64_t wire = std::clamp<int64_t>(
            toNs(static_cast<double>(healthyTransfer) * linkF[r] * jitter), 1, transfer);
        rs.links.push_back({(r + 1) % world, b, linkBytes, start, start + wire});
      }
    }
    optStart[r] = std::max(backwardEnd[r], complete[buckets - 1]);
  }
  optimizeAndEnd(tl, step, optStart);
  return tl;
}

void StepModel::optimizeAndEnd(StepTimeline& tl, int64_t step,
                               const std::vector<int64_t>& gradsReady) {
  const double stepNs = options_.stepMs * 1e6;
  const uint32_t optOp = static_cast<uint32_t>(opNames_.size() - 1);
  int64_t stepEnd = 0;
  for (uint32_t r = 0; r < options_.ranks; ++r) {
    RankStep& rs = tl.ranks[r];
    const int64_t optNs =
        std::max<int64_t>(1, toNs(stepNs * kOptimizerShare * computeFactor(r, step) *
                                  opFactor(optOp, r, step) * lognormal(options_.noise)));
    rs.ops.push_back({optOp, gradsReady[r], optNs});
    rs.ranges.push_back({Phase::kOptimizer, gradsReady[r], gradsReady[r] + optNs});
    stepEnd = std::max(stepEnd, gradsReady[r] + optNs);
  }

  // A periodic checkpoint: all ranks together, after the slowest one's optimizer.
  for (const auto& in : options_.injects) {
    if (in.kind != Inject::Kind::kSpike || step == 0 || step % in.every != 0) continue;
    const int64_t len = toNs(stepNs * (in.factor - 1.0));
    for (auto& rs : tl.ranks) rs.ranges.push_back({Phase::kCheckpoint, stepEnd, stepEnd + len});
    stepEnd += len;
  }

  tl.endNs = stepEnd;
  for (auto& rs : tl.ranks) rs.endNs = stepEnd;
  sumCompute(tl);
}

}  // namespace trainscope::sim
