// Anomaly rows in SqliteStore: the upsert that writeAnomalies() runs in one transaction, and
// the reads by job and by update time.
#include "collector/storage/sqlite_store.h"

#include <utility>

#include <sqlite3.h>

#include "collector/storage/sqlite_internal.h"
#include "collector/storage/store_rows.h"
#include "common/clock.h"

namespace trainscope::storage {
namespace {

using namespace internal;  // NOLINT(google-build-using-namespace): this folder's own helpers

}  // namespace

Status SqliteStore::writeAnomalies(const std::vector<AnomalyRow>& rows) {
  if (rows.empty()) return Status::ok();
  const int64_t now = wallNowNs();
  MutexLock lock(&writeMu_);
  if (auto s = step(writeDb_, stmts_[kBegin], "storage: begin"); !s) return s;
  Status st;
  auto* s = stmts_[kUpsertAnomaly];
  for (const auto& row : rows) {
    st = checkAnomaly(row);
    if (!st) break;
    const bool closed = row.state != AnomalyState::kOpen;  // resolved or ended
    const AnomalyJson text = anomalyJson(row);
    const std::string state = toString(row.state);  // bound without a copy: lives until step()
    bindText(s, 1, row.id);
    bindText(s, 2, row.job);
    bindText(s, 3, row.kind);
    bindText(s, 4, text.ranks);
    bindText(s, 5, text.nodes);
    sqlite3_bind_int64(s, 6, row.onsetStep);
    sqlite3_bind_int64(s, 7, row.detectedStep);
    sqlite3_bind_int64(s, 8, row.detectedNs);
    sqlite3_bind_double(s, 9, row.magnitude);
    sqlite3_bind_double(s, 10, row.confidence);
    bindText(s, 11, text.evidence);
    bindText(s, 12, text.labels);
    bindText(s, 13, state);
    if (closed) {
      sqlite3_bind_int64(s, 14, row.resolvedStep);
      sqlite3_bind_int64(s, 15, row.resolvedNs);
    } else {
      sqlite3_bind_null(s, 14);
      sqlite3_bind_null(s, 15);
    }
    bindText(s, 16, row.summary);
    if (row.captureId) {
      bindText(s, 17, *row.captureId);
    } else {
      sqlite3_bind_null(s, 17);
    }
    sqlite3_bind_int64(s, 18, row.updatedNs != 0 ? row.updatedNs : now);
    st = step(writeDb_, s, "storage: storing anomaly");
    if (!st) break;
  }
  if (st) st = step(writeDb_, stmts_[kCommit], "storage: commit");
  if (!st) {
    // The failure that stopped the transaction is what the caller needs; a failed rollback
    // leaves nothing more to do.
    (void)step(writeDb_, stmts_[kRollback], "storage: rollback");
    return st;
  }
  ++transactions_;
  return Status::ok();
}

Result<std::vector<AnomalyRow>> SqliteStore::queryAnomalies(const std::string& where,
                                                            const std::string* job,
                                                            int64_t sinceNs) {
  using R = Result<std::vector<AnomalyRow>>;
  MutexLock lock(&readMutex());
  ReadStmt q(readDb(),
             "SELECT id, job, kind, ranks, nodes, onset_step, detected_step, detected_ns,"
             " magnitude, confidence, evidence, labels, state, resolved_step, resolved_ns,"
             " summary, capture_id, updated_ns FROM anomalies WHERE " +
                 where + " ORDER BY detected_ns, id");
  if (!q.ok()) return R::error(q.error("storage: querying anomalies"));
  auto* s = q.get();
  if (job != nullptr) {
    bindText(s, 1, *job);
  } else {
    sqlite3_bind_int64(s, 1, sinceNs);
  }
  std::vector<AnomalyRow> out;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    AnomalyRow row;
    row.id = columnText(s, 0);
    row.job = columnText(s, 1);
    row.kind = columnText(s, 2);
    if (auto st = parseAnomalyJson(
            {columnText(s, 3), columnText(s, 4), columnText(s, 10), columnText(s, 11)}, &row);
        !st) {
      return st;
    }
    row.onsetStep = sqlite3_column_int64(s, 5);
    row.detectedStep = sqlite3_column_int64(s, 6);
    row.detectedNs = sqlite3_column_int64(s, 7);
    row.magnitude = sqlite3_column_double(s, 8);
    row.confidence = sqlite3_column_double(s, 9);
    if (auto st = parseAnomalyStateText(columnText(s, 12), &row); !st) return st;
    if (sqlite3_column_type(s, 13) != SQLITE_NULL) row.resolvedStep = sqlite3_column_int64(s, 13);
    if (sqlite3_column_type(s, 14) != SQLITE_NULL) row.resolvedNs = sqlite3_column_int64(s, 14);
    row.summary = columnText(s, 15);
    if (sqlite3_column_type(s, 16) != SQLITE_NULL) row.captureId = columnText(s, 16);
    row.updatedNs = sqlite3_column_int64(s, 17);
    out.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return R::error(q.error("storage: querying anomalies"));
  return out;
}

Result<std::vector<AnomalyRow>> SqliteStore::anomalies(const std::string& job) {
  return queryAnomalies("job = ?1", &job, 0);
}

Result<std::vector<AnomalyRow>> SqliteStore::anomaliesSince(int64_t sinceNs) {
  return queryAnomalies("updated_ns >= ?1", nullptr, sinceNs);
}

}  // namespace trainscope::storage
