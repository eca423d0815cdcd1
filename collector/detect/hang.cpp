#include "collector/detect/hang.h"

#include <algorithm>
#include <cstdio>

namespace trainscope::detect {

namespace {
std::string seconds(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ns) / 1e9);
  return buf;
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
  ++st.stepsSeen;
  if (st.stepsSeen > o_.warmupSteps && report.duration_ns() > 0) {
    double d = static_cast<double>(report.duration_ns());
    st.durations.push(d);
    st.longest = std::max(st.longest, d);
    if (st.durations.size() < 8 || st.stepsSeen % 8 == 0) st.typical = median(st.durations.values());
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
  if (hangOpen_ && culpritSteps_.erase(rank) > 0 && culpritSteps_.empty()) {
    log_->resolve(hang_, st.lastStep + 1, nowNs);
    hangOpen_ = false;
  }
}

void HangDetector::rankGone(uint32_t rank, int64_t nowNs) {
  RankState& st = state(rank);
  if (st.ended || st.gone) return;
  st.gone = true;
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

void HangDetector::tick(int64_t nowNs) {
  if (hangOpen_) return;
  std::vector<uint32_t> live, silent;
  for (const auto& [rank, st] : ranks_) {
    if (st.goneOpen) return;  // a dead peer explains the others' silence
    if (st.ended || st.gone || st.lastActivityNs == 0) continue;
    live.push_back(rank);
    if (nowNs - st.lastActivityNs > threshold(st)) silent.push_back(rank);
  }
  if (silent.empty()) return;
  int64_t minStep = ranks_.at(silent.front()).lastStep;
  for (uint32_t r : silent) minStep = std::min(minStep, ranks_.at(r).lastStep);
  std::vector<uint32_t> culprits;
  for (uint32_t r : silent) {
    if (ranks_.at(r).lastStep == minStep) culprits.push_back(r);
  }
  int64_t maxStep = minStep;
  for (uint32_t r : live) maxStep = std::max(maxStep, ranks_.at(r).lastStep);
  const RankState& first = ranks_.at(culprits.front());
  int64_t silence = nowNs - first.lastActivityNs;
  int64_t thr = threshold(first);
  bool jobStalled = silent.size() == live.size();
  Anomaly a;
  a.job = job_;
  a.kind = AnomalyKind::kHang;
  a.ranks = culprits;
  for (uint32_t r : culprits) a.nodes.push_back(ranks_.at(r).node);
  a.onsetStep = minStep + 1;
  a.detectedStep = maxStep;
  a.detectedNs = nowNs;
  a.magnitude = thr > 0 ? static_cast<double>(silence) / static_cast<double>(thr) : 1.0;
  a.confidence = std::min(1.0, 0.5 + 0.25 * a.magnitude);
  double typical = first.typical;
  a.evidence = {{"silent_s", static_cast<double>(silence) / 1e9},
                {"threshold_s", static_cast<double>(thr) / 1e9},
                {"typical_step_ms", typical / 1e6},
                {"last_step", static_cast<double>(minStep)},
                {"ranks_silent", static_cast<double>(silent.size())},
                {"ranks_live", static_cast<double>(live.size())},
                {"job_stalled", jobStalled ? 1.0 : 0.0},
                {"process_gone", 0.0}};
  if (culprits.size() > 1 && culprits.size() == silent.size()) {
    // Every silent rank stopped after the same step: on a synchronous job the stuck rank and
    // the ranks waiting for it in the next collective look alike in the step reports, so all
    // are named. (A probe heartbeat saying whether the rank waits inside a collective would
    // tell them apart.)
    a.labels["culprit"] = "unknown";
  } else {
    a.labels["culprit"] = rankSubject(culprits);
  }
  std::string who = culprits.size() == 1
                        ? "rank " + std::to_string(culprits.front()) +
                              (first.node.empty() ? "" : " (" + first.node + ")")
                        : "ranks " + rankSubject(culprits);
  a.summary = who + " stopped after step " + std::to_string(minStep) + ": silent " +
              seconds(silence) + " (threshold " + seconds(thr) + "); " +
              std::to_string(silent.size()) + " of " + std::to_string(live.size()) +
              " ranks silent";
  culpritSteps_.clear();
  for (uint32_t r : culprits) culpritSteps_[r] = ranks_.at(r).lastStep;
  hang_ = log_->open(std::move(a), rankSubject(culprits));
  hangOpen_ = true;
}

}  // namespace trainscope::detect
