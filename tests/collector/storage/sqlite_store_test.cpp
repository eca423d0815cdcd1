#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "collector/storage/sqlite_store.h"
#include "tests/collector/storage/sqlite_file.h"
#include "tests/collector/storage/test_store.h"
#include "tests/common/capture_stderr.h"
#include "tests/common/gcc12_string_warnings.h"  // last: GCC 12 -O3 false positives
#include "tests/common/support.h"

using namespace trainscope;
using namespace trainscope::storage;
using trainscope::storage::testing::execSql;
using trainscope::storage::testing::openTestStore;
using trainscope::storage::testing::userVersion;

namespace {

using trainscope::tests::TempDir;

wire::StepReport report(const std::string& job, uint32_t rank, int64_t step, int64_t durNs) {
  wire::StepReport r;
  r.set_job(job);
  r.set_rank(rank);
  r.set_step(step);
  r.set_start_ns(1'000'000'000 + step * 1'000'000'000LL);
  r.set_end_ns(r.start_ns() + durNs);
  r.set_duration_ns(durNs);
  r.set_compute_ns(durNs / 2);
  r.set_comm_ns(durNs / 4);
  r.set_exposed_comm_ns(durNs / 8);
  r.set_data_ns(durNs / 16);
  r.set_records(10);
  auto* op = r.add_ops();
  op->set_name("aten::mm");
  op->set_count(3);
  op->set_total_ns(durNs / 3);
  op->set_max_ns(durNs / 5);
  auto* coll = r.add_collectives();
  coll->set_op(wire::ALL_REDUCE);
  coll->set_group("world");
  coll->set_bytes(1 << 20);
  coll->set_count(2);
  coll->set_total_ns(durNs / 4);
  return r;
}

std::unique_ptr<Store> openStore(const std::string& path, int64_t retentionNs = 0) {
  return openTestStore(path, retentionNs);
}

StepQuery sq(const std::string& job, std::optional<uint32_t> rank = {},
             std::optional<int64_t> from = {}, std::optional<int64_t> to = {}, size_t limit = 1000,
             bool detail = false) {
  StepQuery q;
  q.job = job;
  q.rank = rank;
  q.fromStep = from;
  q.toStep = to;
  q.limit = limit;
  q.detail = detail;
  return q;
}

SummaryQuery smq(const std::string& job, std::optional<int64_t> from = {},
                 std::optional<int64_t> to = {}, size_t limit = 1000) {
  SummaryQuery q;
  q.job = job;
  q.fromStep = from;
  q.toStep = to;
  q.limit = limit;
  return q;
}

}  // namespace

TEST_CASE("storage: a fresh database is migrated to the current version, in WAL mode", "[sqlite]") {
  TempDir dir;
  std::string path = dir.path() + "/t.db";
  {
    auto store = openStore(path);
    WriteBatch b;
    b.steps.push_back(report("job", 0, 1, 100));
    REQUIRE(store->write(b).isOk());
  }
  CHECK(userVersion(path) == currentSchemaVersion());
  CHECK(currentSchemaVersion() == static_cast<int>(migrations().size()));
  // Reopening applies nothing and keeps the rows.
  auto store = openStore(path);
  CHECK(userVersion(path) == currentSchemaVersion());
  CHECK(store->stats().stepRows == 1);
  auto rows = store->steps(sq("job"));
  REQUIRE(rows.isOk());
  CHECK(rows->size() == 1);
  CHECK(std::filesystem::exists(path + "-wal"));
  CHECK(store->stats().bytesOnDisk > 0);
}

TEST_CASE("storage: an older database is migrated step by step, keeping its data", "[sqlite]") {
  TempDir dir;
  std::string path = dir.path() + "/old.db";
  // Build a version-1 database by hand, as an older collector would have left it.
  execSql(path, std::string("BEGIN;") + migrations().front().sql +
                    "PRAGMA user_version = 1; INSERT INTO jobs(name, first_seen_ns, last_seen_ns)"
                    " VALUES('legacy', 1, 1); COMMIT;");
  REQUIRE(userVersion(path) == 1);
  auto store = openStore(path);
  CHECK(userVersion(path) == currentSchemaVersion());
  auto exists = store->jobExists("legacy");
  REQUIRE(exists.isOk());
  CHECK(*exists);
}

TEST_CASE("storage: a database from a newer collector is refused with a clear message",
          "[sqlite]") {
  TempDir dir;
  std::string path = dir.path() + "/new.db";
  execSql(path, "PRAGMA user_version = 999;");
  SqliteOptions options;
  options.path = path;
  auto store = openSqliteStore(options);
  REQUIRE_FALSE(store.isOk());
  CHECK(store.message().find("schema version 999") != std::string::npos);
}

TEST_CASE("storage: a 0-byte database file opens as a new database and the log says so",
          "[sqlite]") {
  TempDir dir;
  const std::string path = dir.path() + "/empty.db";
  { std::ofstream touch(path); }
  SqliteOptions options;
  options.path = path;
  std::optional<bool> opened;
  const std::string log =
      trainscope::testing::captureStderr([&] { opened = openSqliteStore(options).isOk(); });
  CHECK(opened == true);
  CHECK(log.find("database file " + path + " is empty (0 bytes)") != std::string::npos);
  CHECK(userVersion(path) == currentSchemaVersion());

  // A database that already has its schema opens without that line.
  const std::string again =
      trainscope::testing::captureStderr([&] { opened = openSqliteStore(options).isOk(); });
  CHECK(opened == true);
  CHECK(again.find("is empty") == std::string::npos);
}

TEST_CASE("storage: the same step report twice keeps one row and counts the duplicate") {
  TempDir dir;
  auto store = openStore(dir.path() + "/d.db");
  WriteBatch b;
  b.steps.push_back(report("job", 0, 1, 100));
  b.steps.push_back(report("job", 1, 1, 120));
  REQUIRE(store->write(b).isOk());
  REQUIRE(store->write(b).isOk());
  // A duplicate within one batch is ignored too.
  WriteBatch c;
  c.steps.push_back(report("job", 0, 2, 100));
  c.steps.push_back(report("job", 0, 2, 999));
  REQUIRE(store->write(c).isOk());
  auto st = store->stats();
  CHECK(st.stepRows == 3);
  CHECK(st.duplicateSteps == 3);
  CHECK(st.transactions == 3);
  auto rows = store->steps(sq("job"));
  REQUIRE(rows.isOk());
  REQUIRE(rows->size() == 3);
  CHECK((*rows)[2].durationNs == 100);  // the first write wins
  auto jobs = store->jobs();
  REQUIRE(jobs.isOk());
  REQUIRE(jobs->size() == 1);
  CHECK((*jobs)[0].stepRows == 3);
  CHECK((*jobs)[0].latestStep == 2);
  CHECK((*jobs)[0].ranksSeen == 2);
}

TEST_CASE("storage: step queries filter by rank and step range, order by step then rank") {
  auto store = openStore(":memory:");
  WriteBatch b;
  for (int64_t step = 0; step < 10; ++step) {
    for (uint32_t rank = 0; rank < 4; ++rank) b.steps.push_back(report("a", rank, step, 100));
  }
  b.steps.push_back(report("b", 0, 0, 5));
  REQUIRE(store->write(b).isOk());

  auto all = store->steps(sq("a"));
  REQUIRE(all.isOk());
  REQUIRE(all->size() == 40);
  CHECK((*all)[0].step == 0);
  CHECK((*all)[0].rank == 0);
  CHECK((*all)[1].rank == 1);
  CHECK((*all)[4].step == 1);
  CHECK((*all)[0].ops.empty());  // no detail unless asked

  auto one = store->steps(sq("a", 2, 3, 6));
  REQUIRE(one.isOk());
  REQUIRE(one->size() == 4);
  for (const auto& row : *one) CHECK(row.rank == 2);
  CHECK(one->front().step == 3);
  CHECK(one->back().step == 6);

  auto limited = store->steps(sq("a", {}, 8, {}, 5));
  REQUIRE(limited.isOk());
  REQUIRE(limited->size() == 5);
  CHECK(limited->back().step == 9);
  CHECK(limited->back().rank == 0);

  auto detail = store->steps(sq("a", 1, 2, 2, 1000, true));
  REQUIRE(detail.isOk());
  REQUIRE(detail->size() == 1);
  REQUIRE((*detail)[0].ops.size() == 1);
  CHECK((*detail)[0].ops[0].name() == "aten::mm");
  REQUIRE((*detail)[0].collectives.size() == 1);
  CHECK((*detail)[0].collectives[0].op() == wire::ALL_REDUCE);
  CHECK((*detail)[0].computeNs == 50);

  auto none = store->steps(sq("nope"));
  REQUIRE(none.isOk());
  CHECK(none->empty());
  auto exists = store->jobExists("nope");
  REQUIRE(exists.isOk());
  CHECK_FALSE(*exists);
}

TEST_CASE("storage: summary gives min, median, max and the slowest rank per step") {
  auto store = openStore(":memory:");
  WriteBatch b;
  // step 0: 4 ranks (even count: median is the mean of the middle two)
  b.steps.push_back(report("j", 0, 0, 100));
  b.steps.push_back(report("j", 1, 0, 400));
  b.steps.push_back(report("j", 2, 0, 200));
  b.steps.push_back(report("j", 3, 0, 300));
  // step 1: 3 ranks, a tie for the slowest goes to the lower rank
  b.steps.push_back(report("j", 0, 1, 50));
  b.steps.push_back(report("j", 2, 1, 70));
  b.steps.push_back(report("j", 3, 1, 70));
  // step 2..4: one rank each
  for (int64_t s = 2; s < 5; ++s) b.steps.push_back(report("j", 5, s, 10 * s));
  REQUIRE(store->write(b).isOk());

  auto sum = store->summary(smq("j"));
  REQUIRE(sum.isOk());
  REQUIRE(sum->size() == 5);
  CHECK((*sum)[0].step == 0);
  CHECK((*sum)[0].ranks == 4);
  CHECK((*sum)[0].minNs == 100);
  CHECK((*sum)[0].medianNs == 250);
  CHECK((*sum)[0].maxNs == 400);
  CHECK((*sum)[0].slowestRank == 1);
  CHECK((*sum)[1].ranks == 3);
  CHECK((*sum)[1].medianNs == 70);
  CHECK((*sum)[1].slowestRank == 2);
  CHECK((*sum)[4].slowestRank == 5);

  auto page = store->summary(smq("j", 1, {}, 2));
  REQUIRE(page.isOk());
  REQUIRE(page->size() == 2);
  CHECK((*page)[0].step == 1);
  CHECK((*page)[1].step == 2);
  CHECK((*page)[1].minNs == 20);

  auto ranged = store->summary(smq("j", 3, 3));
  REQUIRE(ranged.isOk());
  REQUIRE(ranged->size() == 1);
  CHECK((*ranged)[0].maxNs == 30);
  if (!trainscope::storage::testing::onClickHouse()) {
    // The summaries read are kept for the next reads, and counted with SQLite's own memory.
    const StoreStats st = store->stats();
    CHECK(st.cachedSummarySteps == 5);
    CHECK(st.memoryBytes > 0);
  }
}

TEST_CASE("storage: the step summaries kept for reads are bounded per job and over all jobs") {
  SqliteOptions o;
  o.path = ":memory:";
  o.summaryCacheSteps = 300;
  o.summaryCacheStepsPerJob = 100;
  auto opened = openSqliteStore(o);
  REQUIRE(opened.isOk());
  Store& store = **opened;
  auto fill = [&](const std::string& job, int64_t steps) {
    WriteBatch b;
    for (int64_t s = 0; s < steps; ++s) b.steps.push_back(report(job, 0, s, 10 + s));
    REQUIRE(store.write(b).isOk());
  };
  auto read = [&](const std::string& job, size_t want) {
    auto rows = store.summary(smq(job));
    REQUIRE(rows.isOk());
    REQUIRE(rows->size() == want);
    CHECK(rows->back().maxNs == 10 + static_cast<int64_t>(want) - 1);
  };
  // A job past the per-job bound starts over: answered, not kept.
  fill("long", 150);
  read("long", 150);
  CHECK(store.stats().cachedSummarySteps == 0);
  // 80 steps each: a, b and c fit (240); d makes 320, and a, read least recently, leaves.
  for (const char* j : {"a", "b", "c", "d"}) fill(j, 80);
  read("a", 80);
  read("b", 80);
  read("c", 80);
  CHECK(store.stats().cachedSummarySteps == 240);
  read("b", 80);  // b is now more recent than c
  read("d", 80);
  CHECK(store.stats().cachedSummarySteps == 240);
  // c went next (a already out): reading it again comes from the store, and correct.
  read("a", 80);
  CHECK(store.stats().cachedSummarySteps == 240);
  read("c", 80);
  read("long", 150);
  CHECK(store.stats().cachedSummarySteps == 240);
  // A job's new steps are followed into its cache, up to its bound.
  WriteBatch more;
  for (int64_t s = 80; s < 95; ++s) more.steps.push_back(report("c", 0, s, 10 + s));
  REQUIRE(store.write(more).isOk());
  read("c", 95);
  CHECK(store.stats().cachedSummarySteps <= 300);
}

TEST_CASE("storage: ranks, goodbyes and nodes with their latest host sample") {
  auto store = openStore(":memory:");
  WriteBatch b;
  b.receivedNs = 5000;
  wire::RankInfo info;
  info.set_job("j");
  info.set_rank(1);
  info.set_world_size(2);
  info.set_host("h1");
  info.set_node("n1");
  info.set_pid(42);
  info.set_probe_version("0.1");
  b.ranks.push_back(info);
  b.steps.push_back(report("j", 1, 7, 10));
  wire::RankGoodbye bye;
  bye.set_job("j");
  bye.set_rank(1);
  bye.set_last_step(7);
  b.goodbyes.push_back(bye);
  for (int64_t t : {200, 100}) {
    wire::HostSample h;
    h.set_node("n1");
    h.set_time_ns(t);
    h.set_cpu_percent(static_cast<double>(t) / 10);
    b.hosts.push_back(h);
  }
  NodeUpdate hello;
  hello.node = "n1";
  hello.host = "h1";
  hello.agentVersion = "0.1";
  hello.pid = 7;
  b.nodes.push_back(hello);
  NodeUpdate beat;
  beat.node = "n1";
  beat.hasClock = true;
  beat.offsetNs = -33;
  beat.rttNs = 120;
  beat.spoolBytes = 4096;
  beat.ranks = 2;
  b.nodes.push_back(beat);
  REQUIRE(store->write(b).isOk());

  auto ranks = store->ranks("j");
  REQUIRE(ranks.isOk());
  REQUIRE(ranks->size() == 1);
  const auto& r = (*ranks)[0];
  CHECK(r.rank == 1);
  CHECK(r.worldSize == 2);
  CHECK(r.host == "h1");
  CHECK(r.node == "n1");
  CHECK(r.pid == 42);
  CHECK(r.latestStep == 7);
  CHECK(r.ended);
  CHECK(r.endedStep == 7);

  auto jobs = store->jobs();
  REQUIRE(jobs.isOk());
  REQUIRE(jobs->size() == 1);
  CHECK((*jobs)[0].worldSize == 2);
  CHECK((*jobs)[0].ranksEnded == 1);
  CHECK((*jobs)[0].lastSeenNs == 5000);

  auto nodes = store->nodes();
  REQUIRE(nodes.isOk());
  REQUIRE(nodes->size() == 1);
  const auto& n = (*nodes)[0];
  CHECK(n.host == "h1");  // the heartbeat did not wipe the hello's fields
  CHECK(n.pid == 7);
  CHECK(n.offsetNs == -33);
  CHECK(n.rttNs == 120);
  CHECK(n.spoolBytes == 4096);
  CHECK(n.ranks == 2);
  REQUIRE(n.latestHost.has_value());
  CHECK(n.latestHost->time_ns() == 200);

  // A later hello without clock data keeps the clock fields.
  WriteBatch again;
  again.nodes.push_back(hello);
  REQUIRE(store->write(again).isOk());
  nodes = store->nodes();
  REQUIRE(nodes.isOk());
  CHECK((*nodes)[0].offsetNs == -33);
}

TEST_CASE("storage: retention deletes rows received before the horizon and keeps the rest") {
  TempDir dir;
  const int64_t hour = 3600LL * 1'000'000'000;
  auto store = openStore(dir.path() + "/r.db", 2 * hour);
  for (int64_t i = 0; i < 5; ++i) {
    WriteBatch b;
    b.receivedNs = (i + 1) * hour;
    b.steps.push_back(report("j", 0, i, 100));
    b.steps.push_back(report("j", 1, i, 100));
    wire::HostSample h;
    h.set_node("n");
    h.set_time_ns((i + 1) * hour);
    b.hosts.push_back(h);
    REQUIRE(store->write(b).isOk());
  }
  // now = 6h, horizon = 4h: batches received at 1h, 2h, 3h go.
  auto deleted = store->applyRetention(6 * hour);
  REQUIRE(deleted.isOk());
  CHECK(*deleted == 6 + 3);
  auto rows = store->steps(sq("j"));
  REQUIRE(rows.isOk());
  REQUIRE(rows->size() == 4);
  CHECK(rows->front().step == 3);
  CHECK(store->stats().stepRows == 4);
  auto jobs = store->jobs();
  REQUIRE(jobs.isOk());
  CHECK((*jobs)[0].stepRows == 4);
  // Nothing more to delete; a second pass is a no-op.
  deleted = store->applyRetention(6 * hour);
  REQUIRE(deleted.isOk());
  CHECK(*deleted == 0);
  // A step deleted by retention can be stored again (it is no longer a duplicate).
  WriteBatch b;
  b.receivedNs = 6 * hour;
  b.steps.push_back(report("j", 0, 0, 100));
  REQUIRE(store->write(b).isOk());
  CHECK(store->stats().stepRows == 5);
}

TEST_CASE("storage: retention 0 keeps everything") {
  auto store = openStore(":memory:", 0);
  WriteBatch b;
  b.receivedNs = 1;
  b.steps.push_back(report("j", 0, 0, 100));
  REQUIRE(store->write(b).isOk());
  auto deleted = store->applyRetention(INT64_MAX / 2);
  REQUIRE(deleted.isOk());
  CHECK(*deleted == 0);
  CHECK(store->stats().stepRows == 1);
}

TEST_CASE("storage: reads see committed rows while another thread writes") {
  TempDir dir;
  auto store = openStore(dir.path() + "/c.db");
  std::atomic<bool> done{false};
  std::atomic<bool> failed{false};
  // Catch2's assertions are not thread-safe: the writer only records failure.
  std::thread writer([&] {
    for (int64_t step = 0; step < 200; ++step) {
      WriteBatch b;
      for (uint32_t rank = 0; rank < 8; ++rank) b.steps.push_back(report("j", rank, step, 100));
      if (!store->write(b).isOk()) failed = true;
    }
    done = true;
  });
  size_t last = 0;
  while (!done) {
    auto rows = store->summary(smq("j", {}, {}, 100000));
    REQUIRE(rows.isOk());
    // Whole transactions only: every summarized step has all 8 ranks.
    for (const auto& row : *rows) REQUIRE(row.ranks == 8);
    CHECK(rows->size() >= last);
    last = rows->size();
  }
  writer.join();
  CHECK_FALSE(failed);
  CHECK(store->stats().stepRows == 1600);
}

TEST_CASE("storage: pre-encoded step details are stored as given") {
  auto store = openStore(":memory:");
  WriteBatch b;
  b.steps.push_back(report("j", 0, 0, 100));
  auto encoded = report("j", 0, 0, 100);
  encoded.mutable_ops(0)->set_name("from-pre-encoded");
  b.stepDetails.push_back(encoded.SerializeAsString());
  REQUIRE(store->write(b).isOk());
  auto rows = store->steps(sq("j", 0, {}, {}, 10, true));
  REQUIRE(rows.isOk());
  REQUIRE(rows->size() == 1);
  REQUIRE((*rows)[0].ops.size() == 1);
  CHECK((*rows)[0].ops[0].name() == "from-pre-encoded");
}
