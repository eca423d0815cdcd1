// straggler: the rank the others wait for. In a synchronous job every rank's step takes the
// same wall time and healthy ranks spend their extra time waiting inside collectives, so the
// step duration cannot tell who is slow; each rank's own time can: the step less its exposed
// communication (its waits), which holds whatever makes it late — operators, Python between
// them, a slow data loader — where compute_ns holds only the operators (a rank slowed by
// Python code showed no more compute than its peers on a real DDP job). Below, "compute" in
// the flat (no layout) path means that own time. Per step the detector
// takes ratio = rank compute / median compute of its peers (the other ranks) and runs a CUSUM
// on the ratio's excess over 1 + minExcess in units of sigma (PersistenceOptions), sigma
// being the job-wide robust spread of the ratios (median over recent steps of 1.4826*MAD
// across ranks) — so the level adapts to a noisier job. A job-wide slowdown moves every rank
// and its peers together and leaves the ratios at 1. The first collective arrival of the rank
// relative to the median arrival (node clocks aligned with RankContext.clockOffsetNs) is kept
// as supporting evidence (a straggler arrives last). Limits: needs compute_ns from the probe
// and at least minRanks ranks; a rank slow from its very first step is still found, since the
// baseline is its peers, not its own past. Used from the caller's thread only.
//
// Two ranks. With one peer the ratio alone cannot tell a slow rank from a peer that got
// faster or a noisy pair, so a two-rank job names a rank only when the waits agree: since the
// onset its peer's exposed communication (time blocked on the collectives: DDP's wait for its
// gradient buckets, Work.wait()) exceeds its own by at least half its compute excess — the
// peer waits for it at the collectives. Until then the rise is held (deferred), not reported.
//
// A busy host. Where the probes measure it (StepReport.cpu_wait_ns), the evidence gives the
// rank's wait for a CPU and its peers'; when the rank's exceeds theirs by at least half its
// excess, its host is the cause (labels.cause "cpu_contention", said in the summary): more
// threads there than cores, not the job's code. Busy hosts: where the job's ranks usually wait a
// tenth of their steps for a CPU (the median rank's share over the last 256 steps: on two cores
// with a busy loop beside two ranks, the scheduler starves one rank, then the other, for dozens
// of steps, 50-65 ms a step, as much as a 40 ms fault adds), what is compared is each rank's
// work, its own time less its wait for a CPU (evidence host_cpu_wait_share; the summary says
// "work"). A rank only short of a CPU there is the host's weather (cpu_contention.h): not a
// candidate at all, counted once an episode (hostWeatherHeld) when over the whole window its own
// time is over its peers' by minExcess and its work is not (countStarved); and a rank that does
// more work is found even while its peer is the starved one. A small rise of the work that the
// extra wait explains is held the same way.
//
// Two ranks on a busy host. There the starved rank arrives last at the collectives whatever
// its work, so its peer's waits cannot say who is slow: a rank whose work exceeds its peer's is
// then also named when, since the onset, its work rose over its own past (its last steps
// before the onset) by at least half the excess while its peer's did not rise by half as much.
// A peer that got faster has not risen; a rank that did more work has.
//
// With a parallel layout (setLayout: tensor- or pipeline-parallel groups were declared) the
// unit is the worker (a tensor-parallel group, whose ranks are slow together) and its peers
// are the workers of the same pipeline stage only: stages do different work (the last one
// carries the loss), so comparing across them would call a heavier stage a straggler and
// widen the noise until a real straggler on a lighter stage hid in it. The noise is learned
// per stage from the ratios' step-to-step changes (PeerRatioSet), which a slow worker does
// not inflate even when a stage has only two replicas. A slow worker is one anomaly naming
// every rank of its tensor-parallel group, with labels.coords ({"pp":0,"dp":1}), labels.stage
// and evidence.estimated_gain (the what-if of layout.h: the share of the step the job would
// save if the worker ran at its peers' speed). A stage with a single worker has no peers: a
// slow stage is stage_imbalance's to find.
//
// One slow GPU. A worker goes at its slowest rank (layout.h), so one slow rank makes its
// worker a straggler; it is then named alone (labels.scope "rank", labels.coords with its tp
// index, labels.worker the worker's) when, over the steps since the onset, its compute exceeds
// its tensor-parallel peers' by at least half the worker's excess AND the worker's own
// tensor-parallel collectives (the groups declared with kind tp) show the others waiting for it:
// it waits least there, and the others' wait exceeds its own by at least a quarter of its
// compute excess (only the work between tp collectives is waited for there: W passes of the V
// schedules and expert layers run none, so at tp4·pp8·dp32·ep8 under zb-v and dualpipe-v the
// others waited 0.36 of a slow GPU's excess). A whole worker slowed alike (a slow node, a hot
// host) is named as the worker.
// Without data parallelism a stage has one worker and no peers: its ranks are then compared
// with each other (rank compute / median of its tensor-parallel peers', PeerRatioSet per stage)
// and a rank is named by the same wait test (or on its compute alone when the job reports no
// tensor-parallel collectives); a whole stage slowed alike is stage_imbalance's.
//
// Layout changes. The layout often arrives a few steps after the first reports (ranks declare
// their groups as they start, and it is built once every rank has), and until then the job is
// judged flat, where the ranks of a stage heavier in every replica are slower than the job's
// median: at dp2 pp4 the last stage's two ranks read as two stragglers within a few steps.
// So when the layout arrives, a straggler the flat comparison opened stays open only where it
// is a worker of its own (no tensor parallelism) and its steps so far show it slower than the
// other workers of its stage (by minExcess, own times as in the flat path): it is carried over
// (its id and onset kept) until this comparison's tracker takes it, which later resolves it,
// or for two windows at most. Any other (the two ranks of that heavier stage, the ranks of a
// tensor-parallel group, a rank whose stage has no other worker, whatever was open under a
// layout now replaced) is resolved at the next judged step (labels.resolution "layout", its
// summary saying so), and the new comparison names what is still slow. One still held by the
// DetectorSet (FoldOptions::confirmSteps) is then dropped unpublished.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collector/detect/cpu_contention.h"
#include "collector/detect/events.h"
#include "collector/detect/layout.h"
#include "collector/detect/options.h"
#include "collector/detect/peer_ratio.h"
#include "collector/detect/robust.h"
#include "collector/detect/step_assembler.h"

namespace trainscope::detect {

class StragglerDetector {
 public:
  StragglerDetector(std::string job, const StragglerOptions& options, EventLog* log);
  void onStep(const AssembledStep& step);
  // The job's layout; nullptr (the default) compares every rank with every other. A new
  // layout starts the per-rank and per-worker state over (see "Layout changes").
  void setLayout(std::shared_ptr<const JobLayout> layout);
  // Stragglers not raised: the host's weather (cpu_contention.h).
  uint64_t hostWeatherHeld() const { return hostWeather_; }

 private:
  void onLayoutStep(const AssembledStep& step);
  struct WorkerState {
    explicit WorkerState(size_t window) : compute(window), peer(window) {}
    Ring<double> compute;
    Ring<double> peer;
    // By position in the worker's ranks: compute, and time in the tp collectives (NaN: none).
    std::vector<Ring<double>> rankCompute;
    std::vector<Ring<double>> rankWait;
    bool open = false;
    bool carried = false;  // `anomaly` was opened by the flat comparison (see setLayout)
    Anomaly anomaly;
  };
  // Each worker rank's compute and tensor-parallel wait this step (see "One slow GPU").
  void observeRanks(const AssembledStep& step);
  // A worker alone in its stage (no data parallelism): its ranks against each other, a rank
  // named when its tensor-parallel peers wait for it (see "One slow GPU").
  void judgeLoneWorker(const AssembledStep& step, uint32_t stage, size_t worker);
  // Opens `a` (kind, onset, magnitude, evidence filled) as one rank of worker `wk` (labels,
  // rank evidence, summary ending in `tail`).
  void openRank(const AssembledStep& step, size_t pos, const Worker& wk, double rankNs,
                double peersNs, double rankWait, double peersWait, const std::string& tail,
                Anomaly a, WorkerState* st);
  // The position in the worker's ranks of the one rank that slows it, or -1 (see above).
  int singleRank(const WorkerState& st, const Worker& wk, size_t since, double excessNs,
                 double* rankNs, double* peersNs, double* rankWaitNs, double* peersWaitNs) const;

  struct RankState {
    explicit RankState(const StragglerOptions& o)
        : tracker(o.persistence, 1.0),
          compute(static_cast<size_t>(std::max(1, o.persistence.window))),
          peer(static_cast<size_t>(std::max(1, o.persistence.window))),
          arrivalLag(static_cast<size_t>(std::max(1, o.persistence.window))),
          exposed(static_cast<size_t>(std::max(1, o.persistence.window))),
          peerExposed(static_cast<size_t>(std::max(1, o.persistence.window))),
          cpuWait(static_cast<size_t>(std::max(1, o.persistence.window))),
          peerCpuWait(static_cast<size_t>(std::max(1, o.persistence.window))) {}
    PersistenceTracker tracker;
    Ring<double> compute;
    Ring<double> peer;
    Ring<double> arrivalLag;
    Ring<double> exposed;      // the rank's exposed communication (its waits) per step
    Ring<double> peerExposed;  // the median of its peers'
    Ring<double> cpuWait;      // its training thread's wait for a CPU (StepReport.cpu_wait_ns)
    Ring<double> peerCpuWait;  // the median of its peers'
    std::string node;
    bool open = false;
    bool deferred = false;  // the ratio rose but the peers' waits do not yet say so (two ranks)
    bool weather = false;   // this episode was held as the host's weather (counted once)
    // Two-rank jobs only (sized at their first step): the rank's and its peer's compared time
    // per step, further back than the window (see "Two ranks on a busy host").
    struct PairSample {
      int64_t step;
      double own;
      double peer;
    };
    Ring<PairSample> pairHistory;
    Anomaly anomaly;
  };
  // Steps of pairHistory: enough before an onset that a deferred rise still finds some.
  static constexpr size_t kPairHistory = 128;
  // Whether, since the onset, the rank's own compared time rose over its own past by at least
  // half `excessNs` while its peer's did not (by half that rise): see "Two ranks on a busy host".
  static bool roseAlone(const RankState& st, int64_t onset, double excessNs);

  // The worker of `rank` in `layout` when, over the flat path's recent steps, it is still
  // slower than its stage's other workers (by minExcess); else -1.
  int32_t stillSlow(const JobLayout& layout, uint32_t rank, const RankState& st) const;
  // On a busy host, counts the rank's episode of being short of a CPU (see "Busy hosts").
  void countStarved(RankState& st);

  std::string job_;
  StragglerOptions o_;
  EventLog* log_;
  std::map<uint32_t, RankState> ranks_;
  Ring<double> noise_;
  uint64_t hostWeather_ = 0;
  // Each step's median share of a step the ranks waited for a CPU (recent steps): how busy the
  // job's hosts usually are, for the host's weather (cpu_contention.h).
  WaitShares waitShare_{256};
  uint32_t pairRank_ = 0;  // two ranks: the first one's ratio in the previous step
  double pairRatio_ = 0.0;
  // Layout mode (see above).
  std::shared_ptr<const JobLayout> layout_;
  std::vector<PeerRatioSet> stageSets_;  // one per stage: its workers' ratios
  std::vector<PeerRatioSet> rankSets_;   // one per stage: its lone worker's ranks' ratios
  std::vector<WorkerState> workers_;     // by worker index
  Ring<StepSummary> views_;              // for the evidence (medians since onset)
  LayoutStep view_;                      // scratch
  // Open when the layout changed (setLayout) and not carried over: resolved at the next
  // judged step.
  std::vector<Anomaly> retired_;
  int64_t lastStep_ = -1;    // the latest judged step
  int64_t layoutStep_ = -1;  // the first step judged with the current layout
};

}  // namespace trainscope::detect
