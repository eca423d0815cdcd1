#include "collector/detect/expert_imbalance.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "collector/detect/robust.h"

namespace trainscope::detect {
namespace {

// Steps of per-index views kept for the evidence (medians since the onset, up to this many).
constexpr size_t kViewSteps = 64;

// One rank's token all_to_all in one step.
struct RankA2a {
  double bytes = 0;    // received: bytes per call times calls, summed over the group's keys
  double timeNs = 0;   // sum over calls of arrival to completion
  double compute = 0;  // compute_ns
  bool seen = false;
};

}  // namespace

std::shared_ptr<const ExpertGroups> expertGroupsOf(const topology::Topology& t) {
  auto out = std::make_shared<ExpertGroups>();
  for (const topology::Group& g : t.groups) {
    if (g.kind == wire::GROUP_EP && g.ranks.size() >= 2) {
      out->size = std::max(out->size, static_cast<uint32_t>(g.ranks.size()));
    }
  }
  if (out->size < 2) return nullptr;
  for (const topology::Group& g : t.groups) {
    if (g.kind != wire::GROUP_EP || g.ranks.size() != out->size) continue;
    out->groups.push_back(g.ranks);
    out->names.insert(g.name);
  }
  return out;
}

ExpertImbalanceDetector::ExpertImbalanceDetector(std::string job,
                                                 const ExpertImbalanceOptions& options,
                                                 EventLog* log)
    : job_(std::move(job)), o_(options), log_(log), views_(kViewSteps) {}

void ExpertImbalanceDetector::setGroups(std::shared_ptr<const ExpertGroups> groups,
                                        std::shared_ptr<const JobLayout> layout) {
  groups_ = std::move(groups);
  layout_ = std::move(layout);
  set_.reset();
  states_.clear();
  views_.clear();
  stageOfGroup_.clear();
  stages_ = 1;
  if (!groups_) return;
  set_ = std::make_unique<PeerRatioSet>(o_.persistence, o_.noiseWindow);
  states_.resize(groups_->size);
  // An expert-parallel group sits within one pipeline stage (its ranks hold the same layers).
  if (layout_) stages_ = layout_->stages;
  for (const auto& g : groups_->groups) {
    const int32_t w = layout_ ? layout_->workerOfRank(g.front()) : -1;
    stageOfGroup_.push_back(w < 0 ? 0 : layout_->workers[static_cast<size_t>(w)].stage);
  }
}

bool ExpertImbalanceDetector::isOpen() const {
  return std::any_of(states_.begin(), states_.end(), [](const IndexState& s) { return s.open; });
}

void ExpertImbalanceDetector::onStep(const AssembledStep& step) {
  if (!groups_) return;
  const ExpertGroups& epGroups = *groups_;
  const size_t epSize = epGroups.size;
  std::unordered_map<uint32_t, RankA2a> byRank;
  std::vector<double> durations, shares;
  for (const RankStep& r : step.ranks) {
    const wire::StepReport& rep = r.report;
    durations.push_back(static_cast<double>(rep.duration_ns()));
    if (rep.duration_ns() > 0) {
      shares.push_back(static_cast<double>(rep.all_to_all_ns()) /
                       static_cast<double>(rep.duration_ns()));
    }
    RankA2a a;
    a.compute = static_cast<double>(rep.compute_ns());
    for (const auto& c : rep.collectives()) {
      if (c.op() != wire::ALL_TO_ALL || !epGroups.names.count(c.group())) continue;
      a.bytes += static_cast<double>(c.bytes()) * static_cast<double>(c.count());
      a.timeNs += static_cast<double>(c.total_ns());
      a.seen = true;
    }
    if (a.seen) byRank[rep.rank()] = a;
  }
  if (byRank.empty()) return;

  // Per index: its ratio per group, and the what-if of each group's stage were it hot.
  std::vector<std::vector<double>> ratios(epSize);
  StepView view;
  view.index.resize(epSize);
  view.stepNs = medianInPlace(durations);
  view.a2aShare = shares.empty() ? 0.0 : medianInPlace(shares);
  // By index, by stage: the slow and fixed stage work of each group, and wait ratios.
  std::vector<std::vector<std::vector<double>>> slow(epSize,
                                                     std::vector<std::vector<double>>(stages_)),
      fixed(epSize, std::vector<std::vector<double>>(stages_));
  std::vector<std::vector<double>> waits(epSize), hot(epSize), peer(epSize);
  std::vector<double> others;
  for (size_t g = 0; g < epGroups.groups.size(); ++g) {
    const auto& members = epGroups.groups[g];
    std::vector<const RankA2a*> m(epSize, nullptr);
    double sumCompute = 0, sumBytes = 0, minTime = 0;
    size_t n = 0;
    for (size_t i = 0; i < epSize; ++i) {
      auto it = byRank.find(members[i]);
      if (it == byRank.end() || it->second.bytes <= 0) continue;
      m[i] = &it->second;
      sumCompute += it->second.compute;
      sumBytes += it->second.bytes;
      minTime = n == 0 ? it->second.timeNs : std::min(minTime, it->second.timeNs);
      ++n;
    }
    if (n < 2) continue;
    const double meanCompute = sumCompute / static_cast<double>(n);
    const double meanBytes = sumBytes / static_cast<double>(n);
    for (size_t i = 0; i < epSize; ++i) {
      if (m[i] == nullptr) continue;
      others.clear();
      std::vector<double> otherTimes;
      double otherBytes = 0, otherCompute = 0;  // the busiest other index's
      for (size_t j = 0; j < epSize; ++j) {
        if (j == i || m[j] == nullptr) continue;
        others.push_back(m[j]->bytes);
        otherTimes.push_back(m[j]->timeNs);
        otherBytes = std::max(otherBytes, m[j]->bytes);
        otherCompute = std::max(otherCompute, m[j]->compute);
      }
      ratios[i].push_back(m[i]->bytes / medianInPlace(others));
      if (m[i]->timeNs > 0) waits[i].push_back(medianInPlace(otherTimes) / m[i]->timeNs);
      hot[i].push_back(m[i]->compute);
      peer[i].push_back(meanCompute);
      // Were index i hot: the group goes at its busiest rank's compute and the transfers at
      // the largest load (the least all_to_all time: the rank arriving last waits for
      // nothing). Balanced, it goes at the mean compute and load, or at the busiest other
      // index where the router's jitter puts it higher: the jitter stays when the skew is
      // fixed.
      const uint32_t s = stageOfGroup_[g];
      const double slowNs = std::max(m[i]->compute, otherCompute) + minTime;
      const double fixedNs =
          std::max(meanCompute, otherCompute) +
          minTime * std::max(meanBytes, otherBytes) / std::max(m[i]->bytes, otherBytes);
      slow[i][s].push_back(slowNs);
      fixed[i][s].push_back(std::min(slowNs, fixedNs));
    }
  }
  // The microbatches the pipeline replay needs (0 without a layout: one stage, no replay).
  double micro = 0;
  pipeline::Schedule schedule;
  if (layout_) {
    LayoutStep lv;
    viewStep(step, *layout_, &lv);
    micro = lv.microbatches;
    schedule = lv.schedule;
  }
  std::vector<std::pair<size_t, double>> unitRatios;
  for (size_t i = 0; i < epSize; ++i) {
    if (ratios[i].empty()) continue;
    unitRatios.emplace_back(i, medianInPlace(ratios[i]));
    IndexView& iv = view.index[i];
    std::vector<double> slowStage(stages_, 0.0), fixedStage(stages_, 0.0);
    bool complete = true;
    for (uint32_t s = 0; s < stages_; ++s) {
      if (slow[i][s].empty()) {
        complete = false;
        break;
      }
      slowStage[s] = medianInPlace(slow[i][s]);
      fixedStage[s] = medianInPlace(fixed[i][s]);
    }
    if (complete) {
      iv.gainNs = std::max(0.0, pipelineStepNs(slowStage, micro, schedule) -
                                    pipelineStepNs(fixedStage, micro, schedule));
    }
    iv.hotCompute = medianInPlace(hot[i]);
    iv.peerCompute = medianInPlace(peer[i]);
    iv.waitRatio = waits[i].empty() ? 0.0 : medianInPlace(waits[i]);
  }
  views_.push(view);

  std::vector<PeerRatioSet::Event> events;
  set_->push(step.step, unitRatios, &events);
  for (const auto& e : events) {
    IndexState& st = states_[e.unit];
    const PersistenceTracker& tr = set_->tracker(e.unit);
    if (e.transition == PersistenceTracker::Transition::kResolved) {
      if (st.open) log_->resolve(st.anomaly, tr.resolvedStep(), step.nowNs);
      st.open = false;
      continue;
    }
    const size_t idx = e.unit;
    Anomaly a;
    a.job = job_;
    a.kind = AnomalyKind::kExpertImbalance;
    for (const auto& g : epGroups.groups) a.ranks.push_back(g[idx]);
    std::sort(a.ranks.begin(), a.ranks.end());
    a.nodes = nodesOf(step, a.ranks);
    fillOpened(tr, step, &a);
    // Medians since the onset (at most kViewSteps).
    const size_t since = static_cast<size_t>(std::max<int64_t>(1, step.step - a.onsetStep + 1));
    std::vector<double> gain, stepNs, share, wait, hotC, peerC;
    for (const StepView& v : views_.latest(since)) {
      gain.push_back(v.index[idx].gainNs);
      stepNs.push_back(v.stepNs);
      share.push_back(v.a2aShare);
      wait.push_back(v.index[idx].waitRatio);
      hotC.push_back(v.index[idx].hotCompute);
      peerC.push_back(v.index[idx].peerCompute);
    }
    const double stepMed = medianInPlace(stepNs);
    const double gainNs = medianInPlace(gain);
    const double g = stepMed > 0 ? std::clamp(gainNs / stepMed, 0.0, 1.0) : 0.0;
    const double a2aShare = medianInPlace(share);
    const double waitRatio = medianInPlace(wait);
    const double hotMs = medianInPlace(hotC) / 1e6;
    const double peerMs = medianInPlace(peerC) / 1e6;
    a.evidence = {{"tokens_ratio", a.magnitude},
                  {"all_to_all_share", a2aShare},
                  {"wait_ratio", waitRatio},
                  {"hot_compute_ms", hotMs},
                  {"group_mean_compute_ms", peerMs},
                  {"ep_size", static_cast<double>(epSize)},
                  {"ep_groups", static_cast<double>(epGroups.groups.size())},
                  {"noise_sigma", set_->noise()},
                  {"exceed_level", tr.exceedLevel()},
                  {"exceeding_steps", tr.exceedCount()},
                  {"step_ms", stepMed / 1e6},
                  {"estimated_gain", g},
                  {"added_ms_per_step", gainNs / 1e6}};
    std::string names;
    for (const auto& n : epGroups.names) names += (names.empty() ? "" : ",") + n;
    a.labels = {{"group", names},
                {"ep_index", std::to_string(idx)},
                {"coords", "{\"ep\":" + std::to_string(idx) + '}'}};
    char shareText[32];
    std::snprintf(shareText, sizeof shareText, "%.0f %%", a2aShare * 100);
    a.summary = "experts at expert-parallel index " + std::to_string(idx) + " (" +
                rankList(a.ranks) + ") receive " + formatRatio(a.magnitude) +
                " the tokens of their peers in all_to_all group '" + names + "' from step " +
                std::to_string(a.onsetStep) + "; their peers wait " + formatRatio(waitRatio) +
                " as long in all_to_all (" + shareText + " of the step); about " +
                std::to_string(static_cast<int>(std::lround(g * 100))) +
                " % of the step to gain by balancing the experts";
    st.anomaly = log_->open(std::move(a), "ep" + std::to_string(idx));
    st.open = true;
  }
}

}  // namespace trainscope::detect
