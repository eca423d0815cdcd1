#include "collector/detect/straggler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "collector/detect/cpu_contention.h"
#include "common/str_cat.h"

namespace trainscope::detect {

StragglerDetector::StragglerDetector(std::string job, const StragglerOptions& options,
                                     EventLog* log)
    : job_(std::move(job)),
      o_(options),
      log_(log),
      noise_(static_cast<size_t>(std::max(1, options.noiseWindow))),
      views_(static_cast<size_t>(std::max(1, options.persistence.window))) {}

void StragglerDetector::setLayout(std::shared_ptr<const JobLayout> layout) {
  // What is open was judged against the old peers (see "Layout changes" in the header).
  std::vector<std::pair<size_t, Anomaly>> carried;  // (worker in the new layout, anomaly)
  for (auto& [rank, st] : ranks_) {
    if (!st.open) continue;
    const int32_t w = layout ? stillSlow(*layout, rank, st) : -1;
    const bool taken = std::any_of(carried.begin(), carried.end(), [&](const auto& c) {
      return c.first == static_cast<size_t>(w);
    });
    if (w >= 0 && !taken) {
      carried.emplace_back(static_cast<size_t>(w), std::move(st.anomaly));
    } else {
      retired_.push_back(std::move(st.anomaly));
    }
  }
  for (WorkerState& w : workers_) {
    if (w.open) retired_.push_back(std::move(w.anomaly));
  }
  ranks_.clear();
  noise_.clear();
  pairRank_ = 0;
  pairRatio_ = 0.0;
  layoutStep_ = -1;
  layout_ = std::move(layout);
  stageSets_.clear();
  rankSets_.clear();
  workers_.clear();
  views_.clear();
  if (!layout_) return;
  for (uint32_t s = 0; s < layout_->stages; ++s) {
    stageSets_.emplace_back(o_.persistence, o_.noiseWindow);
    rankSets_.emplace_back(o_.persistence, o_.noiseWindow);
  }
  const size_t window = static_cast<size_t>(std::max(1, o_.persistence.window));
  workers_.assign(layout_->workers.size(), WorkerState(window));
  for (auto& [w, a] : carried) {
    workers_[w].open = true;
    workers_[w].carried = true;
    workers_[w].anomaly = std::move(a);
  }
}

int32_t StragglerDetector::stillSlow(const JobLayout& layout, uint32_t rank,
                                     const RankState& st) const {
  const int32_t w = layout.workerOfRank(rank);
  if (w < 0 || st.compute.empty()) return -1;
  // A worker of several ranks is named by the layout path (as the worker, or its one slow
  // GPU), where the flat path named each of its slow ranks.
  if (layout.workers[static_cast<size_t>(w)].ranks != std::vector<uint32_t>{rank}) return -1;
  const size_t since = static_cast<size_t>(
      std::clamp<int64_t>(lastStep_ - st.tracker.onsetStep() + 1, 1, o_.persistence.window));
  // A worker's own time is its slowest rank's (layout.h), each rank's the median since onset.
  auto workerNs = [&](const Worker& wk) {
    double x = 0;
    for (uint32_t r : wk.ranks) {
      auto it = ranks_.find(r);
      if (it != ranks_.end() && !it->second.compute.empty())
        x = std::max(x, median(it->second.compute.latest(since)));
    }
    return x;
  };
  const Worker& mine = layout.workers[static_cast<size_t>(w)];
  std::vector<double> peers;
  for (const Worker& q : layout.workers) {
    if (&q == &mine || q.stage != mine.stage) continue;
    const double x = workerNs(q);
    if (x > 0) peers.push_back(x);
  }
  if (peers.empty()) return -1;
  const double peer = medianInPlace(peers);
  return workerNs(mine) >= (1.0 + o_.persistence.minExcess) * peer ? w : -1;
}

namespace {

// A rank's own time in a step: all of it but the time it waited on communication. In a
// synchronous job every rank's step lasts as long, and whatever makes one rank late (its
// operators, Python between them, a slow data loader, a busy neighbour) is in its own time
// and in its peers' waits, where compute_ns (the operators) misses all but the first. Reports
// without a duration or without communication (nothing says what was waited) use compute_ns.
double ownTime(const wire::StepReport& r) {
  if (r.duration_ns() <= 0 || r.comm_ns() <= 0) return static_cast<double>(r.compute_ns());
  return static_cast<double>(std::max<int64_t>(0, r.duration_ns() - r.exposed_comm_ns()));
}

}  // namespace

void StragglerDetector::onStep(const AssembledStep& step) {
  lastStep_ = step.step;
  for (Anomaly& a : retired_) {
    a.labels["resolution"] = "layout";
    a.summary =
        "superseded by the job's declared layout, which compares workers within their "
        "stage: " +
        a.summary;
    log_->resolve(a, step.step, step.nowNs);
  }
  retired_.clear();
  if (layout_) {
    onLayoutStep(step);
    return;
  }
  std::vector<const RankStep*> rs;
  for (const RankStep& r : step.ranks) {
    if (ownTime(r.report) > 0) rs.push_back(&r);
  }
  if (rs.size() < std::max<uint32_t>(o_.minRanks, 2)) return;

  size_t n = rs.size();
  std::vector<double> waits(n);
  for (size_t i = 0; i < n; ++i) waits[i] = static_cast<double>(rs[i]->report.exposed_comm_ns());
  const std::vector<double> peerWaits = mediansOfOthers(waits);
  std::vector<double> cpuWaits(n);
  for (size_t i = 0; i < n; ++i) cpuWaits[i] = static_cast<double>(rs[i]->report.cpu_wait_ns());
  const std::vector<double> peerCpuWaits = mediansOfOthers(cpuWaits);
  const bool cpuWaitKnown =
      std::any_of(cpuWaits.begin(), cpuWaits.end(), [](double w) { return w > 0; });
  if (cpuWaitKnown) {
    // The job's usual wait for a CPU: the median rank's share of its step, over recent steps.
    std::vector<double> shares(n);
    for (size_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(rs[i]->report.duration_ns());
      shares[i] = d > 0 ? cpuWaits[i] / d : 0.0;
    }
    waitShare_.push(medianInPlace(shares));
  }
  // What is compared (see "Busy hosts" in the header): a rank's own time, or on a busy host its
  // work, the own time less its wait for a CPU.
  const bool busy =
      cpuWaitKnown && !waitShare_.empty() && waitShare_.median() >= kBusyHostWaitShare;
  std::vector<double> computes(n);
  for (size_t i = 0; i < n; ++i) {
    computes[i] = ownTime(rs[i]->report);
    if (busy) computes[i] = std::max(0.0, computes[i] - cpuWaits[i]);
  }
  const std::vector<double> peers = mediansOfOthers(computes);
  std::vector<double> ratios(n);
  for (size_t i = 0; i < n; ++i) ratios[i] = peers[i] > 0 ? computes[i] / peers[i] : 1.0;
  // Job-wide spread of the ratios; one straggler barely moves a MAD across ranks.
  double med = median(ratios);
  if (n >= 3) {
    noise_.push(kMadToSigma * mad(ratios, med));
  } else {
    // Two ranks: the spread across them is the straggler's own excess (it would hide itself),
    // so the noise is learned from the ratio's step-to-step change, which a lasting straggler
    // does not inflate (sigma of a difference of two steps = sqrt(2) sigma).
    const uint32_t first = rs[0]->report.rank();
    if (pairRatio_ > 0 && pairRank_ == first) noise_.push(std::fabs(ratios[0] - pairRatio_));
    pairRank_ = first;
    pairRatio_ = ratios[0];
  }
  double jobNoise = noise_.empty() ? 0.0
                    : n >= 3       ? median(noise_.values())
                                   : kMadToSigma * median(noise_.values()) / std::sqrt(2.0);

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
    st.compute.push(computes[i]);
    st.peer.push(peers[i]);
    st.exposed.push(waits[i]);
    st.peerExposed.push(peerWaits[i]);
    st.cpuWait.push(cpuWaits[i]);
    st.peerCpuWait.push(peerCpuWaits[i]);
    if (n < 3) {
      if (st.pairHistory.capacity() < kPairHistory)
        st.pairHistory = Ring<RankState::PairSample>(kPairHistory);
      st.pairHistory.push({step.step, computes[i], peers[i]});
    }
    if (known.size() >= 2 && arrivals[i] == arrivals[i])
      st.arrivalLag.push(arrivals[i] - arrivalMedian);
    st.tracker.setExternalNoise(jobNoise);
    auto t = st.tracker.push(step.step, ratios[i]);
    if (busy) countStarved(st);
    const bool candidate = t == PersistenceTracker::Transition::kOpened ||
                           (st.deferred && !st.open && st.tracker.active());
    if (candidate) {
      // The steps since the onset: the window also holds healthy steps from before it, whose
      // median would show the old compute time.
      const size_t since =
          static_cast<size_t>(std::max<int64_t>(1, step.step - st.tracker.onsetStep() + 1));
      double computeMs = median(st.compute.latest(since)) / 1e6;
      double peerMs = median(st.peer.latest(since)) / 1e6;
      double waitMs = median(st.exposed.latest(since)) / 1e6;
      double peerWaitMs = median(st.peerExposed.latest(since)) / 1e6;
      st.deferred = n < 3 && !(peerWaitMs - waitMs >= 0.5 * (computeMs - peerMs)) &&
                    !(busy && roseAlone(st, st.tracker.onsetStep(), (computeMs - peerMs) * 1e6));
      if (st.deferred) continue;
      // The host's weather (cpu_contention.h): the rank only waited longer for a CPU, on a host
      // where its peers already waited for one. Held like a deferral, counted once. (On a busy
      // host the work is compared already: this holds only a small rise of it.)
      const double cpuWaitMs = cpuWaitKnown ? median(st.cpuWait.latest(since)) / 1e6 : 0.0;
      const double peerCpuWaitMs = cpuWaitKnown ? median(st.peerCpuWait.latest(since)) / 1e6 : 0.0;
      const double ownMs = busy ? computeMs + cpuWaitMs : computeMs;
      const double peerOwnMs = busy ? peerMs + peerCpuWaitMs : peerMs;
      if (!waitShare_.empty() &&
          hostWeather(ownMs - peerOwnMs, cpuWaitMs - peerCpuWaitMs, ownMs - cpuWaitMs,
                      peerOwnMs - peerCpuWaitMs, waitShare_.median())) {
        if (!st.weather) ++hostWeather_;
        st.weather = true;
        st.deferred = true;
        continue;
      }
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
      a.evidence = {{"compute_ms", computeMs},
                    {"peer_median_ms", peerMs},
                    {"exposed_comm_ms", waitMs},
                    {"peer_exposed_comm_ms", peerWaitMs},
                    {"ratio", a.magnitude},
                    {"noise_sigma", jobNoise},
                    {"exceed_level", st.tracker.exceedLevel()},
                    {"exceeding_steps", st.tracker.exceedCount()},
                    {"ranks", static_cast<double>(n)},
                    {"added_ms_per_step", computeMs - peerMs}};
      if (!st.arrivalLag.empty())
        a.evidence["arrival_lag_ms"] = median(st.arrivalLag.values()) / 1e6;
      std::string cause;
      if (cpuWaitKnown) {
        a.evidence["cpu_wait_ms"] = cpuWaitMs;
        a.evidence["peer_cpu_wait_ms"] = peerCpuWaitMs;
        if (busy) a.evidence["host_cpu_wait_share"] = waitShare_.median();
        if (waitExplains(ownMs - peerOwnMs, cpuWaitMs - peerCpuWaitMs)) {
          a.labels["cause"] = "cpu_contention";
          cause = "; it waited " + formatMs(cpuWaitMs * 1e6) + " a step for a CPU (peers " +
                  formatMs(peerCpuWaitMs * 1e6) + "): its host runs more threads than it has cores";
        }
      }
      a.summary = "rank " + std::to_string(rank) + (st.node.empty() ? "" : " (" + st.node + ")") +
                  " is a straggler: its " +
                  (busy ? "work (the step less its waits, for communication and for a CPU) "
                        : "own time (the step less its waits) ") +
                  formatRatio(a.magnitude) + " the peer median (" + formatMs(computeMs * 1e6) +
                  " vs " + formatMs(peerMs * 1e6) + ") from step " + std::to_string(a.onsetStep) +
                  cause;
      st.anomaly = log_->open(std::move(a), rankSubject({rank}));
      st.open = true;
    } else if (t == PersistenceTracker::Transition::kResolved) {
      if (st.open) log_->resolve(st.anomaly, st.tracker.resolvedStep(), step.nowNs);
      st.open = false;
      st.deferred = false;
      st.weather = false;
    }
  }
}

bool StragglerDetector::roseAlone(const RankState& st, int64_t onset, double excessNs) {
  std::vector<double> ownBefore, peerBefore, ownSince, peerSince;
  for (size_t i = 0; i < st.pairHistory.size(); ++i) {
    const RankState::PairSample& x = st.pairHistory[i];
    (x.step < onset ? ownBefore : ownSince).push_back(x.own);
    (x.step < onset ? peerBefore : peerSince).push_back(x.peer);
  }
  if (ownBefore.size() < 8 || ownSince.empty() || !(excessNs > 0)) return false;
  const double rankRise = medianInPlace(ownSince) - medianInPlace(ownBefore);
  const double peerRise = medianInPlace(peerSince) - medianInPlace(peerBefore);
  return rankRise >= 0.5 * excessNs && peerRise < 0.5 * rankRise;
}

void StragglerDetector::countStarved(RankState& st) {
  // Over the whole window: a rank whose own time is over its peers' while its work is not was
  // only short of a CPU. Counted once an episode, which begins 2 minExcess over the peers and
  // ends under minExcess (so noise around one limit does not count it again).
  const size_t n = st.compute.size();
  if (n < st.compute.capacity() || st.open || st.tracker.active()) return;
  std::vector<double> own(n), peerOwn(n);
  for (size_t i = 0; i < n; ++i) {
    own[i] = st.compute[i] + st.cpuWait[i];
    peerOwn[i] = st.peer[i] + st.peerCpuWait[i];
  }
  const double ownRatio = medianInPlace(own) / std::max(1.0, medianInPlace(peerOwn));
  const double excess = o_.persistence.minExcess;
  if (st.weather) {
    st.weather = ownRatio >= 1.0 + excess;
  } else if (ownRatio >= 1.0 + 2.0 * excess &&
             median(st.compute.values()) < (1.0 + excess) * median(st.peer.values())) {
    st.weather = true;
    ++hostWeather_;
  }
}

void StragglerDetector::observeRanks(const AssembledStep& step) {
  const JobLayout& layout = *layout_;
  const size_t window = static_cast<size_t>(std::max(1, o_.persistence.window));
  for (const RankStep& r : step.ranks) {
    const uint32_t rank = r.report.rank();
    const int32_t w = layout.workerOfRank(rank);
    if (w < 0) continue;
    const Worker& wk = layout.workers[static_cast<size_t>(w)];
    if (wk.ranks.size() < 2) continue;
    WorkerState& st = workers_[static_cast<size_t>(w)];
    if (st.rankCompute.size() != wk.ranks.size()) {
      st.rankCompute.assign(wk.ranks.size(), Ring<double>(window));
      st.rankWait.assign(wk.ranks.size(), Ring<double>(window));
    }
    const size_t pos = static_cast<size_t>(
        std::lower_bound(wk.ranks.begin(), wk.ranks.end(), rank) - wk.ranks.begin());
    if (pos >= wk.ranks.size() || r.report.compute_ns() <= 0) continue;
    double wait = 0;
    bool any = false;
    for (const auto& c : r.report.collectives()) {
      if (!std::binary_search(layout.tpGroups.begin(), layout.tpGroups.end(), c.group())) continue;
      wait += static_cast<double>(c.total_ns());
      any = true;
    }
    st.rankCompute[pos].push(static_cast<double>(r.report.compute_ns()));
    st.rankWait[pos].push(any ? wait : std::numeric_limits<double>::quiet_NaN());
  }
}

int StragglerDetector::singleRank(const WorkerState& st, const Worker& wk, size_t since,
                                  double excessNs, double* rankNs, double* peersNs,
                                  double* rankWaitNs, double* peersWaitNs) const {
  const size_t n = wk.ranks.size();
  if (n < 2 || st.rankCompute.size() != n || !(excessNs > 0)) return -1;
  std::vector<double> c(n), w(n);
  for (size_t i = 0; i < n; ++i) {
    c[i] = median(st.rankCompute[i].latest(since));
    std::vector<double> waits;
    for (double x : st.rankWait[i].latest(since)) {
      if (!std::isnan(x)) waits.push_back(x);
    }
    if (waits.empty()) return -1;  // no tensor-parallel collectives: nothing shows who waits
    w[i] = medianInPlace(waits);
  }
  const size_t slow = static_cast<size_t>(std::max_element(c.begin(), c.end()) - c.begin());
  const size_t least = static_cast<size_t>(std::min_element(w.begin(), w.end()) - w.begin());
  if (slow != least) return -1;
  std::vector<double> oc, ow;
  for (size_t i = 0; i < n; ++i) {
    if (i == slow) continue;
    oc.push_back(c[i]);
    ow.push_back(w[i]);
  }
  const double dc = c[slow] - medianInPlace(oc);
  const double dw = medianInPlace(ow) - w[slow];
  if (dc < 0.5 * excessNs || dw < 0.25 * dc) return -1;
  *rankNs = c[slow];
  *peersNs = c[slow] - dc;
  *rankWaitNs = w[slow];
  *peersWaitNs = w[slow] + dw;
  return static_cast<int>(slow);
}

void StragglerDetector::onLayoutStep(const AssembledStep& step) {
  const JobLayout& layout = *layout_;
  if (layoutStep_ < 0) layoutStep_ = step.step;
  // A straggler carried over from the flat comparison stays open while this comparison finds
  // its worker slow too; if it has not within two windows, it is over.
  for (size_t w = 0; w < workers_.size(); ++w) {
    WorkerState& st = workers_[w];
    if (!st.carried) continue;
    const PeerRatioSet& set = stageSets_[layout.workers[w].stage];
    if (set.has(w) && set.tracker(w).active()) {
      st.carried = false;
    } else if (step.step - layoutStep_ >= 2 * int64_t{std::max(1, o_.persistence.window)}) {
      Anomaly a = st.anomaly;
      a.labels["resolution"] = "layout";
      log_->resolve(a, step.step, step.nowNs);
      st.open = false;
      st.carried = false;
    }
  }
  viewStep(step, layout, &view_);
  observeRanks(step);
  views_.push(summaryOf(view_));
  // Per stage, each worker's compute against the median of the stage's other workers.
  std::vector<std::vector<size_t>> byStage(layout.stages);
  for (size_t w = 0; w < layout.workers.size(); ++w) {
    if (view_.workerNs[w] > 0) byStage[layout.workers[w].stage].push_back(w);
  }
  std::vector<std::pair<size_t, double>> ratios;
  std::vector<double> others;
  std::vector<PeerRatioSet::Event> events;
  for (uint32_t s = 0; s < layout.stages; ++s) {
    const auto& ws = byStage[s];
    if (ws.size() == 1 && layout.replicas == 1) judgeLoneWorker(step, s, ws[0]);
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
      const Worker& wk = layout.workers[e.unit];
      const PersistenceTracker& tr = stageSets_[s].tracker(e.unit);
      if (e.transition == PersistenceTracker::Transition::kResolved) {
        if (st.open) log_->resolve(st.anomaly, tr.resolvedStep(), step.nowNs);
        st.open = false;
        continue;
      }
      if (st.open) {  // carried over from the flat comparison: the same straggler
        st.carried = false;
        continue;
      }
      Anomaly a;
      a.job = job_;
      a.kind = AnomalyKind::kStraggler;
      a.ranks = wk.ranks;
      a.nodes = nodesOf(step, wk.ranks);
      fillOpened(tr, step, &a);
      const size_t since = static_cast<size_t>(std::max<int64_t>(1, step.step - a.onsetStep + 1));
      const double computeNs = median(st.compute.latest(since));
      const double peerNs = median(st.peer.latest(since));
      const std::vector<StepSummary> recent = views_.latest(since);
      const std::vector<StepSummary> all = views_.latest(views_.size());
      const StepSummary med = medianOf(recent, layout.stages, &all);
      const double stepMs = med.stepNs / 1e6;
      double gain = computeNs > 0 ? replayedGain(recent, layout, e.unit, peerNs / computeNs,
                                                 med.microbatches, med.schedule)
                                  : -1.0;
      if (gain < 0) {
        gain = estimatedGain(med.stageNs, s, computeNs, peerNs, med.microbatches, med.stepNs,
                             med.schedule);
      }
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
      const std::string gainText = "; about " +
                                   std::to_string(static_cast<int>(std::lround(gain * 100))) +
                                   " % of the step to gain";
      double rankNs = 0, peersNs = 0, rankWait = 0, peersWait = 0;
      const int one =
          singleRank(st, wk, since, computeNs - peerNs, &rankNs, &peersNs, &rankWait, &peersWait);
      if (one >= 0) {
        // One GPU: its tp peers wait for it in their collectives (see the header).
        const std::string tail =
            strCat("; the worker runs ", formatRatio(a.magnitude),
                   " its stage's other workers from step ", std::to_string(a.onsetStep), gainText);
        openRank(step, static_cast<size_t>(one), wk, rankNs, peersNs, rankWait, peersWait, tail,
                 std::move(a), &st);
        continue;
      }
      a.labels["scope"] = "worker";
      const std::string who = rankList(wk.ranks);
      a.summary =
          strCat("worker ", wk.coords, " (", who, ") is a straggler: compute ",
                 formatRatio(a.magnitude), " its stage's other workers (", formatMs(computeNs),
                 " vs ", formatMs(peerNs), ") from step ", std::to_string(a.onsetStep), gainText);
      st.anomaly = log_->open(std::move(a), rankSubject(wk.ranks));
      st.open = true;
    }
  }
}

void StragglerDetector::openRank(const AssembledStep& step, size_t pos, const Worker& wk,
                                 double rankNs, double peersNs, double rankWait, double peersWait,
                                 const std::string& tail, Anomaly a, WorkerState* st) {
  const uint32_t rank = wk.ranks[pos];
  std::string coords = wk.coords;
  if (pos < wk.tp.size() && wk.tp[pos] >= 0) {
    coords.pop_back();  // '}'
    coords +=
        std::string(coords.size() > 1 ? "," : "") + "\"tp\":" + std::to_string(wk.tp[pos]) + '}';
  }
  a.ranks = {rank};
  a.nodes = nodesOf(step, a.ranks);
  a.labels["coords"] = coords;
  a.labels["worker"] = wk.coords;
  a.labels["scope"] = "rank";
  a.evidence["rank_compute_ms"] = rankNs / 1e6;
  a.evidence["tp_peers_compute_ms"] = peersNs / 1e6;
  const bool waits = !std::isnan(rankWait) && !std::isnan(peersWait);
  if (waits) {
    a.evidence["rank_tp_wait_ms"] = rankWait / 1e6;
    a.evidence["tp_peers_wait_ms"] = peersWait / 1e6;
  }
  a.summary = strCat("rank ", std::to_string(rank), " ", coords, " slows its worker (",
                     rankList(wk.ranks), "): compute ", formatMs(rankNs), " vs ", formatMs(peersNs),
                     " on its tensor-parallel peers",
                     waits ? strCat(", which wait ", formatMs(peersWait - rankWait),
                                    " per step for it in their collectives")
                           : std::string(" (the job reports no tensor-parallel collectives)"),
                     tail);
  st->anomaly = log_->open(std::move(a), rankSubject({rank}));
  st->open = true;
}

void StragglerDetector::judgeLoneWorker(const AssembledStep& step, uint32_t stage, size_t w) {
  const JobLayout& layout = *layout_;
  const Worker& wk = layout.workers[w];
  const size_t n = wk.ranks.size();
  if (n < 2) return;
  // This step's compute of the worker's ranks (0: not reported).
  std::vector<double> compute(n, 0.0);
  for (const RankStep& r : step.ranks) {
    const uint32_t rank = r.report.rank();
    if (layout.workerOfRank(rank) != static_cast<int32_t>(w)) continue;
    const auto it = std::lower_bound(wk.ranks.begin(), wk.ranks.end(), rank);
    if (it != wk.ranks.end() && *it == rank)
      compute[static_cast<size_t>(it - wk.ranks.begin())] =
          static_cast<double>(r.report.compute_ns());
  }
  std::vector<std::pair<size_t, double>> ratios;
  std::vector<double> others;
  for (size_t i = 0; i < n; ++i) {
    if (compute[i] <= 0) continue;
    others.clear();
    for (size_t j = 0; j < n; ++j) {
      if (j != i && compute[j] > 0) others.push_back(compute[j]);
    }
    if (others.empty()) continue;
    const double peer = medianInPlace(others);
    ratios.emplace_back(i, peer > 0 ? compute[i] / peer : 1.0);
  }
  std::vector<PeerRatioSet::Event> events;
  rankSets_[stage].push(step.step, ratios, &events);
  WorkerState& st = workers_[w];
  for (const auto& e : events) {
    if (e.transition != PersistenceTracker::Transition::kResolved) continue;
    if (st.open && st.anomaly.ranks == std::vector<uint32_t>{wk.ranks[e.unit]}) {
      log_->resolve(st.anomaly, rankSets_[stage].tracker(e.unit).resolvedStep(), step.nowNs);
      st.open = false;
    }
  }
  // A rank whose ratio stays high is named once the wait test agrees: judged again every step
  // while its excursion lasts, as the tp collectives' evidence builds up with the steps.
  for (const auto& r : ratios) {
    if (st.open) break;  // one anomaly per worker
    const size_t unit = r.first;
    const PersistenceTracker& tr = rankSets_[stage].tracker(unit);
    if (!tr.active()) continue;
    Anomaly a;
    a.job = job_;
    a.kind = AnomalyKind::kStraggler;
    fillOpened(tr, step, &a);
    const size_t since = static_cast<size_t>(std::max<int64_t>(1, step.step - a.onsetStep + 1));
    if (st.rankCompute.size() != n) continue;
    // The rank's excess over its tensor-parallel peers since the onset; it is named only when
    // their collectives show them waiting for it (singleRank), as for a worker with peers.
    std::vector<double> peerMedians;
    for (size_t j = 0; j < n; ++j) {
      if (j != unit) peerMedians.push_back(median(st.rankCompute[j].latest(since)));
    }
    const double rankMedian = median(st.rankCompute[unit].latest(since));
    const double peerMedian = medianInPlace(peerMedians);
    double rankNs = 0, peersNs = 0, rankWait = 0, peersWait = 0;
    const int one = singleRank(st, wk, since, rankMedian - peerMedian, &rankNs, &peersNs, &rankWait,
                               &peersWait);
    if (one != static_cast<int>(unit)) {
      // No tensor-parallel collectives reported at all: nothing shows who waits, and nothing
      // contradicts the compute either (ranks of one tp group do the same work), so the rank
      // is named on its compute alone. Collectives that show no one waiting for it keep it
      // unnamed: its extra compute costs the step nothing then.
      bool anyWait = false;
      for (const auto& ring : st.rankWait) {
        for (double x : ring.latest(since)) anyWait = anyWait || !std::isnan(x);
      }
      if (anyWait || !(rankMedian > peerMedian)) continue;
      rankNs = rankMedian;
      peersNs = peerMedian;
      rankWait = peersWait = std::numeric_limits<double>::quiet_NaN();
    }
    const std::vector<StepSummary> all = views_.latest(views_.size());
    const StepSummary med = medianOf(views_.latest(since), layout.stages, &all);
    const double gain = estimatedGain(med.stageNs, stage, med.stageNs[stage],
                                      med.stageNs[stage] - (rankNs - peersNs), med.microbatches,
                                      med.stepNs, med.schedule);
    a.evidence = {{"compute_ms", rankNs / 1e6},
                  {"peer_median_ms", peersNs / 1e6},
                  {"ratio", a.magnitude},
                  {"noise_sigma", rankSets_[stage].noise()},
                  {"exceed_level", tr.exceedLevel()},
                  {"exceeding_steps", tr.exceedCount()},
                  {"peers", static_cast<double>(n - 1)},
                  {"step_ms", med.stepNs / 1e6},
                  {"estimated_gain", gain},
                  {"added_ms_per_step", (rankNs - peersNs) / 1e6}};
    a.labels = {{"stage", std::to_string(wk.stage)}};
    const std::string tail = strCat(
        "; its stage has no other worker, so it is judged against its tensor-parallel peers: ",
        formatRatio(a.magnitude), " their compute from step ", std::to_string(a.onsetStep),
        "; about ", std::to_string(static_cast<int>(std::lround(gain * 100))),
        " % of the step to gain");
    openRank(step, unit, wk, rankNs, peersNs, rankWait, peersWait, tail, std::move(a), &st);
  }
}

}  // namespace trainscope::detect
