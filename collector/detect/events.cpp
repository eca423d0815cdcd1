#include "collector/detect/events.h"

#include <algorithm>
#include <cstdio>

namespace trainscope::detect {

namespace {
constexpr AnomalyKind kAllKinds[] = {AnomalyKind::kStepShift,
                                     AnomalyKind::kStraggler,
                                     AnomalyKind::kSlowComm,
                                     AnomalyKind::kOpRegression,
                                     AnomalyKind::kHang,
                                     AnomalyKind::kSpike,
                                     AnomalyKind::kStageImbalance,
                                     AnomalyKind::kWorkloadImbalance,
                                     AnomalyKind::kExpertImbalance,
                                     AnomalyKind::kGpuFault};
}  // namespace

const char* anomalyKindName(AnomalyKind kind) {
  switch (kind) {
    case AnomalyKind::kStepShift:
      return "step_shift";
    case AnomalyKind::kStraggler:
      return "straggler";
    case AnomalyKind::kSlowComm:
      return "slow_comm";
    case AnomalyKind::kOpRegression:
      return "op_regression";
    case AnomalyKind::kHang:
      return "hang";
    case AnomalyKind::kSpike:
      return "spike";
    case AnomalyKind::kStageImbalance:
      return "stage_imbalance";
    case AnomalyKind::kWorkloadImbalance:
      return "workload_imbalance";
    case AnomalyKind::kExpertImbalance:
      return "expert_imbalance";
    case AnomalyKind::kGpuFault:
      return "gpu_fault";
  }
  return "unknown";
}

bool parseAnomalyKind(const std::string& name, AnomalyKind* out) {
  for (AnomalyKind k : kAllKinds) {
    if (name == anomalyKindName(k)) {
      *out = k;
      return true;
    }
  }
  return false;
}

std::string rankList(const std::vector<uint32_t>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i]);
  }
  return out;
}

std::string rankSubject(const std::vector<uint32_t>& ranksIn) {
  std::vector<uint32_t> ranks = ranksIn;
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += '+';
    out += 'r' + std::to_string(ranks[i]);
    if (j > i) out += '-' + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out.empty() ? "job" : out;
}

std::string formatMs(double ns) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f ms", ns / 1e6);
  return buf;
}

std::string formatRatio(double ratio) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2fx", ratio);
  return buf;
}

Anomaly EventLog::open(Anomaly a, const std::string& subject) {
  std::sort(a.ranks.begin(), a.ranks.end());
  a.ranks.erase(std::unique(a.ranks.begin(), a.ranks.end()), a.ranks.end());
  a.nodes.erase(std::remove(a.nodes.begin(), a.nodes.end(), std::string()), a.nodes.end());
  std::sort(a.nodes.begin(), a.nodes.end());
  a.nodes.erase(std::unique(a.nodes.begin(), a.nodes.end()), a.nodes.end());
  std::string base =
      a.job + "/" + anomalyKindName(a.kind) + "/" + std::to_string(a.onsetStep) + "/" + subject;
  std::string id = base;
  for (int n = 2; usedIds_.count(id) != 0; ++n) id = base + "#" + std::to_string(n);
  usedIds_.insert(id);
  a.id = id;
  a.state = AnomalyState::kOpen;
  a.resolvedStep = -1;
  a.confidence = std::clamp(a.confidence, 0.0, 1.0);
  events_.push_back(a);
  ++opened_;
  return a;
}

void EventLog::resolve(const Anomaly& anomaly, int64_t step, int64_t nowNs) {
  Anomaly a = anomaly;
  a.state = AnomalyState::kResolved;
  a.resolvedStep = step;
  a.resolvedNs = nowNs;
  a.summary = "resolved at step " + std::to_string(step) + ": " + anomaly.summary;
  events_.push_back(std::move(a));
  ++resolved_;
}

void EventLog::refresh(const Anomaly& anomaly) {
  Anomaly a = anomaly;
  a.state = AnomalyState::kOpen;
  a.refresh = true;
  events_.push_back(std::move(a));
}

std::vector<Anomaly> EventLog::take() {
  std::vector<Anomaly> out;
  out.swap(events_);
  return out;
}

}  // namespace trainscope::detect
