// Options of the simulated training job (trainscope-simtrain) and the faults it can inject.
// Plain data, filled once by main() from flags; parsing and validation are pure functions,
// safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainscope::sim {

// One injected fault. Which fields matter depends on the kind; see parseInject().
struct Inject {
  enum class Kind {
    kStraggler,
    kShift,
    kComm,
    kOp,
    kHang,
    kSpike,
    kStage,
    kWorker,
    kSeqlen,
    kP2p,
    kGpu,
    kExperts
  };
  Kind kind = Kind::kStraggler;
  std::optional<uint32_t> rank;  // straggler, hang, gpu; op when limited to one rank; comm: the
                                 // rank whose outgoing ring link is slow (none: every link);
                                 // p2p: the sending rank of the slow pipeline link
  uint32_t to = 0;               // p2p: the receiving rank of the slow pipeline link
  double cv = 0.0;               // seqlen: coefficient of variation of a replica's work per step
  int64_t fromStep = 0;          // straggler, shift, comm, op, stage, worker, seqlen, p2p, gpu:
                                 // first affected step
  int64_t atStep = 0;            // hang: the step whose first collective rank never reaches
  double factor = 1.0;           // straggler, shift, comm, op, spike, p2p, gpu: multiplier (> 0);
                                 // experts: the skew (tokens of the hot experts / the others')
  std::string op;                // op: the operator name
  uint32_t pp = 0;               // stage, worker (--parallel): the pipeline stage slowed
  uint32_t dp = 0;               // worker: the data-parallel replica whose stage is slowed
  uint32_t ep = 0;               // experts: the expert-parallel index holding the hot experts
  int64_t every = 0;             // spike: period in steps
  std::string spec;              // the text it was parsed from, for messages
};

// A tensor x context x pipeline x data (x expert) parallel layout (--parallel
// tp=T,pp=P,dp=D,cp=C,ep=E). Global ranks follow Megatron's order (tp fastest, then cp, dp,
// pp): rank = pp_index * (dp * cp * tp) + dp_index * (cp * tp) + cp_index * tp + tp_index.
// Expert parallelism is carved out of data parallelism, as Megatron does for the MoE layers:
// an expert-parallel group holds the ranks of E consecutive data-parallel replicas with the same
// pp, cp and tp index, and a rank's ep index is its dp index modulo E (E divides D).
struct ParallelLayout {
  uint32_t tp = 1;
  uint32_t pp = 1;
  uint32_t dp = 1;
  uint32_t cp = 1;
  uint32_t ep = 1;
  uint32_t world() const { return tp * cp * pp * dp; }
  uint32_t tpIndex(uint32_t rank) const { return rank % tp; }
  uint32_t cpIndex(uint32_t rank) const { return (rank / tp) % cp; }
  uint32_t dpIndex(uint32_t rank) const { return (rank / (tp * cp)) % dp; }
  uint32_t ppIndex(uint32_t rank) const { return rank / (tp * cp * dp); }
  uint32_t epIndex(uint32_t rank) const { return dpIndex(rank) % ep; }
  uint32_t rankAt(uint32_t pp, uint32_t dp, uint32_t tp, uint32_t cp = 0) const;
  // The members of rank's tensor-, pipeline- (stage order), data-, context- and
  // expert-parallel groups.
  std::vector<uint32_t> tpGroup(uint32_t rank) const;
  std::vector<uint32_t> ppGroup(uint32_t rank) const;
  std::vector<uint32_t> dpGroup(uint32_t rank) const;
  std::vector<uint32_t> cpGroup(uint32_t rank) const;
  std::vector<uint32_t> epGroup(uint32_t rank) const;
};

struct SimOptions {
  std::vector<std::string> agents;  // agent endpoints; global rank r reports to
                                    // agents[r % size]
  std::string job;                  // job id; "" means sim-<unix time>
  uint32_t ranks = 16;              // simulated ranks hosted here (one probe each): more costs
                                    // CPU per step
  uint32_t firstRank = 0;           // global rank of the first hosted rank; with worldSize, one
                                    // job can be split over several processes (kill one of them)
  uint32_t worldSize = 0;           // ranks of the whole job; 0 = firstRank + ranks. Every
                                    // process models all of them (same seed, same timeline) and
                                    // reports only its own, so collectives still wait for the
                                    // slowest rank of the job
  int64_t steps = 300;              // steps to run; 0 runs until SIGINT/SIGTERM
  double stepMs = 100.0;            // healthy step time; sets the pace without --fast
  uint64_t seed = 1;                // same seed and options give the same timeline
  double noise = 0.02;              // log-normal sigma per operator: more looks noisier and
                                    // makes detectors work harder
  int64_t warmup = 3;               // first steps run slower, as real jobs do
  bool fast = false;                // no sleeping: timestamps run ahead of the wall clock
  std::vector<Inject> injects;      // faults, applied together
  std::string truthFile;            // "" writes no truth file
  int64_t flushTimeoutMs = 10000;   // how long to wait at the end for the agents' acks
  double hangHoldS = 0.0;           // after a hang, stay alive this long; 0 = until killed
  double endStaggerMs = 0.0;        // at the end, hosted ranks end one by one this far apart
                                    // (as ranks of a real job finish at different times); 0:
                                    // all together
  bool quiet = false;               // no progress lines
  // --parallel: a pipelined tensor x pipeline x data parallel job instead of a flat
  // data-parallel one; every rank declares its groups and pipeline stages exchange
  // activations and gradients by p2p send/recv following `schedule`.
  std::optional<ParallelLayout> parallel;
  std::string schedule = "1f1b";  // pipeline schedule (--schedule): 1f1b, interleaved:V, zb-v,
                                  // dualpipe-v (common/pipeline_schedule.h)
  uint32_t microbatches = 0;      // per step and replica (--microbatches); 0 = 2 * pp
  double edgeLoad = 0.0;          // --edge-load: a naturally unbalanced pipeline; the first
                                  // stage works edgeLoad / 2 more (embedding), the last
                                  // edgeLoad more (head and loss); 0 = balanced stages
  // Model constants (not flags): what a healthy step looks like.
  uint32_t layers = 4;                 // transformer blocks; more means more operators per step
  uint32_t buckets = 4;                // gradient buckets all-reduced per step
  uint64_t bucketBytes = 25ull << 20;  // bytes of one bucket
  double bandwidthGBps = 0.0;          // all_reduce bus bandwidth; 0 scales it with --step-ms so
                                       // one bucket takes kBucketShare of a healthy step
  double latencyUs = 30.0;             // fixed cost of one collective
};

// Parses one --inject spec such as "straggler:rank=5,from=150,factor=1.4" or, with
// --parallel, "stage:pp=1,factor=1.3[,from=N]" (every rank of pipeline stage 1 computes 1.3x
// longer), "worker:dp=0,pp=1,factor=1.5[,from=N]" (the tensor-parallel group of replica 0 at
// stage 1), "gpu:rank=R,factor=F[,from=N]" (one rank inside its tensor-parallel group) and
// "p2p:from=R,to=Q,factor=F[,from=N]" (rank R's pipeline sends to rank Q take F times longer;
// the first from= is the sending rank, a second one the first step). "seqlen:cv=X[,from=N]"
// (with or without --parallel) gives every data-parallel replica (a rank of a flat job) a
// random share of work each step: its forward and backward times are multiplied by a
// log-normal draw of mean 1 and coefficient of variation X, new every step, so the slowest
// replica moves at random. "experts:skew=X[,ep=K][,from=N]" (with --parallel ep=E > 1): the
// experts held by expert-parallel index K (default 0) get X times the tokens of the others
// (the mean load stays 1), so those ranks' expert compute and the all_to_all delivering to them
// take longer while their expert-parallel peers wait in the all_to_all. from defaults to 0 for
// these six. Unknown kinds, unknown, missing
// or repeated keys and malformed values fail with a message naming them.
Result<Inject> parseInject(const std::string& spec);

// Parses --parallel "tp=2,pp=2,dp=2[,cp=C,ep=E]" (keys tp, pp, dp, cp, ep, each >= 1, any
// order, missing ones 1). The message names the key at fault; validate() checks that E
// divides D.
Result<ParallelLayout> parseParallel(const std::string& spec);

// Checks the options as a whole (values in range, hosted ranks inside the world, injected
// ranks below the world size, at least one agent when `needAgents`). The message names the
// flag or the inject spec at fault.
Status validate(const SimOptions& options, bool needAgents);

// The job's world size: options.worldSize, or firstRank + ranks when it is 0.
uint32_t worldSizeOf(const SimOptions& options);

// The ranks an inject slows, for the truth file: its rank, every rank of the job (shift,
// fabric-wide comm, an op on every rank, seqlen), the stage's ranks (stage), the worker's
// tensor-parallel group (worker) or the link's two ends, sender first (p2p); experts: every
// rank of the hot expert-parallel index.
std::vector<uint32_t> injectRanks(const SimOptions& options, const Inject& inject);

// The kind's name in the truth file ("straggler", "step_shift", ...; a worker or gpu fault is
// a "straggler", a stage fault a "stage_imbalance", seqlen a "workload_imbalance", p2p a
// "slow_comm", experts an "expert_imbalance").
const char* truthKindName(Inject::Kind kind);

}  // namespace trainscope::sim
