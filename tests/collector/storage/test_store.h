// The engine the store tests run against. Unset TRAINSCOPE_TEST_STORE runs them on SQLite;
// TRAINSCOPE_TEST_STORE=clickhouse runs the same tests against a clickhouse-server started once
// for the test binary (tests/common/clickhouse_server.h), and the binary exits 77 (skipped)
// where none is installed. Tests only SQLite has (its files, migrations) are tagged [sqlite]
// and left out of the ClickHouse run. Test thread only.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "collector/storage/store.h"
#include "tests/common/clickhouse_server.h"

namespace trainscope::storage::testing {

inline bool onClickHouse() {
  const char* engine = getenv("TRAINSCOPE_TEST_STORE");
  return engine != nullptr && std::string(engine) == "clickhouse";
}

// The binary's server, started on first use and stopped at exit.
inline trainscope::testing::ClickHouseServer& clickHouseServer() {
  static std::unique_ptr<trainscope::testing::ClickHouseServer> server = [] {
    trainscope::testing::ClickHouseServer::skipUnlessInstalled();
    std::string error;
    auto started = trainscope::testing::ClickHouseServer::start(&error);
    INFO(error);
    REQUIRE(started != nullptr);
    return started;
  }();
  return *server;
}

// A ClickHouse store on database `db` of the binary's server.
inline std::unique_ptr<Store> openClickHouseDb(const std::string& db, int64_t retentionNs = 0) {
  ClickHouseOptions o;
  o.url = clickHouseServer().url(db);
  o.retentionNs = retentionNs;
  auto store = openClickHouseStore(o);
  INFO(store.message());
  REQUIRE(store.isOk());
  return std::move(store.value());
}

// A store for a test: SQLite at `path` (":memory:" in memory), or on ClickHouse a database of
// its own per path (a fresh one for each ":memory:"), so opening the same path again reopens
// the same data on either engine.
inline std::unique_ptr<Store> openTestStore(const std::string& path, int64_t retentionNs = 0) {
  if (!onClickHouse()) {
    SqliteOptions o;
    o.path = path;
    o.retentionNs = retentionNs;
    auto store = openSqliteStore(o);
    INFO(store.message());
    REQUIRE(store.isOk());
    return std::move(store.value());
  }
  static std::map<std::string, std::string> databases;
  static int next = 0;
  std::string& db = databases[path == ":memory:" ? ":memory:" + std::to_string(next) : path];
  if (db.empty()) db = "t" + std::to_string(::getpid()) + "_" + std::to_string(next++);
  return openClickHouseDb(db, retentionNs);
}

}  // namespace trainscope::storage::testing
