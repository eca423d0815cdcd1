#include "collector/http/api.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>

#include "collector/http/json_writer.h"
#include "collector/http/parallel_metrics.h"
#include "collector/http/request_target.h"
#include "collector/http/router.h"
#include "collector/http/static_files.h"
#include "common/log.h"
#include "schema/wire.h"

namespace trainscope::http {
namespace {

using nlohmann::json;
using Query = std::vector<std::pair<std::string, std::string>>;

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

ApiResponse jsonResponse(const json& body, unsigned status) {
  ApiResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

ApiResponse errorResponse(unsigned status, const std::string& message) {
  return jsonResponse(json{{"error", message}}, status);
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
              {"gpu_uuid", r.gpuUuid.empty() ? json(nullptr) : json(r.gpuUuid)},
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
  // Where its operators ran: their times are launches on the host there (null: the host).
  w.key("device");
  if (s.device.empty()) {
    w.null();
  } else {
    w.value(s.device);
  }
  w.field("cpu_wait_ns", s.cpuWaitNs);
  w.field("device_comm_ns", s.deviceCommNs);
  w.field("device_dropped", s.deviceDropped);
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
    if (p.device_timed()) {
      // Timed by NCCL's profiler plugin on the device; the host's own sum beside it.
      w.field("device_timed", true);
      w.field("host_total_ns", p.host_total_ns());
    }
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
      if (c.device_timed()) {
        // Timed by NCCL's profiler plugin on the device; the host's own sum beside it.
        w.field("device_timed", true);
        w.field("host_total_ns", c.host_total_ns());
        w.field("first_seq", c.first_seq());
        w.field("last_seq", c.last_seq());
        w.field("algorithm", c.algorithm());
        w.field("protocol", c.protocol());
        w.field("datatype", c.datatype());
        w.field("channels", c.channels());
      }
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
  json gpus = json::array();
  for (const auto& g : h.gpus()) gpus.push_back(gpuSampleJson(g));
  json gpuEvents = json::array();
  for (const auto& e : h.gpu_events()) gpuEvents.push_back(gpuEventJson(e));
  return json{{"time_ns", h.time_ns()},
              {"cpu_percent", finite(h.cpu_percent())},
              {"cpu_count", h.cpu_count()},
              {"mem_total_bytes", h.mem_total_bytes()},
              {"mem_available_bytes", h.mem_available_bytes()},
              {"load1", finite(h.load1())},
              {"net", std::move(net)},
              {"procs", std::move(procs)},
              {"gpus", std::move(gpus)},
              {"gpu_events", std::move(gpuEvents)}};
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
  const bool resolved = a.state == storage::AnomalyState::kResolved;
  // Ended: the job ended while the anomaly was open; the store keeps its last step and the time
  // in the resolution's columns.
  const bool ended = a.state == storage::AnomalyState::kEnded;
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
              {"state", storage::toString(a.state)},
              {"resolved_step", resolved ? json(a.resolvedStep) : json(nullptr)},
              {"resolved_ns", resolved ? json(a.resolvedNs) : json(nullptr)},
              {"ended_step", ended ? json(a.resolvedStep) : json(nullptr)},
              {"ended_ns", ended ? json(a.resolvedNs) : json(nullptr)},
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

ApiResponse Api::jobs(const Query& query) const {
  QueryParams params(query);
  auto limit = params.unsignedInt("limit", kMaxJobLimit);
  if (!limit) return errorResponse(400, limit.message());
  if (*limit && **limit == 0) {
    return errorResponse(400, "parameter 'limit' must be at least 1, got '0'");
  }
  auto offset = params.unsignedInt("offset", std::numeric_limits<uint32_t>::max());
  if (!offset) return errorResponse(400, offset.message());
  const size_t pageLimit = *limit ? static_cast<size_t>(**limit) : kDefaultJobLimit;
  auto rows = store_.jobs();
  if (!rows) return errorResponse(500, rows.message());
  int64_t now = clock_.nowNs();
  const size_t first = std::min(rows->size(), static_cast<size_t>(offset->value_or(0)));
  const size_t end = std::min(rows->size(), first + pageLimit);
  json list = json::array();
  for (size_t i = first; i < end; ++i) list.push_back(jobJson((*rows)[i], now));
  return jsonResponse(json{{"jobs", std::move(list)},
                           {"total", rows->size()},
                           {"offset", first},
                           {"limit", pageLimit},
                           {"truncated", end < rows->size()}});
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
