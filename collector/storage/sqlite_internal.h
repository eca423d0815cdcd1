// Private helpers shared by the SQLite store's source files (sqlite_store.cpp,
// sqlite_queries.cpp, sqlite_anomalies.cpp, sqlite_captures.cpp); no other file includes it. The
// helpers hold no state: callers use them under whichever SqliteStore lock guards the connection
// they pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <sqlite3.h>

#include "common/status.h"

namespace trainscope::storage::internal {

// Indexes into SqliteStore::stmts_.
enum Stmt : size_t {
  kBegin,
  kCommit,
  kRollback,
  kInsertStep,
  kUpsertRankInfo,
  kRankSteps,
  kGoodbye,
  kJobAggregate,
  kJobWorldSize,
  kInsertJob,
  kSelectJob,
  kUpsertNode,
  kInsertHost,
  kNodeHost,
  kUpsertAnomaly,
  kUpsertCapture,
  kRankGroups,
  kDeleteCaptureRanks,
  kUpsertCaptureRank,
  kCaptureProgress,
  kStmtCount,
};

inline std::string sqlError(sqlite3* db, const std::string& what) {
  return what + ": " + (db != nullptr ? sqlite3_errmsg(db) : "no database");
}

inline Status exec(sqlite3* db, const char* sql, const std::string& what) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string message = what + ": " + (err != nullptr ? err : "unknown error");
    sqlite3_free(err);
    return Status::error(message);
  }
  return Status::ok();
}

// A statement prepared for one read, finalized on scope exit.
class ReadStmt {
 public:
  ReadStmt(sqlite3* db, const std::string& sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &stmt_, nullptr);
  }
  ~ReadStmt() { sqlite3_finalize(stmt_); }
  ReadStmt(const ReadStmt&) = delete;
  ReadStmt& operator=(const ReadStmt&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return stmt_; }
  std::string error(const std::string& what) const { return sqlError(db_, what); }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

inline std::string columnText(sqlite3_stmt* s, int col) {
  const auto* text = sqlite3_column_text(s, col);
  return text != nullptr ? std::string(reinterpret_cast<const char*>(text),
                                       static_cast<size_t>(sqlite3_column_bytes(s, col)))
                         : std::string();
}

inline void bindText(sqlite3_stmt* s, int index, const std::string& text) {
  sqlite3_bind_text(s, index, text.data(), static_cast<int>(text.size()), SQLITE_STATIC);
}
// SQLITE_STATIC keeps the pointer until the statement runs: a temporary (a string made from a
// const char* at the call) would be gone by then, so binding one does not compile.
void bindText(sqlite3_stmt* s, int index, std::string&& text) = delete;

// Runs a prepared write statement to completion and resets it for the next use.
inline Status step(sqlite3* db, sqlite3_stmt* s, const char* what) {
  int rc = sqlite3_step(s);
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return Status::error(sqlError(db, what));
  return Status::ok();
}

}  // namespace trainscope::storage::internal
