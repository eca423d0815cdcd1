// Anomaly rows in SqliteStore: the upsert that writeAnomalies() runs in one transaction, and
// the reads by job and by update time.
#include "collector/storage/sqlite_store.h"

#include <utility>

#include <sqlite3.h>
#include <nlohmann/json.hpp>

#include "collector/storage/sqlite_internal.h"
#include "common/clock.h"

namespace trainscope::storage {
namespace {

using namespace internal;  // NOLINT(google-build-using-namespace): this folder's own helpers

// JSON text of an anomaly's lists and maps. Non-finite evidence becomes null (JSON has no NaN)
// and is left out again when read back.
std::string jsonText(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status parseAnomalyJson(sqlite3_stmt* s, AnomalyRow* row) {
  auto parse = [&](int col, const char* what) -> Result<nlohmann::json> {
    auto j = nlohmann::json::parse(columnText(s, col), nullptr, false);
    if (j.is_discarded()) {
      return Result<nlohmann::json>::error("storage: anomaly " + row->id + ": " + what +
                                           " is not JSON");
    }
    return j;
  };
  auto ranks = parse(3, "ranks");
  if (!ranks) return ranks.status();
  auto nodes = parse(4, "nodes");
  if (!nodes) return nodes.status();
  auto evidence = parse(10, "evidence");
  if (!evidence) return evidence.status();
  auto labels = parse(11, "labels");
  if (!labels) return labels.status();
  for (const auto& r : *ranks) {
    if (r.is_number_unsigned()) row->ranks.push_back(r.get<uint32_t>());
  }
  for (const auto& n : *nodes) {
    if (n.is_string()) row->nodes.push_back(n.get<std::string>());
  }
  for (const auto& [k, v] : evidence->items()) {
    if (v.is_number()) row->evidence[k] = v.get<double>();
  }
  for (const auto& [k, v] : labels->items()) {
    if (v.is_string()) row->labels[k] = v.get<std::string>();
  }
  return Status::ok();
}

}  // namespace

Status SqliteStore::writeAnomalies(const std::vector<AnomalyRow>& rows) {
  if (rows.empty()) return Status::ok();
  const int64_t now = wallNowNs();
  std::lock_guard lock(writeMu_);
  if (auto s = step(writeDb_, stmts_[kBegin], "storage: begin"); !s) return s;
  Status st;
  auto* s = stmts_[kUpsertAnomaly];
  for (const auto& row : rows) {
    if (row.id.empty() || row.job.empty() || row.kind.empty()) {
      st = Status::error("storage: anomaly without " +
                         std::string(row.id.empty()    ? "id"
                                     : row.job.empty() ? "job"
                                                       : "kind") +
                         (row.id.empty() ? std::string() : " (id " + row.id + ")"));
      break;
    }
    if (row.state != "open" && row.state != "resolved") {
      st = Status::error("storage: anomaly " + row.id + ": state must be open or resolved, got '" +
                         row.state + "'");
      break;
    }
    const bool resolved = row.state == "resolved";
    const std::string ranks = jsonText(nlohmann::json(row.ranks));
    const std::string nodes = jsonText(nlohmann::json(row.nodes));
    const std::string evidence = jsonText(nlohmann::json(row.evidence));
    const std::string labels = jsonText(nlohmann::json(row.labels));
    bindText(s, 1, row.id);
    bindText(s, 2, row.job);
    bindText(s, 3, row.kind);
    bindText(s, 4, ranks);
    bindText(s, 5, nodes);
    sqlite3_bind_int64(s, 6, row.onsetStep);
    sqlite3_bind_int64(s, 7, row.detectedStep);
    sqlite3_bind_int64(s, 8, row.detectedNs);
    sqlite3_bind_double(s, 9, row.magnitude);
    sqlite3_bind_double(s, 10, row.confidence);
    bindText(s, 11, evidence);
    bindText(s, 12, labels);
    bindText(s, 13, row.state);
    if (resolved) {
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
  std::lock_guard lock(readMutex());
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
    if (auto st = parseAnomalyJson(s, &row); !st) return st;
    row.onsetStep = sqlite3_column_int64(s, 5);
    row.detectedStep = sqlite3_column_int64(s, 6);
    row.detectedNs = sqlite3_column_int64(s, 7);
    row.magnitude = sqlite3_column_double(s, 8);
    row.confidence = sqlite3_column_double(s, 9);
    row.state = columnText(s, 12);
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
