// What only the ClickHouse engine has to show (the shared store tests run on it too, from the
// same files as SQLite): rows an insert repeated after a lost reply are served once, a
// restarted collector keeps its counts and still refuses replays, the partition length stays
// what the tables were made with, and bad URLs or an absent server fail naming the cause;
// collectors sharing a database count a job that moved between them exactly; a cluster of two
// shards (two servers, Distributed tables) stores each job on one shard and answers as one
// server does; a database of schema version 1 is moved to version 2; a commit naming thousands
// of long job names is stored (its lookups stay under the server's query size); jobs idle for
// ClickHouseStore::kForgetJobNs leave the writer's memory and come back whole when written.
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

// How many step rows of `job` the store serves, and its step summaries (up to 1000 each).
std::pair<size_t, std::vector<StepSummaryRow>> served(Store& store, const std::string& job) {
  StepQuery q;
  q.job = job;
  q.limit = 1000;
  auto rows = store.steps(q);
  REQUIRE(rows);
  SummaryQuery sq;
  sq.job = job;
  auto sum = store.summary(sq);
  REQUIRE(sum);
  return {rows->size(), *sum};
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
  const auto [rows, sum] = served(*store, "j");
  CHECK(rows == 20);
  REQUIRE(sum.size() == 5);
  for (const auto& s : sum) CHECK(s.ranks == 4);
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

TEST_CASE("clickhouse: a commit naming thousands of long job names is stored, not refused") {
  // ClickHouse parses at most 256 KiB of a query (max_query_size): a commit whose lookups named
  // every job in one WHERE or IN list failed whole, with every other agent's items in it.
  // 2,000 jobs of 250 bytes make each list about 0.5 MiB.
  auto store = openClickHouseDb("many_jobs");
  WriteBatch b;
  for (int i = 0; i < 2000; ++i) {
    std::string job = std::to_string(i) + '-';
    job.resize(250, 'x');
    b.steps.push_back(report(job, 0, 7, 100));
  }
  // Names no SQL literal should trip on, among them.
  for (const auto& odd : {std::string("q'uote\\back"), std::string("nul\0byte", 8),
                          std::string("line\nfeed\ttab"), std::string("\xff\xfe bytes")}) {
    b.steps.push_back(report(odd, 0, 7, 100));
  }
  b.steps.push_back(report("legit", 0, 1, 100));  // another agent's item in the same commit
  auto first = store->write(b);
  INFO(first.message());
  REQUIRE(first);
  CHECK(store->stats().stepRows == 2005);
  CHECK(sql("many_jobs", "SELECT count() FROM steps FORMAT TabSeparated") == "2005\n");
  auto jobs = store->jobs();
  REQUIRE(jobs);
  CHECK(jobs->size() == 2005);
  // The replay takes the other lookup (which keys are stored) over the same jobs.
  auto again = store->write(b);
  INFO(again.message());
  REQUIRE(again);
  CHECK(store->stats().stepRows == 2005);
  CHECK(store->stats().duplicateSteps == 2005);
}

TEST_CASE("clickhouse: idle jobs leave the writer's memory and come back whole when written") {
  // Every job and rank ever stored stayed in the writer's memory, loaded again at each open.
  ClickHouseOptions o;
  o.url = clickHouseServer().url("forget_idle");
  auto opened = ClickHouseStore::open(o);
  REQUIRE(opened);
  auto& store = **opened;
  const int64_t t0 = 1'000'000 * 1'000'000'000LL;
  WriteBatch a = grid("old", 2, 3);
  wire::RankInfo info;
  info.set_job("old");
  info.set_world_size(3);
  a.ranks.push_back(info);
  a.receivedNs = t0;
  REQUIRE(store.write(a));
  CHECK(store.heldInMemory() == std::pair<size_t, size_t>{1, 3});
  WriteBatch b = grid("new", 1, 1);
  b.receivedNs = t0 + ClickHouseStore::kForgetJobNs + 1;
  REQUIRE(store.write(b));
  CHECK(store.heldInMemory() == std::pair<size_t, size_t>{1, 1});  // "old" left
  // "old" reports again: read back, its first-seen time, world size and counts carry on.
  WriteBatch again = grid("old", 3, 3);  // steps 0 and 1 stored already, step 2 new
  again.receivedNs = b.receivedNs + 1;
  REQUIRE(store.write(again));
  CHECK(store.stats().duplicateSteps == 6);
  auto jobs = store.jobs();
  REQUIRE(jobs);
  REQUIRE(jobs->size() == 2);
  const JobRow& old = (*jobs)[0].job == "old" ? (*jobs)[0] : (*jobs)[1];
  CHECK(old.firstSeenNs == t0);
  CHECK(old.worldSize == 3);
  CHECK(old.stepRows == 9);
  CHECK(old.latestStep == 2);
  CHECK(old.ranksSeen == 3);
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
  o.retentionNs = int64_t{30} * 24 * hour;
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
           {"clickhouse://127.0.0.1:8123/my-db", "database name"},
           {"clickhouse://127.0.0.1:8123,127.0.0.1:8124/db", "name their cluster"},
           {"clickhouse://127.0.0.1:8123,/db?cluster=c", "names no port"},
           {"clickhouse://127.0.0.1:8123/db?shards=2", "the only parameter is cluster=NAME"},
           {"clickhouse://127.0.0.1:8123/db?cluster=a;b", "cluster name"}}) {
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

namespace {

std::unique_ptr<Store> openAs(const std::string& url, const std::string& collector) {
  ClickHouseOptions o;
  o.url = url;
  o.retentionNs = 0;
  o.collector = collector;
  auto store = openClickHouseStore(o);
  INFO(store.message());
  REQUIRE(store.isOk());
  return std::move(store.value());
}

WriteBatch steps(const std::string& job, int64_t from, int64_t to, uint32_t ranks,
                 int64_t receivedNs) {
  WriteBatch b;
  b.receivedNs = receivedNs;
  for (int64_t s = from; s < to; ++s) {
    for (uint32_t r = 0; r < ranks; ++r) b.steps.push_back(report(job, r, s, 100 + r + s));
  }
  return b;
}

const JobRow& onlyJob(const std::vector<JobRow>& jobs, const std::string& name) {
  for (const auto& j : jobs) {
    if (j.job == name) return j;
  }
  FAIL("no job " << name);
  return jobs.front();
}

}  // namespace

TEST_CASE("clickhouse: two collectors sharing a database count a job that moved exactly") {
  constexpr int64_t kSec = 1'000'000'000;
  const std::string url = clickHouseServer().url("shared");
  auto a = openAs(url, "collector-a");
  auto b = openAs(url, "collector-b");

  WriteBatch first = steps("j", 0, 5, 2, 100 * kSec);
  for (uint32_t r = 0; r < 2; ++r) {
    wire::RankInfo info;
    info.set_job("j");
    info.set_rank(r);
    info.set_world_size(2);
    info.set_host("host-" + std::to_string(r));
    info.set_node("node-0");
    info.set_pid(40 + r);
    first.ranks.push_back(info);
  }
  NodeUpdate hello;
  hello.node = "node-0";
  hello.host = "host-0";
  hello.agentVersion = "1.0";
  hello.seenNs = 100 * kSec;
  first.nodes.push_back(hello);
  wire::HostSample sample;
  sample.set_node("node-0");
  sample.set_time_ns(100 * kSec);
  sample.set_cpu_percent(42);
  first.hosts.push_back(sample);
  REQUIRE(a->write(first));
  // A stored step 5 and was killed before it counted it (its jobs row comes after the steps).
  sql("shared",
      "INSERT INTO steps (job, rank, step, received_ns) VALUES ('j', 0, 5, 1),"
      " ('j', 1, 5, 1)");

  // The job moves to B (A is gone): B gets what A had not acked (steps 4 and 5 again) and the
  // rest, but no registration yet (hellos come every 2 s).
  REQUIRE(b->write(steps("j", 4, 10, 2, 110 * kSec)));
  NodeUpdate heartbeat;
  heartbeat.node = "node-0";
  heartbeat.seenNs = 111 * kSec;
  heartbeat.hasClock = true;
  heartbeat.offsetNs = 7;
  WriteBatch hb;
  hb.receivedNs = 111 * kSec;
  hb.nodes.push_back(heartbeat);
  REQUIRE(b->write(hb));
  CHECK(b->stats().duplicateSteps == 4);

  for (Store* either : {a.get(), b.get()}) {
    auto jobs = either->jobs();
    REQUIRE(jobs);
    const JobRow& j = onlyJob(*jobs, "j");
    CHECK(j.stepRows == 20);  // once each: 10 steps x 2 ranks
    CHECK(j.latestStep == 9);
    CHECK(j.firstSeenNs == 100 * kSec);
    CHECK(j.lastSeenNs == 110 * kSec);
    CHECK(j.worldSize == 2);
    CHECK(j.collector == "collector-b");
    CHECK(j.ranksSeen == 2);
    // B read the ranks A registered before writing them: nothing of A's view is lost.
    auto ranks = either->ranks("j");
    REQUIRE(ranks);
    REQUIRE(ranks->size() == 2);
    CHECK((*ranks)[1].host == "host-1");
    CHECK((*ranks)[1].pid == 41);
    CHECK((*ranks)[1].firstSeenNs == 100 * kSec);
    CHECK((*ranks)[1].latestStep == 9);
    // The node: B's heartbeat is the latest word, A's host sample the latest sample.
    auto nodes = either->nodes();
    REQUIRE(nodes);
    REQUIRE(nodes->size() == 1);
    CHECK((*nodes)[0].host == "host-0");
    CHECK((*nodes)[0].lastSeenNs == 111 * kSec);
    CHECK((*nodes)[0].offsetNs == 7);
    REQUIRE((*nodes)[0].latestHost.has_value());
    CHECK((*nodes)[0].latestHost->cpu_percent() == 42);
  }
  CHECK(sql("shared", "SELECT count() FROM steps FORMAT TabSeparated") == "20\n");

  // A is back and the job returns to it.
  REQUIRE(a->write(steps("j", 10, 12, 2, 120 * kSec)));
  auto jobs = b->jobs();
  REQUIRE(jobs);
  CHECK(onlyJob(*jobs, "j").stepRows == 24);
  CHECK(onlyJob(*jobs, "j").collector == "collector-a");
  CHECK(onlyJob(*jobs, "j").latestStep == 11);
}

TEST_CASE("clickhouse: a cluster of two shards stores each job on one shard and reads as one") {
  trainscope::testing::ClickHouseServer::skipUnlessInstalled();
  std::string error;
  auto servers = trainscope::testing::ClickHouseServer::startCluster(2, "two", &error);
  INFO(error);
  REQUIRE(servers.size() == 2);
  const std::string url =
      trainscope::testing::ClickHouseServer::clusterUrl(servers, "sharded", "two");
  auto store = openAs(url, "c0");
  constexpr int kJobs = 8;
  for (int j = 0; j < kJobs; ++j) {
    REQUIRE(store->write(steps("job-" + std::to_string(j), 0, 10, 4, 1'000'000'000)));
  }
  REQUIRE(store->write(steps("job-0", 5, 12, 4, 2'000'000'000)));  // a replay and more
  auto shardCount = [&](size_t i, const std::string& what) {
    clickhouse::Endpoint e;
    e.port = std::to_string(servers[i]->port());
    e.database = "sharded";
    clickhouse::HttpClient client(e, std::chrono::milliseconds(10000));
    auto out = client.query(what + " FORMAT TabSeparated");
    INFO(out.message());
    REQUIRE(out.isOk());
    return std::stoll(*out);
  };
  const int64_t total = kJobs * 40 + 2 * 4;
  const int64_t on0 = shardCount(0, "SELECT count() FROM steps_local");
  const int64_t on1 = shardCount(1, "SELECT count() FROM steps_local");
  INFO("shard 0 holds " << on0 << " rows, shard 1 " << on1);
  CHECK(on0 + on1 == total);  // each row once, on one shard
  CHECK(on0 > 0);
  CHECK(on1 > 0);
  // A job's rows all lie on one shard.
  CHECK(shardCount(0, "SELECT uniqExact(job) FROM steps_local") +
            shardCount(1, "SELECT uniqExact(job) FROM steps_local") ==
        kJobs);
  // Either server answers for all of it through its Distributed tables.
  CHECK(shardCount(1, "SELECT count() FROM steps") == total);
  auto jobs = store->jobs();
  REQUIRE(jobs);
  CHECK(jobs->size() == static_cast<size_t>(kJobs));
  CHECK(onlyJob(*jobs, "job-0").stepRows == 48);
  CHECK(onlyJob(*jobs, "job-3").stepRows == 40);
  const auto [rows, sum] = served(*store, "job-0");
  CHECK(rows == 48);
  CHECK(sum.size() == 12);
  CHECK(store->stats().bytesOnDisk > 0);

  // A second collector on the same cluster sees the same.
  auto other = openAs(url, "c1");
  auto otherJobs = other->jobs();
  REQUIRE(otherJobs);
  CHECK(otherJobs->size() == static_cast<size_t>(kJobs));

  // Retention drops the partitions on both shards.
  ClickHouseOptions o;
  o.url = url;
  o.collector = "c0";
  o.retentionNs = 3600LL * 1'000'000'000;
  auto retaining = openClickHouseStore(o);
  REQUIRE(retaining);
  auto dropped = (*retaining)->applyRetention(int64_t{30} * 24 * 3600 * 1'000'000'000);
  REQUIRE(dropped);
  CHECK(*dropped == static_cast<uint64_t>(total));
  CHECK(shardCount(0, "SELECT count() FROM steps_local") == 0);
  CHECK(shardCount(1, "SELECT count() FROM steps_local") == 0);
  auto after = (*retaining)->jobs();
  REQUIRE(after);
  CHECK(onlyJob(*after, "job-0").stepRows == 0);

  // The URL must list one server per shard.
  ClickHouseOptions bad;
  bad.url = "clickhouse://127.0.0.1:" + std::to_string(servers[0]->port()) + "/x?cluster=two";
  auto refused = openClickHouseStore(bad);
  REQUIRE_FALSE(refused);
  INFO(refused.message());
  CHECK(refused.message().find("cluster two has 2 shards") != std::string::npos);
}

TEST_CASE("clickhouse: a database of schema version 1 is moved to per-collector rows") {
  const std::string db = "version1";
  (void)clickHouseServer();
  clickhouse::Endpoint e;
  e.port = std::to_string(clickHouseServer().port());
  e.database = db;
  clickhouse::HttpClient client(e, std::chrono::milliseconds(10000));
  for (const char* ddl :
       {"CREATE DATABASE IF NOT EXISTS version1",
        "CREATE TABLE version1.meta (key String, value String, version UInt64) ENGINE ="
        " ReplacingMergeTree(version) ORDER BY key",
        "INSERT INTO version1.meta VALUES ('schema_version', '1', 1),"
        " ('partition_ns', '86400000000000', 1)",
        "CREATE TABLE version1.jobs (job String, world_size UInt32, first_seen_ns Int64,"
        " last_seen_ns Int64, latest_step Int64, step_rows UInt64, version UInt64) ENGINE ="
        " ReplacingMergeTree(version) ORDER BY job",
        "INSERT INTO version1.jobs VALUES ('old', 4, 10, 20, 99, 400, 5)",
        "CREATE TABLE version1.nodes (name String, host String, agent_version String,"
        " pid UInt32, first_seen_ns Int64, last_seen_ns Int64, offset_ns Int64, rtt_ns Int64,"
        " spool_bytes UInt64, spool_dropped UInt64, ranks UInt32, latest_host_ns Int64,"
        " latest_host Nullable(String), version UInt64) ENGINE ="
        " ReplacingMergeTree(version) ORDER BY name",
        "INSERT INTO version1.nodes VALUES ('n', 'h', 'v', 1, 10, 20, 0, 0, 0, 0, 4, 0,"
        " NULL, 5)"}) {
    auto done = client.query(ddl, std::nullopt, false);
    INFO(ddl << ": " << done.message());
    REQUIRE(done.isOk());
  }
  auto store = openAs(clickHouseServer().url(db), "new");
  auto jobs = store->jobs();
  REQUIRE(jobs);
  REQUIRE(jobs->size() == 1);
  CHECK((*jobs)[0].stepRows == 400);
  CHECK((*jobs)[0].latestStep == 99);
  CHECK((*jobs)[0].collector.empty());  // written before collectors had names
  auto nodes = store->nodes();
  REQUIRE(nodes);
  REQUIRE(nodes->size() == 1);
  CHECK((*nodes)[0].host == "h");
  CHECK(sql(db, "SELECT value FROM meta FINAL WHERE key = 'schema_version' FORMAT TabSeparated") ==
        "2\n");
  // Opened again: nothing left to move.
  auto again = openAs(clickHouseServer().url(db), "new");
  auto jobsAgain = again->jobs();
  REQUIRE(jobsAgain);
  CHECK(jobsAgain->size() == 1);
}
