#include "collector/detect/step_assembler.h"

#include <algorithm>
#include <cmath>

#include "collector/detect/robust.h"

namespace trainscope::detect {

StepAssembler::StepAssembler(std::string job, const AssemblyOptions& options)
    : job_(std::move(job)), o_(options) {}

void StepAssembler::add(const wire::StepReport& report, const RankContext& ctx, uint32_t worldSize,
                        std::vector<AssembledStep>* out) {
  add(wire::StepReport(report), ctx, worldSize, out);
}

void StepAssembler::add(wire::StepReport&& report, const RankContext& ctx, uint32_t worldSize,
                        std::vector<AssembledStep>* out) {
  ++stats_.reports;
  int64_t step = report.step();
  int64_t endNs = report.end_ns() + ctx.clockOffsetNs;
  if (step <= lastReleased_) {
    ++stats_.late;
    // A replay resends old reports (old end times); a restarted job sends new ones at low
    // step numbers (end times later than anything seen).
    bool restartLike = step < lastReleased_ - o_.graceSteps && endNs > maxEndNs_;
    consecutiveLate_ = restartLike ? consecutiveLate_ + 1 : 0;
    if (consecutiveLate_ < std::max<uint64_t>(16, 2 * static_cast<uint64_t>(worldSize))) return;
    // A restart: forget the old timeline and take steps from here on.
    ++stats_.rewinds;
    pending_.clear();
    lastReleased_ = step - 1;
    maxSeen_ = step;
    std::fill(rankMax_.begin(), rankMax_.end(), -1);
    consecutiveLate_ = 0;
  } else {
    consecutiveLate_ = 0;
  }
  maxEndNs_ = std::max(maxEndNs_, endNs);
  auto [it, inserted] = pending_.try_emplace(step);
  AssembledStep& s = it->second;
  if (inserted) {
    s.job = job_;
    s.step = step;
    if (!spare_.empty()) {
      s.ranks = std::move(spare_.back());
      spare_.pop_back();
    }
    s.ranks.reserve(worldSize);
  }
  s.worldSize = std::max(s.worldSize, worldSize);
  // Ranks are appended as they come (sorted when the step is handed out); a bitmap by rank
  // finds duplicates without a scan, which would cost O(ranks) per report.
  const uint32_t rank = report.rank();
  if (s.seen.size() <= rank) s.seen.resize(std::max<size_t>(rank + 1, worldSize), 0);
  if (s.seen[rank]) {
    ++stats_.duplicates;
    return;
  }
  s.seen[rank] = 1;
  int64_t now = ctx.receivedNs != 0 ? ctx.receivedNs : report.end_ns() + ctx.clockOffsetNs;
  s.nowNs = std::max(s.nowNs, now);
  if (rankMax_.size() <= rank) {
    const size_t n = std::max<size_t>(rank + 1, worldSize);
    rankMax_.resize(n, -1);
    rankLastNs_.resize(n, 0);
    rankNode_.resize(n, -1);
  }
  rankMax_[rank] = std::max(rankMax_[rank], step);
  noteArrival(rank, ctx.node, now);
  if (firstNs_ == 0) firstNs_ = now;
  latestNs_ = std::max(latestNs_, now);
  if (report.duration_ns() > 0) {
    const double d = static_cast<double>(report.duration_ns());
    stepNs_ = stepNs_ <= 0.0 ? d : stepNs_ + (d - stepNs_) / 64.0;
  }
  s.ranks.push_back(RankStep{std::move(report), ctx});
  maxSeen_ = std::max(maxSeen_, step);

  // Hand out from the front, in order: complete steps, steps the grace has passed, and
  // anything past the memory bound.
  while (!pending_.empty()) {
    auto front = pending_.begin();
    bool complete = front->second.ranks.size() >= front->second.worldSize;
    bool overBound = pending_.size() > o_.maxPendingSteps;
    bool graceOver = !complete && !overBound && front->first + o_.graceSteps <= maxSeen_ &&
                     missingMayBeLeftOut(front->second);
    if (!(complete || graceOver || overBound)) break;
    release(front, out);
  }
}

void StepAssembler::noteArrival(uint32_t rank, const std::string& node, int64_t nowNs) {
  rankLastNs_[rank] = std::max(rankLastNs_[rank], nowNs);
  int32_t& n = rankNode_[rank];
  // A rank keeps its node: one string compare per report, a search only on a change.
  if (n < 0 || nodeNames_[static_cast<size_t>(n)] != node) {
    auto it = std::find(nodeNames_.begin(), nodeNames_.end(), node);
    if (it == nodeNames_.end()) {
      nodeNames_.push_back(node);
      nodeLastNs_.push_back(0);
      it = nodeNames_.end() - 1;
    }
    n = static_cast<int32_t>(it - nodeNames_.begin());
  }
  int64_t& last = nodeLastNs_[static_cast<size_t>(n)];
  last = std::max(last, nowNs);
}

bool StepAssembler::missingMayBeLeftOut(const AssembledStep& s) const {
  const int64_t silentNs =
      std::max(static_cast<int64_t>(std::max(0, o_.graceSteps) * stepNs_), o_.silentFloorNs);
  for (uint32_t r = 0; r < s.worldSize; ++r) {
    if (r < s.seen.size() && s.seen[r]) continue;
    const bool known = r < rankMax_.size() && rankMax_[r] >= 0;
    if (known && rankMax_[r] > s.step) continue;  // moved on: this report was lost
    // Silent while its node kept delivering (a rank never seen: while any rank did).
    const int64_t last = known ? rankLastNs_[r] : firstNs_;
    const int64_t nodeNow = known ? nodeLastNs_[static_cast<size_t>(rankNode_[r])] : latestNs_;
    if (nodeNow - last > silentNs) continue;  // silent: stopped or gone
    return false;  // behind but reporting, or its node's delivery lags: wait for it
  }
  return true;
}

void StepAssembler::release(std::map<int64_t, AssembledStep>::iterator it,
                            std::vector<AssembledStep>* out) {
  AssembledStep s = std::move(it->second);
  pending_.erase(it);
  lastReleased_ = std::max(lastReleased_, s.step);
  double need = std::ceil(o_.minRankFraction * static_cast<double>(s.worldSize));
  if (static_cast<double>(s.ranks.size()) < need) {
    ++stats_.droppedSteps;
    return;
  }
  if (s.partial()) ++stats_.partialSteps;
  std::sort(s.ranks.begin(), s.ranks.end(),
            [](const RankStep& a, const RankStep& b) { return a.report.rank() < b.report.rank(); });
  s.seen.clear();
  s.seen.shrink_to_fit();
  out->push_back(std::move(s));
}

double medianComputeNs(const AssembledStep& step, std::vector<double>* scratch) {
  scratch->clear();
  for (const RankStep& r : step.ranks) {
    if (r.report.compute_ns() > 0) scratch->push_back(static_cast<double>(r.report.compute_ns()));
  }
  return medianInPlace(*scratch);
}

void StepAssembler::recycle(std::vector<AssembledStep>& done) {
  for (AssembledStep& s : done) {
    if (spare_.size() >= 2) break;
    s.ranks.clear();
    spare_.push_back(std::move(s.ranks));
  }
  done.clear();
}

void StepAssembler::flush(std::vector<AssembledStep>* out) {
  while (!pending_.empty()) release(pending_.begin(), out);
}

}  // namespace trainscope::detect
