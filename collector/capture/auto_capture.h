// Which anomalies get the automatic captures (docs/CAPTURE.md, "Automatic captures"). Every
// anomaly row the detect runner stores is offered; an open one becomes a candidate of its job
// and waits a short decision window (a false alarm often resolves within a few steps, and a
// more important anomaly of the same fault may open just after); then the candidates of the
// job are taken most important first (score: estimated gain, weighed by confidence), within a
// budget of captures per job and interval. An anomaly whose estimated effect on the step is
// below a floor takes none, and once the job had a capture in the interval only a clearly
// more important anomaly takes another. Before, the first anomaly of a job took its one
// capture per 600 s, in every real run a false alarm, and the real fault got none.
// Pure: no clock, store or thread of its own; not thread-safe (CaptureManager guards it).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "collector/storage/store.h"

namespace trainscope::capture {

struct AutoCaptureOptions {
  // The window the budget counts in (0 turns automatic captures off). Longer spends the budget
  // over more of the job.
  int64_t intervalNs = 600'000'000'000;
  // Trace captures per job per interval; stack dumps (hangs) have a budget of their own of the
  // same size. More captures more anomalies, costs the job more tracing overhead and disk.
  uint32_t budget = 3;
  // Anomalies whose evidence.estimated_gain (the fraction of step time fixing it would save)
  // is below this take no capture: a 1.15x operator adding 0.05 ms to a 100 ms step is not
  // worth tracing. Hangs always qualify.
  double minGain = 0.02;
  // How long an open anomaly waits before it may take a capture. Longer lets more false
  // alarms resolve first and sees more candidates at once; it also pushes the capture, and
  // so the history it needs to reach the onset, later.
  int64_t decisionNs = 1'000'000'000;
  // Once the job had a trace capture within the interval, another needs a score at least this
  // many times the best one captured in it. Lower captures more similar anomalies.
  double betterFactor = 2.0;
  // A candidate not captured within this long (a capture kept running on its ranks) is
  // dropped: its onset would be out of the history's reach anyway.
  int64_t candidateTtlNs = 60'000'000'000;
  // Candidates kept per job at most (the least important goes first).
  size_t maxCandidates = 64;
};

// Counters since start: why anomalies got no automatic capture.
struct AutoCaptureSkips {
  uint64_t smallGain = 0;  // estimated gain below minGain
  uint64_t budget = 0;     // the job's budget for the interval was spent
  uint64_t notBetter = 0;  // not clearly more important than the interval's capture
  uint64_t resolved = 0;   // resolved or ended within the decision window
  uint64_t expired = 0;    // still waiting after candidateTtlNs (or pushed out)
  uint64_t total() const { return smallGain + budget + notBetter + resolved + expired; }
};

// The anomaly's importance: evidence.estimated_gain (else magnitude - 1), in 0..1, times
// 0.5 + 0.5 * confidence, so a weak signal of a large effect still ranks above a certain one of
// a negligible effect.
double anomalyGain(const storage::AnomalyRow& row);
double anomalyScore(const storage::AnomalyRow& row);

class AutoCapturePolicy {
 public:
  explicit AutoCapturePolicy(AutoCaptureOptions options) : options_(options) {}

  // A stored anomaly row at `nowNs` (opened, refreshed, resolved, ended, given a capture): an
  // open row without a capture becomes or updates its job's candidate (the latest figures
  // count) unless it was decided already (captured or passed over); any other drops it.
  void offer(const storage::AnomalyRow& row, int64_t nowNs);
  // The anomalies to capture now: per job at most one, the most important candidate whose
  // window passed and that the budget allows; candidates that can never qualify are dropped
  // (counted). The caller starts each and reports back with started() or drop(); a row it
  // could not start for now (a capture runs on its ranks) needs neither: it stays a candidate
  // and comes again from a later call.
  std::vector<storage::AnomalyRow> due(int64_t nowNs);
  // A capture started for `row` at `nowNs`: spends the budget, drops the candidate.
  void started(const storage::AnomalyRow& row, int64_t nowNs);
  // `row` was refused for good (its ranks ended, a store error): no longer a candidate.
  void drop(const storage::AnomalyRow& row);

  const AutoCaptureSkips& skips() const { return skips_; }
  size_t candidates() const;

 private:
  struct Candidate {
    storage::AnomalyRow row;
    int64_t sinceNs = 0;  // first offered
  };
  struct Spent {
    int64_t atNs = 0;
    double score = 0;
    bool stacks = false;
  };
  struct Job {
    std::map<std::string, Candidate> candidates;  // by anomaly id
    std::deque<Spent> spent;                      // captures started, oldest first
  };
  // Ends `id`'s candidacy for good: a later row of it (a refresh, which carries no capture id)
  // makes it no candidate again, so an anomaly is weighed once and captured at most once.
  void decided(const std::string& id);

  AutoCaptureOptions options_;
  std::map<std::string, Job> jobs_;
  AutoCaptureSkips skips_;
  // Anomalies captured or passed over, the oldest forgotten first past kMaxDecided.
  std::set<std::string> decided_;
  std::deque<std::string> decidedOrder_;
  static constexpr size_t kMaxDecided = 65536;
};

}  // namespace trainscope::capture
