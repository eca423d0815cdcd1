// Every threshold and window the detectors use, with the defaults users get. Plain values,
// filled once at start-up (flags, config) and copied into a DetectorSet.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trainscope::detect {

// Shared shape of the "own baseline + sequential test" detectors (op_regression, slow_comm,
// straggler). Each sample is turned into its relative excess e = value / baseline - 1 and fed to
// a one-sided CUSUM, S = max(0, S + min(e / sigma - max(minExcess / sigma, cusumMinK),
// cusumClip)), sigma being the series' robust relative spread (floored at minRelSigma); the
// detector opens when S reaches cusumH and the median since the excursion began is above
// baseline * (1 + minExcess). A rise of (minExcess + d) is thus found after about cusumH / (d /
// sigma) samples: a 10 % fault on a 1 %-noise series in 4 samples, on a 5 %-noise series in ~12,
// and a rise below minExcess never. It resolves when at most releaseCount of the last `window`
// samples exceed baseline * (1 + max(minExcess, noiseSigmas * sigma)) and their median is back
// within minExcess / 2 of the baseline.
struct PersistenceOptions {
  int warmupSamples = 10;      // first samples ignored (compile, caches); more = later first alarm
  int baselineMin = 32;        // samples needed to learn a baseline before judging; more = steadier
  int baselineSize = 256;      // baseline ring (median/MAD); larger = steadier, and slower to
                               // absorb a regression not yet fired on (or to follow a drift)
  int window = 20;             // recent samples kept out of the baseline, judged for resolution
                               // and for the level; larger = slower resolution
  double cusumH = 12.0;        // CUSUM alarm level in sigmas; higher = fewer false alarms, later
  double cusumClip = 3.0;      // cap of one sample's CUSUM increment, so one outlier (or three)
                               // cannot open an episode alone; lower = more robust, slower
  double cusumMinK = 1.0;      // least CUSUM allowance in sigmas, for series noisier than
                               // minExcess; higher = quieter on noisy series, slower there
  int releaseCount = 4;        // at most this many exceeding samples in the window to resolve
  double minExcess = 0.05;     // rises up to this fraction are tolerated (CUSUM allowance); a
                               // 10 % fault needs < 0.1; higher = quieter, misses small faults
  double noiseSigmas = 1.0;    // exceed level (resolution) in robust sigmas above minExcess on
                               // noisy series; higher = resolves sooner on noisy series
  double minRelSigma = 0.005;  // floor of the relative sigma, so a noiseless series is not twitchy
};

struct StepShiftOptions {
  int warmupSteps = 10;        // first steps never count (compile, cache warm-up)
  int baselineSteps = 20;      // steps that learn the reference level before detecting
  int baselineSize = 256;      // reference = median/MAD of up to this many healthy steps
  int baselineLag = 32;        // a step joins the reference this many steps later, so a change
                               // is detected before the reference absorbs it
  double cusumK = 1.0;         // CUSUM allowance in sigmas: shifts under ~2k sigma are ignored
  double cusumH = 10.0;        // CUSUM alarm level: higher = fewer false alarms, later alarms
  double zClip = 4.0;          // per-step cap on |z|, so isolated spikes never reach cusumH alone
  double minRelSigma = 0.01;   // sigma floor as a fraction of the level (a steady job needs a
                               // ~2 % move to register)
  double minShift = 0.05;      // detected shifts whose ratio is within this of 1 are ignored
  double spikeZ = 6.0;         // an outlier step is this many sigmas above the reference ...
  double spikeMinRatio = 1.3;  // ... and at least this ratio of it
  int spikeRepeats = 4;        // outliers at equal gaps needed to call them periodic
  int spikeMinPeriod = 3;      // shorter gaps are a shift, not a periodic spike
  int spikeJitter = 1;         // allowed gap jitter in steps
  int resolveWindow = 10;      // recent steps whose median must be back near the reference
};

struct StragglerOptions {
  // On rank compute / peer median compute (baseline 1.0). No warm-up: the peers are the
  // baseline, so a rank slow from its first step is judged from that step and reported with
  // it as the onset (a warm-up slows every rank alike and leaves the ratios at 1).
  PersistenceOptions persistence{.warmupSamples = 0};
  uint32_t minRanks = 2;  // two ranks are judged with their waits (see straggler.h)
  int noiseWindow = 64;   // steps over which the job-wide ratio spread is learned
};

// On a pipeline stage's work / the median of the other stages' (baseline 1.0); see
// stage_imbalance.h. No warm-up, like the straggler's: the other stages are the baseline.
struct StageImbalanceOptions {
  // minExcess: a stage this much heavier than the others is tolerated; first and last stages
  // carry the embedding, head and loss, a few percent by construction. Lower finds smaller
  // imbalances, and calls a pipeline chosen that way imbalanced.
  PersistenceOptions persistence{.warmupSamples = 0, .minExcess = 0.08};
  int noiseWindow = 64;  // steps over which the ratios' step-to-step noise is learned
};

// On an expert-parallel index's all_to_all bytes received / the median of its group's other
// ranks' (baseline 1.0); see expert_imbalance.h. No warm-up: the peers are the baseline.
struct ExpertImbalanceOptions {
  // minExcess: routers balance tokens only approximately (an auxiliary loss, capacity
  // factors), so a few percent more tokens at one index are the job's normal; lower finds
  // smaller skews, and calls a router's usual spread a skew.
  PersistenceOptions persistence{.warmupSamples = 0, .minExcess = 0.05};
  int noiseWindow = 64;  // steps over which the ratios' step-to-step noise is learned
};

// On the per-step spread of the data-parallel replicas' work (see workload_imbalance.h): the
// sigma over replicas of their work ratios' step-to-step changes, as a fraction of the work.
struct WorkloadImbalanceOptions {
  double minSpread = 0.065;  // per-step spread tolerated: operator noise of 5 % gives ~1 %, a
                             // rank whose whole step varies 5 % at random 5 %; lower finds
                             // smaller imbalances, and calls such a noisy job imbalanced
  double cusumH = 0.12;      // CUSUM alarm level (summed spread above minSpread); higher = later
  double clip = 0.15;        // cap of one step's spread in the CUSUM, so a single odd step (a
                             // straggler's first step) cannot open it alone
  int minSteps = 3;          // costly steps (spread >= minSpread) needed before judging whether
                             // the slowest replica moves; more = later, surer
  double maxShare = 0.75;    // the same replica slowest in more than this share of the costly
                             // steps is a straggler that comes and goes, not moving work
  double minGain = 0.02;     // reported only when balancing would save this share of the step
  int window = 20;           // steps whose mean spread must be under minSpread / 2 to resolve
                             // (two replicas give one sample a step: a few calm steps in a row
                             // are common); longer = later resolution
};

struct SlowCommOptions {
  PersistenceOptions persistence{};  // on per-call transfer time of one (op, group, bytes)
  double maxComputeRise = 0.05;      // compute of the group's ranks may rise at most this much
                                     // (else the slowdown is not communication's)
  double rankSkew = 0.10;            // a rank completing this much (of transfer time) after its
                                     // peers is named as the slow end
  size_t maxKeysPerJob = 256;        // bounded memory; least recently seen keys are dropped
  int forgetAfterSteps = 1000;       // a key (or link) unseen this long is dropped
  // Links (StepReport.links): per (sender, peer, group) in-flight ns per byte.
  PersistenceOptions linkPersistence{};  // on a link's time per byte / its group's median link
  double linkRise = 0.05;                // a link is slow when its time per byte rose this much
                                         // against its own history and against its peers; lower
                                         // names smaller faults, and noisy links by mistake
  double fabricFraction = 0.5;           // this share of a group's links slower together is the
                                         // fabric (the group is named); lower calls more "fabric"
  uint32_t minLinks = 3;                 // fewer links in a group have no meaningful peer median
  uint32_t maxPeersPerRank = 16;         // links kept per sender and group (a ring has 1-2, a tree
                                         // 3); an all-to-all's other peers are ignored
  size_t maxLinksPerJob = 65536;         // bounded memory (~2.5 KiB a link); past it new links
                                         // are ignored until old ones are forgotten
  size_t maxLinkGroups = 64;             // groups with links tracked per job
  uint32_t maxLinkRank = 65536;          // ranks at or above are not tracked per link
};

// Pipeline links (p2p_link.h): on a link's send time per byte / the median of its peers'
// (baseline 1.0). No warm-up, like the straggler's: the other links are the baseline.
struct P2pLinkOptions {
  PersistenceOptions persistence{.warmupSamples = 0};  // minExcess: a link this much slower
                                                       // than its peers is tolerated
  int noiseWindow = 64;     // steps over which the ratios' step-to-step noise is learned
  uint32_t minLinks = 3;    // fewer comparable links have no meaningful peer median
  size_t maxLinks = 65536;  // bounded memory (~1 KiB a link); past it new links are ignored
};

struct OpRegressionOptions {
  PersistenceOptions persistence{};  // on per-call time (total/count) of one op on one rank
  double jobWideFraction = 0.5;      // when at least this fraction of ranks regress together
                                     // it is reported once with every rank
  size_t maxOpsPerJob = 256;         // bounded memory; least recently seen ops are dropped
  int forgetAfterSteps = 1000;       // an op unseen this long is dropped
  int64_t minCallNs = 1000;          // ops faster than this per call are too noisy to judge
  // A rank's step whose training thread waited for a CPU (StepReport.cpu_wait_ns) longer than
  // this share of the step is not sampled: its operator times hold the host's scheduling, not
  // the operators (on a 2-core host with a busy neighbour a preemption made single operators
  // 10-90x slower for a step, and their shares of compute drifted for dozens of steps). Larger
  // = judges operators on busier hosts, with more false alarms there; 1 = never skip.
  double maxCpuWaitShare = 0.05;
};

struct HangOptions {
  double stepMultiple = 10.0;        // silent for this many typical steps ...
  int64_t floorNs = 10'000'000'000;  // ... and at least this long (10 s)
  double longestStepMultiple = 1.5;  // ... and longer than 1.5x the longest step seen after
                                     // warm-up (checkpoints are slow but not hangs)
  int warmupSteps = 10;              // steps left out of the typical/longest step time
  int typicalWindow = 32;            // recent steps whose median is the typical step time
  // Progress from the probes' hellos (which rank is stuck, which wait for it):
  int64_t progressMarginNs = 500'000'000;     // progress counts once it was true this long
                                              // (or 2 typical steps) after the rank's last
                                              // report: by then a peer reached its collective
  int64_t progressMaxAgeNs = 10'000'000'000;  // older progress does not count (hellos come
                                              // every 2 s); longer = trusts staler news
  int64_t progressWaitNs = 5'000'000'000;     // a due hang waits this long for a hello from
                                              // the silence; longer = later, better named
};

struct AssemblyOptions {
  int graceSteps = 4;  // a step is complete when every rank reported it, or when a
                       // report this many steps later arrived and each missing rank
                       // reported a later step or was silent this many step times;
                       // larger = more patience for late ranks, later detection
  int64_t silentFloorNs = 10'000'000'000;  // ... silent at least this long (collector clock):
                                           // agents deliver in bursts seconds apart under
                                           // load; lower judges such steps without their
                                           // ranks (late), higher holds steps longer
  size_t maxPendingSteps = 64;   // bounded memory per job: the oldest pending step is forced out
  double minRankFraction = 0.5;  // a step forced out with fewer ranks than this is dropped
};

// How DetectorSet folds a derived anomaly into the one that explains it: a straggler whose
// compute rise an op regression on the same rank explains, and a job step-time rise that a
// straggler, op regression or slow collective starting at the same time explains, are not
// reported a second time.
struct FoldOptions {
  int holdSteps = 1;          // a straggler or step_shift waits this many judged steps for
                              // its explanation before it is published; more = fewer
                              // double reports, later alarms (the wait is in the latency)
  int onsetSteps = 20;        // onsets this close (in steps) count as the same event;
                              // wider = folds more, may hide a second, unrelated change
  double minExplained = 0.5;  // the explanation must account for at least this fraction of
                              // the added time per step; lower = folds more eagerly
  // Real jobs on shared hosts (tools/bench/realjob): a neighbour's burst of work slows one
  // rank, an operator or the whole job for a few to a few dozen steps; nobody should act on it.
  int confirmSteps = 24;     // every anomaly but a hang is held this many judged steps ...
  int64_t confirmMs = 2000;  // ... and this long (collector clock) after its detection; one
                             // whose detector resolves it meanwhile is dropped (counted as
                             // flapped). Both are added to the detection latency; 0 and 0 =
                             // publish at once
  double minGain = 0.01;     // an anomaly whose estimated gain (the share of the step its fix
                             // would save) is below this is not raised; 0 = all are
};

// The gpu_fault detector (gpu_fault.h).
struct GpuFaultOptions {
  // Throttling for this long (consecutive samples with a throttle reason) opens a gpu_fault;
  // it resolves after as long without. Shorter catches brief episodes and raises on boost
  // dips a healthy GPU has under load.
  int64_t throttleNs = 5'000'000'000;
  // NVLink errors (replay, recovery, CRC, summed over links) that one sample may add before it
  // is a fault: links replay now and then without harm.
  uint64_t nvlinkErrors = 5;
  // A straggler is said to be caused by its GPU when the GPU throttled or faulted within this
  // long before the straggler opened.
  int64_t explainWindowNs = 120'000'000'000;
  size_t maxGpus = 4096;  // GPUs remembered; past it the table starts over
};

struct DetectOptions {
  AssemblyOptions assembly{};
  FoldOptions fold{};
  StepShiftOptions stepShift{};
  StragglerOptions straggler{};
  StageImbalanceOptions stageImbalance{};
  WorkloadImbalanceOptions workloadImbalance{};
  ExpertImbalanceOptions expertImbalance{};
  SlowCommOptions slowComm{};
  P2pLinkOptions p2pLink{};
  OpRegressionOptions opRegression{};
  HangOptions hang{};
  GpuFaultOptions gpuFault{};
  size_t maxJobs = 1024;  // jobs tracked at once; the least recently seen is forgotten first
};

}  // namespace trainscope::detect
