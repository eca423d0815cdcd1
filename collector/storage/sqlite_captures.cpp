// Capture rows in SqliteStore (docs/CAPTURE.md): the replace-by-id write, and the reads by id,
// by job (newest first) and by update time. The rank list and per-rank status are JSON columns.
#include "collector/storage/sqlite_store.h"

#include <utility>

#include <sqlite3.h>

#include "collector/storage/sqlite_internal.h"
#include "collector/storage/store_rows.h"
#include "common/clock.h"

namespace trainscope::storage {
namespace {

using namespace internal;  // NOLINT(google-build-using-namespace): this folder's own helpers

constexpr const char* kColumns =
    "id, job, kind, state, reason, anomaly_id, ranks, start_step, steps, history, max_bytes,"
    " created_ns, updated_ns, finished_ns, deadline_ns, trace_bytes, summary, rank_status";

Result<CaptureRow> readRow(sqlite3_stmt* s) {
  CaptureRow row;
  row.id = columnText(s, 0);
  row.job = columnText(s, 1);
  row.kind = columnText(s, 2);
  if (auto st = parseCaptureStateText(columnText(s, 3), &row); !st) return st;
  row.reason = columnText(s, 4);
  if (sqlite3_column_type(s, 5) != SQLITE_NULL) row.anomalyId = columnText(s, 5);
  if (auto st = parseCaptureRanks(columnText(s, 6), &row); !st) return st;
  row.startStep = sqlite3_column_int64(s, 7);
  row.steps = static_cast<uint32_t>(sqlite3_column_int64(s, 8));
  row.history = static_cast<uint32_t>(sqlite3_column_int64(s, 9));
  row.maxBytes = static_cast<uint64_t>(sqlite3_column_int64(s, 10));
  row.createdNs = sqlite3_column_int64(s, 11);
  row.updatedNs = sqlite3_column_int64(s, 12);
  if (sqlite3_column_type(s, 13) != SQLITE_NULL) row.finishedNs = sqlite3_column_int64(s, 13);
  row.deadlineNs = sqlite3_column_int64(s, 14);
  if (sqlite3_column_type(s, 15) != SQLITE_NULL) {
    row.traceBytes = static_cast<uint64_t>(sqlite3_column_int64(s, 15));
  }
  row.summary = columnText(s, 16);
  if (auto st = parseRankStatus(columnText(s, 17), &row); !st) return st;
  return row;
}

}  // namespace

Status SqliteStore::writeCapture(const CaptureRow& row) {
  if (auto st = checkCapture(row); !st) return st;
  const std::string ranks = captureRanksText(row);
  const std::string rankStatus = rankStatusText(row.rankStatus);
  const std::string state = wire::toString(row.state);  // bound SQLITE_STATIC: kept until the step
  MutexLock lock(&writeMu_);
  auto* s = stmts_[kUpsertCapture];
  bindText(s, 1, row.id);
  bindText(s, 2, row.job);
  bindText(s, 3, row.kind);
  bindText(s, 4, state);
  bindText(s, 5, row.reason);
  if (row.anomalyId) {
    bindText(s, 6, *row.anomalyId);
  } else {
    sqlite3_bind_null(s, 6);
  }
  bindText(s, 7, ranks);
  sqlite3_bind_int64(s, 8, row.startStep);
  sqlite3_bind_int64(s, 9, row.steps);
  sqlite3_bind_int64(s, 10, row.history);
  sqlite3_bind_int64(s, 11, static_cast<int64_t>(row.maxBytes));
  sqlite3_bind_int64(s, 12, row.createdNs);
  sqlite3_bind_int64(s, 13, row.updatedNs != 0 ? row.updatedNs : wallNowNs());
  if (row.finishedNs) {
    sqlite3_bind_int64(s, 14, *row.finishedNs);
  } else {
    sqlite3_bind_null(s, 14);
  }
  sqlite3_bind_int64(s, 15, row.deadlineNs);
  if (row.traceBytes) {
    sqlite3_bind_int64(s, 16, static_cast<int64_t>(*row.traceBytes));
  } else {
    sqlite3_bind_null(s, 16);
  }
  bindText(s, 17, row.summary);
  bindText(s, 18, rankStatus);
  // One statement is its own transaction (autocommit): no BEGIN/COMMIT needed.
  if (auto st = step(writeDb_, s, "storage: storing capture"); !st) return st;
  ++transactions_;
  return Status::ok();
}

Result<std::vector<CaptureRow>> SqliteStore::queryCaptures(const std::string& where,
                                                           const std::string* text, int64_t sinceNs,
                                                           const char* order) {
  using R = Result<std::vector<CaptureRow>>;
  MutexLock lock(&readMutex());
  ReadStmt q(readDb(), std::string("SELECT ") + kColumns + " FROM captures WHERE " + where +
                           " ORDER BY " + order);
  if (!q.ok()) return R::error(q.error("storage: querying captures"));
  auto* s = q.get();
  if (text != nullptr) {
    bindText(s, 1, *text);
  } else {
    sqlite3_bind_int64(s, 1, sinceNs);
  }
  std::vector<CaptureRow> out;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    auto row = readRow(s);
    if (!row) return row.status();
    out.push_back(std::move(row.value()));
  }
  if (rc != SQLITE_DONE) return R::error(q.error("storage: querying captures"));
  return out;
}

Result<std::optional<CaptureRow>> SqliteStore::capture(const std::string& id) {
  auto rows = queryCaptures("id = ?1", &id, 0, "id");
  if (!rows) return rows.status();
  if (rows->empty()) return std::optional<CaptureRow>();
  return std::optional<CaptureRow>(std::move(rows->front()));
}

Result<std::vector<CaptureRow>> SqliteStore::captures(const std::string& job) {
  return queryCaptures("job = ?1", &job, 0, "created_ns DESC, id DESC");
}

Result<std::vector<CaptureRow>> SqliteStore::capturesSince(int64_t sinceNs) {
  return queryCaptures("updated_ns >= ?1", nullptr, sinceNs, "updated_ns, id");
}

}  // namespace trainscope::storage
