// Anomaly and capture rows in ClickHouseStore: each write inserts the rows' whole new state with
// a larger version (the anomaly merge rules applied here, as SQLite's upsert applies them), and
// reads take the latest version with FINAL, filtering on updated_ns outside it.
#include "collector/storage/clickhouse_store.h"

#include <algorithm>
#include <map>
#include <utility>

#include "collector/storage/clickhouse_internal.h"
#include "collector/storage/store_rows.h"
#include "common/clock.h"

namespace trainscope::storage {
namespace {

using namespace clickhouse;  // NOLINT(google-build-using-namespace): this engine's own helpers

// The anomaly columns as stored: a resolution's step and time are -1 and 0 while open, which
// is what the SQLite engine serves for its NULLs.
void writeAnomaly(RowWriter& w, const AnomalyRow& row) {
  const AnomalyJson text = anomalyJson(row);
  const bool closed = row.state != AnomalyState::kOpen;  // resolved or ended
  w.str(row.id);
  w.str(row.job);
  w.str(row.kind);
  w.str(text.ranks);
  w.str(text.nodes);
  w.i64(row.onsetStep);
  w.i64(row.detectedStep);
  w.i64(row.detectedNs);
  w.f64(row.magnitude);
  w.f64(row.confidence);
  w.str(text.evidence);
  w.str(text.labels);
  w.str(toString(row.state));
  w.i64(closed ? row.resolvedStep : -1);
  w.i64(closed ? row.resolvedNs : 0);
  w.str(row.summary);
  w.nullStr(row.captureId);
  w.i64(row.updatedNs);
}

Result<AnomalyRow> readAnomaly(RowReader& r) {
  AnomalyRow row;
  AnomalyJson text;
  row.id = std::string(r.str());
  row.job = std::string(r.str());
  row.kind = std::string(r.str());
  text.ranks = std::string(r.str());
  text.nodes = std::string(r.str());
  row.onsetStep = r.i64();
  row.detectedStep = r.i64();
  row.detectedNs = r.i64();
  row.magnitude = r.f64();
  row.confidence = r.f64();
  text.evidence = std::string(r.str());
  text.labels = std::string(r.str());
  const std::string state(r.str());
  row.resolvedStep = r.i64();
  row.resolvedNs = r.i64();
  row.summary = std::string(r.str());
  row.captureId = r.nullStr();
  row.updatedNs = r.i64();
  if (r.failed()) {
    return Result<AnomalyRow>::error(StatusCode::kMalformed,
                                     "storage: anomalies from ClickHouse do not decode");
  }
  if (auto st = parseAnomalyStateText(state, &row); !st) return st;
  if (auto st = parseAnomalyJson(text, &row); !st) return st;
  return row;
}

// A re-detection (same id) keeps the first detection and a capture id once set; the rest is
// the new write's (SQLite's ON CONFLICT clause, in C++).
void mergeAnomaly(const AnomalyRow& stored, AnomalyRow* next) {
  next->detectedStep = std::min(stored.detectedStep, next->detectedStep);
  next->detectedNs = std::min(stored.detectedNs, next->detectedNs);
  if (!next->captureId) next->captureId = stored.captureId;
  next->updatedNs = std::max(stored.updatedNs, next->updatedNs);
}

void writeCaptureRow(RowWriter& w, const CaptureRow& row) {
  w.str(row.id);
  w.str(row.job);
  w.str(row.kind);
  w.str(wire::toString(row.state));
  w.str(row.reason);
  w.nullStr(row.anomalyId);
  w.str(captureRanksText(row));
  w.i64(row.startStep);
  w.u32(row.steps);
  w.u32(row.history);
  w.u64(row.maxBytes);
  w.i64(row.createdNs);
  w.i64(row.updatedNs);
  w.nullI64(row.finishedNs);
  w.i64(row.deadlineNs);
  w.nullI64(row.traceBytes ? std::optional<int64_t>(static_cast<int64_t>(*row.traceBytes))
                           : std::nullopt);
  w.str(row.summary);
  w.str(rankStatusText(row.rankStatus));
}

Result<CaptureRow> readCapture(RowReader& r) {
  CaptureRow row;
  row.id = std::string(r.str());
  row.job = std::string(r.str());
  row.kind = std::string(r.str());
  std::string state(r.str());
  row.reason = std::string(r.str());
  row.anomalyId = r.nullStr();
  std::string ranks(r.str());
  row.startStep = r.i64();
  row.steps = r.u32();
  row.history = r.u32();
  row.maxBytes = r.u64();
  row.createdNs = r.i64();
  row.updatedNs = r.i64();
  row.finishedNs = r.nullI64();
  row.deadlineNs = r.i64();
  if (auto bytes = r.nullI64()) row.traceBytes = static_cast<uint64_t>(*bytes);
  row.summary = std::string(r.str());
  std::string rankStatus(r.str());
  if (r.failed()) {
    return Result<CaptureRow>::error(StatusCode::kMalformed,
                                     "storage: captures from ClickHouse do not decode");
  }
  if (auto st = parseCaptureStateText(state, &row); !st) return st;
  if (auto st = parseCaptureRanks(ranks, &row); !st) return st;
  if (auto st = parseRankStatus(rankStatus, &row); !st) return st;
  return row;
}

}  // namespace

Status ClickHouseStore::writeAnomalies(const std::vector<AnomalyRow>& rows) {
  if (rows.empty()) return Status::ok();
  for (const auto& row : rows) {
    if (auto st = checkAnomaly(row); !st) return st;
  }
  const int64_t now = wallNowNs();
  MutexLock lock(&writeMu_);
  // The stored rows these ids update, read under the write lock so no other write of them
  // comes between.
  std::vector<std::string> ids;
  ids.reserve(rows.size());
  for (const auto& row : rows) ids.push_back(quote(row.id));
  std::map<std::string, AnomalyRow> latest;
  for (const auto& in : chunkTerms(ids, ", ")) {
    auto stored = writer_->query(std::string("SELECT ") + kAnomalyColumns +
                                 " FROM anomalies FINAL WHERE id IN (" + in + ") FORMAT RowBinary");
    if (!stored) return Status::error(stored.code(), "storage: " + stored.message());
    for (RowReader r(*stored); !r.atEnd();) {
      auto row = readAnomaly(r);
      if (!row) return row.status();
      std::string id = row->id;
      latest[id] = std::move(row.value());
    }
  }
  for (const auto& row : rows) {
    AnomalyRow next = row;
    if (next.updatedNs == 0) next.updatedNs = now;
    if (auto it = latest.find(row.id); it != latest.end()) mergeAnomaly(it->second, &next);
    latest[row.id] = std::move(next);
  }
  RowWriter w;
  const uint64_t version = nextVersionLocked();
  for (const auto& row : rows) {
    // Each id once, in its merged state (a batch may name an id twice).
    auto it = latest.find(row.id);
    if (it == latest.end()) continue;
    writeAnomaly(w, it->second);
    w.u64(version);
    latest.erase(it);
  }
  auto done = writer_->query(insertSql("anomalies", kAnomalyColumns, true), w.data());
  if (!done) return Status::error(done.code(), "storage: storing anomalies: " + done.message());
  ++transactions_;
  return Status::ok();
}

Result<std::vector<AnomalyRow>> ClickHouseStore::queryAnomalies(const std::string& where) {
  auto rows =
      read(std::string("SELECT ") + kAnomalyColumns + " FROM (SELECT " + kAnomalyColumns +
           " FROM anomalies FINAL) WHERE " + where + " ORDER BY detected_ns, id FORMAT RowBinary");
  if (!rows) return rows.status();
  std::vector<AnomalyRow> out;
  for (RowReader r(*rows); !r.atEnd();) {
    auto row = readAnomaly(r);
    if (!row) return row.status();
    out.push_back(std::move(row.value()));
  }
  return out;
}

Result<std::vector<AnomalyRow>> ClickHouseStore::anomalies(const std::string& job) {
  return queryAnomalies("job = " + quote(job));
}

Result<std::vector<AnomalyRow>> ClickHouseStore::anomaliesSince(int64_t sinceNs) {
  return queryAnomalies("updated_ns >= " + std::to_string(sinceNs));
}

Status ClickHouseStore::writeCapture(const CaptureRow& row) {
  if (auto st = checkCapture(row); !st) return st;
  CaptureRow next = row;
  if (next.updatedNs == 0) next.updatedNs = wallNowNs();
  MutexLock lock(&writeMu_);
  RowWriter w;
  writeCaptureRow(w, next);
  w.u64(nextVersionLocked());
  auto done = writer_->query(insertSql("captures", kCaptureColumns, true), w.data());
  if (!done) return Status::error(done.code(), "storage: storing capture: " + done.message());
  ++transactions_;
  return Status::ok();
}

Result<std::vector<CaptureRow>> ClickHouseStore::queryCaptures(const std::string& where,
                                                               const char* order) {
  auto rows =
      read(std::string("SELECT ") + kCaptureColumns + " FROM (SELECT " + kCaptureColumns +
           " FROM captures FINAL) WHERE " + where + " ORDER BY " + order + " FORMAT RowBinary");
  if (!rows) return rows.status();
  std::vector<CaptureRow> out;
  for (RowReader r(*rows); !r.atEnd();) {
    auto row = readCapture(r);
    if (!row) return row.status();
    out.push_back(std::move(row.value()));
  }
  return out;
}

Result<std::optional<CaptureRow>> ClickHouseStore::capture(const std::string& id) {
  auto rows = queryCaptures("id = " + quote(id), "id");
  if (!rows) return rows.status();
  if (rows->empty()) return std::optional<CaptureRow>();
  return std::optional<CaptureRow>(std::move(rows->front()));
}

Result<std::vector<CaptureRow>> ClickHouseStore::captures(const std::string& job) {
  return queryCaptures("job = " + quote(job), "created_ns DESC, id DESC");
}

Result<std::vector<CaptureRow>> ClickHouseStore::capturesSince(int64_t sinceNs) {
  return queryCaptures("updated_ns >= " + std::to_string(sinceNs), "updated_ns, id");
}

}  // namespace trainscope::storage
