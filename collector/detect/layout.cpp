#include "collector/detect/layout.h"

#include <algorithm>
#include <map>

#include "collector/detect/robust.h"
#include "common/median.h"

namespace trainscope::detect {

std::shared_ptr<const JobLayout> layoutOf(const topology::Topology& t) {
  if (!t.declared || t.coords.empty()) return nullptr;
  const uint32_t tp = t.sizes[2];  // kAxes: pp, dp, tp, cp, ep
  const uint32_t pp = t.sizes[0];
  if (tp <= 1 && pp <= 1) return nullptr;
  // Not before every rank of the layout has declared its groups: ranks declare as they start,
  // and a layout missing some would name a stage or worker by the ranks seen so far, then be
  // replaced as the rest arrive (restarting the detectors, with what they had opened orphaned).
  // Until then the job keeps the flat comparisons.
  uint64_t expected = 1;
  for (size_t a = 0; a < topology::kAxes.size(); ++a) {
    const wire::GroupKind k = topology::kAxes[a];
    if (k == wire::GROUP_EP) continue;  // carved out of dp, not a factor of its own
    expected *= std::max<uint32_t>(t.sizes[a], 1);
  }
  if (t.coords.size() < expected) return nullptr;
  for (const auto& [rank, c] : t.coords) {  // another rank's group may name one before it speaks
    for (size_t a = 0; a < topology::kAxes.size(); ++a) {
      if (topology::kAxes[a] != wire::GROUP_EP && t.sizes[a] > 1 && !c.at[a]) return nullptr;
    }
  }
  auto layout = std::make_shared<JobLayout>();
  layout->stages = std::max<uint32_t>(pp, 1);
  // Workers by their coordinates along pp and dp: tensor- and context-parallel ranks wait for
  // each other in every layer (all_reduce, key/value all_gather), so they go together; the ep
  // index is a function of the dp one.
  std::map<std::vector<int64_t>, size_t> byKey;
  uint32_t maxRank = 0;
  for (const auto& [rank, c] : t.coords) {
    std::vector<int64_t> key;
    std::string coords;
    for (size_t a = 0; a < topology::kAxes.size(); ++a) {
      const wire::GroupKind k = topology::kAxes[a];
      if (k == wire::GROUP_TP || k == wire::GROUP_CP || k == wire::GROUP_EP) continue;
      key.push_back(c.at[a] ? static_cast<int64_t>(*c.at[a]) : -1);
      if (!c.at[a]) continue;
      coords += coords.empty() ? '{' : ',';
      coords += '"' + std::string(topology::kindName(topology::kAxes[a])) +
                "\":" + std::to_string(*c.at[a]);
    }
    if (coords.empty()) {
      coords = "{}";
    } else {
      coords += '}';
    }
    auto [it, fresh] = byKey.try_emplace(key, layout->workers.size());
    if (fresh) {
      Worker w;
      w.stage = c.along(wire::GROUP_PP).value_or(0);
      w.replica = c.along(wire::GROUP_DP).value_or(0);
      w.coords = coords;
      layout->workers.push_back(std::move(w));
    }
    layout->workers[it->second].ranks.push_back(rank);  // coords is by rank: stays sorted
    const auto tpIndex = c.along(wire::GROUP_TP);
    layout->workers[it->second].tp.push_back(tpIndex ? static_cast<int32_t>(*tpIndex) : -1);
    maxRank = std::max(maxRank, rank);
  }
  // A stage index past the declared size (a problem the topology lists) is clamped, so the
  // detectors' per-stage arrays stay in range.
  for (Worker& w : layout->workers) w.stage = std::min(w.stage, layout->stages - 1);
  layout->replicas = std::max<uint32_t>(t.sizes[1], 1);  // kAxes[1] is dp
  for (Worker& w : layout->workers) w.replica = std::min(w.replica, layout->replicas - 1);
  for (const topology::Group& g : t.groups) {
    if (g.kind == wire::GROUP_TP) layout->tpGroups.push_back(g.name);
    if (g.kind == wire::GROUP_DP) layout->dpGroups.push_back(g.name);
  }
  for (auto* names : {&layout->tpGroups, &layout->dpGroups}) {
    std::sort(names->begin(), names->end());
    names->erase(std::unique(names->begin(), names->end()), names->end());
  }
  layout->workerOf.assign(static_cast<size_t>(maxRank) + 1, -1);
  layout->stageOf.assign(static_cast<size_t>(maxRank) + 1, -1);
  for (size_t i = 0; i < layout->workers.size(); ++i) {
    for (uint32_t r : layout->workers[i].ranks) {
      layout->workerOf[r] = static_cast<int32_t>(i);
      layout->stageOf[r] = static_cast<int32_t>(layout->workers[i].stage);
    }
  }
  // Replicas whose ranks share an expert-parallel group meet in every MoE layer's all_to_all:
  // each block takes its lowest replica's index.
  layout->expertBlock.resize(layout->replicas);
  for (uint32_t r = 0; r < layout->replicas; ++r) layout->expertBlock[r] = r;
  auto root = [&](uint32_t r) {
    while (layout->expertBlock[r] != r) r = layout->expertBlock[r];
    return r;
  };
  for (const topology::Group& g : t.groups) {
    if (g.kind != wire::GROUP_EP) continue;
    std::vector<uint32_t> roots;
    for (uint32_t rank : g.ranks) {
      const int32_t w = layout->workerOfRank(rank);
      if (w >= 0) roots.push_back(root(layout->workers[static_cast<size_t>(w)].replica));
    }
    if (roots.empty()) continue;
    const uint32_t low = *std::min_element(roots.begin(), roots.end());
    for (uint32_t b : roots) layout->expertBlock[b] = low;
  }
  for (uint32_t r = 0; r < layout->replicas; ++r) layout->expertBlock[r] = root(r);
  return layout;
}

void viewStep(const AssembledStep& step, const JobLayout& layout, LayoutStep* out) {
  const size_t nw = layout.workers.size();
  out->workerNs.assign(nw, 0.0);
  out->dpWaitNs.assign(nw, -1.0);
  std::vector<double> durations;
  std::vector<topology::RankPipe> pipes;
  durations.reserve(step.ranks.size());
  for (const RankStep& r : step.ranks) {
    durations.push_back(static_cast<double>(r.report.duration_ns()));
    const int32_t w = layout.workerOfRank(r.report.rank());
    topology::RankPipe pipe;
    pipe.rank = r.report.rank();
    pipe.replica = w < 0 ? 0 : static_cast<int32_t>(layout.workers[static_cast<size_t>(w)].replica);
    pipe.computeNs = static_cast<double>(r.report.compute_ns());
    pipe.bubbleNs = static_cast<double>(r.report.bubble_ns());
    pipe.sends = topology::transfersOf(r.report.p2p());
    if (!pipe.sends.empty()) pipes.push_back(std::move(pipe));
    if (w < 0) continue;
    if (!layout.dpGroups.empty()) {
      double waitNs = -1.0;
      for (const auto& c : r.report.collectives()) {
        if (std::binary_search(layout.dpGroups.begin(), layout.dpGroups.end(), c.group())) {
          waitNs = std::max(waitNs, 0.0) + static_cast<double>(c.total_ns());
        }
      }
      double& d = out->dpWaitNs[static_cast<size_t>(w)];
      if (waitNs >= 0 && (d < 0 || waitNs < d)) d = waitNs;
    }
    if (r.report.compute_ns() <= 0) continue;
    double& x = out->workerNs[static_cast<size_t>(w)];
    x = std::max(x, static_cast<double>(r.report.compute_ns()));
  }
  out->stepNs = medianInPlace(durations);
  // Every layout-aware detector views the same step in turn, on the same thread: infer the
  // schedule (replays of each candidate) once per step.
  struct Last {
    const JobLayout* layout = nullptr;
    std::string job;
    int64_t step = -1;
    size_t ranks = 0;
    topology::ScheduleGuess guess;
  };
  thread_local Last last;
  if (last.layout != &layout || last.job != step.job || last.step != step.step ||
      last.ranks != step.ranks.size()) {
    last = Last{&layout, step.job, step.step, step.ranks.size(),
                topology::inferSchedule(layout.stageOf, layout.stages, pipes)};
  }
  const topology::ScheduleGuess& guess = last.guess;
  out->schedule = guess.schedule.value_or(pipeline::Schedule{});
  out->microbatches = static_cast<double>(guess.microbatches);
  std::vector<std::vector<double>> perStage(layout.stages);
  for (size_t i = 0; i < nw; ++i) {
    if (out->workerNs[i] > 0) perStage[layout.workers[i].stage].push_back(out->workerNs[i]);
  }
  out->stageNs.assign(layout.stages, 0.0);
  for (uint32_t s = 0; s < layout.stages; ++s) {
    auto& v = perStage[s];
    if (v.empty()) continue;
    // The lower median: with two replicas the faster one, so a slow worker never sets it.
    out->stageNs[s] = lowerMedianInPlace(v);
  }
}

StepSummary medianOf(const std::vector<StepSummary>& steps, size_t stages,
                     const std::vector<StepSummary>* scheduleSteps) {
  StepSummary out;
  out.stageNs.assign(stages, 0.0);
  std::vector<double> col;
  for (size_t s = 0; s < stages; ++s) {
    col.clear();
    for (const StepSummary& v : steps) {
      if (s < v.stageNs.size() && v.stageNs[s] > 0) col.push_back(v.stageNs[s]);
    }
    out.stageNs[s] = medianInPlace(col);
  }
  col.clear();
  for (const StepSummary& v : steps) col.push_back(v.stepNs);
  out.stepNs = medianInPlace(col);
  // The schedule and microbatches most steps showed (they come together).
  const std::vector<StepSummary>& voters = scheduleSteps ? *scheduleSteps : steps;
  std::vector<topology::ScheduleGuess> guesses;
  guesses.reserve(voters.size());
  for (const StepSummary& v : voters) {
    guesses.push_back({v.schedule, static_cast<uint32_t>(v.microbatches)});
  }
  const topology::ScheduleGuess g = topology::mostCommon(guesses);
  out.schedule = g.schedule.value_or(pipeline::Schedule{});
  out.microbatches = g.microbatches;
  return out;
}

std::vector<std::string> nodesOf(const AssembledStep& step, const std::vector<uint32_t>& ranks) {
  std::vector<std::string> out;
  for (const RankStep& r : step.ranks) {
    if (r.ctx.node.empty() || !std::binary_search(ranks.begin(), ranks.end(), r.report.rank()) ||
        std::find(out.begin(), out.end(), r.ctx.node) != out.end()) {
      continue;
    }
    out.push_back(r.ctx.node);
  }
  return out;
}

double pipelineStepNs(const std::vector<double>& stageNs, double microbatches,
                      const pipeline::Schedule& schedule) {
  if (stageNs.empty()) return 0.0;
  if (!(microbatches >= 1) || stageNs.size() == 1) {
    return *std::max_element(stageNs.begin(), stageNs.end());
  }
  const auto m = static_cast<uint32_t>(std::min(microbatches, 4096.0));
  return pipeline::makespanNs(schedule, stageNs, m);
}

double estimatedGain(std::vector<double> stageNs, size_t stage, double slowNs, double fixedNs,
                     double microbatches, double stepNs, const pipeline::Schedule& schedule) {
  if (stage >= stageNs.size() || !(stepNs > 0)) return 0.0;
  stageNs[stage] = slowNs;
  const double slow = pipelineStepNs(stageNs, microbatches, schedule);
  stageNs[stage] = fixedNs;
  const double fixed = pipelineStepNs(stageNs, microbatches, schedule);
  return std::clamp((slow - fixed) / stepNs, 0.0, 1.0);
}

double replayedGain(const std::vector<StepSummary>& steps, const JobLayout& layout, size_t worker,
                    double scale, double microbatches, const pipeline::Schedule& schedule) {
  if (worker >= layout.workers.size()) return -1.0;
  // The workers of each replica by stage (-1: none).
  std::vector<std::vector<int32_t>> grid(layout.replicas, std::vector<int32_t>(layout.stages, -1));
  for (size_t w = 0; w < layout.workers.size(); ++w) {
    const Worker& wk = layout.workers[w];
    if (wk.replica < layout.replicas && wk.stage < layout.stages) {
      grid[wk.replica][wk.stage] = static_cast<int32_t>(w);
    }
  }
  const uint32_t culprit = layout.workers[worker].replica;
  // The replicas that wait for the culprit's in every MoE layer: fixing it speeds them too.
  auto coupled = [&](uint32_t r) {
    return r < layout.expertBlock.size() && culprit < layout.expertBlock.size() &&
           layout.expertBlock[r] == layout.expertBlock[culprit];
  };
  std::vector<double> gains;
  std::vector<double> stageNs;
  auto replicaStages = [&](const StepSummary& s, uint32_t r) {
    stageNs.assign(layout.stages, 0.0);
    for (uint32_t st = 0; st < layout.stages; ++st) {
      const int32_t w = grid[r][st];
      const double x = w >= 0 ? s.workerNs[static_cast<size_t>(w)] : 0.0;
      stageNs[st] = x > 0 ? x : (st < s.stageNs.size() ? s.stageNs[st] : 0.0);
    }
  };
  for (const StepSummary& s : steps) {
    if (s.workerNs.size() != layout.workers.size() || !(s.stepNs > 0) ||
        !(s.workerNs[worker] > 0)) {
      continue;
    }
    replicaStages(s, culprit);
    const double slowNs = pipelineStepNs(stageNs, microbatches, schedule);
    stageNs[layout.workers[worker].stage] *= scale;
    double fixedNs = pipelineStepNs(stageNs, microbatches, schedule);
    // The culprit's expert peers' replicas, waiting for it now, go at their own pace once it
    // is fixed: replayed from their workers' compute.
    for (uint32_t r = 0; r < layout.replicas; ++r) {
      if (r == culprit || !coupled(r)) continue;
      replicaStages(s, r);
      fixedNs = std::max(fixedNs, pipelineStepNs(stageNs, microbatches, schedule));
    }
    // How much later the culprit's replica finished than the latest other replica, from their
    // data-parallel waits (one that finished a stage d sooner waited d longer there), at the
    // stage where it lags most (its own, in a V schedule, where its replay's stage ends are
    // too close to tell): fixing the culprit saves at most that, and at most what its replay
    // saves.
    double gapNs = -1;
    bool waited = s.dpWaitNs.size() == layout.workers.size();
    for (uint32_t st = 0; waited && st < layout.stages; ++st) {
      const int32_t c = grid[culprit][st];
      double least = -1;  // the shortest wait of another replica: the latest to finish
      for (uint32_t r = 0; r < layout.replicas && c >= 0; ++r) {
        const int32_t w = grid[r][st];
        if (coupled(r) || w < 0 || s.dpWaitNs[static_cast<size_t>(w)] < 0) continue;
        const double d = s.dpWaitNs[static_cast<size_t>(w)];
        least = least < 0 ? d : std::min(least, d);
      }
      waited = c >= 0 && least >= 0 && s.dpWaitNs[static_cast<size_t>(c)] >= 0;
      if (waited) gapNs = std::max(gapNs, least - s.dpWaitNs[static_cast<size_t>(c)]);
    }
    if (waited) {
      gains.push_back(std::clamp(std::min(gapNs, slowNs - fixedNs) / s.stepNs, 0.0, 1.0));
      continue;
    }
    // No waits: the other replicas replayed from their workers' compute.
    double othersNs = 0;
    for (uint32_t r = 0; r < layout.replicas; ++r) {
      if (coupled(r)) continue;
      replicaStages(s, r);
      othersNs = std::max(othersNs, pipelineStepNs(stageNs, microbatches, schedule));
    }
    const double slowest = std::max(slowNs, othersNs);
    const double fixed = std::max(fixedNs, othersNs);
    gains.push_back(std::clamp((slowest - fixed) / s.stepNs, 0.0, 1.0));
  }
  return gains.empty() ? -1.0 : medianInPlace(gains);
}

}  // namespace trainscope::detect
