// The JSON API's routing and handlers, independent of the transport: a method and a target in,
// a status, headers and a body out. The server calls handle() on its I/O thread; handlers only
// read the Store (safe from any thread), so an Api may be used from any one thread at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "collector/http/json_writer.h"
#include "collector/http/metrics.h"
#include "collector/http/server.h"
#include "collector/storage/store.h"
#include "collector/topology/schedule.h"
#include "collector/topology/topology.h"
#include "common/byte_source.h"
#include "common/clock.h"

namespace trainscope::http {

// A job whose last report is older than this, and that did not end, is "stale".
inline constexpr int64_t kRunningWindowNs = 30LL * 1'000'000'000;
// Rows a steps/summary query returns when the client gives no limit=.
inline constexpr size_t kDefaultRowLimit = 1000;
// Jobs GET /api/v1/jobs lists when the client gives no limit=, and at most: any ingest sender
// can make thousands of jobs a second, and one reply of 100k jobs was 20 MB. The newest
// first; offset= pages through the rest.
inline constexpr size_t kDefaultJobLimit = 1000;
inline constexpr size_t kMaxJobLimit = 10000;

struct ApiResponse {
  unsigned status = 200;
  std::string contentType = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers, e.g. Allow
  // When set, the body is this stream (a capture file) instead of `body`, sent piece by piece.
  std::shared_ptr<ByteSource> stream;
  // When set, nothing is sent: the transport hands the connection to the live feed (kLivePath).
  bool liveFeed = false;
};

// What the capture routes need from the capture stage (collector/capture/manager.h), which the
// collector wires in through HttpOptions::captures (http does not depend on that stage).
// Implementations must be safe from any thread.
class CaptureService {
 public:
  virtual ~CaptureService() = default;
  // Starts a capture of `job` from a POST body (the request fields of docs/CAPTURE.md) and
  // returns the stored capture, or the refusal with its code (httpStatusOf maps it).
  virtual Result<storage::CaptureRow> start(const std::string& job, std::string_view body) = 0;
  // A stored file of capture `id` ("trace.json.gz" or "rank-<R>.json.gz") as a stream: the
  // gzip bytes as stored when `gzip`, else decompressed (bounded) on the fly.
  virtual Result<std::unique_ptr<ByteSource>> file(const std::string& id, const std::string& name,
                                                   bool gzip) const = 0;
};

// `body` as the response, with the given status. Invalid UTF-8 in it (a job name is whatever
// the probe sent) is replaced, not thrown on.
ApiResponse jsonResponse(const nlohmann::json& body, unsigned status = 200);
// A JSON error body {"error": message} with the given status.
ApiResponse errorResponse(unsigned status, const std::string& message);
// The HTTP status of a failure's code: the one place the stages' codes become HTTP numbers
// (kInvalidArgument, kMalformed and kUnsupported 400, kNotFound 404, kConflict 409, kTooLarge
// 413, kUnavailable 503, kError 500).
unsigned httpStatusOf(StatusCode code);
// errorResponse(httpStatusOf(failure.code()), failure.message()).
ApiResponse errorResponse(const Status& failure);
// 405 for `method` on `path`, naming the `allowed` methods (also in the Allow header).
ApiResponse notAllowed(std::string_view method, const std::string& path, const char* allowed);

class Router;
struct RouteRequest;

// The step range of a compact rank x step route (/heatmap, /parallel) with the job's ranks,
// as Api::stepWindow checked it.
struct StepWindow {
  int64_t from = 0;
  int64_t to = 0;
  size_t steps = 0;                     // to - from + 1
  std::vector<storage::RankRow> ranks;  // the rows, in the store's rank order
};

// The live feed's path: a WebSocket the transport takes over (ApiResponse::liveFeed).
inline constexpr std::string_view kLivePath = "/api/v1/live";

class Api {
 public:
  // `store` and `clock` must outlive the Api.
  Api(HttpOptions options, storage::Store& store, const Clock& clock);

  // Routes one request through the route table (routes.cpp). Never throws; a failing store
  // query becomes a 500 with its message. `body` is the request body (POST); `acceptsGzip`
  // says the client's Accept-Encoding allows gzip, so stored compressed files may be sent as
  // they are with Content-Encoding: gzip; `webSocketUpgrade` says the request asks for a
  // WebSocket (only the live feed takes one).
  ApiResponse handle(std::string_view method, std::string_view target, std::string_view body = {},
                     bool acceptsGzip = false, bool webSocketUpgrade = false) const;
  // Requests whose handler threw (answered 500), since construction. Any thread.
  uint64_t handlerErrors() const { return handlerErrors_.load(); }
  // The server's own counters for /metrics (httpMetricsText); none set: they are left out.
  // Called on the I/O threads; set before serving.
  void setStatsSource(std::function<HttpStats()> stats) { stats_ = std::move(stats); }

  // The route table: every route the HTTP server answers, with its handler.
  static const Router& router();

 private:
  ApiResponse healthz() const;
  // GET /metrics: the store's metrics, the server's counters and HttpOptions::extraMetrics.
  ApiResponse metrics() const;
  // The live feed: 426 unless the request is a WebSocket upgrade, else a response that tells
  // the transport to hand the connection over.
  ApiResponse live(bool webSocketUpgrade) const;
  // {"jobs":[...],"total":N,"offset":O,"limit":L,"truncated":T}: the newest jobs first.
  ApiResponse jobs(const std::vector<std::pair<std::string, std::string>>& query) const;
  ApiResponse nodes() const;
  ApiResponse ranks(const std::string& job) const;
  // A node's GPU samples and events over a time range (gpu_api.cpp).
  ApiResponse nodeGpus(const std::string& node,
                       const std::vector<std::pair<std::string, std::string>>& query) const;
  // The job's parallel layout (collector/topology): axis sizes, each rank's coordinates, the
  // distinct groups and what the declarations disagree on.
  ApiResponse topology(const std::string& job) const;
  ApiResponse steps(const std::string& job,
                    const std::vector<std::pair<std::string, std::string>>& query) const;
  ApiResponse summary(const std::string& job,
                      const std::vector<std::pair<std::string, std::string>>& query) const;
  // The dashboard heatmap's data in one compact response (window_api.cpp says more).
  ApiResponse heatmap(const std::string& job,
                      const std::vector<std::pair<std::string, std::string>>& query) const;
  // Bubble, overlap, MFU/HFU and all-to-all share per rank and step, and the bubble per
  // pipeline stage and step, compact (the dashboard's parallel panel; window_api.cpp says more).
  ApiResponse parallel(const std::string& job,
                       const std::vector<std::pair<std::string, std::string>>& query) const;
  // Reads from= and to= (required, at most 10,000 steps) and the job's ranks, and checks that
  // the window holds at most `maxCells` rank x step cells. False with *failure set (400 naming
  // the parameter or the limit, 404 unknown job, 500 store error) otherwise.
  bool stepWindow(const std::string& job,
                  const std::vector<std::pair<std::string, std::string>>& query, int64_t maxCells,
                  StepWindow* out, ApiResponse* failure) const;
  ApiResponse jobAnomalies(const std::string& job) const;
  ApiResponse anomaliesSince(const std::vector<std::pair<std::string, std::string>>& query) const;
  // The capture routes (capture_api.cpp).
  ApiResponse startCapture(const std::string& job, std::string_view body) const;
  ApiResponse jobCaptures(const std::string& job) const;
  ApiResponse getCapture(const std::string& id) const;
  ApiResponse captureFile(const std::string& id, const std::optional<std::string>& rank,
                          bool acceptsGzip) const;
  // The import routes (import_api.cpp); 503 when HttpOptions::imports is not set.
  ApiResponse openImport(const std::string& job, std::string_view body) const;
  ApiResponse putImportFile(const std::string& id, const std::string& name,
                            const std::vector<std::pair<std::string, std::string>>& query,
                            std::string_view body) const;
  ApiResponse commitImport(const std::string& id, std::string_view body) const;
  ApiResponse abortImport(const std::string& id) const;
  // The dashboard's files under HttpOptions::webRoot; 404 when there is none.
  ApiResponse staticFile(const RouteRequest& request) const;
  // True if the job exists; otherwise fills *failure with a 404 (unknown) or 500 (store error).
  bool checkJob(const std::string& job, ApiResponse* failure) const;

  HttpOptions options_;
  storage::Store& store_;
  const Clock& clock_;
  std::function<HttpStats()> stats_;
  mutable std::atomic<uint64_t> handlerErrors_{0};
};

// The route table as a Markdown table (method, path with query parameters, what it serves):
// `trainscope-collector --list-routes` prints it and docs/API.md's route table is this text.
std::string routeListing();

// "ended" if every rank said goodbye, "running" if seen within kRunningWindowNs, else "stale".
std::string jobState(const storage::JobRow& job, int64_t nowNs);

// JSON shapes of the API, exposed so later endpoints (WebSocket updates) send the same shapes.
nlohmann::json jobJson(const storage::JobRow& job, int64_t nowNs);
nlohmann::json rankJson(const storage::RankRow& rank);
// {"pp": 0, "dp": 1, "tp": 0, ...}: only the axes the rank has a coordinate along.
nlohmann::json coordsJson(const topology::Coords& coords);
// GET /api/v1/jobs/{job}/topology: {"job", "declared", "world_size", "ranks_declared",
// "layout": {"pp": P, "dp": D, "tp": T, ...}, "ranks": [{"rank", "node", "host", "coords"}],
// "groups": [{"name", "kind", "ranks", "declared_by"}], "problems": [...], "schedule":
// "1f1b" | "interleaved:V" | "zb-v" | "dualpipe-v" | "unknown", "microbatches": M (0: unknown)}:
// the pipeline schedule the job's latest steps show (collector/topology/schedule.h).
nlohmann::json topologyJson(const std::string& job, const topology::Topology& topology,
                            const std::vector<storage::RankRow>& ranks,
                            const topology::ScheduleGuess& schedule = {});
// The schedule most of `steps` (rows with detail, any order) show, read through `topology`.
topology::ScheduleGuess scheduleOf(const topology::Topology& topology,
                                   const std::vector<storage::StepRow>& steps);
nlohmann::json stepJson(const storage::StepRow& step, bool detail);
// The same shapes written straight to text, for large pages.
void writeStepJson(JsonWriter& w, const storage::StepRow& step, bool detail);
void writeSummaryJson(JsonWriter& w, const storage::StepSummaryRow& row);
nlohmann::json summaryJson(const storage::StepSummaryRow& row);
nlohmann::json hostSampleJson(const wire::HostSample& sample);
// One GPU's reading (gpu_api.cpp): index, uuid, name, lost, then each reading NVML gave, null
// where it gave none (GpuSample.present), and "throttling" (a kGpuThrottleReasons bit set).
nlohmann::json gpuSampleJson(const wire::GpuSample& gpu);
nlohmann::json gpuEventJson(const wire::GpuEvent& event);
nlohmann::json nodeJson(const storage::NodeRow& node, int64_t nowNs);
// {"id","job","kind","ranks","nodes","onset_step","detected_step","detected_ns","magnitude",
//  "confidence","evidence","labels","state","resolved_step","resolved_ns","summary",
//  "capture_id","updated_ns"}; resolved_* are null while open, capture_id null when none.
nlohmann::json anomalyJson(const storage::AnomalyRow& anomaly);
// The capture JSON of docs/CAPTURE.md ("id", "job", "kind", "state", ..., "rank_status").
nlohmann::json captureJson(const storage::CaptureRow& capture);

}  // namespace trainscope::http
