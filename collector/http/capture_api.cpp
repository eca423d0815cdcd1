// The capture routes of the JSON API (docs/CAPTURE.md): start a capture, list a job's captures,
// read one, and serve its merged trace and rank files (gzip as stored when the client takes
// gzip). Starting and files go through HttpOptions::captures; listing reads the Store.
#include <exception>

#include "collector/http/api.h"
#include "collector/http/request_target.h"
#include "collector/storage/capture_json.h"
#include "schema/capture_state.h"

namespace trainscope::http {
namespace {

using nlohmann::json;

ApiResponse capturesOff() {
  return errorResponse(503, "captures are off");
}

}  // namespace

json captureJson(const storage::CaptureRow& c) {
  json ranks = storage::rankStatusJson(c.rankStatus);
  return json{{"id", c.id},
              {"job", c.job},
              {"kind", c.kind},
              {"state", wire::toString(c.state)},
              {"reason", c.reason},
              {"anomaly_id", c.anomalyId ? json(*c.anomalyId) : json(nullptr)},
              {"ranks", c.ranks},
              {"start_step", c.startStep},
              {"steps", c.steps},
              {"history", c.history},
              {"max_bytes", c.maxBytes},
              {"created_ns", c.createdNs},
              {"updated_ns", c.updatedNs},
              {"finished_ns", c.finishedNs ? json(*c.finishedNs) : json(nullptr)},
              {"deadline_ns", c.deadlineNs},
              {"trace_bytes", c.traceBytes ? json(*c.traceBytes) : json(nullptr)},
              {"summary", c.summary},
              {"rank_status", std::move(ranks)}};
}

ApiResponse Api::startCapture(const std::string& job, std::string_view body) const {
  if (!options_.captures) return capturesOff();
  auto started = options_.captures->start(job, body);
  if (!started) return errorResponse(started.status());
  ApiResponse r = jsonResponse(captureJson(*started), 201);
  r.headers.emplace_back("Location", "/api/v1/captures/" + percentEncode(started->id));
  return r;
}

ApiResponse Api::jobCaptures(const std::string& job) const {
  ApiResponse failure;
  if (!checkJob(job, &failure)) return failure;
  auto rows = store_.captures(job);
  if (!rows) return errorResponse(500, rows.message());
  json list = json::array();
  for (const auto& row : *rows) list.push_back(captureJson(row));
  return jsonResponse(json{{"captures", std::move(list)}});
}

ApiResponse Api::getCapture(const std::string& id) const {
  auto row = store_.capture(id);
  if (!row) return errorResponse(500, row.message());
  if (!*row) return errorResponse(404, "unknown capture '" + id + "'");
  return jsonResponse(captureJson(**row));
}

ApiResponse Api::captureFile(const std::string& id, const std::optional<std::string>& rank,
                             bool acceptsGzip) const {
  auto stored = store_.capture(id);
  if (!stored) return errorResponse(500, stored.message());
  if (!*stored) return errorResponse(404, "unknown capture '" + id + "'");
  const auto& c = **stored;
  std::string name = "trace.json.gz";
  if (rank) {
    const storage::CaptureRankRow* found = nullptr;
    if (!rank->empty() && rank->size() <= 10 &&
        rank->find_first_not_of("0123456789") == std::string::npos) {
      for (const auto& r : c.rankStatus) {
        if (std::to_string(r.rank) == *rank) found = &r;
      }
    }
    if (found == nullptr) {
      return errorResponse(404, "capture " + id + " has no rank '" + *rank + "'");
    }
    if (found->state == wire::RankState::kFailed) {
      return errorResponse(
          404, "rank " + *rank + " of capture " + id + " has no file: it failed: " + found->detail);
    }
    if (found->state != wire::RankState::kDone) {
      return errorResponse(
          409, "rank " + *rank + " of capture " + id + " is still " + wire::toString(found->state));
    }
    name = "rank-" + *rank + ".json.gz";
  } else if (c.state == wire::CaptureState::kRunning) {
    return errorResponse(409, "capture " + id + " is still running (" + c.summary + ")");
  } else if (c.state == wire::CaptureState::kFailed) {
    return errorResponse(404, "capture " + id + " failed, it has no trace (" + c.summary + ")");
  }
  if (!options_.captures) return capturesOff();
  auto file = options_.captures->file(id, name, acceptsGzip);
  if (!file) return errorResponse(404, "capture " + id + ": " + file.message());
  ApiResponse r;
  r.stream = std::move(file.value());
  r.headers.emplace_back("Vary", "Accept-Encoding");
  if (acceptsGzip) r.headers.emplace_back("Content-Encoding", "gzip");
  if (!rank) {
    r.headers.emplace_back("Content-Disposition", "inline; filename=\"" + id + ".trace.json\"");
  }
  return r;
}

}  // namespace trainscope::http
