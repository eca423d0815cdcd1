// The SQLite store's summary cache does work in proportion to the jobs each call touches, not
// to every job it holds: the live feed's first poll summarizes every job once, which was
// quadratic in the number of jobs (36.6 s at 20,000 jobs). Counts the cache's visits to job
// entries instead of timing anything.
#include "collector/storage/summary_cache.h"

#include <string>
#include <vector>

#include <sqlite3.h>
#include <catch2/catch.hpp>

using namespace trainscope::storage;
using trainscope::storage::internal::SummaryCache;

namespace {

// A steps table of the shape catchUp reads, in memory.
struct Db {
  sqlite3* db = nullptr;
  Db() {
    REQUIRE(sqlite3_open(":memory:", &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db,
                         "CREATE TABLE steps (id INTEGER PRIMARY KEY, job_id INTEGER, step INTEGER,"
                         " rank INTEGER, duration_ns INTEGER)",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
  }
  ~Db() { sqlite3_close(db); }
  void add(int64_t jobId, int64_t step) {
    const std::string sql = "INSERT INTO steps (job_id, step, rank, duration_ns) VALUES (" +
                            std::to_string(jobId) + ", " + std::to_string(step) + ", 0, 100)";
    REQUIRE(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  }
};

StepSummaryRow row(int64_t step) {
  StepSummaryRow r;
  r.step = step;
  r.ranks = 1;
  return r;
}

}  // namespace

TEST_CASE("summary cache: summarizing every job once is linear in the jobs, not quadratic") {
  Db db;
  SummaryCache cache;
  cache.maxSteps = 1000;  // fewer than the jobs' steps: the least recently read jobs leave
  constexpr int kJobs = 5000;
  REQUIRE(cache.catchUp(db.db));
  for (int i = 0; i < kJobs; ++i) {
    // What the live feed's poll does per job while ingest goes on: new rows since the last
    // call, then one job's page read and remembered.
    db.add(i, 0);
    REQUIRE(cache.catchUp(db.db));
    const std::string name = "job-" + std::to_string(i);
    auto& j = cache.job(name, i);
    j.remember(0, 0, {row(0)});
    cache.bound(name);
  }
  CHECK(cache.steps() <= 1000);
  // A few visits per call; before, every call visited every cached job (~kJobs^2 in all).
  CHECK(cache.visits <= 20 * static_cast<uint64_t>(kJobs));
}

TEST_CASE("summary cache: catching up re-reads the cached steps that got rows, and only those") {
  Db db;
  SummaryCache cache;
  REQUIRE(cache.catchUp(db.db));
  db.add(1, 0);
  db.add(2, 0);
  REQUIRE(cache.catchUp(db.db));
  cache.job("a", 1).remember(0, 0, {row(0)});
  cache.bound("a");
  cache.job("b", 2).remember(0, 0, {row(0)});
  cache.bound("b");
  db.add(1, 0);  // a second rank of job a's step 0
  REQUIRE(cache.catchUp(db.db));
  auto a = cache.job("a", 1).lookup(0, 0, 10);
  REQUIRE(a);
  REQUIRE(a->size() == 1);
  CHECK((*a)[0].ranks == 2);
  auto b = cache.job("b", 2).lookup(0, 0, 10);
  REQUIRE(b);
  CHECK((*b)[0].ranks == 1);
  CHECK(cache.steps() == 2);
}

TEST_CASE("summary cache: the number of jobs held is bounded, even jobs with no steps") {
  SummaryCache cache;
  for (int i = 0; i < 3 * static_cast<int>(cache.maxJobs); ++i) {
    const std::string name = "job-" + std::to_string(i);
    cache.job(name, i);
    cache.bound(name);
  }
  CHECK(cache.jobs.size() <= cache.maxJobs);
}
