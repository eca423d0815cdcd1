#include "collector/detect/straggler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace trainscope::detect {

StragglerDetector::StragglerDetector(std::string job, const StragglerOptions& options,
                                     EventLog* log)
    : job_(std::move(job)),
      o_(options),
      log_(log),
      noise_(static_cast<size_t>(std::max(1, options.noiseWindow))),
      views_(static_cast<size_t>(std::max(1, options.persistence.window))) {}

void StragglerDetector::setLayout(std::shared_ptr<const JobLayout> layout) {
  layout_ = std::move(layout);
  stageSets_.clear();
  workers_.clear();
  views_.clear();
  if (!layout_) return;
  for (uint32_t s = 0; s < layout_->stages; ++s) {
    stageSets_.emplace_back(o_.persistence, o_.noiseWindow);
  }
  const size_t window = static_cast<size_t>(std::max(1, o_.persistence.window));
  workers_.assign(layout_->workers.size(), WorkerState(window));
}

namespace {

// Median of sorted `s` without the element at position p (s.size() >= 2).
double medianWithout(const std::vector<double>& s, size_t p) {
  size_t m = s.size() - 1;
  auto at = [&](size_t i) { return i < p ? s[i] : s[i + 1]; };
  return m % 2 == 1 ? at(m / 2) : (at(m / 2 - 1) + at(m / 2)) / 2.0;
}

}  // namespace

void StragglerDetector::onStep(const AssembledStep& step) {
  if (layout_) {
    onLayoutStep(step);
    return;
  }
  std::vector<const RankStep*> rs;
  for (const RankStep& r : step.ranks) {
    if (r.report.compute_ns() > 0) rs.push_back(&r);
  }
  if (rs.size() < std::max<uint32_t>(o_.minRanks, 2)) return;

  size_t n = rs.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return rs[a]->report.compute_ns() < rs[b]->report.compute_ns();
  });
  std::vector<double> sorted(n);
  std::vector<size_t> pos(n);
  for (size_t i = 0; i < n; ++i) {
    sorted[i] = static_cast<double>(rs[order[i]]->report.compute_ns());
    pos[order[i]] = i;
  }
  std::vector<double> ratios(n), peers(n);
  for (size_t i = 0; i < n; ++i) {
    peers[i] = medianWithout(sorted, pos[i]);
    ratios[i] = peers[i] > 0 ? static_cast<double>(rs[i]->report.compute_ns()) / peers[i] : 1.0;
  }
  // Job-wide spread of the ratios; one straggler barely moves a MAD across ranks.
  double med = median(ratios);
  noise_.push(kMadToSigma * mad(ratios, med));
  double jobNoise = median(noise_.values());

  // First collective arrival per rank, clock-aligned, for the "arrives last" evidence.
  std::vector<double> arrivals(n, std::numeric_limits<double>::quiet_NaN());
  std::vector<double> known;
  for (size_t i = 0; i < n; ++i) {
    int64_t first = 0;
    for (const auto& c : rs[i]->report.collectives()) {
      if (c.first_arrival_ns() > 0 && (first == 0 || c.first_arrival_ns() < first)) {
        first = c.first_arrival_ns();
      }
    }
    if (first > 0) {
      arrivals[i] = static_cast<double>(first + rs[i]->ctx.clockOffsetNs);
      known.push_back(arrivals[i]);
    }
  }
  double arrivalMedian = known.size() >= 2 ? median(known) : 0.0;

  for (size_t i = 0; i < n; ++i) {
    uint32_t rank = rs[i]->report.rank();
    auto it = ranks_.find(rank);
    if (it == ranks_.end()) it = ranks_.emplace(rank, RankState(o_)).first;
    RankState& st = it->second;
    st.node = rs[i]->ctx.node;
    st.compute.push(static_cast<double>(rs[i]->report.compute_ns()));
    st.peer.push(peers[i]);
    if (known.size() >= 2 && arrivals[i] == arrivals[i])
      st.arrivalLag.push(arrivals[i] - arrivalMedian);
    st.tracker.setExternalNoise(jobNoise);
    auto t = st.tracker.push(step.step, ratios[i]);
    if (t == PersistenceTracker::Transition::kOpened) {
      Anomaly a;
      a.job = job_;
      a.kind = AnomalyKind::kStraggler;
      a.ranks = {rank};
      a.nodes = {st.node};
      a.onsetStep = st.tracker.onsetStep();
      a.detectedStep = step.step;
      a.detectedNs = step.nowNs;
      a.magnitude = st.tracker.level();
      a.confidence = st.tracker.confidence();
      // The steps since the onset: the window also holds healthy steps from before it, whose
      // median would show the old compute time.
      const size_t since = static_cast<size_t>(std::max<int64_t>(1, step.step - a.onsetStep + 1));
      double computeMs = median(st.compute.latest(since)) / 1e6;
      double peerMs = median(st.peer.latest(since)) / 1e6;
      a.evidence = {{"compute_ms", computeMs},
                    {"peer_median_ms", peerMs},
                    {"ratio", a.magnitude},
                    {"noise_sigma", jobNoise},
                    {"exceed_level", st.tracker.exceedLevel()},
                    {"exceeding_steps", st.tracker.exceedCount()},
                    {"ranks", static_cast<double>(n)},
                    {"added_ms_per_step", computeMs - peerMs}};
      if (!st.arrivalLag.empty())
        a.evidence["arrival_lag_ms"] = median(st.arrivalLag.values()) / 1e6;
      a.summary = "rank " + std::to_string(rank) + (st.node.empty() ? "" : " (" + st.node + ")") +
                  " is a straggler: compute " + formatRatio(a.magnitude) + " the peer median (" +
                  formatMs(computeMs * 1e6) + " vs " + formatMs(peerMs * 1e6) + ") from step " +
                  std::to_string(a.onsetStep);
      st.anomaly = log_->open(std::move(a), rankSubject({rank}));
      st.open = true;
    } else if (t == PersistenceTracker::Transition::kResolved && st.open) {
      log_->resolve(st.anomaly, st.tracker.resolvedStep(), step.nowNs);
      st.open = false;
    }
  }
}

void StragglerDetector::onLayoutStep(const AssembledStep& step) {
  const JobLayout& L = *layout_;
  viewStep(step, L, &view_);
  views_.push(summaryOf(view_));
  // Per stage, each worker's compute against the median of the stage's other workers.
  std::vector<std::vector<size_t>> byStage(L.stages);
  for (size_t w = 0; w < L.workers.size(); ++w) {
    if (view_.workerNs[w] > 0) byStage[L.workers[w].stage].push_back(w);
  }
  std::vector<std::pair<size_t, double>> ratios;
  std::vector<double> others;
  std::vector<PeerRatioSet::Event> events;
  for (uint32_t s = 0; s < L.stages; ++s) {
    const auto& ws = byStage[s];
    if (ws.size() < 2) continue;
    ratios.clear();
    for (size_t w : ws) {
      others.clear();
      for (size_t q : ws) {
        if (q != w) others.push_back(view_.workerNs[q]);
      }
      const double peer = medianInPlace(others);
      workers_[w].compute.push(view_.workerNs[w]);
      workers_[w].peer.push(peer);
      ratios.emplace_back(w, peer > 0 ? view_.workerNs[w] / peer : 1.0);
    }
    events.clear();
    stageSets_[s].push(step.step, ratios, &events);
    for (const auto& e : events) {
      WorkerState& st = workers_[e.unit];
      const Worker& wk = L.workers[e.unit];
      const PersistenceTracker& tr = stageSets_[s].tracker(e.unit);
      if (e.transition == PersistenceTracker::Transition::kResolved) {
        if (st.open) log_->resolve(st.anomaly, tr.resolvedStep(), step.nowNs);
        st.open = false;
        continue;
      }
      Anomaly a;
      a.job = job_;
      a.kind = AnomalyKind::kStraggler;
      a.ranks = wk.ranks;
      a.nodes = nodesOf(step, wk.ranks);
      a.onsetStep = tr.onsetStep();
      a.detectedStep = step.step;
      a.detectedNs = step.nowNs;
      a.magnitude = tr.level();
      a.confidence = tr.confidence();
      const size_t since = static_cast<size_t>(std::max<int64_t>(1, step.step - a.onsetStep + 1));
      const double computeNs = median(st.compute.latest(since));
      const double peerNs = median(st.peer.latest(since));
      const StepSummary med = medianOf(views_.latest(since), L.stages);
      const double stepMs = med.stepNs / 1e6;
      const double gain =
          estimatedGain(med.stageNs, s, computeNs, peerNs, med.microbatches, med.stepNs);
      a.evidence = {{"compute_ms", computeNs / 1e6},
                    {"peer_median_ms", peerNs / 1e6},
                    {"ratio", a.magnitude},
                    {"noise_sigma", stageSets_[s].noise()},
                    {"exceed_level", tr.exceedLevel()},
                    {"exceeding_steps", tr.exceedCount()},
                    {"peers", static_cast<double>(ws.size() - 1)},
                    {"step_ms", stepMs},
                    {"estimated_gain", gain},
                    {"added_ms_per_step", (computeNs - peerNs) / 1e6}};
      a.labels = {{"coords", wk.coords}, {"stage", std::to_string(wk.stage)}};
      const std::string who = rankList(wk.ranks);
      a.summary = "worker " + wk.coords + " (" + who + ") is a straggler: compute " +
                  formatRatio(a.magnitude) + " its stage's other workers (" + formatMs(computeNs) +
                  " vs " + formatMs(peerNs) + ") from step " + std::to_string(a.onsetStep) +
                  "; about " + std::to_string(static_cast<int>(std::lround(gain * 100))) +
                  " % of the step to gain";
      st.anomaly = log_->open(std::move(a), rankSubject(wk.ranks));
      st.open = true;
    }
  }
}

}  // namespace trainscope::detect
