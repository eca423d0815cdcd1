#include "collector/detect/workload_imbalance.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace trainscope::detect {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr size_t kRecords = 64;                     // steps kept for the evidence and the excursion
constexpr size_t kHistory = 64;                     // ratios per replica for its persistent offset
constexpr size_t kMinHistory = 16;                  // ratios needed before an offset is taken out
constexpr double kSqrtPiOver2 = 0.886226925452758;  // Gini mean difference -> sigma
constexpr int64_t kRefreshSteps = 16;  // an open anomaly's figures are redone this often

std::string percent(double fraction) {
  return std::to_string(static_cast<int>(std::lround(fraction * 100))) + " %";
}

}  // namespace

WorkloadImbalanceDetector::WorkloadImbalanceDetector(std::string job,
                                                     const WorkloadImbalanceOptions& options,
                                                     EventLog* log)
    : job_(std::move(job)),
      o_(options),
      log_(log),
      records_(kRecords),
      recentSpread_(static_cast<size_t>(std::max(1, options.window))) {}

void WorkloadImbalanceDetector::setLayout(std::shared_ptr<const JobLayout> layout) {
  layout_ = std::move(layout);
  reset();
}

void WorkloadImbalanceDetector::reset() {
  previous_.clear();
  history_.clear();
  records_.clear();
  recentSpread_.clear();
  cusum_ = 0;
  excursionStart_ = -1;
  moving_ = false;
  firstStep_ = -1;
  // An open anomaly stays open: it resolves when the spread goes down, judged afresh.
}

double WorkloadImbalanceDetector::changeSpread(const std::vector<double>& ratios,
                                               const std::vector<double>& previous) {
  std::vector<double> changes;
  for (size_t d = 0; d < ratios.size() && d < previous.size(); ++d) {
    if (!std::isnan(ratios[d]) && !std::isnan(previous[d]))
      changes.push_back(ratios[d] - previous[d]);
  }
  const size_t n = changes.size();
  if (n < 2) return kNaN;
  // The Gini mean difference (mean |c_i - c_j| over pairs) x sqrt(pi)/2: a sigma that, unlike a
  // MAD, is steady with few replicas (a MAD of four changes is mostly noise); one replica's odd
  // step (a straggler starting) moves it by O(1/n) only, and the CUSUM's clip bounds that.
  std::sort(changes.begin(), changes.end());
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    sum += (2.0 * static_cast<double>(i) - static_cast<double>(n) + 1.0) * changes[i];
  }
  const double gini = 2.0 * sum / (static_cast<double>(n) * static_cast<double>(n - 1));
  return gini * kSqrtPiOver2 / std::sqrt(2.0);
}

bool WorkloadImbalanceDetector::ratios(const AssembledStep& step, std::vector<double>* out,
                                       double* workNs) {
  std::vector<double> scratch;
  // Jobs without a layout are not judged: their ranks' compute jitters with whatever shares
  // the host (a 2-rank CPU job on a loaded machine moved 17 % per step), which reads exactly
  // like moving work, and nothing tells replicas apart from pipeline stages there.
  if (!layout_) return false;
  const JobLayout& layout = *layout_;
  viewStep(step, layout, &view_);
  // Each worker against the median worker of its stage, so stages of different length
  // compare alike; a replica's ratio is the mean over its workers.
  std::vector<double> stageMedian(layout.stages, 0.0);
  for (uint32_t s = 0; s < layout.stages; ++s) {
    scratch.clear();
    for (size_t w = 0; w < layout.workers.size(); ++w) {
      if (layout.workers[w].stage == s && view_.workerNs[w] > 0)
        scratch.push_back(view_.workerNs[w]);
    }
    stageMedian[s] = medianInPlace(scratch);
  }
  std::vector<double> sum(layout.replicas, 0.0);
  std::vector<uint32_t> count(layout.replicas, 0);
  for (size_t w = 0; w < layout.workers.size(); ++w) {
    const Worker& wk = layout.workers[w];
    if (view_.workerNs[w] <= 0 || stageMedian[wk.stage] <= 0) continue;
    sum[wk.replica] += view_.workerNs[w] / stageMedian[wk.stage];
    ++count[wk.replica];
  }
  out->assign(layout.replicas, kNaN);
  for (uint32_t d = 0; d < layout.replicas; ++d) {
    if (count[d] > 0) (*out)[d] = sum[d] / count[d];
  }
  *workNs = pipelineStepNs(view_.stageNs, view_.microbatches, view_.schedule);
  size_t known = 0;
  for (double x : *out) known += std::isnan(x) ? 0 : 1;
  return known >= 2 && *workNs > 0;
}

double WorkloadImbalanceDetector::currentSpread() const {
  std::vector<double> v;
  const size_t n = static_cast<size_t>(std::max(1, o_.window));
  for (size_t i = records_.size() > n ? records_.size() - n : 0; i < records_.size(); ++i) {
    v.push_back(records_[i].spread);
  }
  return medianInPlace(v);
}

void WorkloadImbalanceDetector::onStep(const AssembledStep& step) {
  std::vector<double> r;
  double workNs = 0;
  if (!ratios(step, &r, &workNs)) return;
  if (firstStep_ < 0) firstStep_ = step.step;
  const double spread = changeSpread(r, previous_);

  // Persistent offsets (each replica's median ratio lately) come out of the gain: a straggler
  // or a slower node is not work that balancing would move.
  if (history_.size() < r.size()) history_.resize(r.size(), Ring<float>(kHistory));
  std::vector<double> moving;
  std::vector<double> offsets;
  for (size_t d = 0; d < r.size(); ++d) {
    if (std::isnan(r[d])) continue;
    history_[d].push(static_cast<float>(r[d]));
    if (history_[d].size() >= kMinHistory) {
      const std::vector<float> h = history_[d].values();
      offsets.push_back(median(std::vector<double>(h.begin(), h.end())));
    } else {
      offsets.push_back(1.0);
    }
    moving.push_back(r[d]);
  }
  const double offsetMedian = median(offsets);
  for (size_t i = 0; i < moving.size(); ++i) moving[i] -= offsets[i] - offsetMedian;
  previous_ = r;
  if (std::isnan(spread)) return;

  Record rec;
  rec.step = step.step;
  rec.spread = spread;
  double sum = 0;
  for (double x : moving) sum += x;
  const double mean = sum / static_cast<double>(moving.size());
  const double top = *std::max_element(moving.begin(), moving.end());
  std::vector<double> durations;
  for (const RankStep& rs : step.ranks)
    durations.push_back(static_cast<double>(rs.report.duration_ns()));
  rec.stepNs = medianInPlace(durations);
  rec.gain = rec.stepNs > 0 ? std::clamp((top - mean) * workNs / rec.stepNs, 0.0, 1.0) : 0.0;
  rec.maxOverMean = mean > 0 ? top / mean - 1.0 : 0.0;
  double best = -1;
  for (size_t d = 0; d < r.size(); ++d) {
    if (!std::isnan(r[d]) && r[d] > best) {
      best = r[d];
      rec.slowest = static_cast<int32_t>(d);
    }
  }
  records_.push(rec);
  recentSpread_.push(spread);

  if (open_) {
    // The mean, not the median: with two replicas each step gives one half-normal sample of
    // the spread, and a 10 % spread had a median of 20 such samples under 3 % now and then.
    double sum = 0;
    for (double x : recentSpread_.values()) sum += std::min(x, o_.clip);
    const double calm = sum / static_cast<double>(recentSpread_.size());
    if (recentSpread_.full() && calm < o_.minSpread / 2) {
      // Back to normal from the first step of the calm stretch that ends here.
      int64_t since = step.step;
      for (size_t i = records_.size(); i-- > 0 && records_[i].spread < o_.minSpread;) {
        since = records_[i].step;
      }
      log_->resolve(anomaly_, since, step.nowNs);
      open_ = false;
      cusum_ = 0;
      excursionStart_ = -1;
      moving_ = false;
    } else if (step.step >= refreshedStep_ + kRefreshSteps) {
      Anomaly a = describe(step, anomaly_.onsetStep);
      a.id = anomaly_.id;
      a.detectedStep = anomaly_.detectedStep;
      a.detectedNs = anomaly_.detectedNs;
      a.confidence = anomaly_.confidence;
      anomaly_ = std::move(a);
      log_->refresh(anomaly_);
      refreshedStep_ = step.step;
    }
    return;
  }
  const double before = cusum_;
  cusum_ =
      std::min(2 * o_.cusumH, std::max(0.0, cusum_ + std::min(spread, o_.clip) - o_.minSpread));
  if (cusum_ <= 0) {
    excursionStart_ = -1;
    moving_ = false;
    return;
  }
  if (before <= 0) excursionStart_ = step.step;

  // The excursion's costly steps: who was slowest, and what balancing would have saved.
  std::vector<int32_t> slowest;
  std::vector<double> gains;
  for (size_t i = 0; i < records_.size(); ++i) {
    const Record& x = records_[i];
    if (x.step < excursionStart_) continue;
    gains.push_back(x.gain);
    if (x.spread >= o_.minSpread) slowest.push_back(x.slowest);
  }
  size_t most = 0;
  for (int32_t d : slowest) {
    most = std::max(most, static_cast<size_t>(std::count(slowest.begin(), slowest.end(), d)));
  }
  moving_ = most < slowest.size();
  if (cusum_ < o_.cusumH) return;
  if (slowest.size() < static_cast<size_t>(std::max(1, o_.minSteps))) return;
  if (static_cast<double>(most) > o_.maxShare * static_cast<double>(slowest.size())) return;
  if (median(gains) < o_.minGain) return;
  // A spread from the job's first judged steps began with its first step: the first change
  // is measured one step later.
  open(step, excursionStart_ <= firstStep_ + 1 ? firstStep_ : excursionStart_);
}

void WorkloadImbalanceDetector::open(const AssembledStep& step, int64_t onset) {
  anomaly_ = log_->open(describe(step, onset), "job");
  open_ = true;
  refreshedStep_ = step.step;
  recentSpread_.clear();  // resolution is judged on the steps after this one
}

Anomaly WorkloadImbalanceDetector::describe(const AssembledStep& step, int64_t onset) const {
  std::vector<double> spreads, gains, excess, stepNs;
  std::vector<int32_t> slowest;
  size_t changes = 0;
  for (size_t i = 0; i < records_.size(); ++i) {
    const Record& x = records_[i];
    if (x.step < onset) continue;
    spreads.push_back(x.spread);
    gains.push_back(x.gain);
    excess.push_back(x.maxOverMean);
    stepNs.push_back(x.stepNs);
    if (!slowest.empty() && x.slowest != slowest.back()) ++changes;
    slowest.push_back(x.slowest);
  }
  size_t most = 0;
  for (int32_t d : slowest) {
    most = std::max(most, static_cast<size_t>(std::count(slowest.begin(), slowest.end(), d)));
  }
  const double gain = median(gains);
  const double stepMs = median(stepNs) / 1e6;
  const double spread = median(spreads);
  const size_t replicas = previous_.size();
  Anomaly a;
  a.job = job_;
  a.kind = AnomalyKind::kWorkloadImbalance;
  const uint32_t world =
      std::max<uint32_t>(step.worldSize, static_cast<uint32_t>(step.ranks.size()));
  for (uint32_t rank = 0; rank < world; ++rank) a.ranks.push_back(rank);
  for (const RankStep& rs : step.ranks) {
    if (!rs.ctx.node.empty() &&
        std::find(a.nodes.begin(), a.nodes.end(), rs.ctx.node) == a.nodes.end())
      a.nodes.push_back(rs.ctx.node);
  }
  std::sort(a.nodes.begin(), a.nodes.end());
  a.onsetStep = onset;
  a.detectedStep = step.step;
  a.detectedNs = step.nowNs;
  a.magnitude = gain < 1.0 ? 1.0 / (1.0 - gain) : 1.0;
  a.confidence = std::min(1.0, cusum_ / (2 * o_.cusumH));
  a.evidence = {
      {"spread", spread},
      {"slowest_excess", median(excess)},
      {"slowest_changed",
       slowest.size() > 1 ? static_cast<double>(changes) / static_cast<double>(slowest.size() - 1)
                          : 0.0},
      {"slowest_top_share",
       slowest.empty() ? 0.0 : static_cast<double>(most) / static_cast<double>(slowest.size())},
      {"replicas", static_cast<double>(replicas)},
      {"min_spread", o_.minSpread},
      {"steps_judged", static_cast<double>(spreads.size())},
      {"step_ms", stepMs},
      {"balanced_step_ms", stepMs * (1.0 - gain)},
      {"estimated_gain", gain},
      {"added_ms_per_step", gain * stepMs}};
  a.labels = {{"scope", "job"}, {"replicas", layout_ ? "dp" : "ranks"}};
  a.summary = "workload imbalance across " + std::to_string(replicas) +
              (layout_ ? " data-parallel replicas" : " ranks") +
              ": each replica's work varies by " + percent(spread) +
              " from step to step and the slowest one changed in " +
              percent(a.evidence["slowest_changed"]) + " of the steps since step " +
              std::to_string(onset) + "; every step waits for that step's heaviest (" +
              percent(a.evidence["slowest_excess"]) + " over the mean), so the job runs " +
              formatRatio(a.magnitude) + " its balanced time: about " + percent(gain) +
              " of the step to gain by balancing the work (e.g. sequence lengths) across them";
  return a;
}

}  // namespace trainscope::detect
