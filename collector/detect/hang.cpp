#include "collector/detect/hang.h"

#include <algorithm>
#include <climits>
#include <cstdio>

namespace trainscope::detect {

namespace {
std::string seconds(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ns) / 1e9);
  return buf;
}

// The smallest and largest f(rank) over the ranks of `v` (not empty), and the ranks kept.
template <typename F>
auto minOf(const std::vector<uint32_t>& v, F&& f) {
  auto best = f(v.front());
  for (uint32_t r : v) best = std::min(best, f(r));
  return best;
}
template <typename F>
auto maxOf(const std::vector<uint32_t>& v, F&& f) {
  auto best = f(v.front());
  for (uint32_t r : v) best = std::max(best, f(r));
  return best;
}
template <typename Keep>
std::vector<uint32_t> select(const std::vector<uint32_t>& v, Keep&& keep) {
  std::vector<uint32_t> out;
  for (uint32_t r : v) {
    if (keep(r)) out.push_back(r);
  }
  return out;
}
}  // namespace

HangDetector::HangDetector(std::string job, const HangOptions& options, EventLog* log)
    : job_(std::move(job)), o_(options), log_(log) {}

HangDetector::RankState& HangDetector::state(uint32_t rank) {
  auto it = ranks_.find(rank);
  if (it == ranks_.end()) {
    it = ranks_.emplace(rank, RankState(static_cast<size_t>(std::max(1, o_.typicalWindow)))).first;
  }
  return it->second;
}

int64_t HangDetector::threshold(const RankState& st) const {
  double typical = st.typical;
  double t = std::max({o_.stepMultiple * typical, static_cast<double>(o_.floorNs),
                       o_.longestStepMultiple * st.longest});
  return static_cast<int64_t>(t);
}

int64_t HangDetector::thresholdNs(uint32_t rank) const {
  auto it = ranks_.find(rank);
  return it == ranks_.end() ? 0 : threshold(it->second);
}

bool HangDetector::allEnded() const {
  if (ranks_.empty() || ranks_.size() < worldSize_) return false;
  for (const auto& [rank, st] : ranks_) {
    if (!st.ended) return false;
  }
  return true;
}

void HangDetector::observe(const wire::StepReport& report, const RankContext& ctx,
                           uint32_t worldSize) {
  worldSize_ = std::max(worldSize_, worldSize);
  RankState& st = state(report.rank());
  if (!ctx.node.empty()) st.node = ctx.node;
  int64_t activity = ctx.receivedNs != 0 ? ctx.receivedNs : report.end_ns() + ctx.clockOffsetNs;
  st.lastActivityNs = std::max(st.lastActivityNs, activity);
  if (report.step() <= st.lastStep) return;  // a replay or a late report: no progress
  st.lastStep = report.step();
  if (endedStep_ >= 0 && report.step() > endedStep_) endedStep_ = -1;  // the job goes on
  maxStep_ = std::max(maxStep_, report.step());
  ++st.stepsSeen;
  if (st.stepsSeen > o_.warmupSteps && report.duration_ns() > 0) {
    double d = static_cast<double>(report.duration_ns());
    st.durations.push(d);
    st.longest = std::max(st.longest, d);
    if (st.durations.size() < 8 || st.stepsSeen % 8 == 0)
      st.typical = median(st.durations.values());
  }
  if (st.gone) {
    st.gone = false;
    if (st.goneOpen) {
      log_->resolve(st.goneAnomaly, report.step(), activity);
      st.goneOpen = false;
    }
  }
  if (hangOpen_) {
    auto it = culpritSteps_.find(report.rank());
    if (it != culpritSteps_.end() && report.step() > it->second) culpritSteps_.erase(it);
    if (culpritSteps_.empty()) {
      log_->resolve(hang_, report.step(), activity);
      hangOpen_ = false;
    }
  }
}

void HangDetector::rankEnded(uint32_t rank, int64_t nowNs) {
  RankState& st = state(rank);
  st.ended = true;
  // Ended after everything the job did: its steps are done (see the header).
  if (st.lastStep >= 0 && st.lastStep >= maxStep_) endedStep_ = std::max(endedStep_, st.lastStep);
  if (hangOpen_ && culpritSteps_.erase(rank) > 0 && culpritSteps_.empty()) {
    log_->resolve(hang_, st.lastStep + 1, nowNs);
    hangOpen_ = false;
  }
}

void HangDetector::rankGone(uint32_t rank, int64_t nowNs) {
  RankState& st = state(rank);
  if (st.ended || st.gone) return;
  st.gone = true;
  if (finishingRank(st, nowNs)) return;  // exited after the job's steps were done
  Anomaly a;
  a.job = job_;
  a.kind = AnomalyKind::kHang;
  a.ranks = {rank};
  a.nodes = {st.node};
  a.onsetStep = st.lastStep + 1;
  a.detectedStep = st.lastStep;
  a.detectedNs = nowNs;
  a.magnitude = 1.0;
  a.confidence = 1.0;
  a.evidence = {{"process_gone", 1.0}, {"last_step", static_cast<double>(st.lastStep)}};
  if (st.lastActivityNs > 0) {
    a.evidence["silent_s"] = static_cast<double>(nowNs - st.lastActivityNs) / 1e9;
  }
  a.labels = {{"cause", "process_exited"}};
  a.summary = "rank " + std::to_string(rank) + (st.node.empty() ? "" : " (" + st.node + ")") +
              " process exited without a goodbye after step " + std::to_string(st.lastStep);
  st.goneAnomaly = log_->open(std::move(a), rankSubject({rank}) + "/gone");
  st.goneOpen = true;
}

void HangDetector::rankProgress(uint32_t rank, const wire::RankProgress& p,
                                const RankContext& ctx) {
  auto it = ranks_.find(rank);
  if (it == ranks_.end()) return;  // no step report yet: nothing a hang could name
  RankState& st = it->second;
  if (!ctx.node.empty()) st.node = ctx.node;
  auto toCollector = [&](int64_t probeNs) {
    return probeNs == 0 ? 0 : probeNs + ctx.clockOffsetNs;
  };
  const int64_t asOf = ctx.receivedNs != 0 ? ctx.receivedNs : toCollector(p.last_record_ns());
  if (st.progress.known && asOf < st.progress.asOfNs) return;  // an older hello, late
  Progress& g = st.progress;
  g.known = true;
  g.asOfNs = asOf;
  g.lastStep = p.last_step();
  g.openStep = p.open_step();
  g.lastRecordNs = toCollector(p.last_record_ns());
  g.collectiveSinceNs = toCollector(p.collective_since_ns());
  g.collectivesBegun = p.collectives_begun();
}

bool HangDetector::progressCounts(const RankState& st, int64_t nowNs) const {
  const Progress& g = st.progress;
  if (!g.known || g.asOfNs == 0) return false;
  const int64_t margin = std::max(o_.progressMarginNs, static_cast<int64_t>(2.0 * st.typical));
  return g.asOfNs >= st.lastActivityNs + margin && nowNs - g.asOfNs <= o_.progressMaxAgeNs;
}

bool HangDetector::finishingRank(const RankState& st, int64_t nowNs) const {
  if (endedStep_ < 0) return false;
  // Shown in a step after the end: it went on, and waits for the ranks that left.
  return !(progressCounts(st, nowNs) && st.progress.openStep > endedStep_);
}

void HangDetector::tick(int64_t nowNs, const NodeClock* nodes) {
  if (hangOpen_) return;
  Stall s;
  if (!measureSilence(nowNs, nodes, &s)) return;
  if (s.silent.empty()) {
    hangDueNs_ = 0;
    return;
  }
  if (hangDueNs_ == 0) hangDueNs_ = nowNs;
  sortStalled(nowNs, &s);
  if (s.waitForHello && nowNs - hangDueNs_ < o_.progressWaitNs) return;
  openHang(s, nameCulprits(s, nowNs), nowNs);
}

bool HangDetector::measureSilence(int64_t nowNs, const NodeClock* nodes, Stall* s) const {
  for (const auto& [rank, st] : ranks_) {
    if (st.goneOpen) return false;  // a dead peer explains the others' silence
    if (st.ended || st.gone || st.lastActivityNs == 0) continue;
    if (finishingRank(st, nowNs)) continue;
    s->live.push_back(rank);
    // Silence of a rank on its node's delivery clock (see the header).
    int64_t now = nowNs;
    if (nodes != nullptr) {
      auto it = nodes->find(st.node);
      if (it != nodes->end()) now = std::min(now, std::max(it->second, st.lastActivityNs));
    }
    // Peers reported steps it cannot have missed: in a synchronous job no rank runs two
    // steps ahead of a stuck one (it blocks in the next collective), so its reports are in
    // transit (a probe's queue behind its agent), not stopped.
    const int64_t quiet = maxStep_ >= st.lastStep + 2 ? 0 : now - st.lastActivityNs;
    s->quiet[rank] = quiet;
    if (quiet > threshold(st)) s->silent.push_back(rank);
  }
  return true;
}

void HangDetector::sortStalled(int64_t nowNs, Stall* s) const {
  // Stalled: silent, or silent for over half the threshold (stopped with the silent ones; its
  // last report merely arrived a little later).
  for (uint32_t r : s->live) {
    if (2 * s->quiet.at(r) > threshold(ranks_.at(r))) s->stalled.push_back(r);
  }
  // A stalled rank that sends progress but none from its silence yet: wait for its next hello.
  for (uint32_t r : s->stalled) {
    const RankState& st = ranks_.at(r);
    if (!progressCounts(st, nowNs)) {
      s->noProgress.push_back(r);
      if (st.progress.known) s->waitForHello = true;
    } else if (st.progress.collectiveSinceNs != 0) {
      s->waiting.push_back(r);
    } else {
      s->notWaiting.push_back(r);
    }
  }
}

int64_t HangDetector::reachedStep(uint32_t rank, int64_t nowNs) const {
  const RankState& st = ranks_.at(rank);
  return progressCounts(st, nowNs) ? std::max(st.lastStep, st.progress.lastStep) : st.lastStep;
}

HangDetector::Culprits HangDetector::nameCulprits(const Stall& s, int64_t nowNs) const {
  const bool jobStalled = s.stalled.size() == s.live.size();
  if (!s.waiting.empty() && (!s.notWaiting.empty() || !s.noProgress.empty())) {
    return outsideCollective(s);
  }
  if (s.noProgress.empty() && jobStalled) return behindInStalledJob(s, nowNs);
  return stoppedFirst(s);
}

HangDetector::Culprits HangDetector::outsideCollective(const Stall& s) const {
  // The stuck rank never reached the collective its peers wait in.
  const int64_t waitStep = minOf(s.waiting, [&](uint32_t r) {
    const Progress& g = ranks_.at(r).progress;
    return g.openStep >= 0 ? g.openStep : std::max(ranks_.at(r).lastStep, g.lastStep) + 1;
  });
  Culprits c;
  c.ranks = s.notWaiting.empty() ? s.noProgress : s.notWaiting;
  c.label = std::string(s.notWaiting.empty() ? "no progress" : "not in a collective") + " while " +
            std::to_string(s.waiting.size()) + " peer" + (s.waiting.size() == 1 ? "" : "s") +
            " wait in one since step " + std::to_string(waitStep);
  return c;
}

HangDetector::Culprits HangDetector::behindInStalledJob(const Stall& s, int64_t nowNs) const {
  // Every rank's progress is known and alike: all wait in a collective, or none does.
  const std::vector<uint32_t>& stalled = s.stalled;
  auto reached = [&](uint32_t r) { return reachedStep(r, nowNs); };
  const bool allWait = s.notWaiting.empty();
  const int64_t low = minOf(stalled, reached);
  const int64_t high = maxOf(stalled, reached);
  auto begun = [&](uint32_t r) { return ranks_.at(r).progress.collectivesBegun; };
  const uint64_t fewest = minOf(stalled, begun);
  const uint64_t most = maxOf(stalled, begun);
  std::vector<uint32_t> behind = select(stalled, [&](uint32_t r) { return begun(r) == fewest; });
  Culprits c;
  if (low < high) {
    c.ranks = select(stalled, [&](uint32_t r) { return reached(r) == low; });
    c.label = "stopped at step " + std::to_string(low) + " while " +
              std::to_string(stalled.size() - c.ranks.size()) + " peers reached step " +
              std::to_string(high);
  } else if (allWait && fewest < most && 2 * behind.size() < stalled.size()) {
    c.ranks = behind;
    c.label = "entered " + std::to_string(fewest) + " collectives while " +
              std::to_string(stalled.size() - behind.size()) + " peers entered up to " +
              std::to_string(most) + " (waits in an earlier one)";
  } else {
    c.ranks = stalled;
    c.jobWide = true;
    c.label = allWait ? "job-wide: every rank waits in a collective since step " +
                            std::to_string(low + 1) + " (none stuck in its own code)"
                      : "job-wide: no rank waits in a collective (all stuck in their own "
                        "code since step " +
                            std::to_string(low + 1) + ")";
  }
  return c;
}

HangDetector::Culprits HangDetector::stoppedFirst(const Stall& s) const {
  // No progress to tell them apart (older probes): the ones that stopped first.
  const int64_t minStep = minOf(s.stalled, [&](uint32_t r) { return ranks_.at(r).lastStep; });
  Culprits c;
  c.ranks = select(s.stalled, [&](uint32_t r) { return ranks_.at(r).lastStep == minStep; });
  // All stopped after the same step: on a synchronous job the stuck rank and the ranks
  // waiting for it in the next collective look alike in the step reports.
  c.label =
      c.ranks.size() > 1 && c.ranks.size() == s.stalled.size() ? "unknown" : rankSubject(c.ranks);
  return c;
}

void HangDetector::openHang(const Stall& s, const Culprits& c, int64_t nowNs) {
  const std::vector<uint32_t>& culprits = c.ranks;
  int64_t onset = INT64_MAX;
  for (uint32_t r : culprits) onset = std::min(onset, reachedStep(r, nowNs) + 1);
  int64_t maxStep = onset - 1;
  for (uint32_t r : s.live) maxStep = std::max(maxStep, ranks_.at(r).lastStep);
  // The hang's age: the longest silence among the stalled ranks.
  uint32_t longest = s.stalled.front();
  for (uint32_t r : s.stalled) {
    if (s.quiet.at(r) > s.quiet.at(longest)) longest = r;
  }
  const RankState& first = ranks_.at(longest);
  const int64_t silence = s.quiet.at(longest);
  const int64_t thr = threshold(first);
  const RankState& lead = ranks_.at(culprits.front());
  Anomaly a;
  a.job = job_;
  a.kind = AnomalyKind::kHang;
  a.ranks = culprits;
  for (uint32_t r : culprits) a.nodes.push_back(ranks_.at(r).node);
  a.onsetStep = onset;
  a.detectedStep = maxStep;
  a.detectedNs = nowNs;
  a.magnitude = thr > 0 ? static_cast<double>(silence) / static_cast<double>(thr) : 1.0;
  a.confidence = std::min(1.0, 0.5 + 0.25 * a.magnitude);
  a.evidence = {{"silent_s", static_cast<double>(silence) / 1e9},
                {"threshold_s", static_cast<double>(thr) / 1e9},
                {"typical_step_ms", first.typical / 1e6},
                {"last_step", static_cast<double>(onset - 1)},
                {"ranks_silent", static_cast<double>(s.silent.size())},
                {"ranks_stalled", static_cast<double>(s.stalled.size())},
                {"ranks_live", static_cast<double>(s.live.size())},
                {"job_stalled", s.stalled.size() == s.live.size() ? 1.0 : 0.0},
                {"process_gone", 0.0},
                {"ranks_waiting", static_cast<double>(s.waiting.size())},
                {"ranks_not_waiting", static_cast<double>(s.notWaiting.size())},
                {"ranks_no_progress", static_cast<double>(s.noProgress.size())}};
  if (!s.waiting.empty()) {
    const int64_t since =
        minOf(s.waiting, [&](uint32_t r) { return ranks_.at(r).progress.collectiveSinceNs; });
    a.evidence["wait_s"] = static_cast<double>(nowNs - since) / 1e9;
    a.evidence["peers_collectives_begun"] = static_cast<double>(
        maxOf(s.waiting, [&](uint32_t r) { return ranks_.at(r).progress.collectivesBegun; }));
  }
  if (progressCounts(lead, nowNs)) {
    if (lead.progress.lastRecordNs != 0) {
      a.evidence["culprit_idle_s"] = static_cast<double>(nowNs - lead.progress.lastRecordNs) / 1e9;
    }
    a.evidence["culprit_collectives_begun"] = static_cast<double>(lead.progress.collectivesBegun);
  }
  a.labels["culprit"] = c.label;
  a.labels["scope"] = c.jobWide ? "job" : "rank";
  std::string who = culprits.size() == 1 ? "rank " + std::to_string(culprits.front()) +
                                               (lead.node.empty() ? "" : " (" + lead.node + ")")
                                         : "ranks " + rankSubject(culprits);
  if (c.jobWide) who = "job-wide hang: " + who;
  a.summary = who + " stopped after step " + std::to_string(onset - 1) + ": silent " +
              seconds(silence) + " (threshold " + seconds(thr) + "); " +
              std::to_string(s.stalled.size()) + " of " + std::to_string(s.live.size()) +
              " ranks stalled";
  if (c.label != "unknown" && c.label != rankSubject(culprits)) a.summary += "; " + c.label;
  culpritSteps_.clear();
  for (uint32_t r : culprits) culpritSteps_[r] = reachedStep(r, nowNs);
  hang_ = log_->open(std::move(a), rankSubject(culprits));
  hangOpen_ = true;
  hangDueNs_ = 0;
}

}  // namespace trainscope::detect
