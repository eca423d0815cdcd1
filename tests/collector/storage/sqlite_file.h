// Test helpers that open a store's database file directly with SQLite: read its schema version,
// run raw SQL and build old-version databases for migration tests. Test thread only.
#pragma once

#include <string>

#include <sqlite3.h>
#include <catch2/catch.hpp>

#include "collector/storage/sqlite_store.h"

namespace trainscope::storage::testing {

// PRAGMA user_version of the database at `path`.
inline int userVersion(const std::string& path) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &s, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(s) == SQLITE_ROW);
  int v = sqlite3_column_int(s, 0);
  sqlite3_finalize(s);
  sqlite3_close(db);
  return v;
}

// Runs `sql` (any number of statements) on the database at `path`; the test fails if it fails.
inline void execSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
}

// Builds a database at `path` as this collector's migrations up to `version` left it, then
// runs `rowsSql` in the same transaction (the rows an old collector would have written).
inline void createAtVersion(const std::string& path, int version, const std::string& rowsSql) {
  std::string sql = "BEGIN;";
  for (const auto& m : migrations()) {
    if (m.version <= version) sql += m.sql;
  }
  sql += "PRAGMA user_version = " + std::to_string(version) + ";" + rowsSql + "COMMIT;";
  execSql(path, sql);
  REQUIRE(userVersion(path) == version);
}

}  // namespace trainscope::storage::testing
