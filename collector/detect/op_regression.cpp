#include "collector/detect/op_regression.h"

#include <algorithm>
#include <memory>
#include <string_view>
#include <vector>

namespace trainscope::detect {

namespace {
// Shares are tiny numbers; scaled so the trackers' values stay in a comfortable range.
constexpr double kShareScale = 1e6;
}  // namespace

OpRegressionDetector::OpRegressionDetector(std::string job, const OpRegressionOptions& options,
                                           EventLog* log)
    : job_(std::move(job)), o_(options), log_(log) {}

double OpRegressionDetector::recentMedian(const Ring<double>& ring, int64_t n) {
  size_t take = static_cast<size_t>(std::clamp<int64_t>(n, 1, static_cast<int64_t>(ring.size())));
  std::vector<double> v;
  for (size_t i = ring.size() - take; i < ring.size(); ++i) v.push_back(ring[i]);
  return median(std::move(v));
}

void OpRegressionDetector::evict(int64_t step) {
  const size_t before = ops_.size();
  for (auto it = ops_.begin(); it != ops_.end();) {
    bool stale = step - it->second.lastSeenStep > o_.forgetAfterSteps;
    it = stale ? ops_.erase(it) : std::next(it);
  }
  if (ops_.size() > o_.maxOpsPerJob || ops_.size() != before) byPosition_.clear();
  while (ops_.size() > o_.maxOpsPerJob) {
    auto oldest = ops_.begin();
    for (auto it = ops_.begin(); it != ops_.end(); ++it) {
      if (it->second.lastSeenStep < oldest->second.lastSeenStep) oldest = it;
    }
    ops_.erase(oldest);
  }
}

void OpRegressionDetector::onStep(const AssembledStep& step) {
  touched_.clear();
  ++serial_;
  const double medianCompute = medianComputeNs(step, &scratch_);
  gatherSamples(step, medianCompute);
  for (OpState* op : touched_) judgeOp(*op, step, medianCompute);
  if (step.step % 64 == 0 || ops_.size() > o_.maxOpsPerJob) evict(step.step);
}

bool OpRegressionDetector::cpuBound(const wire::StepReport& r) {
  const uint32_t rank = r.rank();
  if (r.duration_ns() <= 0 || rank >= kMaxWaitRanks) return false;
  const double share = static_cast<double>(r.cpu_wait_ns()) / static_cast<double>(r.duration_ns());
  if (waitShares_.size() <= rank) {
    if (share <= 0.0) return false;  // no rank of the job waited yet: nothing kept
    waitShares_.resize(rank + 1, WaitShares(kWaitHistory));
  }
  WaitShares& recent = waitShares_[rank];
  recent.push(share);
  return share > o_.maxCpuWaitShare || recent.median() > o_.maxCpuWaitShare;
}

void OpRegressionDetector::gatherSamples(const AssembledStep& step, double medianCompute) {
  for (const RankStep& r : step.ranks) {
    // Operators on a device are timed as launches on the host (StepReport.device): not judged.
    if (!r.report.device().empty()) continue;
    // Nor on a thread that waited for a CPU, in this step or typically of late: its operator
    // times hold the host's scheduling (and a busy host's rare quiet step is a biased sample).
    if (cpuBound(r.report)) {
      ++cpuBoundSkipped_;
      continue;
    }
    // How much slower this rank computes than its peers this step: a straggler's ops all carry
    // it, so it is divided out of the rank's op series.
    const double rankFactor = medianCompute > 0.0 && r.report.compute_ns() > 0
                                  ? static_cast<double>(r.report.compute_ns()) / medianCompute
                                  : 1.0;
    size_t pos = 0;
    for (const auto& op : r.report.ops()) {
      const size_t at = pos++;
      if (op.count() == 0 || op.total_ns() <= 0) continue;
      double perCall = static_cast<double>(op.total_ns()) / static_cast<double>(op.count());
      if (perCall < static_cast<double>(o_.minCallNs)) continue;
      OpState* st = &opAt(at, op.name());
      if (st->sampledIn != serial_) {
        st->sampledIn = serial_;
        st->lastSeenStep = step.step;
        st->samples.clear();
        touched_.push_back(st);
      }
      st->samples.push_back(
          {r.report.rank(), perCall, static_cast<double>(op.count()), rankFactor, &r.ctx.node});
    }
  }
}

OpRegressionDetector::OpState& OpRegressionDetector::opAt(size_t at, const std::string& name) {
  OpState* st = at < byPosition_.size() ? byPosition_[at] : nullptr;
  if (st != nullptr && *st->name == name) return *st;
  auto it = ops_.find(std::string_view(name));
  if (it == ops_.end()) {
    it = ops_.emplace(name, OpState(o_.persistence)).first;
    it->second.name = &it->first;
  }
  if (byPosition_.size() <= at) byPosition_.resize(at + 1, nullptr);
  byPosition_[at] = &it->second;
  return it->second;
}

void OpRegressionDetector::judgeOp(OpState& op, const AssembledStep& step, double medianCompute) {
  std::vector<double>& values = scratch_;
  values.clear();
  for (const Sample& s : op.samples) values.push_back(s.perCall);
  const double medianCall = medianInPlace(values);
  const std::vector<uint32_t> opened = pushRankSeries(op, medianCall, step);
  op.perCall.push(medianCall);
  // Job level: the op's median per-call time relative to the job's median compute, so a
  // job-wide step-time shift (every op slower alike) is not an op regression.
  const auto jt = op.job.push(
      step.step, medianCompute > 0.0 ? medianCall / medianCompute * kShareScale : medianCall);
  // Ranks trending up together make this a job-wide regression; the per-rank trackers stay
  // silent and the job-level tracker reports it once. Counted only when a rank opened.
  const bool jobWide = !opened.empty() && isJobWide(op, jt);

  if (jt == PersistenceTracker::Transition::kOpened) {
    openJobWide(op, step);
  } else if (jt == PersistenceTracker::Transition::kResolved && op.jobOpen) {
    log_->resolve(op.jobAnomaly, op.job.resolvedStep(), step.nowNs);
    op.jobOpen = false;
  }

  for (uint32_t rank : opened) {
    if (jobWide) {
      op.ranks.at(rank)->tracker.forgetEpisode();
    } else {
      openRank(op, rank, medianCall, step);
    }
  }
}

std::vector<uint32_t> OpRegressionDetector::pushRankSeries(OpState& op, double medianCall,
                                                           const AssembledStep& step) {
  std::vector<uint32_t> opened;
  const std::vector<Sample>& list = op.samples;
  // A 1,024-rank job has ~25,000 of these series, far more than the cache holds, and each
  // push reads its series and writes two of its rings: cache misses were most of the cost.
  // The series a few samples ahead are prefetched (series first, then its ring slots) so the
  // misses overlap instead of following one another.
  auto series = [&](size_t i) -> const RankSeries* {
    const uint32_t r = list[i].rank;
    return r < op.ranks.size() ? op.ranks[r].get() : nullptr;
  };
  for (size_t i = 0; i < list.size(); ++i) {
    if (i + 8 < list.size()) {
      if (const RankSeries* ahead = series(i + 8)) {
        // Every line of it: the tracker's fields, its rings' pointers and the node span
        // several (the anomaly kept for resolution is at the end and is left out).
        const char* p = reinterpret_cast<const char*>(ahead);
        const char* end = reinterpret_cast<const char*>(&ahead->anomaly);
        for (; p < end; p += 64) __builtin_prefetch(p);
      }
    }
    if (i + 4 < list.size()) {
      if (const RankSeries* ahead = series(i + 4)) ahead->tracker.prefetch();
    }
    const Sample& s = list[i];
    if (op.ranks.size() <= s.rank) op.ranks.resize(s.rank + 1);
    if (!op.ranks[s.rank]) {
      op.ranks[s.rank] = std::make_unique<RankSeries>(o_.persistence);
      ++op.rankCount;
    }
    RankSeries& rsr = *op.ranks[s.rank];
    if (rsr.node != *s.node) rsr.node = *s.node;
    rsr.lastPerCall = s.perCall;
    rsr.lastCount = s.count;
    // Relative to the same op on the other ranks this step (which carries job-wide changes)
    // and to how much slower this rank computes than its peers (which carries a straggler).
    double rel = medianCall > 0.0 ? s.perCall / medianCall / s.rankFactor : s.perCall;
    auto t = rsr.tracker.push(step.step, rel);
    if (t == PersistenceTracker::Transition::kOpened) {
      opened.push_back(s.rank);
    } else if (t == PersistenceTracker::Transition::kResolved && rsr.open) {
      log_->resolve(rsr.anomaly, rsr.tracker.resolvedStep(), step.nowNs);
      rsr.open = false;
    }
  }
  return opened;
}

bool OpRegressionDetector::isJobWide(const OpState& op,
                                     PersistenceTracker::Transition jobTransition) const {
  const bool jobOpened = jobTransition == PersistenceTracker::Transition::kOpened;
  if (op.rankCount < 2) return jobOpened || op.jobOpen;
  if (op.jobOpen || jobOpened) return true;
  size_t trending = 0;
  for (const auto& rsr : op.ranks) {
    if (rsr && (rsr->tracker.active() || rsr->tracker.cusum() >= o_.persistence.cusumH / 3)) {
      ++trending;
    }
  }
  return static_cast<double>(trending) >=
         o_.jobWideFraction * static_cast<double>(std::max<size_t>(op.rankCount, 1));
}

void OpRegressionDetector::openJobWide(OpState& op, const AssembledStep& step) {
  const std::string& name = *op.name;
  Anomaly a;
  a.job = job_;
  a.kind = AnomalyKind::kOpRegression;
  // Every rank and node.
  for (uint32_t i = 0; i < std::max<uint32_t>(step.worldSize, 1); ++i) a.ranks.push_back(i);
  for (const RankStep& r : step.ranks) a.nodes.push_back(r.ctx.node);
  a.onsetStep = op.job.onsetStep();
  a.detectedStep = step.step;
  a.detectedNs = step.nowNs;
  a.magnitude = op.job.baseline() > 0 ? op.job.level() / op.job.baseline() : 1.0;
  a.confidence = op.job.confidence();
  double currentNs = recentMedian(op.perCall, step.step - a.onsetStep + 1);
  double baseNs = a.magnitude > 0 ? currentNs / a.magnitude : currentNs;
  std::vector<double> counts;
  for (const Sample& s : op.samples) counts.push_back(s.count);
  const double calls = median(std::move(counts));
  a.evidence = {{"baseline_us", baseNs / 1e3},
                {"current_us", currentNs / 1e3},
                {"ratio", a.magnitude},
                {"noise_sigma", op.job.relSigma()},
                {"ranks_reporting", static_cast<double>(op.samples.size())},
                {"calls_per_step", calls},
                {"added_ms_per_step", (currentNs - baseNs) * calls / 1e6}};
  a.labels = {{"op", name}, {"scope", "all_ranks"}};
  a.summary = "op " + name + " slowed on all ranks: " + formatRatio(a.magnitude) + " per call (" +
              formatMs(baseNs) + " -> " + formatMs(currentNs) + ") from step " +
              std::to_string(a.onsetStep);
  op.jobAnomaly = log_->open(std::move(a), name + "/all");
  op.jobOpen = true;
}

void OpRegressionDetector::openRank(OpState& op, uint32_t rank, double medianCall,
                                    const AssembledStep& step) {
  const std::string& name = *op.name;
  RankSeries& rsr = *op.ranks.at(rank);
  const PersistenceTracker& t = rsr.tracker;
  Anomaly a;
  a.job = job_;
  a.kind = AnomalyKind::kOpRegression;
  a.ranks = {rank};
  a.nodes = {rsr.node};
  a.onsetStep = t.onsetStep();
  a.detectedStep = step.step;
  a.detectedNs = step.nowNs;
  a.magnitude = t.baseline() > 0 ? t.level() / t.baseline() : 1.0;
  a.confidence = t.confidence();
  double currentNs = rsr.lastPerCall;  // this step's; the magnitude is the robust figure
  double baseNs = a.magnitude > 0 ? currentNs / a.magnitude : currentNs;
  // The time this adds per step, against what the rank's peers take now (times its usual
  // ratio to them): the series itself is divided by the rank's compute ratio, which this
  // op's own rise is part of, so its level understates a large op's rise.
  const double addedNs = std::max(0.0, currentNs - medianCall * t.baseline());
  a.evidence = {{"baseline_us", baseNs / 1e3},
                {"current_us", currentNs / 1e3},
                {"ratio", a.magnitude},
                {"noise_sigma", t.relSigma()},
                {"peer_median_us", medianCall / 1e3},
                {"calls_per_step", rsr.lastCount},
                {"added_ms_per_step", addedNs * rsr.lastCount / 1e6}};
  a.labels = {{"op", name}, {"scope", "rank"}};
  a.summary = "op " + name + " slowed on rank " + std::to_string(rank) +
              (rsr.node.empty() ? "" : " (" + rsr.node + ")") + ": " + formatRatio(a.magnitude) +
              " per call (" + formatMs(baseNs) + " -> " + formatMs(currentNs) + ") from step " +
              std::to_string(a.onsetStep);
  rsr.anomaly = log_->open(std::move(a), name + "/" + rankSubject({rank}));
  rsr.open = true;
}

}  // namespace trainscope::detect
