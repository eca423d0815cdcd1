// Capture rows in SqliteStore (docs/CAPTURE.md): the replace-by-id write, the progress write of
// a running capture's changed ranks, and the reads by id, by job (newest first) and by update
// time. The rank list is a JSON column; each rank's status is a row of capture_ranks, so a
// progress write costs the ranks that changed, not the capture's size.
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
    " created_ns, updated_ns, finished_ns, deadline_ns, trace_bytes, summary";
constexpr const char* kRankSql =
    "SELECT rank, node, state, detail, bytes, truncated, first_step, last_step, updated_ns"
    " FROM capture_ranks WHERE capture_id = ?1 ORDER BY rank";

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
  return row;
}

// The rank rows of `row` from `ranks` (kRankSql, reset here), in rank order.
Status readRanks(sqlite3* db, sqlite3_stmt* ranks, CaptureRow* row) {
  sqlite3_reset(ranks);
  bindText(ranks, 1, row->id);
  int rc;
  while ((rc = sqlite3_step(ranks)) == SQLITE_ROW) {
    CaptureRankRow r;
    r.rank = static_cast<uint32_t>(sqlite3_column_int64(ranks, 0));
    r.node = columnText(ranks, 1);
    auto parsed = storedRankState(row->id, r.rank, columnText(ranks, 2));
    if (!parsed) return parsed.status();
    r.state = *parsed;
    r.detail = columnText(ranks, 3);
    r.bytes = static_cast<uint64_t>(sqlite3_column_int64(ranks, 4));
    r.truncated = sqlite3_column_int64(ranks, 5) != 0;
    r.firstStep = sqlite3_column_int64(ranks, 6);
    r.lastStep = sqlite3_column_int64(ranks, 7);
    r.updatedNs = sqlite3_column_int64(ranks, 8);
    row->rankStatus.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return Status::error(sqlError(db, "storage: reading capture ranks"));
  return Status::ok();
}

}  // namespace

Status SqliteStore::upsertCaptureRanksLocked(const std::string& id,
                                             const std::vector<CaptureRankRow>& ranks) {
  auto* s = stmts_[kUpsertCaptureRank];
  for (const auto& r : ranks) {
    const std::string state = wire::toString(r.state);  // bound SQLITE_STATIC: kept until the step
    bindText(s, 1, id);
    sqlite3_bind_int64(s, 2, r.rank);
    bindText(s, 3, r.node);
    bindText(s, 4, state);
    bindText(s, 5, r.detail);
    sqlite3_bind_int64(s, 6, static_cast<int64_t>(r.bytes));
    sqlite3_bind_int(s, 7, r.truncated ? 1 : 0);
    sqlite3_bind_int64(s, 8, r.firstStep);
    sqlite3_bind_int64(s, 9, r.lastStep);
    sqlite3_bind_int64(s, 10, r.updatedNs);
    if (auto st = step(writeDb_, s, "storage: storing a capture rank"); !st) return st;
  }
  return Status::ok();
}

Status SqliteStore::endTransactionLocked(Status st) {
  if (st) st = step(writeDb_, stmts_[kCommit], "storage: commit");
  if (!st) {
    (void)step(writeDb_, stmts_[kRollback], "storage: rollback");  // `st` says why
    return st;
  }
  ++transactions_;
  return Status::ok();
}

Status SqliteStore::writeCapture(const CaptureRow& row) {
  if (auto st = checkCapture(row); !st) return st;
  const std::string ranks = captureRanksText(row);
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
  // The row and all its ranks replace what was stored, together.
  if (auto st = step(writeDb_, stmts_[kBegin], "storage: begin"); !st) return st;
  Status st = step(writeDb_, s, "storage: storing capture");
  if (st) {
    auto* del = stmts_[kDeleteCaptureRanks];
    bindText(del, 1, row.id);
    st = step(writeDb_, del, "storage: replacing capture ranks");
  }
  if (st) st = upsertCaptureRanksLocked(row.id, row.rankStatus);
  return endTransactionLocked(std::move(st));
}

Status SqliteStore::writeCaptureProgress(const CaptureProgress& progress) {
  MutexLock lock(&writeMu_);
  if (auto st = step(writeDb_, stmts_[kBegin], "storage: begin"); !st) return st;
  auto* s = stmts_[kCaptureProgress];
  bindText(s, 1, progress.id);
  bindText(s, 2, progress.summary);
  sqlite3_bind_int64(s, 3, progress.updatedNs != 0 ? progress.updatedNs : wallNowNs());
  Status st = step(writeDb_, s, "storage: storing capture progress");
  if (st && sqlite3_changes(writeDb_) == 0) {
    st = Status::error("storage: capture " + progress.id + " is not stored as running");
  }
  if (st) st = upsertCaptureRanksLocked(progress.id, progress.ranks);
  return endTransactionLocked(std::move(st));
}

Result<std::vector<CaptureRow>> SqliteStore::queryCaptures(const std::string& where,
                                                           const std::string* text, int64_t sinceNs,
                                                           const char* order) {
  using R = Result<std::vector<CaptureRow>>;
  MutexLock lock(&readMutex());
  ReadStmt q(readDb(), std::string("SELECT ") + kColumns + " FROM captures WHERE " + where +
                           " ORDER BY " + order);
  if (!q.ok()) return R::error(q.error("storage: querying captures"));
  ReadStmt ranks(readDb(), kRankSql);
  if (!ranks.ok()) return R::error(ranks.error("storage: querying capture ranks"));
  auto* s = q.get();
  if (text != nullptr) {
    bindText(s, 1, *text);
  } else {
    sqlite3_bind_int64(s, 1, sinceNs);
  }
  // One read transaction: a capture's row and its ranks from the same write (its summary
  // agrees with its ranks).
  if (auto st = exec(readDb(), "BEGIN", "storage: querying captures"); !st) return st;
  std::vector<CaptureRow> out;
  Status st;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    auto row = readRow(s);
    if (row) st = readRanks(readDb(), ranks.get(), &row.value());
    if (!row) st = row.status();
    if (!st) break;
    out.push_back(std::move(row.value()));
  }
  if (st && rc != SQLITE_DONE) st = Status::error(q.error("storage: querying captures"));
  sqlite3_reset(s);
  sqlite3_reset(ranks.get());
  (void)exec(readDb(), "COMMIT", "storage: querying captures");  // a read: nothing to lose
  if (!st) return st;
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
