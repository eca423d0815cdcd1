#include "collector/http/parallel_metrics.h"

#include <algorithm>
#include <utility>

namespace trainscope::http {
namespace {

std::optional<double> ratio(double num, double den) {
  if (!(den > 0)) return std::nullopt;
  return num / den;
}

}  // namespace

StepRatios stepRatios(const storage::StepRow& s) {
  StepRatios r;
  const auto duration = static_cast<double>(s.durationNs);
  if (s.p2pNs > 0) r.bubble = ratio(static_cast<double>(s.bubbleNs), duration);
  r.overlap = ratio(static_cast<double>(s.collectiveNs - s.exposedCollectiveNs),
                    static_cast<double>(s.collectiveNs));
  // FLOPs x 1e9 / (ns x FLOP/s): no rounded 1e-9 in the denominator.
  const double peakTimesNs = duration * s.peakFlops;
  if (s.modelFlops > 0) r.mfu = ratio(s.modelFlops * 1e9, peakTimesNs);
  if (s.hardwareFlops > 0) r.hfu = ratio(s.hardwareFlops * 1e9, peakTimesNs);
  if (s.allToAllNs > 0) r.allToAllShare = ratio(static_cast<double>(s.allToAllNs), duration);
  return r;
}

std::vector<StageBubble> stageBubbles(std::span<const storage::StepRow* const> rows,
                                      const topology::Topology& layout) {
  struct Sum {
    uint32_t ranks = 0;
    double bubbleNs = 0;
    double durationNs = 0;
  };
  std::map<uint32_t, Sum> sums;
  for (const storage::StepRow* row : rows) {
    if (row->p2pNs <= 0 || row->durationNs <= 0) continue;
    auto c = layout.coords.find(row->rank);
    if (c == layout.coords.end()) continue;
    const std::optional<uint32_t> stage = c->second.along(wire::GROUP_PP);
    if (!stage) continue;
    Sum& sum = sums[*stage];
    ++sum.ranks;
    sum.bubbleNs += static_cast<double>(row->bubbleNs);
    sum.durationNs += static_cast<double>(row->durationNs);
  }
  std::vector<StageBubble> out;
  out.reserve(sums.size());
  for (const auto& [stage, sum] : sums) {
    out.push_back({stage, sum.ranks, sum.bubbleNs / sum.durationNs});
  }
  return out;
}

std::string ParallelMetrics::add(storage::Store& store, const std::string& job,
                                 const std::map<uint32_t, const storage::StepRow*>& latest) {
  auto& ranks = ranks_[job];
  std::vector<const storage::StepRow*> rows;
  bool pipeline = false;
  for (const auto& [rank, row] : latest) {
    ranks[rank] = stepRatios(*row);
    rows.push_back(row);
    pipeline = pipeline || row->p2pNs > 0;
  }
  if (!pipeline) return {};
  auto declared = store.groups(job);
  if (!declared) {
    return "# store error (groups of " + escapeHelpText(job) +
           "): " + escapeHelpText(declared.message()) + "\n";
  }
  stages_[job] = stageBubbles(rows, topology::derive(*declared));
  return {};
}

void ParallelMetrics::write(MetricsText& m) const {
  auto perRank = [&](const char* name, const char* help, std::optional<double> StepRatios::*field) {
    m.family(name, "gauge", help);
    for (const auto& [job, ranks] : ranks_) {
      for (const auto& [rank, r] : ranks) {
        if (const auto& v = r.*field) {
          m.sample({{"training_job", job}, {"rank", std::to_string(rank)}}, *v);
        }
      }
    }
  };
  perRank("trainscope_step_last_bubble_ratio",
          "Pipeline bubble in the rank's latest step: time idle waiting on pipeline peers (p2p "
          "not overlapped by compute) / step time. Ranks that did p2p only.",
          &StepRatios::bubble);
  perRank("trainscope_step_last_comm_overlap_ratio",
          "Communication overlap in the rank's latest step: 1 - exposed / total collective "
          "time (p2p excluded). Ranks that ran collectives only.",
          &StepRatios::overlap);
  perRank("trainscope_step_last_mfu",
          "Model FLOPs utilisation of the rank's latest step: stated model FLOPs per step / "
          "(step time x stated peak FLOP/s). Jobs that stated their FLOPs only.",
          &StepRatios::mfu);
  perRank("trainscope_step_last_hfu",
          "Hardware FLOPs utilisation of the rank's latest step (recomputation included). Jobs "
          "that stated their hardware FLOPs only.",
          &StepRatios::hfu);
  perRank("trainscope_step_last_all_to_all_share",
          "Share of the rank's latest step spent in all-to-all (MoE token exchange). Ranks "
          "that ran all-to-all only.",
          &StepRatios::allToAllShare);
  m.family("trainscope_stage_bubble_ratio", "gauge",
           "Pipeline bubble of a stage over its ranks' latest steps: their bubble summed / "
           "their step time summed. Jobs that declared a pipeline-parallel group only.");
  for (const auto& [job, stages] : stages_) {
    for (const StageBubble& s : stages) {
      m.sample({{"training_job", job}, {"stage", std::to_string(s.stage)}}, s.ratio);
    }
  }
}

}  // namespace trainscope::http
