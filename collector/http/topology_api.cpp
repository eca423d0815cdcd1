// The parallel-layout routes of the JSON API: a job's ranks with their coordinates, and its
// topology (axis sizes, groups, what the declarations disagree on, and the pipeline schedule
// its latest steps show). Both read the Store and derive the layout (collector/topology).
#include <algorithm>
#include <map>
#include <optional>

#include "collector/http/api.h"
#include "schema/wire.h"

namespace trainscope::http {

using nlohmann::json;

json coordsJson(const topology::Coords& c) {
  json out = json::object();
  for (size_t i = 0; i < topology::kAxes.size(); ++i) {
    if (c.at[i]) out[topology::kindName(topology::kAxes[i])] = *c.at[i];
  }
  return out;
}

// A rank's state in the ranks listing, by the rule that makes a job stale (jobState): "ended"
// once it said goodbye, "running" while it was heard from within kRunningWindowNs, "silent"
// after that.
const char* rankState(const storage::RankRow& r, int64_t nowNs) {
  if (r.ended) return "ended";
  return nowNs - r.lastSeenNs <= kRunningWindowNs ? "running" : "silent";
}

// Steps the topology endpoint reads back to infer the schedule (the latest and these before).
constexpr int64_t kScheduleSteps = 9;

topology::ScheduleGuess scheduleOf(const topology::Topology& t,
                                   const std::vector<storage::StepRow>& steps) {
  const uint32_t pp = t.sizes[0];  // kAxes[0] is pp
  std::vector<int32_t> stageOf;
  std::map<uint32_t, int32_t> replicaOf;
  for (const auto& [rank, c] : t.coords) {
    const auto s = c.along(wire::GROUP_PP);
    if (!s) continue;
    if (stageOf.size() <= rank) stageOf.resize(static_cast<size_t>(rank) + 1, -1);
    stageOf[rank] = static_cast<int32_t>(*s);
    replicaOf[rank] = static_cast<int32_t>(c.along(wire::GROUP_DP).value_or(0));
  }
  std::map<int64_t, std::vector<topology::RankPipe>> bySteps;
  for (const auto& row : steps) {
    topology::RankPipe p;
    p.rank = row.rank;
    const auto d = replicaOf.find(row.rank);
    p.replica = d == replicaOf.end() ? 0 : d->second;
    p.computeNs = static_cast<double>(row.computeNs);
    p.bubbleNs = static_cast<double>(row.bubbleNs);
    p.sends = topology::transfersOf(row.p2p);
    if (!p.sends.empty()) bySteps[row.step].push_back(std::move(p));
  }
  std::vector<topology::ScheduleGuess> guesses;
  for (const auto& [step, pipes] : bySteps) {
    (void)step;
    guesses.push_back(topology::inferSchedule(stageOf, pp, pipes));
  }
  return topology::mostCommon(guesses);
}

json topologyJson(const std::string& job, const topology::Topology& t,
                  const std::vector<storage::RankRow>& ranks,
                  const topology::ScheduleGuess& schedule) {
  json layout = json::object();
  for (size_t i = 0; i < topology::kAxes.size(); ++i) {
    if (t.sizes[i] > 0) layout[topology::kindName(topology::kAxes[i])] = t.sizes[i];
  }
  // Every rank stored, and every rank only others' groups name (not registered yet).
  std::map<uint32_t, json> rankList;
  uint32_t worldSize = 0;
  for (const auto& r : ranks) {
    worldSize = std::max(worldSize, r.worldSize);
    rankList[r.rank] = json{{"rank", r.rank}, {"node", r.node}, {"host", r.host}};
  }
  for (const auto& [rank, c] : t.coords) {
    (void)c;
    rankList.try_emplace(rank, json{{"rank", rank}, {"node", ""}, {"host", ""}});
  }
  json list = json::array();
  for (auto& [rank, entry] : rankList) {
    auto c = t.coords.find(rank);
    entry["coords"] = c == t.coords.end() ? json::object() : coordsJson(c->second);
    list.push_back(std::move(entry));
  }
  json groups = json::array();
  for (const auto& g : t.groups) {
    groups.push_back(json{{"name", g.name},
                          {"kind", topology::kindName(g.kind)},
                          {"ranks", g.ranks},
                          {"declared_by", g.declaredBy}});
  }
  return json{{"job", job},
              {"declared", t.declared},
              {"world_size", worldSize},
              {"ranks_declared", t.ranksDeclared},
              {"layout", std::move(layout)},
              {"ranks", std::move(list)},
              {"groups", std::move(groups)},
              {"problems", t.problems},
              {"schedule", topology::guessName(schedule)},
              {"microbatches", schedule.microbatches}};
}

ApiResponse Api::ranks(const std::string& job) const {
  ApiResponse failure;
  if (!checkJob(job, &failure)) return failure;
  auto rows = store_.ranks(job);
  if (!rows) return errorResponse(500, rows.message());
  auto declared = store_.groups(job);
  if (!declared) return errorResponse(500, declared.message());
  // Jobs that declared no groups keep today's shape: no "coords" at all.
  const topology::Topology t = topology::derive(*declared);
  // Each rank's GPU as its node's latest sample has it (rank_gpu: null when not known).
  std::map<std::string, const wire::GpuSample*> gpuByUuid;
  std::optional<std::vector<storage::NodeRow>> nodes;
  if (std::any_of(rows->begin(), rows->end(), [](const auto& r) { return !r.gpuUuid.empty(); })) {
    auto n = store_.nodes();
    if (!n) return errorResponse(500, n.message());
    nodes = std::move(*n);
    for (const auto& node : *nodes) {
      if (!node.latestHost) continue;
      for (const auto& g : node.latestHost->gpus()) gpuByUuid[g.uuid()] = &g;
    }
  }
  const int64_t now = clock_.nowNs();
  json list = json::array();
  for (const auto& row : *rows) {
    json r = rankJson(row);
    r["state"] = rankState(row, now);
    auto g = row.gpuUuid.empty() ? gpuByUuid.end() : gpuByUuid.find(row.gpuUuid);
    r["gpu"] = g == gpuByUuid.end() ? json(nullptr) : gpuSampleJson(*g->second);
    if (t.declared) {
      auto c = t.coords.find(row.rank);
      r["coords"] = c == t.coords.end() ? json::object() : coordsJson(c->second);
    }
    list.push_back(std::move(r));
  }
  return jsonResponse(json{{"job", job}, {"ranks", std::move(list)}});
}

ApiResponse Api::topology(const std::string& job) const {
  ApiResponse failure;
  if (!checkJob(job, &failure)) return failure;
  auto rows = store_.ranks(job);
  if (!rows) return errorResponse(500, rows.message());
  auto declared = store_.groups(job);
  if (!declared) return errorResponse(500, declared.message());
  const topology::Topology t = topology::derive(*declared);
  // The schedule from the p2p of the latest steps every rank has finished (a few, so one odd
  // step does not decide it).
  topology::ScheduleGuess schedule;
  if (t.sizes[0] > 1) {
    int64_t latest = -1;
    for (const auto& r : *rows) latest = std::max(latest, r.latestStep);
    if (latest >= 0) {
      storage::StepQuery q;
      q.job = job;
      q.fromStep = std::max<int64_t>(0, latest - kScheduleSteps);
      q.toStep = latest;
      q.detail = true;
      q.limit = (kScheduleSteps + 1) * std::max<size_t>(rows->size(), 1);
      auto steps = store_.steps(q);
      if (!steps) return errorResponse(500, steps.message());
      schedule = scheduleOf(t, *steps);
    }
  }
  return jsonResponse(topologyJson(job, t, *rows, schedule));
}

}  // namespace trainscope::http
