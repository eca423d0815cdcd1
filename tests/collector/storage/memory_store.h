// An empty SQLite store in memory, for tests of what sits on a store (API, pipeline, live
// updates). The store tests themselves run on either engine through test_store.h.
#pragma once

#include <memory>
#include <utility>

#include <catch2/catch.hpp>

#include "collector/storage/sqlite_store.h"

namespace trainscope::storage::testing {

inline std::unique_ptr<Store> memoryStore() {
  SqliteOptions options;
  options.path = ":memory:";
  auto opened = openSqliteStore(options);
  INFO(opened.message());
  REQUIRE(opened.isOk());
  return std::move(opened.value());
}

}  // namespace trainscope::storage::testing
