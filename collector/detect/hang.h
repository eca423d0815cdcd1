// hang: a rank, or the whole job, that stopped reporting steps. Evaluated on tick(now): a
// rank is silent when now - its last report (collector clock) exceeds
// max(stepMultiple * its typical step, floorNs, longestStepMultiple * its longest step after
// warm-up), so slow checkpoint steps are not hangs. One hang anomaly is open per job at a
// time. It opens when a rank is silent, and judges every stalled rank: the silent ones and
// those silent for over half their threshold (they stopped with it, their last report just
// came a little later).
//
// Naming the culprit. Step reports alone cannot: in a synchronous job the stuck rank (stuck in
// its own code: data loader, a deadlock, a kernel that never returns) and its peers, which
// wait for it in the step's first collective, all stop after the same step. The probe's
// progress (rankProgress, from every RankHello, every 2 s) tells them apart: peers have an
// open collective, the stuck rank has none. Progress counts for a rank only when it was true
// at least max(2 typical steps, progressMarginNs) after the rank's last report arrived (it
// describes the silence, not the step before) and is at most progressMaxAgeNs old; when a
// stalled rank that sends progress has none that counts yet, the hang waits up to
// progressWaitNs for its next hello (HangOptions; 0.5 s, 10 s and 5 s by default). Then:
//  - some stalled ranks wait in a collective and others do not (or sent nothing that
//    counts): those others are named, labels["culprit"] = "not in a collective while N peers
//    wait in one since step S" (or "no progress ...");
//  - the whole job stalled, each rank's progress known, and all wait in a collective, or
//    none does: the ones behind are named (a lower step reached; or, when all wait, fewer
//    collectives entered by less than half of them), else every rank is named and
//    labels["culprit"] says "job-wide: ..." (labels["scope"] = "job");
//  - otherwise (no progress: older probes) as before: the stalled ranks with the lowest
//    latest step; when all stopped after the same step, all are named, culprit "unknown".
// Evidence adds ranks_waiting, ranks_not_waiting, ranks_no_progress, wait_s (longest wait in
// the collective), culprit_idle_s (since the culprit's newest record), and the culprits' and
// the waiting peers' collectives_begun. Progress never opens a hang by itself. It resolves
// when every culprit reports a newer step than it had reached.
// A process that exited (rankGone, from its agent) is not a hang of that rank: it is reported
// at once as kind hang with evidence process_gone=1 and a summary saying the process exited,
// and while it is open the rest of the job is not reported as hung (the dead peer explains
// their silence). It resolves if the rank reports again. A rank that ended cleanly
// (rankEnded, from its goodbye) is never reported.
// The end of a job. Ranks say goodbye one by one, seconds apart (a rank saves a last
// checkpoint; a host tears down hundreds of ranks in turn). Once a rank ended cleanly after
// the job's latest step, the job's steps are done: in a synchronous job no peer can be stuck
// in a step that rank completed. From then on the job is finishing: no rank is reported hung
// or gone, except one whose progress shows it in a later step (it went on without the ended
// rank, and waits for it); a report of a later step means the job goes on (ending revoked).
// Delivery. Silence is measured on the collector's clock of the rank's node: for a node whose
// agent delivers host samples (nodeDelivered, every second), "now" for its ranks is the
// latest arrival of anything from that node, so an agent, spool or collector that lags and
// then delivers in a burst is not a silence of its ranks; a hung rank's agent keeps
// delivering its samples, so a real silence still grows. Ranks of other nodes use tick's now.
// And a rank two or more steps behind the latest step any rank reported is not silent: in a
// synchronous job peers block in the next collective of a stuck rank, at most one step ahead
// of it, so its own reports are still on their way (limit: an asynchronous job whose other
// ranks run on without a stuck one shows no hang for it).
// Memory: one progress per rank. Used from the caller's thread only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "collector/detect/events.h"
#include "collector/detect/options.h"
#include "collector/detect/robust.h"
#include "schema/trainscope.pb.h"

namespace trainscope::detect {

class HangDetector {
 public:
  HangDetector(std::string job, const HangOptions& options, EventLog* log);

  // Where each node's delivered data reaches (collector clock): node -> latest arrival of
  // anything from it, for the nodes whose agents send host samples (see above).
  using NodeClock = std::map<std::string, int64_t, std::less<>>;

  void observe(const wire::StepReport& report, const RankContext& ctx, uint32_t worldSize);
  // `nodes`, when given, is the nodes' delivery clock (see above); ranks on nodes not in it
  // are judged at `nowNs`.
  void tick(int64_t nowNs, const NodeClock* nodes = nullptr);
  void rankEnded(uint32_t rank, int64_t nowNs);
  void rankGone(uint32_t rank, int64_t nowNs);
  // The rank's latest progress (see above); ctx.receivedNs is when it was true (collector
  // clock; 0: its last_record_ns), ctx.clockOffsetNs converts its probe-clock times. Kept only
  // for a rank that reported a step already; an older one than the kept one is ignored.
  void rankProgress(uint32_t rank, const wire::RankProgress& progress, const RankContext& ctx);

  bool allEnded() const;
  int64_t maxStep() const { return maxStep_; }  // the latest step any rank reported
  // Silence threshold of a rank now (for tests and the API); 0 for an unknown rank.
  int64_t thresholdNs(uint32_t rank) const;

 private:
  // A rank's progress with its times on the collector clock.
  struct Progress {
    bool known = false;
    int64_t asOfNs = 0;  // when it was true
    int64_t lastStep = -1;
    int64_t openStep = -1;
    int64_t lastRecordNs = 0;       // 0: none
    int64_t collectiveSinceNs = 0;  // 0: not in a collective
    uint64_t collectivesBegun = 0;
  };
  struct RankState {
    explicit RankState(size_t window) : durations(window) {}
    int64_t lastStep = -1;
    int64_t lastActivityNs = 0;
    Ring<double> durations;
    double longest = 0.0;
    double typical = 0.0;  // median of durations, refreshed every few steps (tick reads it)
    int64_t stepsSeen = 0;
    std::string node;
    bool ended = false;
    bool gone = false;
    bool goneOpen = false;
    Anomaly goneAnomaly;
    Progress progress;
  };
  // What a tick found: the ranks judged and how long each has been quiet.
  struct Stall {
    std::map<uint32_t, int64_t> quiet;  // live rank -> silence on its node's clock (0: in transit)
    std::vector<uint32_t> live;         // not ended, gone or finishing
    std::vector<uint32_t> silent;       // quiet past their threshold
    std::vector<uint32_t> stalled;      // quiet past half of it
    // The stalled ranks by their progress (see the header).
    std::vector<uint32_t> waiting, notWaiting, noProgress;
    bool waitForHello = false;  // a stalled rank sends progress but none counts yet
  };
  // Who the hang names (see the header).
  struct Culprits {
    std::vector<uint32_t> ranks;
    std::string label;  // labels["culprit"]
    bool jobWide = false;
  };
  // tick, in order: measure silences (false: a dead peer explains them), sort the stalled
  // ranks by progress, name the culprits, open the hang.
  bool measureSilence(int64_t nowNs, const NodeClock* nodes, Stall* s) const;
  void sortStalled(int64_t nowNs, Stall* s) const;
  Culprits nameCulprits(const Stall& s, int64_t nowNs) const;
  Culprits outsideCollective(const Stall& s) const;
  Culprits behindInStalledJob(const Stall& s, int64_t nowNs) const;
  Culprits stoppedFirst(const Stall& s) const;
  void openHang(const Stall& s, const Culprits& c, int64_t nowNs);
  // The step a rank reached: its reports', or its progress's when that is newer.
  int64_t reachedStep(uint32_t rank, int64_t nowNs) const;

  int64_t threshold(const RankState& st) const;
  RankState& state(uint32_t rank);
  // Whether the rank's progress describes its silence at `nowNs` (see above).
  bool progressCounts(const RankState& st, int64_t nowNs) const;
  // Whether the job is finishing and this rank with it (not shown in a later step).
  bool finishingRank(const RankState& st, int64_t nowNs) const;

  std::string job_;
  HangOptions o_;
  EventLog* log_;
  uint32_t worldSize_ = 0;
  std::map<uint32_t, RankState> ranks_;
  bool hangOpen_ = false;
  Anomaly hang_;
  std::map<uint32_t, int64_t> culpritSteps_;  // culprit rank -> its last step at the hang
  int64_t hangDueNs_ = 0;   // first tick that found a silent rank; 0: none is silent
  int64_t maxStep_ = -1;    // the latest step any rank reported
  int64_t endedStep_ = -1;  // the job is finishing: a rank ended cleanly after this step
};

}  // namespace trainscope::detect
