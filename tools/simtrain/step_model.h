// The step model of the simulated job: given SimOptions and a seed, it produces for each step
// and rank the timeline a synchronous data-parallel job would show (data loading, forward and
// backward operators, gradient-bucket all_reduces, optimizer), or with --parallel that of a
// pipelined tensor x context x pipeline x data (x expert) parallel job. Pure: no clock, no I/O, no
// probe, so tests can check it directly. One StepModel is used from one thread.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tools/simtrain/sim_options.h"

namespace trainscope::sim {

// Shares of a healthy step; the rest is the optimizer and exposed communication.
inline constexpr double kDataShare = 0.05;
inline constexpr double kForwardShare = 0.30;
inline constexpr double kBackwardShare = 0.55;
inline constexpr double kOptimizerShare = 0.06;
// One bucket's all_reduce transfer as a share of a healthy step (when bandwidth is automatic).
inline constexpr double kBucketShare = 0.03;
// The training loop's own time between step begin and the data loader (Python, hooks). It
// also keeps the first record of a step strictly after the previous step's end.
inline constexpr int64_t kLoopOverheadNs = 20'000;
// Warm-up steps run this much slower.
inline constexpr double kWarmupFactor = 2.0;
// --parallel with ep > 1 (MoE): the share of each forward and backward spent in the experts,
// and the transfer of one token all_to_all as a share of a forward or backward (at a balanced
// load; the rank receiving the most tokens sets it).
inline constexpr double kExpertShare = 0.4;
inline constexpr double kAllToAllShare = 0.05;
// The experts' operators (grouped GEMMs over the tokens each expert received).
inline constexpr const char* kExpertOp = "aten::_grouped_mm";
inline constexpr const char* kExpertBackwardOp = "aten::_grouped_mm_backward";

enum class Phase { kData, kForward, kBackward, kOptimizer, kCheckpoint };
const char* phaseName(Phase phase);  // "data_loading", "forward", ...

struct RangeExec {
  Phase phase = Phase::kData;
  int64_t startNs = 0;
  int64_t endNs = 0;
};

struct OpExec {
  uint32_t op = 0;  // index into StepModel::opNames()
  int64_t startNs = 0;
  int64_t durationNs = 0;
};

struct CollExec {
  enum class Group : uint8_t { kDp, kTp, kCp, kEp };  // which process group it runs in
  enum class Op : uint8_t { kAllReduce, kAllGather, kAllToAll };
  uint32_t bucket = 0;
  uint64_t bytes = 0;  // all_to_all: the bytes this rank receives
  int64_t arriveNs = 0;
  int64_t completeNs = 0;  // 0 when it never completes (hang)
  Group group = Group::kDp;
  Op op = Op::kAllReduce;
};

// One pipeline send or receive (--parallel): a send is posted when the stage finished the
// microbatch and completes after the transfer; a receive is posted when the stage is ready
// for the microbatch and completes when the data arrived, so its wait is the pipeline bubble.
struct P2pExec {
  bool send = false;
  uint32_t peer = 0;  // global rank of the neighbouring stage
  uint64_t bytes = 0;
  int64_t postedNs = 0;
  int64_t completeNs = 0;
};

// One transfer a rank sends to its ring neighbour for one bucket's all_reduce, as a comm
// library's profiler hooks report it: posted when the bucket's transfer starts, delivered
// after the link's own in-flight time (a healthy link delivers early and then waits for the
// slowest link of the ring; waiting is not in flight).
struct LinkExec {
  uint32_t peer = 0;  // global rank receiving: (rank + 1) % world
  uint32_t bucket = 0;
  uint64_t bytes = 0;  // what a ring all_reduce sends per rank: 2 (n - 1) / n of the bucket
  int64_t postedNs = 0;
  int64_t deliveredNs = 0;
};

struct RankStep {
  uint32_t rank = 0;
  int64_t beginNs = 0;
  int64_t endNs = 0;              // 0 when the step never ends (hang)
  std::vector<RangeExec> ranges;  // in time order
  std::vector<OpExec> ops;        // in time order
  std::vector<CollExec> colls;    // in time order; a hung collective has completeNs == 0
  std::vector<LinkExec> links;    // in time order; none in a hung step or a 1-rank job
  std::vector<P2pExec> p2ps;      // in time order; --parallel with pp > 1 only
  // Totals the model knows, for tests and the truth: time spent in compute ranges.
  int64_t computeNs = 0;
};

// One event of a rank's step: which list of the RankStep, and its index there.
struct RankEvent {
  enum class Kind { kRange, kOp, kColl, kLink, kP2p };
  Kind kind;
  size_t idx;
};
// The events of one rank's step in the order trainscope-simtrain records them (and the
// detector evaluation feeds them): by start time; at the same time ranges before the ops they
// contain, ops before collectives, collectives before their link transfers.
std::vector<RankEvent> eventOrder(const RankStep& rs);

struct StepTimeline {
  int64_t step = 0;
  int64_t beginNs = 0;
  int64_t endNs = 0;            // the same for every rank; 0 when the step hangs
  bool hung = false;            // a hang was injected at this step: no rank ends it
  std::vector<RankStep> ranks;  // one per rank of the whole job (worldSizeOf), by rank
};

// Adds each rank's forward, backward and optimizer range time to its computeNs.
void sumCompute(StepTimeline& tl);

class StepModel {
 public:
  explicit StepModel(const SimOptions& options);

  // The timeline of `step`, starting at `beginNs` on every rank of the job.
  StepTimeline step(int64_t step, int64_t beginNs);

  const std::vector<std::string>& opNames() const { return opNames_; }
  // The names of the forward operators, then the backward ones, for --inject op validation.
  static std::vector<std::string> knownOps();
  // Transfer time of one bucket at the given slow-down.
  int64_t transferNs(double commFactor) const;
  // Slow-down of rank's outgoing ring link at `step`: the factors of comm injects naming it
  // or naming no rank (a fabric-wide slowdown).
  double linkFactor(uint32_t rank, int64_t step) const;

 private:
  struct OpTemplate {
    uint32_t op;    // index into opNames_
    double weight;  // relative cost within its phase
  };
  double computeFactor(uint32_t rank, int64_t step) const;
  // --inject seqlen: each replica's share of work this step (mean 1; 1 for every replica
  // without the fault). Drawn from (seed, step) alone, so every process of a split job and a
  // run without other faults see the same draws. Fills workload_, by rank.
  void drawWorkload(int64_t step);
  // --parallel ep > 1: each expert-parallel index's share of the tokens this step, mean 1: a
  // little jitter (the router's) and, with --inject experts, the hot index's skew. Drawn from
  // its own generator, so a run without the fault sees the same jitter.
  std::vector<double> drawExpertLoad(int64_t step);
  // --inject p2p: how much longer rank `sender`'s pipeline transfer to `receiver` takes.
  double p2pFactor(uint32_t sender, uint32_t receiver, int64_t step) const;
  // One pipeline transfer's time: the healthy one, its link's slow-down and some jitter.
  int64_t p2pTransferNs(int64_t healthyNs, uint32_t sender, uint32_t receiver, int64_t step);
  double opFactor(uint32_t op, uint32_t rank, int64_t step) const;
  double commFactor(int64_t step) const;
  double lognormal(double sigma);
  // The --parallel timeline (pipeline_model.cpp): each data-parallel replica runs its
  // pipeline schedule over the microbatches, tensor-parallel ranks meet in an all_reduce after
  // every forward and backward, replicas all_reduce gradients per stage, then the optimizer.
  StepTimeline pipelineStep(int64_t step, int64_t beginNs);
  // Every rank runs the optimizer once its gradients are reduced (gradsReady, by rank), then
  // the periodic checkpoint (--inject spike) after the slowest; all ranks end the step
  // together, and each rank's computeNs is summed.
  void optimizeAndEnd(StepTimeline& tl, int64_t step, const std::vector<int64_t>& gradsReady);

  SimOptions options_;
  std::mt19937_64 rng_;
  // Link jitter draws from its own generator, so adding links left every other time of the
  // timeline as it was for a given seed.
  std::mt19937_64 linkRng_;
  std::normal_distribution<double> linkNormal_{0.0, 1.0};  // its own: normal_ caches a draw
  std::normal_distribution<double> normal_{0.0, 1.0};
  // Pipeline transfer jitter, its own generator for the same reason as linkRng_.
  std::mt19937_64 p2pRng_;
  std::normal_distribution<double> p2pNormal_{0.0, 1.0};
  std::mt19937_64 expertRng_;     // drawExpertLoad's own, for the same reason
  std::vector<double> workload_;  // by rank: this step's seqlen factor (see drawWorkload)
  std::vector<std::string> opNames_;
  std::vector<OpTemplate> forward_;
  std::vector<OpTemplate> backward_;
  double forwardWeight_ = 0;
  double backwardWeight_ = 0;
  double bucketBytesPerNs_ = 0;
};

}  // namespace trainscope::sim
