#include "collector/detect/stage_imbalance.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "common/median.h"

namespace trainscope::detect {
namespace {

// The stages' work as compared here when every stage has one worker (no data parallelism): the
// lower median of each stage's ranks' compute. A worker's compute is its slowest rank's
// (layout.h), so there one slow GPU would read as a heavier stage; the lower median moves only
// when the stage's own work grows (all its ranks compute longer), and the slow GPU is the
// straggler detector's, judged against its tensor-parallel peers.
void loneWorkerStageWork(const AssembledStep& step, const JobLayout& layout,
                         std::vector<double>* out) {
  std::vector<std::vector<double>> byStage(layout.stages);
  for (const RankStep& r : step.ranks) {
    const uint32_t rank = r.report.rank();
    if (rank >= layout.stageOf.size() || layout.stageOf[rank] < 0) continue;
    if (r.report.compute_ns() <= 0) continue;
    const auto stage = static_cast<size_t>(layout.stageOf[rank]);
    if (stage < byStage.size())
      byStage[stage].push_back(static_cast<double>(r.report.compute_ns()));
  }
  out->assign(layout.stages, 0.0);
  for (size_t s = 0; s < byStage.size(); ++s) {
    auto& v = byStage[s];
    if (v.empty()) continue;
    (*out)[s] = lowerMedianInPlace(v);
  }
}

}  // namespace

StageImbalanceDetector::StageImbalanceDetector(std::string job,
                                               const StageImbalanceOptions& options, EventLog* log)
    : job_(std::move(job)),
      o_(options),
      log_(log),
      views_(static_cast<size_t>(std::max(1, options.persistence.window))) {}

void StageImbalanceDetector::setLayout(std::shared_ptr<const JobLayout> layout) {
  layout_ = layout && layout->stages >= 2 ? std::move(layout) : nullptr;
  set_.reset();
  stages_.clear();
  views_.clear();
  if (!layout_) return;
  set_ = std::make_unique<PeerRatioSet>(o_.persistence, o_.noiseWindow);
  stages_.resize(layout_->stages);
}

void StageImbalanceDetector::onStep(const AssembledStep& step) {
  if (!layout_) return;
  const JobLayout& layout = *layout_;
  viewStep(step, layout, &view_);
  views_.push(summaryOf(view_));
  const std::vector<double>* work = &view_.stageNs;
  if (layout.replicas == 1) {
    loneWorkerStageWork(step, layout, &rankWork_);
    work = &rankWork_;
  }
  std::vector<std::pair<size_t, double>> ratios;
  std::vector<double> others;
  for (uint32_t s = 0; s < layout.stages; ++s) {
    if ((*work)[s] <= 0) continue;
    others.clear();
    for (uint32_t q = 0; q < layout.stages; ++q) {
      if (q != s && (*work)[q] > 0) others.push_back((*work)[q]);
    }
    if (others.empty()) continue;
    ratios.emplace_back(s, (*work)[s] / medianInPlace(others));
  }
  std::vector<PeerRatioSet::Event> events;
  set_->push(step.step, ratios, &events);
  for (const auto& e : events) {
    StageState& st = stages_[e.unit];
    const PersistenceTracker& tr = set_->tracker(e.unit);
    if (e.transition == PersistenceTracker::Transition::kResolved) {
      if (st.open) log_->resolve(st.anomaly, tr.resolvedStep(), step.nowNs);
      st.open = false;
      continue;
    }
    const uint32_t stage = static_cast<uint32_t>(e.unit);
    Anomaly a;
    a.job = job_;
    a.kind = AnomalyKind::kStageImbalance;
    for (const Worker& w : layout.workers) {
      if (w.stage == stage) a.ranks.insert(a.ranks.end(), w.ranks.begin(), w.ranks.end());
    }
    std::sort(a.ranks.begin(), a.ranks.end());
    a.nodes = nodesOf(step, a.ranks);
    fillOpened(tr, step, &a);
    // Medians since the onset: the stages' work, the step time; the schedule most of the
    // window's steps showed.
    const size_t since = static_cast<size_t>(std::max<int64_t>(1, step.step - a.onsetStep + 1));
    const std::vector<StepSummary> all = views_.latest(views_.size());
    const StepSummary med = medianOf(views_.latest(since), layout.stages, &all);
    const std::vector<double>& stageNs = med.stageNs;
    others.clear();
    for (uint32_t q = 0; q < layout.stages; ++q) {
      if (q != stage && stageNs[q] > 0) others.push_back(stageNs[q]);
    }
    const double otherNs = medianInPlace(others);
    const double stepMs = med.stepNs / 1e6;
    const double gain = estimatedGain(stageNs, stage, stageNs[stage], otherNs, med.microbatches,
                                      med.stepNs, med.schedule);
    a.evidence = {{"stage_ms", stageNs[stage] / 1e6},
                  {"other_stages_ms", otherNs / 1e6},
                  {"ratio", a.magnitude},
                  {"noise_sigma", set_->noise()},
                  {"exceed_level", tr.exceedLevel()},
                  {"exceeding_steps", tr.exceedCount()},
                  {"stages", static_cast<double>(layout.stages)},
                  {"step_ms", stepMs},
                  {"estimated_gain", gain},
                  {"added_ms_per_step", (stageNs[stage] - otherNs) / 1e6}};
    a.labels = {{"stage", std::to_string(stage)},
                {"coords", "{\"pp\":" + std::to_string(stage) + '}'}};
    a.summary = "pipeline stage " + std::to_string(stage) + " (" + rankList(a.ranks) + ") works " +
                formatRatio(a.magnitude) + " the other stages (" + formatMs(stageNs[stage]) +
                " vs " + formatMs(otherNs) + " per step) from step " + std::to_string(a.onsetStep) +
                "; about " + std::to_string(static_cast<int>(std::lround(gain * 100))) +
                " % of the step to gain by balancing it";
    st.anomaly = log_->open(std::move(a), "stage" + std::to_string(stage));
    st.open = true;
  }
}

}  // namespace trainscope::detect
