#include "collector/storage/store_rows.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "collector/storage/capture_json.h"

namespace trainscope::storage {
namespace {

using nlohmann::json;

std::string jsonText(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

StepSummaryRow summarizeStep(int64_t step, std::vector<std::pair<int64_t, uint32_t>>& durations) {
  StepSummaryRow row;
  row.step = step;
  row.ranks = static_cast<uint32_t>(durations.size());
  std::sort(durations.begin(), durations.end());
  row.minNs = durations.front().first;
  size_t n = durations.size();
  row.medianNs = n % 2 == 1 ? durations[n / 2].first
                            : durations[n / 2 - 1].first +
                                  (durations[n / 2].first - durations[n / 2 - 1].first) / 2;
  int64_t maxNs = durations.back().first;
  row.maxNs = maxNs;
  auto first =
      std::lower_bound(durations.begin(), durations.end(), std::make_pair(maxNs, uint32_t{0}));
  row.slowestRank = first->second;
  return row;
}

std::string_view stepDetail(const WriteBatch& batch, size_t i, std::string* scratch) {
  if (batch.stepDetailViews.size() == batch.steps.size()) return batch.stepDetailViews[i];
  if (batch.stepDetails.size() == batch.steps.size()) return batch.stepDetails[i];
  scratch->clear();
  batch.steps[i].SerializeToString(scratch);
  return *scratch;
}

Status fillStepDetail(std::string_view blob, StepRow* row) {
  wire::StepReport detail;
  if (!detail.ParseFromArray(blob.data(), static_cast<int>(blob.size()))) {
    return Status::error("storage: step detail of job " + row->job + " rank " +
                         std::to_string(row->rank) + " step " + std::to_string(row->step) +
                         " is corrupt");
  }
  row->ops.assign(detail.ops().begin(), detail.ops().end());
  row->collectives.assign(detail.collectives().begin(), detail.collectives().end());
  row->p2p.assign(detail.p2p().begin(), detail.p2p().end());
  row->p2pNs = detail.p2p_ns();
  row->bubbleNs = detail.bubble_ns();
  row->collectiveNs = detail.collective_ns();
  row->exposedCollectiveNs = detail.exposed_collective_ns();
  row->allToAllNs = detail.all_to_all_ns();
  row->device = detail.device();
  row->cpuWaitNs = detail.cpu_wait_ns();
  row->deviceCommNs = detail.device_comm_ns();
  row->deviceDropped = detail.device_dropped();
  row->modelFlops = detail.model_flops();
  row->hardwareFlops = detail.hardware_flops();
  row->peakFlops = detail.peak_flops();
  return Status::ok();
}

AnomalyJson anomalyJson(const AnomalyRow& row) {
  return {jsonText(json(row.ranks)), jsonText(json(row.nodes)), jsonText(json(row.evidence)),
          jsonText(json(row.labels))};
}

Status parseAnomalyJson(const AnomalyJson& text, AnomalyRow* row) {
  auto parse = [&](const std::string& t, const char* what) -> Result<json> {
    auto j = json::parse(t, nullptr, false);
    if (j.is_discarded()) {
      return Result<json>::error("storage: anomaly " + row->id + ": " + what + " is not JSON");
    }
    return j;
  };
  auto ranks = parse(text.ranks, "ranks");
  if (!ranks) return ranks.status();
  auto nodes = parse(text.nodes, "nodes");
  if (!nodes) return nodes.status();
  auto evidence = parse(text.evidence, "evidence");
  if (!evidence) return evidence.status();
  auto labels = parse(text.labels, "labels");
  if (!labels) return labels.status();
  for (const auto& r : *ranks) {
    if (r.is_number_unsigned()) row->ranks.push_back(r.get<uint32_t>());
  }
  for (const auto& n : *nodes) {
    if (n.is_string()) row->nodes.push_back(n.get<std::string>());
  }
  for (const auto& [k, v] : evidence->items()) {
    if (v.is_number()) row->evidence[k] = v.get<double>();
  }
  for (const auto& [k, v] : labels->items()) {
    if (v.is_string()) row->labels[k] = v.get<std::string>();
  }
  return Status::ok();
}

Status checkAnomaly(const AnomalyRow& row) {
  if (row.id.empty() || row.job.empty() || row.kind.empty()) {
    return Status::error("storage: anomaly without " +
                         std::string(row.id.empty()    ? "id"
                                     : row.job.empty() ? "job"
                                                       : "kind") +
                         (row.id.empty() ? std::string() : " (id " + row.id + ")"));
  }
  return Status::ok();
}

const char* toString(AnomalyState state) {
  switch (state) {
    case AnomalyState::kResolved:
      return "resolved";
    case AnomalyState::kEnded:
      return "ended";
    case AnomalyState::kOpen:
      break;
  }
  return "open";
}

std::optional<AnomalyState> parseAnomalyState(std::string_view text) {
  for (AnomalyState s : {AnomalyState::kOpen, AnomalyState::kResolved, AnomalyState::kEnded}) {
    if (text == toString(s)) return s;
  }
  return std::nullopt;
}

Status parseAnomalyStateText(std::string_view text, AnomalyRow* row) {
  const auto state = parseAnomalyState(text);
  if (!state) {
    return Status::error(StatusCode::kMalformed, "storage: anomaly " + row->id +
                                                     ": unknown state '" + std::string(text) + "'");
  }
  row->state = *state;
  return Status::ok();
}

Status checkCapture(const CaptureRow& row) {
  if (row.id.empty() || row.job.empty()) {
    return Status::error(std::string("storage: capture without ") +
                         (row.id.empty() ? "id" : "job (id " + row.id + ")"));
  }
  if (row.kind != "trace" && row.kind != "stacks" && row.kind != "import") {
    return Status::error("storage: capture " + row.id +
                         ": kind must be trace, stacks or import, got '" + row.kind + "'");
  }
  return Status::ok();
}

Status parseCaptureStateText(std::string_view text, CaptureRow* row) {
  const auto state = wire::parseCaptureState(text);
  if (!state) {
    return Status::error(StatusCode::kMalformed, "storage: capture " + row->id +
                                                     ": unknown state '" + std::string(text) + "'");
  }
  row->state = *state;
  return Status::ok();
}

std::string captureRanksText(const CaptureRow& row) {
  return jsonText(json(row.ranks));
}

std::string rankStatusText(const std::vector<CaptureRankRow>& ranks) {
  return jsonText(rankStatusJson(ranks));
}

Status parseCaptureRanks(std::string_view text, CaptureRow* row) {
  auto ranks = json::parse(text, nullptr, false);
  if (ranks.is_discarded() || !ranks.is_array()) {
    return Status::error("storage: capture " + row->id + ": ranks is not a JSON list");
  }
  for (const auto& r : ranks) {
    if (r.is_number_unsigned()) row->ranks.push_back(r.get<uint32_t>());
  }
  return Status::ok();
}

Result<wire::RankState> storedRankState(const std::string& captureId, uint32_t rank,
                                        const std::string& text) {
  const auto parsed = wire::parseRankState(text);
  if (!parsed) {
    return Status::error(StatusCode::kMalformed, "storage: capture " + captureId + ": rank " +
                                                     std::to_string(rank) +
                                                     " has an unknown state '" + text + "'");
  }
  return *parsed;
}

Status parseRankStatus(std::string_view text, CaptureRow* row) {
  auto list = json::parse(text, nullptr, false);
  if (list.is_discarded() || !list.is_array()) {
    return Status::error("storage: capture " + row->id + ": rank_status is not a JSON list");
  }
  for (const auto& j : list) {
    if (!j.is_object()) continue;
    CaptureRankRow r;
    r.rank = j.value("rank", 0u);
    r.node = j.value("node", std::string());
    auto parsed = storedRankState(
        row->id, r.rank, j.value("state", std::string(wire::toString(wire::RankState::kPending))));
    if (!parsed) return parsed.status();
    r.state = *parsed;
    r.detail = j.value("detail", std::string());
    r.bytes = j.value("bytes", uint64_t{0});
    r.truncated = j.value("truncated", false);
    r.firstStep = j.value("first_step", int64_t{-1});
    r.lastStep = j.value("last_step", int64_t{-1});
    r.updatedNs = j.value("updated_ns", int64_t{0});
    row->rankStatus.push_back(std::move(r));
  }
  return Status::ok();
}

Status Store::writeCaptureProgress(const CaptureProgress& progress) {
  auto stored = capture(progress.id);
  if (!stored) return stored.status();
  if (!stored->has_value() || (*stored)->state != wire::CaptureState::kRunning) {
    return Status::error("storage: capture " + progress.id + " is not stored as running");
  }
  CaptureRow row = std::move(**stored);
  std::map<uint32_t, size_t> index;
  for (size_t i = 0; i < row.rankStatus.size(); ++i) index[row.rankStatus[i].rank] = i;
  for (const auto& r : progress.ranks) {
    if (auto it = index.find(r.rank); it != index.end()) {
      row.rankStatus[it->second] = r;
    } else {
      row.rankStatus.push_back(r);
    }
  }
  row.summary = progress.summary;
  row.updatedNs = progress.updatedNs;
  return writeCapture(row);
}

json rankStatusJson(const std::vector<CaptureRankRow>& ranks) {
  json list = json::array();
  for (const auto& r : ranks) {
    list.push_back(json{{"rank", r.rank},
                        {"node", r.node},
                        {"state", wire::toString(r.state)},
                        {"detail", r.detail},
                        {"bytes", r.bytes},
                        {"truncated", r.truncated},
                        {"first_step", r.firstStep},
                        {"last_step", r.lastStep},
                        {"updated_ns", r.updatedNs}});
  }
  return list;
}

}  // namespace trainscope::storage
