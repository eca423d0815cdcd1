// What only the ClickHouse engine has to show (the shared store tests run on it too, from the
// same files as SQLite): rows an insert repeated after a lost reply are served once, a
// restarted collector keeps its counts and still refuses replays, the partition length stays
// what the tables were made with, and bad URLs or an absent server fail naming the cause.
// Exits 77 where clickhouse-server is not installed.
#include <chrono>
#include <string>

#include <catch2/catch.hpp>

#include "collector/storage/clickhouse_http.h"
#include "collector/storage/clickhouse_store.h"
#include "tests/collector/storage/test_store.h"

using namespace trainscope;
using namespace trainscope::storage;
using trainscope::storage::testing::clickHouseServer;
using trainscope::storage::testing::openClickHouseDb;

namespace {

wire::StepReport report(const std::string& job, uint32_t rank, int64_t step, int64_t durNs) {
  wire::StepReport r;
  r.set_job(job);
  r.set_rank(rank);
  r.set_step(step);
  r.set_start_ns(step * 1'000'000);
  r.set_end_ns(r.start_ns() + durNs);
  r.set_duration_ns(durNs);
  return r;
}

std::string sql(const std::string& db, const std::string& query) {
  clickhouse::Endpoint e;
  e.port = std::to_string(clickHouseServer().port());
  e.database = db;
  clickhouse::HttpClient client(e, std::chrono::milliseconds(10000));
  auto out = client.query(query);
  INFO(out.message());
  REQUIRE(out.isOk());
  return *out;
}

WriteBatch grid(const std::string& job, int64_t steps, uint32_t ranks) {
  WriteBatch b;
  for (int64_t s = 0; s < steps; ++s) {
    for (uint32_t r = 0; r < ranks; ++r) b.steps.push_back(report(job, r, s, 100 + 10 * r + s));
  }
  return b;
}

}  // namespace

TEST_CASE("clickhouse: rows stored twice by a repeated insert are served once (FINAL)") {
  auto store = openClickHouseDb("dup_rows");
  REQUIRE(store->write(grid("j", 5, 4)));
  // What a retried insert whose first reply was lost leaves: every row twice, until a merge.
  sql("dup_rows", "INSERT INTO steps SELECT * FROM steps");
  CHECK(sql("dup_rows", "SELECT count() FROM steps FORMAT TabSeparated") == "40\n");
  auto rows = store->steps([] {
    StepQuery q;
    q.job = "j";
    return q;
  }());
  REQUIRE(rows);
  CHECK(rows->size() == 20);
  SummaryQuery sq;
  sq.job = "j";
  auto sum = store->summary(sq);
  REQUIRE(sum);
  REQUIRE(sum->size() == 5);
  for (const auto& s : *sum) CHECK(s.ranks == 4);
}

TEST_CASE("clickhouse: a reopened store keeps its counts and still refuses a replayed batch") {
  const auto batch = grid("j", 3, 2);
  {
    auto store = openClickHouseDb("reopen");
    REQUIRE(store->write(batch));
    CHECK(store->stats().stepRows == 6);
  }
  auto store = openClickHouseDb("reopen");
  CHECK(store->stats().stepRows == 6);
  REQUIRE(store->write(batch));  // the agent's spool replayed after a collector restart
  CHECK(store->stats().stepRows == 6);
  CHECK(store->stats().duplicateSteps == 6);
  CHECK(sql("reopen", "SELECT count() FROM steps FORMAT TabSeparated") == "6\n");
  auto jobs = store->jobs();
  REQUIRE(jobs);
  REQUIRE(jobs->size() == 1);
  CHECK((*jobs)[0].stepRows == 6);
  CHECK((*jobs)[0].ranksSeen == 2);
  CHECK(store->stats().bytesOnDisk > 0);
}

TEST_CASE("clickhouse: the partition length is fixed by the first open and kept after") {
  const int64_t hour = 3600LL * 1'000'000'000;
  {
    ClickHouseOptions o;
    o.url = clickHouseServer().url("partitions");
    o.retentionNs = 14 * hour;  // a seventh: 2 h partitions
    auto store = ClickHouseStore::open(o);
    REQUIRE(store);
    CHECK((*store)->partitionNs() == 2 * hour);
  }
  ClickHouseOptions o;
  o.url = clickHouseServer().url("partitions");
  o.retentionNs = 30 * 24 * hour;
  auto store = ClickHouseStore::open(o);
  REQUIRE(store);
  CHECK((*store)->partitionNs() == 2 * hour);
  // Retention drops whole partitions: a row 1 h past the horizon stays until its partition
  // is wholly past it.
  WriteBatch b;
  b.receivedNs = 10 * hour;  // partition [10 h, 12 h)
  b.steps.push_back(report("j", 0, 0, 1));
  REQUIRE((*store)->write(b));
  auto kept = (*store)->applyRetention(10 * hour + o.retentionNs + hour);
  REQUIRE(kept);
  CHECK(*kept == 0);
  auto dropped = (*store)->applyRetention(12 * hour + o.retentionNs);
  REQUIRE(dropped);
  CHECK(*dropped == 1);
  CHECK((*store)->stats().stepRows == 0);
}

TEST_CASE("clickhouse: bad URLs and an absent server fail naming the cause") {
  for (const auto& [url, says] : std::vector<std::pair<std::string, std::string>>{
           {"http://127.0.0.1:8123/db", "not a clickhouse://"},
           {"clickhouse://127.0.0.1:8123", "names no database"},
           {"clickhouse://127.0.0.1/db", "names no port"},
           {"clickhouse://127.0.0.1:99999/db", "port must be"},
           {"clickhouse://127.0.0.1:8123/my-db", "database name"}}) {
    ClickHouseOptions o;
    o.url = url;
    auto store = openClickHouseStore(o);
    REQUIRE_FALSE(store);
    CHECK(store.code() == StatusCode::kInvalidArgument);
    INFO(store.message());
    CHECK(store.message().find(says) != std::string::npos);
  }
  // A port nobody listens on: the server's own port, with a fresh server stopped.
  trainscope::testing::ClickHouseServer::skipUnlessInstalled();
  std::string error;
  auto server = trainscope::testing::ClickHouseServer::start(&error);
  REQUIRE(server);
  const std::string url = server->url("gone");
  server.reset();
  ClickHouseOptions o;
  o.url = url;
  o.timeoutMs = 2000;
  auto store = openClickHouseStore(o);
  REQUIRE_FALSE(store);
  CHECK(store.code() == StatusCode::kUnavailable);
  INFO(store.message());
  CHECK(store.message().find("clickhouse 127.0.0.1:") != std::string::npos);
}
