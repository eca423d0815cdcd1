#include "collector/http/api.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <map>
#include <unordered_map>

#include "collector/http/json_writer.h"
#include "collector/http/parallel_metrics.h"
#include "collector/http/request_target.h"
#include "collector/http/router.h"
#include "collector/http/static_files.h"
#include "common/checked.h"
#include "common/log.h"
#include "schema/wire.h"

namespace trainscope::http {
namespace {

using nlohmann::json;
using Query = std::vector<std::pair<std::string, std::string>>;

ApiResponse jsonResponse(const json& body) {
  ApiResponse r;
  // Invalid UTF-8 (a job name is whatever the probe sent) is replaced, not thrown on.
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

// The step-range and limit parameters shared by /steps and /summary.
struct RangeParams {
  std::optional<int64_t> from;
  std::optional<int64_t> to;
  size_t limit = kDefaultRowLimit;
};

Status parseRange(const QueryParams& params, size_t maxRows, RangeParams* out) {
  auto from = params.signedInt("from");
  if (!from) return from.status();
  auto to = params.signedInt("to");
  if (!to) return to.status();
  if (*from && *to && **from > **to) {
    return Status::error("parameter 'from' (" + std::to_string(**from) +
                         ") must not be greater than parameter 'to' (" + std::to_string(**to) +
                         ")");
  }
  auto limit = params.unsignedInt("limit", maxRows);
  if (!limit) return limit.status();
  if (*limit && **limit == 0) {
    return Status::error("parameter 'limit' must be at least 1, got '0'");
  }
  out->from = *from;
  out->to = *to;
  out->limit = *limit ? static_cast<size_t>(**limit) : std::min(kDefaultRowLimit, maxRows);
  return Status::ok();
}

// {"job":J,"steps":[...],"limit":L,"truncated":T}, written directly: a page may hold
// maxStepRows rows, and building nlohmann objects for 100,000 of them takes seconds.
template <typename Row, typename WriteRow>
ApiResponse pageResponse(const std::string& job, const std::vector<Row>& rows, size_t limit,
                         bool truncated, size_t bytesPerRow, WriteRow writeRow) {
  ApiResponse r;
  r.body.reserve(64 + rows.size() * bytesPerRow);
  JsonWriter w(&r.body);
  w.beginObject();
  w.field("job", job);
  w.key("steps");
  w.beginArray();
  for (const auto& row : rows) writeRow(w, row);
  w.endArray();
  w.field("limit", static_cast<uint64_t>(limit));
  w.field("truncated", truncated);
  w.endObject();
  return r;
}

}  // namespace

ApiResponse errorResponse(unsigned status, const std::string& message) {
  ApiResponse r = jsonResponse(json{{"error", message}});
  r.status = status;
  return r;
}

unsigned httpStatusOf(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
    case StatusCode::kMalformed:
    case StatusCode::kUnsupported:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kConflict:
      return 409;
    case StatusCode::kTooLarge:
      return 413;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kError:
      return 500;
  }
  return 500;
}

ApiResponse errorResponse(const Status& failure) {
  return errorResponse(httpStatusOf(failure.code()), failure.message());
}

ApiResponse notAllowed(std::string_view method, const std::string& path, const char* allowed) {
  ApiResponse r = errorResponse(405, "method " + std::string(method) + " not allowed for " + path +
                                         " (allowed: " + allowed + ")");
  r.headers.emplace_back("Allow", allowed);
  return r;
}

std::string jobState(const storage::JobRow& job, int64_t nowNs) {
  if (job.worldSize > 0 && job.ranksEnded >= job.worldSize) return "ended";
  if (nowNs - job.lastSeenNs <= kRunningWindowNs) return "running";
  return "stale";
}

json jobJson(const storage::JobRow& job, int64_t nowNs) {
  return json{{"job", job.job},
              {"world_size", job.worldSize},
              {"ranks_seen", job.ranksSeen},
              {"ranks_ended", job.ranksEnded},
              {"latest_step", job.latestStep},
              {"step_rows", job.stepRows},
              {"first_seen_ns", job.firstSeenNs},
              {"last_seen_ns", job.lastSeenNs},
              {"state", jobState(job, nowNs)},
              {"collector", job.collector.empty() ? json(nullptr) : json(job.collector)}};
}

json rankJson(const storage::RankRow& r) {
  return json{{"rank", r.rank},
              {"world_size", r.worldSize},
              {"local_rank", r.localRank},
              {"host", r.host},
              {"node", r.node},
              {"pid", r.pid},
              {"probe_version", r.probeVersion},
              {"first_seen_ns", r.firstSeenNs},
              {"last_seen_ns", r.lastSeenNs},
              {"latest_step", r.latestStep},
              {"ended", r.ended},
              {"ended_step", r.endedStep}};
}

namespace {

// A figure that may have no meaning for the step (parallel_metrics.h): null then.
void writeOptional(JsonWriter& w, const char* key, const std::optional<double>& v) {
  w.key(key);
  if (v) {
    w.value(*v);
  } else {
    w.null();
  }
}

// The parallel-layout part of a step's detail: p2p per peer, the pipeline bubble, the
// communication overlap, MFU/HFU where the job stated its FLOPs and the all-to-all share
// (stepRatios says when each is null).
void writeParallelDetail(JsonWriter& w, const storage::StepRow& s) {
  w.field("p2p_ns", s.p2pNs);
  w.field("bubble_ns", s.bubbleNs);
  w.field("collective_ns", s.collectiveNs);
  w.field("exposed_collective_ns", s.exposedCollectiveNs);
  w.field("all_to_all_ns", s.allToAllNs);
  const StepRatios r = stepRatios(s);
  writeOptional(w, "bubble_ratio", r.bubble);
  writeOptional(w, "comm_overlap_ratio", r.overlap);
  writeOptional(w, "mfu", r.mfu);
  writeOptional(w, "hfu", r.hfu);
  writeOptional(w, "all_to_all_share", r.allToAllShare);
  w.key("p2p");
  w.beginArray();
  for (const auto& p : s.p2p) {
    w.beginObject();
    w.field("peer", p.peer());
    w.field("group", p.group());
    w.field("op", wire::collectiveOpName(p.op()));
    w.field("count", p.count());
    w.field("bytes", p.bytes());
    w.field("total_ns", p.total_ns());
    w.field("max_ns", p.max_ns());
    w.field("min_ns", p.min_ns());
    w.endObject();
  }
  w.endArray();
}

}  // namespace

void writeStepJson(JsonWriter& w, const storage::StepRow& s, bool detail) {
  w.beginObject();
  w.field("rank", s.rank);
  w.field("step", s.step);
  w.field("start_ns", s.startNs);
  w.field("end_ns", s.endNs);
  w.field("duration_ns", s.durationNs);
  w.field("compute_ns", s.computeNs);
  w.field("comm_ns", s.commNs);
  w.field("exposed_comm_ns", s.exposedCommNs);
  w.field("data_ns", s.dataNs);
  w.field("records", s.records);
  w.field("dropped", s.dropped);
  if (detail) {
    w.key("ops");
    w.beginArray();
    for (const auto& op : s.ops) {
      w.beginObject();
      w.field("name", op.name());
      w.field("count", op.count());
      w.field("total_ns", op.total_ns());
      w.field("max_ns", op.max_ns());
      w.endObject();
    }
    w.endArray();
    w.key("collectives");
    w.beginArray();
    for (const auto& c : s.collectives) {
      w.beginObject();
      w.field("op", wire::collectiveOpName(c.op()));
      w.field("group", c.group());
      w.field("bytes", c.bytes());
      w.field("count", c.count());
      w.field("total_ns", c.total_ns());
      w.field("max_ns", c.max_ns());
      w.field("bandwidth_bps", c.bandwidth_bps());
      w.endObject();
    }
    w.endArray();
    writeParallelDetail(w, s);
  }
  w.endObject();
}

void writeSummaryJson(JsonWriter& w, const storage::StepSummaryRow& r) {
  w.beginObject();
  w.field("step", r.step);
  w.field("ranks", r.ranks);
  w.field("min_ns", r.minNs);
  w.field("median_ns", r.medianNs);
  w.field("max_ns", r.maxNs);
  w.field("slowest_rank", r.slowestRank);
  w.endObject();
}

json stepJson(const storage::StepRow& s, bool detail) {
  std::string text;
  JsonWriter w(&text);
  writeStepJson(w, s, detail);
  return json::parse(text);
}

json summaryJson(const storage::StepSummaryRow& r) {
  std::string text;
  JsonWriter w(&text);
  writeSummaryJson(w, r);
  return json::parse(text);
}

json hostSampleJson(const wire::HostSample& h) {
  auto finite = [](double v) { return std::isfinite(v) ? v : 0.0; };
  json net = json::array();
  for (const auto& n : h.net()) {
    net.push_back(json{{"iface", n.iface()},
                       {"rx_bytes", n.rx_bytes()},
                       {"tx_bytes", n.tx_bytes()},
                       {"rx_bps", finite(n.rx_bps())},
                       {"tx_bps", finite(n.tx_bps())}});
  }
  json procs = json::array();
  for (const auto& p : h.procs()) {
    procs.push_back(json{{"job", p.job()},
                         {"rank", p.rank()},
                         {"pid", p.pid()},
                         {"cpu_percent", finite(p.cpu_percent())},
                         {"rss_bytes", p.rss_bytes()},
                         {"alive", p.alive()}});
  }
  return json{{"time_ns", h.time_ns()},
              {"cpu_percent", finite(h.cpu_percent())},
              {"cpu_count", h.cpu_count()},
              {"mem_total_bytes", h.mem_total_bytes()},
              {"mem_available_bytes", h.mem_available_bytes()},
              {"load1", finite(h.load1())},
              {"net", std::move(net)},
              {"procs", std::move(procs)}};
}

json nodeJson(const storage::NodeRow& n, int64_t nowNs) {
  // Seconds with millisecond resolution; a node clock ahead of ours must not read negative.
  double ageS =
      std::round(static_cast<double>(std::max<int64_t>(0, nowNs - n.lastSeenNs)) / 1e6) / 1e3;
  return json{{"node", n.node},
              {"host", n.host},
              {"agent_version", n.agentVersion},
              {"pid", n.pid},
              {"first_seen_ns", n.firstSeenNs},
              {"last_seen_ns", n.lastSeenNs},
              {"last_seen_age_s", ageS},
              {"clock_offset_ns", n.offsetNs},
              {"rtt_ns", n.rttNs},
              {"spool_bytes", n.spoolBytes},
              {"spool_dropped", n.spoolDropped},
              {"ranks", n.ranks},
              {"latest_host", n.latestHost ? hostSampleJson(*n.latestHost) : json(nullptr)}};
}

json anomalyJson(const storage::AnomalyRow& a) {
  auto finite = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json evidence = json::object();
  for (const auto& [k, v] : a.evidence) evidence[k] = finite(v);
  // labels.coords (a worker's or stage's place in the parallel layout) is stored as JSON text,
  // like every label a string; served as the object it is: {"pp": 0, "dp": 1}.
  json labels = a.labels;
  if (auto c = a.labels.find("coords"); c != a.labels.end()) {
    json parsed = json::parse(c->second, nullptr, false);
    if (parsed.is_object()) labels["coords"] = std::move(parsed);
  }
  const bool resolved = a.state == "resolved";
  return json{{"id", a.id},
              {"job", a.job},
              {"kind", a.kind},
              {"ranks", a.ranks},
              {"nodes", a.nodes},
              {"onset_step", a.onsetStep},
              {"detected_step", a.detectedStep},
              {"detected_ns", a.detectedNs},
              {"magnitude", finite(a.magnitude)},
              {"confidence", finite(a.confidence)},
              {"evidence", std::move(evidence)},
              {"labels", std::move(labels)},
              {"state", a.state},
              {"resolved_step", resolved ? json(a.resolvedStep) : json(nullptr)},
              {"resolved_ns", resolved ? json(a.resolvedNs) : json(nullptr)},
              {"summary", a.summary},
              {"capture_id", a.captureId ? json(*a.captureId) : json(nullptr)},
              {"updated_ns", a.updatedNs}};
}

Api::Api(HttpOptions options, storage::Store& store, const Clock& clock)
    : options_(std::move(options)), store_(store), clock_(clock) {}

ApiResponse Api::handle(std::string_view method, std::string_view target, std::string_view body,
                        bool acceptsGzip, bool webSocketUpgrade) const {
  try {
    auto parsed = parseRequestTarget(target);
    if (!parsed) return errorResponse(400, parsed.message());
    RouteRequest request;
    request.method = method;
    request.target = &*parsed;
    request.body = body;
    request.acceptsGzip = acceptsGzip;
    request.webSocketUpgrade = webSocketUpgrade;
    return router().dispatch(*this, std::move(request));
  } catch (const std::exception& e) {
    // Our own bug or an allocation failure; the connection and the server stay up.
    ++handlerErrors_;
    logError("http", std::string("request handler failed: ") + e.what());
    return errorResponse(500, std::string("internal error: ") + e.what());
  }
}

ApiResponse Api::metrics() const {
  ApiResponse r;
  r.contentType = "text/plain; version=0.0.4; charset=utf-8";
  r.body = renderStoreMetrics(store_, clock_.nowNs(), options_.metrics);
  if (stats_) r.body += httpMetricsText(stats_());
  if (options_.extraMetrics) r.body += options_.extraMetrics();
  return r;
}

ApiResponse Api::live(bool webSocketUpgrade) const {
  if (!webSocketUpgrade) {
    return errorResponse(426, std::string(kLivePath) + " is a WebSocket: send an Upgrade request");
  }
  ApiResponse r;
  r.liveFeed = true;
  return r;
}

ApiResponse Api::staticFile(const RouteRequest& request) const {
  if (options_.webRoot.empty()) return errorResponse(404, "no route for GET " + request.path());
  return serveStaticFile(options_.webRoot, request.rest);
}

ApiResponse Api::healthz() const {
  return jsonResponse(json{{"status", "ok"}});
}

ApiResponse Api::jobs() const {
  auto rows = store_.jobs();
  if (!rows) return errorResponse(500, rows.message());
  int64_t now = clock_.nowNs();
  json list = json::array();
  for (const auto& row : *rows) list.push_back(jobJson(row, now));
  return jsonResponse(json{{"jobs", std::move(list)}});
}

ApiResponse Api::nodes() const {
  auto rows = store_.nodes();
  if (!rows) return errorResponse(500, rows.message());
  int64_t now = clock_.nowNs();
  json list = json::array();
  for (const auto& row : *rows) list.push_back(nodeJson(row, now));
  return jsonResponse(json{{"nodes", std::move(list)}});
}

bool Api::checkJob(const std::string& job, ApiResponse* failure) const {
  auto exists = store_.jobExists(job);
  if (!exists) {
    *failure = errorResponse(500, exists.message());
    return false;
  }
  if (!*exists) {
    *failure = errorResponse(404, "unknown job '" + job + "'");
    return false;
  }
  return true;
}

json coordsJson(const topology::Coords& c) {
  json out = json::object();
  for (size_t i = 0; i < topology::kAxes.size(); ++i) {
    if (c.at[i]) out[topology::kindName(topology::kAxes[i])] = *c.at[i];
  }
  return out;
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
  json list = json::array();
  for (const auto& row : *rows) {
    json r = rankJson(row);
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

ApiResponse Api::steps(const std::string& job, const Query& query) const {
  QueryParams params(query);
  auto rank = params.unsignedInt("rank", std::numeric_limits<uint32_t>::max());
  if (!rank) return errorResponse(400, rank.message());
  RangeParams range;
  if (Status s = parseRange(params, options_.maxStepRows, &range); !s) {
    return errorResponse(400, s.message());
  }
  auto detail = params.boolean("detail", false);
  if (!detail) return errorResponse(400, detail.message());

  ApiResponse failure;
  if (!checkJob(job, &failure)) return failure;

  storage::StepQuery q;
  q.job = job;
  if (*rank) q.rank = static_cast<uint32_t>(**rank);
  q.fromStep = range.from;
  q.toStep = range.to;
  q.limit = range.limit + 1;  // one more than asked tells us whether there is more
  q.detail = *detail;
  auto rows = store_.steps(q);
  if (!rows) return errorResponse(500, rows.message());
  bool truncated = rows->size() > range.limit;
  if (truncated) rows->resize(range.limit);
  return pageResponse(
      job, *rows, range.limit, truncated, *detail ? 1024 : 256,
      [&](JsonWriter& w, const storage::StepRow& row) { writeStepJson(w, row, *detail); });
}

ApiResponse Api::summary(const std::string& job, const Query& query) const {
  QueryParams params(query);
  RangeParams range;
  if (Status s = parseRange(params, options_.maxStepRows, &range); !s) {
    return errorResponse(400, s.message());
  }
  ApiResponse failure;
  if (!checkJob(job, &failure)) return failure;

  storage::SummaryQuery q;
  q.job = job;
  q.fromStep = range.from;
  q.toStep = range.to;
  q.limit = range.limit + 1;
  auto rows = store_.summary(q);
  if (!rows) return errorResponse(500, rows.message());
  bool truncated = rows->size() > range.limit;
  if (truncated) rows->resize(range.limit);
  return pageResponse(job, *rows, range.limit, truncated, 128, writeSummaryJson);
}

// Most steps one heatmap request may cover, and most rank x step cells (values sent): a
// 65,536-rank job can still be shown over 64 steps, and the response stays under ~40 MB.
constexpr int64_t kMaxHeatmapSteps = 10000;
constexpr int64_t kMaxHeatmapCells = int64_t{1} << 22;
// /parallel parses each cell's stored detail (operators included), which the heatmap's
// compute-only read does not: it gets a quarter of the heatmap's cells (not measured at the cap).
constexpr int64_t kMaxParallelCells = int64_t{1} << 20;

bool Api::stepWindow(const std::string& job, const Query& query, int64_t maxCells, StepWindow* out,
                     ApiResponse* failure) const {
  QueryParams params(query);
  auto from = params.signedInt("from");
  auto to = params.signedInt("to");
  if (!from || !to) {
    *failure = errorResponse(400, !from ? from.message() : to.message());
    return false;
  }
  if (!*from || !*to) {
    *failure = errorResponse(400, "parameters 'from' and 'to' are required");
    return false;
  }
  if (**from > **to) {
    *failure = errorResponse(400, "parameter 'from' (" + std::to_string(**from) +
                                      ") must not be greater than parameter 'to' (" +
                                      std::to_string(**to) + ")");
    return false;
  }
  const std::optional<int64_t> stepCount = inclusiveCount(**from, **to);
  if (!stepCount || *stepCount > kMaxHeatmapSteps) {
    *failure = errorResponse(
        400, "at most " + std::to_string(kMaxHeatmapSteps) + " steps ('from' to 'to') per request");
    return false;
  }
  if (!checkJob(job, failure)) return false;
  auto ranks = store_.ranks(job);
  if (!ranks) {
    *failure = errorResponse(500, ranks.message());
    return false;
  }
  const int64_t rankCount = std::max<int64_t>(1, static_cast<int64_t>(ranks->size()));
  const std::optional<int64_t> cells = checkedMul(*stepCount, rankCount);
  if (!cells || *cells > maxCells) {
    *failure = errorResponse(400, "at most " + std::to_string(maxCells) +
                                      " rank x step cells per request: job '" + job + "' has " +
                                      std::to_string(rankCount) + " ranks, so at most " +
                                      std::to_string(maxCells / rankCount) + " steps");
    return false;
  }
  out->from = **from;
  out->to = **to;
  out->steps = static_cast<size_t>(*stepCount);
  out->ranks = std::move(*ranks);
  return true;
}

namespace {

// Calls visit(rankIndex, stepIndex, row) for each row of `rows` inside the window, where
// rankIndex is the rank's place in window.ranks. A store may return rows outside the range
// it was asked for; they are never indexed with.
template <typename Visit>
void forEachCell(const StepWindow& window, const std::vector<storage::StepRow>& rows, Visit visit) {
  std::unordered_map<uint32_t, size_t> index;
  for (size_t i = 0; i < window.ranks.size(); ++i) index.emplace(window.ranks[i].rank, i);
  for (const auto& row : rows) {
    auto it = index.find(row.rank);
    if (it == index.end() || row.step < window.from || row.step > window.to) continue;
    visit(it->second, static_cast<size_t>(row.step - window.from), row);
  }
}

// "from", "to" and "ranks" of a compact rank x step response.
void writeWindowHead(JsonWriter& w, const std::string& job, const StepWindow& window) {
  w.field("job", job);
  w.field("from", window.from);
  w.field("to", window.to);
  w.key("ranks");
  w.beginArray();
  for (const auto& rank : window.ranks) w.value(static_cast<uint64_t>(rank.rank));
  w.endArray();
}

}  // namespace

// GET /api/v1/jobs/{job}/heatmap?from=F&to=T: the dashboard heatmap's data in one compact
// response, {"job","from","to","ranks":[rank ids],"compute_ns":[ranks x steps, rank-major, 0
// where a rank did not report]}, about a twentieth of the /steps page it replaces (the browser
// parsed 3.5 MB of step objects for a 64 x 250 heatmap). Reads the store; any thread. Every
// size is computed with checked arithmetic: F and T are any int64 a client sends.
ApiResponse Api::heatmap(const std::string& job, const Query& query) const {
  StepWindow window;
  ApiResponse failure;
  if (!stepWindow(job, query, kMaxHeatmapCells, &window, &failure)) return failure;
  storage::StepQuery q;
  q.job = job;
  q.fromStep = window.from;
  q.toStep = window.to;
  q.limit = std::max<size_t>(1, window.ranks.size() * window.steps);
  auto rows = store_.steps(q);
  if (!rows) return errorResponse(500, rows.message());
  std::vector<int64_t> values(window.ranks.size() * window.steps, 0);
  forEachCell(window, *rows, [&](size_t rank, size_t step, const storage::StepRow& row) {
    values[rank * window.steps + step] = row.computeNs;
  });
  ApiResponse r;
  r.body.reserve(64 + values.size() * 10);
  JsonWriter w(&r.body);
  w.beginObject();
  writeWindowHead(w, job, window);
  w.key("compute_ns");
  w.beginArray();
  for (int64_t v : values) w.value(v);
  w.endArray();
  w.endObject();
  return r;
}

// GET /api/v1/jobs/{job}/parallel?from=F&to=T: the parallel-layout figures of every rank and
// step in one compact response (parallel_metrics.h defines them): {"job","from","to","ranks",
// "bubble_ratio","comm_overlap_ratio","mfu","hfu","all_to_all_share": each [ranks x steps,
// rank-major, null where the figure has no meaning or the rank did not report], "stages":
// [{"stage","ranks":[rank ids],"bubble_ratio":[per step, null where no rank of it did p2p]}]}.
// "stages" is empty unless the job declared a pipeline-parallel group.
ApiResponse Api::parallel(const std::string& job, const Query& query) const {
  StepWindow window;
  ApiResponse failure;
  if (!stepWindow(job, query, kMaxParallelCells, &window, &failure)) return failure;
  auto declared = store_.groups(job);
  if (!declared) return errorResponse(500, declared.message());
  const topology::Topology layout = topology::derive(*declared);
  storage::StepQuery q;
  q.job = job;
  q.fromStep = window.from;
  q.toStep = window.to;
  q.limit = std::max<size_t>(1, window.ranks.size() * window.steps);
  q.detail = true;
  auto rows = store_.steps(q);
  if (!rows) return errorResponse(500, rows.message());

  const size_t cells = window.ranks.size() * window.steps;
  std::vector<StepRatios> ratios(cells);
  std::vector<std::vector<const storage::StepRow*>> perStep(window.steps);
  forEachCell(window, *rows, [&](size_t rank, size_t step, const storage::StepRow& row) {
    ratios[rank * window.steps + step] = stepRatios(row);
    perStep[step].push_back(&row);
  });
  // Stage -> its ranks, from the layout (every rank with a pipeline coordinate).
  std::map<uint32_t, std::vector<uint32_t>> stageRanks;
  for (const auto& [rank, c] : layout.coords) {
    if (auto stage = c.along(wire::GROUP_PP)) stageRanks[*stage].push_back(rank);
  }
  std::map<uint32_t, std::vector<std::optional<double>>> stageSeries;
  for (const auto& [stage, members] : stageRanks) {
    (void)members;
    stageSeries[stage].resize(window.steps);
  }
  for (size_t step = 0; step < window.steps; ++step) {
    for (const StageBubble& b : stageBubbles(perStep[step], layout)) {
      stageSeries[b.stage].resize(window.steps);
      stageSeries[b.stage][step] = b.ratio;
    }
  }

  ApiResponse r;
  r.body.reserve(128 + cells * 5 * 8);
  JsonWriter w(&r.body);
  w.beginObject();
  writeWindowHead(w, job, window);
  auto series = [&](const char* key, std::optional<double> StepRatios::*field) {
    w.key(key);
    w.beginArray();
    for (const StepRatios& cell : ratios) {
      if (const auto& v = cell.*field) {
        w.value(*v);
      } else {
        w.null();
      }
    }
    w.endArray();
  };
  series("bubble_ratio", &StepRatios::bubble);
  series("comm_overlap_ratio", &StepRatios::overlap);
  series("mfu", &StepRatios::mfu);
  series("hfu", &StepRatios::hfu);
  series("all_to_all_share", &StepRatios::allToAllShare);
  w.key("stages");
  w.beginArray();
  for (const auto& [stage, values] : stageSeries) {
    w.beginObject();
    w.field("stage", stage);
    w.key("ranks");
    w.beginArray();
    for (uint32_t rank : stageRanks[stage]) w.value(rank);
    w.endArray();
    w.key("bubble_ratio");
    w.beginArray();
    for (const auto& v : values) {
      if (v) {
        w.value(*v);
      } else {
        w.null();
      }
    }
    w.endArray();
    w.endObject();
  }
  w.endArray();
  w.endObject();
  return r;
}

ApiResponse Api::jobAnomalies(const std::string& job) const {
  ApiResponse failure;
  if (!checkJob(job, &failure)) return failure;
  auto rows = store_.anomalies(job);
  if (!rows) return errorResponse(500, rows.message());
  json list = json::array();
  for (const auto& row : *rows) list.push_back(anomalyJson(row));
  return jsonResponse(json{{"anomalies", std::move(list)}});
}

ApiResponse Api::anomaliesSince(const Query& query) const {
  QueryParams params(query);
  auto since = params.signedInt("since");
  if (!since) return errorResponse(400, since.message());
  if (*since && **since < 0) {
    return errorResponse(400,
                         "parameter 'since' must be >= 0 (nanoseconds since the epoch), "
                         "got '" +
                             std::to_string(**since) + "'");
  }
  auto rows = store_.anomaliesSince(since->value_or(0));
  if (!rows) return errorResponse(500, rows.message());
  json list = json::array();
  for (const auto& row : *rows) list.push_back(anomalyJson(row));
  return jsonResponse(json{{"anomalies", std::move(list)}});
}

}  // namespace trainscope::http
