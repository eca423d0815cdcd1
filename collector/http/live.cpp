#include "collector/http/live.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collector/http/api.h"

namespace trainscope::http {

using nlohmann::json;

namespace {

// Rows written at or after *seenNs (the store's ">=" query), less those already sent at exactly
// *seenNs (kept in *atEdge); advances both. Rows have `id` and `updatedNs`.
template <typename Row>
std::vector<const Row*> unsentSince(const std::vector<Row>& rows, int64_t* seenNs,
                                    std::map<std::string, int64_t>* atEdge) {
  int64_t newest = *seenNs;
  for (const auto& r : rows) newest = std::max(newest, r.updatedNs);
  std::map<std::string, int64_t> edge;
  std::vector<const Row*> out;
  for (const auto& r : rows) {
    auto it = atEdge->find(r.id);
    bool sent = r.updatedNs == *seenNs && it != atEdge->end() && it->second == r.updatedNs;
    if (r.updatedNs == newest) edge[r.id] = r.updatedNs;
    if (!sent) out.push_back(&r);
  }
  if (newest != *seenNs) {
    *atEdge = std::move(edge);
  } else {
    atEdge->insert(edge.begin(), edge.end());
  }
  *seenNs = newest;
  return out;
}

}  // namespace

LiveFeed::LiveFeed(storage::Store& store, const Clock& clock) : store_(store), clock_(clock) {}

void LiveFeed::reset() {
  jobs_.clear();
  nodesSeenNs_.clear();
  anomaliesSeenNs_ = 0;
  anomaliesAtEdge_.clear();
  capturesSeenNs_ = 0;
  capturesAtEdge_.clear();
}

Result<std::string> LiveFeed::snapshot() {
  auto jobs = store_.jobs();
  if (!jobs) return Result<std::string>::error("live snapshot: " + jobs.message());
  auto nodes = store_.nodes();
  if (!nodes) return Result<std::string>::error("live snapshot: " + nodes.message());
  int64_t now = clock_.nowNs();
  json j = {
      {"type", "snapshot"}, {"time_ns", now}, {"jobs", json::array()}, {"nodes", json::array()}};
  const size_t followed = std::min(jobs->size(), kLiveMaxJobs);
  for (size_t i = 0; i < followed; ++i) j["jobs"].push_back(jobJson((*jobs)[i], now));
  for (const auto& row : *nodes) j["nodes"].push_back(nodeJson(row, now));
  j["anomalies"] = json::array();
  // A store without anomaly support refuses; the feed then simply carries none.
  if (auto anomalies = store_.anomaliesSince(0)) {
    size_t first =
        anomalies->size() > kLiveMaxAnomalies ? anomalies->size() - kLiveMaxAnomalies : 0;
    for (size_t i = first; i < anomalies->size(); ++i) {
      j["anomalies"].push_back(anomalyJson((*anomalies)[i]));
    }
  }
  j["captures"] = json::array();
  if (auto captures = store_.capturesSince(0)) {
    size_t first = captures->size() > kLiveMaxCaptures ? captures->size() - kLiveMaxCaptures : 0;
    for (size_t i = first; i < captures->size(); ++i) {
      j["captures"].push_back(captureJson((*captures)[i]));
    }
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<std::vector<std::string>> LiveFeed::poll() {
  using R = Result<std::vector<std::string>>;
  auto jobs = store_.jobs();
  if (!jobs) return R::error("live poll: " + jobs.message());
  auto nodes = store_.nodes();
  if (!nodes) return R::error("live poll: " + nodes.message());
  int64_t now = clock_.nowNs();
  json changedJobs = json::array();
  json summaries = json::object();
  // Only the newest jobs; what was seen of the others is forgotten below.
  if (jobs->size() > kLiveMaxJobs) jobs->resize(kLiveMaxJobs);
  std::map<std::string, JobSeen> stillSeen;
  for (auto& row : *jobs) {
    JobSeen seen{row.latestStep, row.stepRows,  row.ranksSeen,
                 row.ranksEnded, row.worldSize, jobState(row, now)};
    auto it = jobs_.find(row.job);
    bool known = it != jobs_.end();
    const JobSeen before = known ? it->second : JobSeen{};
    if (known && before.latestStep == seen.latestStep && before.stepRows == seen.stepRows &&
        before.ranksSeen == seen.ranksSeen && before.ranksEnded == seen.ranksEnded &&
        before.worldSize == seen.worldSize && before.state == seen.state) {
      stillSeen.emplace(std::move(row.job), std::move(seen));
      continue;
    }
    changedJobs.push_back(jobJson(row, now));
    if (seen.stepRows != before.stepRows && seen.latestStep >= 0) {
      // The previous latest step may have been incomplete then (not every rank had reported),
      // so it is sent again; clients key summary rows by step.
      storage::SummaryQuery q;
      q.job = row.job;
      int64_t from = std::max<int64_t>(0, before.latestStep);
      if (seen.latestStep - from + 1 > static_cast<int64_t>(kLiveMaxSummaryRows)) {
        from = seen.latestStep - static_cast<int64_t>(kLiveMaxSummaryRows) + 1;
      }
      q.fromStep = from;
      q.limit = kLiveMaxSummaryRows;
      auto rows = store_.summary(q);
      if (!rows) return R::error("live poll: " + rows.message());
      json list = json::array();
      for (const auto& s : *rows) list.push_back(summaryJson(s));
      summaries[row.job] = std::move(list);
    }
    stillSeen.emplace(std::move(row.job), std::move(seen));
  }
  jobs_ = std::move(stillSeen);
  json changedNodes = json::array();
  std::map<std::string, int64_t> nodesSeen;
  for (const auto& row : *nodes) {
    auto it = nodesSeenNs_.find(row.node);
    nodesSeen.emplace(row.node, row.lastSeenNs);
    if (it != nodesSeenNs_.end() && it->second == row.lastSeenNs) continue;
    changedNodes.push_back(nodeJson(row, now));
  }
  nodesSeenNs_ = std::move(nodesSeen);
  json changedAnomalies = json::array();
  if (auto anomalies = store_.anomaliesSince(anomaliesSeenNs_)) {
    for (const auto* a : unsentSince(*anomalies, &anomaliesSeenNs_, &anomaliesAtEdge_)) {
      changedAnomalies.push_back(anomalyJson(*a));
    }
  }
  std::vector<std::string> out;
  if (!changedJobs.empty() || !changedNodes.empty() || !changedAnomalies.empty()) {
    json j = {{"type", "delta"},
              {"time_ns", now},
              {"jobs", std::move(changedJobs)},
              {"summary", std::move(summaries)},
              {"nodes", std::move(changedNodes)},
              {"anomalies", std::move(changedAnomalies)}};
    out.push_back(j.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  // A store without capture support refuses; the feed then carries none.
  if (auto captures = store_.capturesSince(capturesSeenNs_)) {
    for (const auto* c : unsentSince(*captures, &capturesSeenNs_, &capturesAtEdge_)) {
      json j = {{"type", "capture"}, {"capture", captureJson(*c)}};
      out.push_back(j.dump(-1, ' ', false, json::error_handler_t::replace));
    }
  }
  return out;
}

}  // namespace trainscope::http
