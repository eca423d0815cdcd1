#include "collector/storage/clickhouse_store.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "collector/storage/clickhouse_internal.h"
#include "collector/storage/store_rows.h"
#include "common/clock.h"
#include "common/log.h"

namespace trainscope::storage {
namespace {

using namespace clickhouse;  // NOLINT(google-build-using-namespace): this engine's own helpers

constexpr const char* kComponent = "storage";
constexpr int64_t kHourNs = 3600LL * 1'000'000'000;
constexpr int64_t kDayNs = 24 * kHourNs;
// A job this collector stored nothing of for this long may have been another's meanwhile.
constexpr int64_t kOwnerGapNs = 5'000'000'000;

// The tables (ClickHouseStore's header says why they look like this). `{P}` is the partition
// length in nanoseconds. On a cluster each data table is NAME_local on every shard, with NAME a
// Distributed table over them, sharded by `shardKey` (all rows of a job, or of a node, on one
// shard, so FINAL through the Distributed table is exact); meta stays a plain table on each.
struct Table {
  const char* name;
  const char* columns;  // "(...) ENGINE = ..."
  const char* shardKey;
};
constexpr Table kSchema[] = {
    {"meta",
     "(key String, value String, version UInt64) ENGINE = ReplacingMergeTree(version) ORDER BY key",
     nullptr},
    {"steps",
     "(job String, rank UInt32, step Int64, start_ns Int64,"
     " end_ns Int64, duration_ns Int64, compute_ns Int64, comm_ns Int64, exposed_comm_ns Int64,"
     " data_ns Int64, records UInt64, dropped UInt64, received_ns Int64, detail String)"
     " ENGINE = ReplacingMergeTree() PARTITION BY intDiv(received_ns, {P})"
     " ORDER BY (job, step, rank)",
     "job"},
    {"host_samples",
     "(node String, time_ns Int64, received_ns Int64,"
     " sample String) ENGINE = ReplacingMergeTree() PARTITION BY intDiv(received_ns, {P})"
     " ORDER BY (node, time_ns)",
     "node"},
    // One row per job and collector: what that collector stored of the job (jobs()).
    {"jobs",
     "(job String, collector String, world_size UInt32, first_seen_ns Int64,"
     " last_seen_ns Int64, latest_step Int64, step_rows UInt64, version UInt64)"
     " ENGINE = ReplacingMergeTree(version) ORDER BY (job, collector)",
     "job"},
    {"ranks",
     "(job String, rank UInt32, world_size UInt32,"
     " local_rank UInt32, host String, node String, pid UInt32, probe_version String,"
     " first_seen_ns Int64, last_seen_ns Int64, latest_step Int64, ended UInt8, ended_step Int64,"
     " groups_declared_ns Int64, groups String, version UInt64, gpu_uuid String)"
     " ENGINE = ReplacingMergeTree(version) ORDER BY (job, rank)",
     "job"},
    // One row per node and collector: what that collector heard of the node (nodes()).
    {"nodes",
     "(name String, collector String, host String, agent_version String,"
     " pid UInt32, first_seen_ns Int64, last_seen_ns Int64, offset_ns Int64, rtt_ns Int64,"
     " spool_bytes UInt64, spool_dropped UInt64, ranks UInt32, latest_host_ns Int64,"
     " latest_host Nullable(String), version UInt64)"
     " ENGINE = ReplacingMergeTree(version) ORDER BY (name, collector)",
     "name"},
    {"anomalies",
     "(id String, job String, kind String, ranks String,"
     " nodes String, onset_step Int64, detected_step Int64, detected_ns Int64, magnitude Float64,"
     " confidence Float64, evidence String, labels String, state String, resolved_step Int64,"
     " resolved_ns Int64, summary String, capture_id Nullable(String), updated_ns Int64,"
     " version UInt64) ENGINE = ReplacingMergeTree(version) ORDER BY (job, id)",
     "job"},
    {"captures",
     "(id String, job String, kind String, state String,"
     " reason String, anomaly_id Nullable(String), ranks String, start_step Int64, steps UInt32,"
     " history UInt32, max_bytes UInt64, created_ns Int64, updated_ns Int64,"
     " finished_ns Nullable(Int64), deadline_ns Int64, trace_bytes Nullable(Int64),"
     " summary String, rank_status String, version UInt64)"
     " ENGINE = ReplacingMergeTree(version) ORDER BY (job, id)",
     "job"},
};

// Columns added to a table after its first version, at its end (kSchema has them too).
struct AddedColumn {
  const char* table;
  const char* column;
  const char* type;
};
constexpr AddedColumn kAddedColumns[] = {
    {"ranks", "gpu_uuid", "String"},  // RankInfo.gpu_uuid (issue 35)
};

// Schema version 1 kept one jobs and one nodes row per job and node; version 2 keeps one per
// collector as well, so collectors sharing the database each count only what they stored.
// Tables of version 1 are moved over at open (their rows become the collector '' rows).
constexpr const char* kMigrateV1[] = {
    "RENAME TABLE jobs TO jobs_v1, nodes TO nodes_v1",
    "{CREATE jobs}",
    "{CREATE nodes}",
    "INSERT INTO jobs (job, collector, world_size, first_seen_ns, last_seen_ns, latest_step,"
    " step_rows, version) SELECT job, '', world_size, first_seen_ns, last_seen_ns, latest_step,"
    " step_rows, version FROM jobs_v1 FINAL",
    "INSERT INTO nodes (name, collector, host, agent_version, pid, first_seen_ns, last_seen_ns,"
    " offset_ns, rtt_ns, spool_bytes, spool_dropped, ranks, latest_host_ns, latest_host, version)"
    " SELECT name, '', host, agent_version, pid, first_seen_ns, last_seen_ns, offset_ns, rtt_ns,"
    " spool_bytes, spool_dropped, ranks, latest_host_ns, latest_host, version FROM nodes_v1 FINAL",
    "DROP TABLE jobs_v1",
    "DROP TABLE nodes_v1",
};

int64_t defaultPartitionNs(int64_t retentionNs) {
  if (retentionNs == 0) return kDayNs;
  return std::clamp(retentionNs / 7 / kHourNs * kHourNs, kHourNs, kDayNs);
}

}  // namespace

namespace clickhouse {

std::vector<std::string> chunkTerms(const std::vector<std::string>& terms,
                                    std::string_view separator) {
  std::vector<std::string> out;
  std::string list;
  for (const auto& term : terms) {
    if (!list.empty() && list.size() + separator.size() + term.size() > kMaxListBytes) {
      out.push_back(std::move(list));
      list.clear();
    }
    if (!list.empty()) list += separator;
    list += term;
  }
  if (!list.empty()) out.push_back(std::move(list));
  return out;
}

void writeJob(RowWriter& w, const std::string& job, const std::string& collector,
              const ClickHouseStore::JobState& s) {
  w.str(job);
  w.str(collector);
  w.u32(s.worldSize);
  w.i64(s.firstSeenNs);
  w.i64(s.lastSeenNs);
  w.i64(s.latestStep);
  w.u64(s.stepRows);
}

std::pair<std::string, ClickHouseStore::JobState> readJob(RowReader& r) {
  std::pair<std::string, ClickHouseStore::JobState> out;
  out.first = std::string(r.str());
  out.second.worldSize = r.u32();
  out.second.firstSeenNs = r.i64();
  out.second.lastSeenNs = r.i64();
  out.second.latestStep = r.i64();
  out.second.stepRows = r.u64();
  return out;
}

void writeRank(RowWriter& w, const ClickHouseStore::RankState& s) {
  const RankRow& r = s.row;
  w.str(r.job);
  w.u32(r.rank);
  w.u32(r.worldSize);
  w.u32(r.localRank);
  w.str(r.host);
  w.str(r.node);
  w.u32(r.pid);
  w.str(r.probeVersion);
  w.i64(r.firstSeenNs);
  w.i64(r.lastSeenNs);
  w.i64(r.latestStep);
  w.u8(r.ended ? 1 : 0);
  w.i64(r.endedStep);
  w.i64(s.groupsDeclaredNs);
  w.str(s.groups);
  w.str(r.gpuUuid);
}

ClickHouseStore::RankState readRank(RowReader& r) {
  ClickHouseStore::RankState s;
  RankRow& row = s.row;
  row.job = std::string(r.str());
  row.rank = r.u32();
  row.worldSize = r.u32();
  row.localRank = r.u32();
  row.host = std::string(r.str());
  row.node = std::string(r.str());
  row.pid = r.u32();
  row.probeVersion = std::string(r.str());
  row.firstSeenNs = r.i64();
  row.lastSeenNs = r.i64();
  row.latestStep = r.i64();
  row.ended = r.u8() != 0;
  row.endedStep = r.i64();
  s.groupsDeclaredNs = r.i64();
  s.groups = std::string(r.str());
  row.gpuUuid = std::string(r.str());
  return s;
}

void writeNode(RowWriter& w, const std::string& collector, const ClickHouseStore::NodeState& s) {
  const NodeRow& n = s.row;
  w.str(n.node);
  w.str(collector);
  w.str(n.host);
  w.str(n.agentVersion);
  w.u32(n.pid);
  w.i64(n.firstSeenNs);
  w.i64(n.lastSeenNs);
  w.i64(n.offsetNs);
  w.i64(n.rttNs);
  w.u64(n.spoolBytes);
  w.u64(n.spoolDropped);
  w.u32(n.ranks);
  w.i64(s.latestHostNs);
  w.nullStr(s.latestHost);
}

ClickHouseStore::NodeState readNode(RowReader& r) {
  ClickHouseStore::NodeState s;
  NodeRow& n = s.row;
  n.node = std::string(r.str());
  n.host = std::string(r.str());
  n.agentVersion = std::string(r.str());
  n.pid = r.u32();
  n.firstSeenNs = r.i64();
  n.lastSeenNs = r.i64();
  n.offsetNs = r.i64();
  n.rttNs = r.i64();
  n.spoolBytes = r.u64();
  n.spoolDropped = r.u64();
  n.ranks = r.u32();
  s.latestHostNs = r.i64();
  s.latestHost = r.nullStr();
  return s;
}

}  // namespace clickhouse

Result<std::unique_ptr<Store>> openClickHouseStore(const ClickHouseOptions& options) {
  auto store = ClickHouseStore::open(options);
  if (!store) return store.status();
  return std::unique_ptr<Store>(std::move(store.value()));
}

ClickHouseStore::ClickHouseStore(const ClickHouseOptions& options, Endpoint endpoint)
    : options_(options), endpoint_(std::move(endpoint)) {
  writer_ = std::make_unique<HttpClient>(endpoint_, std::chrono::milliseconds(options_.timeoutMs));
}

ClickHouseStore::~ClickHouseStore() = default;

Result<std::unique_ptr<ClickHouseStore>> ClickHouseStore::open(const ClickHouseOptions& options) {
  using R = Result<std::unique_ptr<ClickHouseStore>>;
  if (options.retentionNs < 0) {
    return R::error(StatusCode::kInvalidArgument,
                    "storage: retentionNs must be >= 0 (0 keeps everything)");
  }
  if (options.partitionNs < 0) {
    return R::error(StatusCode::kInvalidArgument,
                    "storage: partitionNs must be >= 0 (0 picks it from the retention)");
  }
  if (options.timeoutMs <= 0) {
    return R::error(StatusCode::kInvalidArgument, "storage: timeoutMs must be > 0");
  }
  auto url = parseStoreUrl(options.url);
  if (!url) return R::error(url.code(), "storage: " + url.message());
  Endpoint primary = url->servers.front();
  // On a cluster, inserts through a Distributed table return once every shard has its rows
  // (not later, from a background queue): an ack then means the rows are stored.
  if (!url->cluster.empty()) primary.settings = "insert_distributed_sync=1";
  std::unique_ptr<ClickHouseStore> store(new ClickHouseStore(options, primary));
  store->cluster_ = url->cluster;
  store->collector_ = options.collector;
  store->serverEndpoints_ = url->servers;
  {
    MutexLock lock(&store->writeMu_);  // no other thread has the store yet: for the analysis
    for (const auto& server : url->servers) {
      store->servers_.push_back(
          std::make_unique<HttpClient>(server, std::chrono::milliseconds(options.timeoutMs)));
    }
  }
  if (auto s = store->createSchema(); !s) return s;
  if (auto s = store->loadState(); !s) return s;
  return store;
}

std::string ClickHouseStore::createSql(const char* table, bool local) const {
  for (const Table& t : kSchema) {
    if (std::string_view(t.name) != table) continue;
    std::string text =
        std::string("CREATE TABLE IF NOT EXISTS ") + t.name + (local ? "_local " : " ") + t.columns;
    for (size_t at; (at = text.find("{P}")) != std::string::npos;) {
      text.replace(at, 3, std::to_string(partitionNs_));
    }
    return text;
  }
  return {};
}

Status ClickHouseStore::onEveryServer(const std::string& sql, const std::string& what) {
  for (auto& server : servers_) {
    auto done = server->query(sql);
    if (!done) return Status::error(done.code(), "storage: " + what + ": " + done.message());
  }
  return Status::ok();
}

Status ClickHouseStore::createSchema() {
  MutexLock lock(&writeMu_);
  for (auto& server : servers_) {
    auto created = server->query("CREATE DATABASE IF NOT EXISTS " + endpoint_.database, {}, false);
    if (!created) return Status::error(created.code(), "storage: " + created.message());
  }
  if (!cluster_.empty()) {
    auto shards =
        writer_->query("SELECT count() FROM system.clusters WHERE cluster = " + quote(cluster_) +
                       " FORMAT TabSeparated");
    if (!shards) return Status::error(shards.code(), "storage: " + shards.message());
    const size_t n = std::stoul(*shards);
    if (n != servers_.size()) {
      return Status::error(StatusCode::kInvalidArgument,
                           "storage: cluster " + cluster_ + " has " + std::to_string(n) +
                               " shards in the servers' remote_servers, the URL lists " +
                               std::to_string(servers_.size()) +
                               " servers (one HTTP endpoint per shard, in that order)");
    }
  }
  // The partition length and schema version are the ones the tables were made with, when they
  // exist (no meta table yet reads as nothing stored).
  auto storedMeta = [&](const char* key) REQUIRES(writeMu_) {
    auto v = writer_->query(std::string("SELECT value FROM meta FINAL WHERE key = '") + key +
                            "' FORMAT TabSeparated");
    return v ? *v : std::string();
  };
  const std::string stored = storedMeta("partition_ns");
  partitionNs_ = !stored.empty()             ? std::stoll(stored)
                 : options_.partitionNs != 0 ? options_.partitionNs
                                             : defaultPartitionNs(options_.retentionNs);
  const std::string storedVersion = storedMeta("schema_version");
  if (!storedVersion.empty() && std::stoi(storedVersion) > kSchemaVersion) {
    return Status::error(StatusCode::kUnsupported, "storage: database " + endpoint_.database +
                                                       " has schema version " +
                                                       std::to_string(std::stoi(storedVersion)) +
                                                       ", newer than this collector knows (" +
                                                       std::to_string(kSchemaVersion) + ")");
  }
  if (!storedVersion.empty() && std::stoi(storedVersion) == 1) {
    for (const char* sql : kMigrateV1) {
      std::string text(sql);
      if (text == "{CREATE jobs}") text = createSql("jobs", false);
      if (text == "{CREATE nodes}") text = createSql("nodes", false);
      auto done = writer_->query(text);
      if (!done) {
        return Status::error(done.code(),
                             "storage: moving schema version 1 to 2: " + done.message());
      }
    }
    logInfo(kComponent, "ClickHouse store: schema version 1 moved to 2 (per-collector rows)");
  }
  for (const Table& t : kSchema) {
    const bool sharded = !cluster_.empty() && t.shardKey != nullptr;
    if (auto st = onEveryServer(createSql(t.name, sharded), "creating tables"); !st) return st;
    if (!sharded) continue;
    const std::string distributed = std::string("CREATE TABLE IF NOT EXISTS ") + t.name + " AS " +
                                    t.name + "_local ENGINE = Distributed(" + cluster_ + ", " +
                                    endpoint_.database + ", " + t.name + "_local, " + "sipHash64(" +
                                    t.shardKey + "))";
    if (auto st = onEveryServer(distributed, "creating tables"); !st) return st;
  }
  // Columns added after a table's first version: a database made before them gains them here
  // (ClickHouse adds a column as metadata; old parts read it as its default). The server this
  // runs against predates ADD COLUMN IF NOT EXISTS, so each table is asked first.
  for (const auto& [table, column, type] : kAddedColumns) {
    const Table* t = nullptr;
    for (const Table& candidate : kSchema) {
      if (std::string_view(candidate.name) == table) t = &candidate;
    }
    const bool sharded = t != nullptr && !cluster_.empty() && t->shardKey != nullptr;
    std::vector<std::string> names = {std::string(table) + (sharded ? "_local" : "")};
    if (sharded) names.emplace_back(table);  // the Distributed table's columns too
    for (auto& server : servers_) {
      for (const auto& name : names) {
        auto has = server->query("SELECT count() FROM system.columns WHERE database = " +
                                 quote(endpoint_.database) + " AND table = " + quote(name) +
                                 " AND name = " + quote(column) + " FORMAT TabSeparated");
        if (!has) return Status::error(has.code(), "storage: adding columns: " + has.message());
        if (!has->empty() && has->front() != '0') continue;
        auto added = server->query("ALTER TABLE " + name + " ADD COLUMN " + column + " " + type);
        if (!added) {
          return Status::error(added.code(), "storage: adding columns: " + added.message());
        }
      }
    }
  }
  if (stored.empty() || storedVersion != std::to_string(kSchemaVersion)) {
    RowWriter w;
    const std::vector<std::pair<std::string, std::string>> meta = {
        {"schema_version", std::to_string(kSchemaVersion)},
        {"partition_ns", std::to_string(partitionNs_)}};
    for (const auto& [key, value] : meta) {
      w.str(key);
      w.str(value);
      w.u64(static_cast<uint64_t>(kSchemaVersion));  // a newer schema's row wins
    }
    for (auto& server : servers_) {
      auto done =
          server->query("INSERT INTO meta (key, value, version) FORMAT RowBinary", w.data());
      if (!done) return Status::error(done.code(), "storage: " + done.message());
    }
  }
  logInfo(kComponent, "ClickHouse store at " + endpoint_.host + ':' + endpoint_.port + '/' +
                          endpoint_.database +
                          (cluster_.empty() ? std::string()
                                            : " (cluster " + cluster_ + ", " +
                                                  std::to_string(servers_.size()) + " shards)") +
                          " as collector '" + collector_ + "' (partitions of " +
                          std::to_string(partitionNs_ / kHourNs) + " h)");
  return Status::ok();
}

Status ClickHouseStore::loadState() {
  MutexLock lock(&writeMu_);
  // This collector's own rows of jobs and nodes; the ranks of every job (jobs the writer has
  // not touched for a while are read again: takeOverLocked).
  auto jobs = writer_->query(std::string("SELECT ") + kJobColumns + ", collector, version" +
                             " FROM jobs FINAL FORMAT RowBinary");
  if (!jobs) return Status::error(jobs.code(), "storage: loading jobs: " + jobs.message());
  uint64_t rows = 0;
  for (RowReader r(*jobs); !r.atEnd();) {
    auto [name, state] = readJob(r);
    const std::string_view collector = r.str();
    lastVersion_ = std::max(lastVersion_, r.u64());
    if (r.failed()) return Status::error(StatusCode::kMalformed, "storage: jobs do not decode");
    rows += state.stepRows;  // every collector's: the step rows in the database
    if (collector == collector_) jobs_[name] = state;
  }
  stepRows_ = rows;
  auto ranks = writer_->query(std::string("SELECT ") + kRankColumns +
                              ", version FROM ranks FINAL FORMAT RowBinary");
  if (!ranks) return Status::error(ranks.code(), "storage: loading ranks: " + ranks.message());
  for (RowReader r(*ranks); !r.atEnd();) {
    auto state = readRank(r);
    lastVersion_ = std::max(lastVersion_, r.u64());
    if (r.failed()) return Status::error(StatusCode::kMalformed, "storage: ranks do not decode");
    RankKey key{state.row.job, state.row.rank};
    ranks_[key] = std::move(state);
  }
  auto nodes = writer_->query(std::string("SELECT ") + kNodeColumns +
                              ", version FROM nodes FINAL WHERE collector = " + quote(collector_) +
                              " FORMAT RowBinary");
  if (!nodes) return Status::error(nodes.code(), "storage: loading nodes: " + nodes.message());
  for (RowReader r(*nodes); !r.atEnd();) {
    auto state = readNode(r);
    lastVersion_ = std::max(lastVersion_, r.u64());
    if (r.failed()) return Status::error(StatusCode::kMalformed, "storage: nodes do not decode");
    std::string name = state.row.node;
    nodes_[name] = std::move(state);
  }
  // What was loaded of jobs long idle goes again at once (a write reads it back).
  forgetIdleJobsLocked(wallNowNs());
  return Status::ok();
}

uint64_t ClickHouseStore::nextVersionLocked() {
  // Wall-clock nanoseconds, forced to grow: a later write always wins over an earlier one,
  // also after a restart (unless the clock went back further than the last run wrote).
  lastVersion_ =
      std::max(lastVersion_ + 1, static_cast<uint64_t>(std::max<int64_t>(wallNowNs(), 0)));
  return lastVersion_;
}

std::unique_ptr<HttpClient> ClickHouseStore::lease() {
  {
    MutexLock lock(&poolMu_);
    if (!idle_.empty()) {
      auto client = std::move(idle_.back());
      idle_.pop_back();
      return client;
    }
  }
  return std::make_unique<HttpClient>(endpoint_, std::chrono::milliseconds(options_.timeoutMs));
}

void ClickHouseStore::giveBack(std::unique_ptr<HttpClient> client) {
  MutexLock lock(&poolMu_);
  if (idle_.size() < 8) idle_.push_back(std::move(client));
}

Result<std::string> ClickHouseStore::read(const std::string& sql) {
  auto client = lease();
  auto out = client->query(sql);
  giveBack(std::move(client));
  if (!out) return Result<std::string>::error(out.code(), "storage: " + out.message());
  return out;
}

Status ClickHouseStore::write(const WriteBatch& batch) {
  if (batch.empty()) return Status::ok();
  MutexLock lock(&writeMu_);
  const int64_t now = batch.receivedNs != 0 ? batch.receivedNs : wallNowNs();
  if (auto st = takeOverLocked(batch, now); !st) return st;

  // The batch's changes, applied to copies of the rows they touch; kept only once the step
  // and host rows are stored.
  std::map<std::string, JobState> touchedJobs;
  std::map<RankKey, RankState> touchedRanks;
  std::map<std::string, NodeState> touchedNodes;
  auto job = [&](const std::string& name) REQUIRES(writeMu_) -> JobState& {
    auto it = touchedJobs.find(name);
    if (it != touchedJobs.end()) return it->second;
    auto stored = jobs_.find(name);
    JobState fresh;
    fresh.firstSeenNs = fresh.lastSeenNs = now;
    return touchedJobs.emplace(name, stored != jobs_.end() ? stored->second : fresh).first->second;
  };
  // Returns the rank's row and whether it was stored before this batch touched it.
  auto rank = [&](const std::string& jobName, uint32_t r)
                  REQUIRES(writeMu_) -> std::pair<RankState&, bool> {
    job(jobName);  // a rank's job exists before it
    RankKey key{jobName, r};
    auto it = touchedRanks.find(key);
    if (it != touchedRanks.end()) return {it->second, true};
    auto stored = ranks_.find(key);
    if (stored != ranks_.end())
      return {touchedRanks.emplace(key, stored->second).first->second, true};
    RankState fresh;
    fresh.row.job = jobName;
    fresh.row.rank = r;
    fresh.row.firstSeenNs = fresh.row.lastSeenNs = now;
    return {touchedRanks.emplace(key, std::move(fresh)).first->second, false};
  };
  auto node = [&](const std::string& name, int64_t seenNs)
                  REQUIRES(writeMu_) -> std::pair<NodeState&, bool> {
    auto it = touchedNodes.find(name);
    if (it != touchedNodes.end()) return {it->second, true};
    auto stored = nodes_.find(name);
    if (stored != nodes_.end())
      return {touchedNodes.emplace(name, stored->second).first->second, true};
    NodeState fresh;
    fresh.row.node = name;
    fresh.row.firstSeenNs = fresh.row.lastSeenNs = seenNs;
    return {touchedNodes.emplace(name, std::move(fresh)).first->second, false};
  };

  // Registrations: the same rules as SQLite's upsert (a new pid means the rank restarted).
  for (const auto& info : batch.ranks) {
    auto [state, existed] = rank(info.job(), info.rank());
    RankRow& r = state.row;
    r.worldSize = info.world_size();
    r.localRank = info.local_rank();
    r.host = info.host();
    if (!existed || !info.node().empty()) r.node = info.node();
    if (existed && r.pid != info.pid()) {
      r.ended = false;
      r.endedStep = -1;
    }
    r.pid = info.pid();
    r.probeVersion = info.probe_version();
    r.gpuUuid = info.gpu_uuid();
    r.lastSeenNs = std::max(r.lastSeenNs, now);
    JobState& j = job(info.job());
    j.worldSize = info.world_size();
    j.lastSeenNs = std::max(j.lastSeenNs, now);
  }

  // Step reports: only keys not stored yet, the first of a key within the batch.
  using StepKey = std::tuple<std::string_view, int64_t, uint32_t>;
  std::set<StepKey> stored;
  {
    std::map<std::string_view, std::pair<int64_t, int64_t>> spans;  // job -> step range
    for (const auto& report : batch.steps) {
      auto [it, fresh] = spans.try_emplace(report.job(), report.step(), report.step());
      if (!fresh) {
        it->second.first = std::min(it->second.first, report.step());
        it->second.second = std::max(it->second.second, report.step());
      }
    }
    std::vector<std::string> terms;
    terms.reserve(spans.size());
    for (const auto& [name, span] : spans) {
      terms.push_back("(job = " + quote(name) + " AND step BETWEEN " + std::to_string(span.first) +
                      " AND " + std::to_string(span.second) + ')');
    }
    for (const auto& where : chunkTerms(terms, " OR ")) {
      auto keys =
          writer_->query("SELECT job, step, rank FROM steps WHERE " + where + " FORMAT RowBinary");
      if (!keys) return Status::error(keys.code(), "storage: " + keys.message());
      for (RowReader r(*keys); !r.atEnd();) {
        std::string_view name = r.str();
        int64_t step = r.i64();
        uint32_t rk = r.u32();
        if (r.failed()) return Status::error(StatusCode::kMalformed, "storage: step keys");
        // Views into the batch's job strings, which outlive `stored`.
        auto span = spans.find(name);
        if (span != spans.end()) stored.emplace(span->first, step, rk);
      }
    }
  }
  RowWriter stepRows;
  uint64_t inserted = 0;
  uint64_t duplicates = 0;
  std::string detail;
  std::map<std::string_view, std::pair<int64_t, uint64_t>> jobAgg;  // latest step, inserted
  std::map<std::pair<std::string_view, uint32_t>, int64_t> rankLatest;
  for (size_t i = 0; i < batch.steps.size(); ++i) {
    const auto& report = batch.steps[i];
    auto [agg, freshJob] = jobAgg.try_emplace(report.job(), report.step(), 0);
    if (!freshJob) agg->second.first = std::max(agg->second.first, report.step());
    auto [latest, freshRank] = rankLatest.try_emplace({report.job(), report.rank()}, report.step());
    if (!freshRank) latest->second = std::max(latest->second, report.step());
    if (!stored.emplace(agg->first, report.step(), report.rank()).second) {
      ++duplicates;
      continue;
    }
    const std::string_view blob = stepDetail(batch, i, &detail);
    stepRows.str(report.job());
    stepRows.u32(report.rank());
    stepRows.i64(report.step());
    stepRows.i64(report.start_ns());
    stepRows.i64(report.end_ns());
    stepRows.i64(report.duration_ns());
    stepRows.i64(report.compute_ns());
    stepRows.i64(report.comm_ns());
    stepRows.i64(report.exposed_comm_ns());
    stepRows.i64(report.data_ns());
    stepRows.u64(report.records());
    stepRows.u64(report.dropped());
    stepRows.i64(now);
    stepRows.str(blob);
    ++agg->second.second;
    ++inserted;
  }
  for (const auto& [key, latestStep] : rankLatest) {
    RankRow& r = rank(std::string(key.first), key.second).first.row;
    r.lastSeenNs = std::max(r.lastSeenNs, now);
    r.latestStep = std::max(r.latestStep, latestStep);
  }
  for (const auto& [name, agg] : jobAgg) {
    JobState& j = job(std::string(name));
    j.lastSeenNs = std::max(j.lastSeenNs, now);
    j.latestStep = std::max(j.latestStep, agg.first);
    j.stepRows += agg.second;
  }

  // Declared groups: only a later declaration replaces the stored set.
  for (const auto& update : batch.groups) {
    auto [state, existed] = rank(update.job, update.groups.rank);
    if (existed && update.groups.declaredNs <= state.groupsDeclaredNs) continue;
    wire::RankHello holder;
    for (const auto& g : update.groups.groups) *holder.add_groups() = g;
    state.groups = holder.SerializeAsString();
    state.groupsDeclaredNs = update.groups.declaredNs;
  }

  for (const auto& bye : batch.goodbyes) {
    RankRow& r = rank(bye.job(), bye.rank()).first.row;
    r.ended = true;
    r.endedStep = bye.last_step();
    r.lastSeenNs = std::max(r.lastSeenNs, now);
  }

  RowWriter hostRows;
  std::map<std::string, const wire::HostSample*> latestHost;
  for (const auto& host : batch.hosts) {
    hostRows.str(host.node());
    hostRows.i64(host.time_ns());
    hostRows.i64(now);
    hostRows.str(host.SerializeAsString());
    auto& slot = latestHost[host.node()];
    if (slot == nullptr || slot->time_ns() <= host.time_ns()) slot = &host;
  }
  for (const auto& [name, host] : latestHost) {
    auto [state, existed] = node(name, now);
    if (existed && host->time_ns() < state.latestHostNs) continue;
    state.latestHostNs = host->time_ns();
    state.latestHost = host->SerializeAsString();
  }

  // Hello and heartbeat each carry part of a node's state: keep what this update lacks.
  for (const auto& update : batch.nodes) {
    const int64_t seen = update.seenNs != 0 ? update.seenNs : now;
    auto [state, existed] = node(update.node, seen);
    NodeRow& n = state.row;
    if (!existed || !update.host.empty()) n.host = update.host;
    if (!existed || !update.agentVersion.empty()) n.agentVersion = update.agentVersion;
    if (!existed || update.pid != 0) n.pid = update.pid;
    n.lastSeenNs = std::max(n.lastSeenNs, seen);
    if (!existed || update.hasClock) {
      n.offsetNs = update.offsetNs;
      n.rttNs = update.rttNs;
      n.spoolBytes = update.spoolBytes;
      n.spoolDropped = update.spoolDropped;
      n.ranks = update.ranks;
    }
  }

  // Host samples, then steps: a failure here stores nothing of the batch that a resend would
  // not store again (both tables absorb a repeated row by its key).
  if (!hostRows.empty()) {
    auto done = writer_->query(insertSql("host_samples", kHostColumns, false), hostRows.data());
    if (!done)
      return Status::error(done.code(), "storage: storing host samples: " + done.message());
  }
  if (!stepRows.empty()) {
    auto done = writer_->query(insertSql("steps", kStepColumns, false), stepRows.data());
    if (!done) return Status::error(done.code(), "storage: storing steps: " + done.message());
  }
  for (auto& [name, state] : touchedJobs) {
    jobs_[name] = state;
    dirtyJobs_.insert(name);
  }
  for (auto& [key, state] : touchedRanks) {
    ranks_[key] = std::move(state);
    dirtyRanks_.insert(key);
  }
  for (auto& [name, state] : touchedNodes) {
    nodes_[name] = std::move(state);
    dirtyNodes_.insert(name);
  }
  stepRows_ += inserted;
  duplicates_ += duplicates;
  if (auto s = flushStateLocked(); !s) return s;
  ++transactions_;
  forgetIdleJobsLocked(now);
  return Status::ok();
}

void ClickHouseStore::forgetIdleJobsLocked(int64_t now) {
  constexpr int64_t kMinuteNs = 60'000'000'000;
  if (lastForgetNs_ != 0 && now >= lastForgetNs_ && now - lastForgetNs_ < kMinuteNs) return;
  lastForgetNs_ = now;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const bool idle = now - it->second.lastSeenNs > kForgetJobNs;
    it = idle && dirtyJobs_.count(it->first) == 0 ? jobs_.erase(it) : std::next(it);
  }
  // Ranks of jobs not held (forgotten above, or another collector's, loaded at open): a write
  // of such a job reads its ranks again first.
  for (auto it = ranks_.begin(); it != ranks_.end();) {
    const bool held = jobs_.count(it->first.first) != 0;
    it = !held && dirtyRanks_.count(it->first) == 0 ? ranks_.erase(it) : std::next(it);
  }
}

Status ClickHouseStore::restoreJobsLocked(const std::vector<std::string>& names) {
  std::vector<std::string> notHeld;
  for (const auto& name : names) {
    if (jobs_.find(name) == jobs_.end()) notHeld.push_back(quote(name));
  }
  for (const auto& in : chunkTerms(notHeld, ", ")) {
    auto rows =
        writer_->query(std::string("SELECT ") + kJobColumns + " FROM jobs FINAL WHERE job IN (" +
                       in + ") AND collector = " + quote(collector_) + " FORMAT RowBinary");
    if (!rows) return Status::error(rows.code(), "storage: reading jobs: " + rows.message());
    for (RowReader r(*rows); !r.atEnd();) {
      auto [name, state] = readJob(r);
      if (r.failed()) return Status::error(StatusCode::kMalformed, "storage: jobs do not decode");
      jobs_.emplace(std::move(name), state);
    }
  }
  return Status::ok();
}

std::pair<size_t, size_t> ClickHouseStore::heldInMemory() {
  MutexLock lock(&writeMu_);
  return {jobs_.size(), ranks_.size()};
}

Status ClickHouseStore::takeOverLocked(const WriteBatch& batch, int64_t now) {
  // Another collector may have written a job this one did not store for a while (it owned the
  // job meanwhile). Its ranks are read before the batch is applied to them, so a rank's
  // first-seen time, registration and end are not overwritten with this collector's old view.
  // And the job's row count is taken from the rows themselves: a collector killed between its
  // step insert and its jobs insert stored rows it never counted, which the replay here finds
  // stored (duplicates) and does not count either. This collector's own count becomes what the
  // table holds minus what the others counted (modulo 2^64, like the sum in jobs()).
  std::set<std::string_view> stale;
  auto check = [&](const std::string& job) REQUIRES(writeMu_) {
    auto it = jobs_.find(job);
    if (it == jobs_.end() || now - it->second.lastSeenNs > kOwnerGapNs) stale.insert(job);
  };
  for (const auto& r : batch.steps) check(r.job());
  for (const auto& r : batch.ranks) check(r.job());
  for (const auto& r : batch.goodbyes) check(r.job());
  for (const auto& g : batch.groups) check(g.job);
  if (stale.empty()) return Status::ok();
  std::vector<std::string> quoted;
  quoted.reserve(stale.size());
  for (std::string_view job : stale) quoted.push_back(quote(job));
  std::map<std::string, int64_t, std::less<>> own;
  for (std::string_view job : stale) own[std::string(job)] = 0;
  {
    std::vector<std::string> names(stale.begin(), stale.end());
    if (auto st = restoreJobsLocked(names); !st) return st;
  }
  for (const auto& in : chunkTerms(quoted, ", ")) {
    auto rows = writer_->query(std::string("SELECT ") + kRankColumns +
                               " FROM ranks FINAL WHERE job IN (" + in + ") FORMAT RowBinary");
    if (!rows) return Status::error(rows.code(), "storage: reading ranks: " + rows.message());
    for (RowReader r(*rows); !r.atEnd();) {
      auto state = readRank(r);
      if (r.failed()) return Status::error(StatusCode::kMalformed, "storage: ranks do not decode");
      RankKey key{state.row.job, state.row.rank};
      ranks_[key] = std::move(state);
    }
    // Raw rows, not FINAL: a copy not merged yet (an insert repeated after a lost reply) counts
    // twice until the merge, the price of not reading every row of a large job here.
    auto stored = writer_->query("SELECT job, toInt64(count()) FROM steps WHERE job IN (" + in +
                                 ") GROUP BY job FORMAT RowBinary");
    auto counted = writer_->query(
        "SELECT job, toInt64(sum(step_rows)) FROM jobs FINAL WHERE job IN (" + in +
        ") AND collector != " + quote(collector_) + " GROUP BY job FORMAT RowBinary");
    if (!stored) {
      return Status::error(stored.code(), "storage: counting steps: " + stored.message());
    }
    if (!counted) {
      return Status::error(counted.code(), "storage: counting steps: " + counted.message());
    }
    for (const auto* result : {&*stored, &*counted}) {
      const int64_t sign = result == &*stored ? 1 : -1;
      for (RowReader r(*result); !r.atEnd();) {
        std::string_view job = r.str();
        const int64_t n = r.i64();
        if (r.failed()) return Status::error(StatusCode::kMalformed, "storage: step counts");
        if (auto it = own.find(job); it != own.end()) it->second += sign * n;
      }
    }
  }
  for (const auto& [job, rows] : own) {
    auto [it, fresh] = jobs_.try_emplace(job);
    if (fresh) it->second.firstSeenNs = it->second.lastSeenNs = now;
    it->second.stepRows = static_cast<uint64_t>(rows);
    dirtyJobs_.insert(job);
  }
  return Status::ok();
}

Status ClickHouseStore::flushStateLocked() {
  if (!dirtyRanks_.empty()) {
    RowWriter w;
    const uint64_t version = nextVersionLocked();
    for (const auto& key : dirtyRanks_) {
      writeRank(w, ranks_.at(key));
      w.u64(version);
    }
    auto done = writer_->query(insertSql("ranks", kRankColumns, true), w.data());
    if (!done) return Status::error(done.code(), "storage: storing ranks: " + done.message());
    dirtyRanks_.clear();
  }
  if (!dirtyJobs_.empty()) {
    RowWriter w;
    const uint64_t version = nextVersionLocked();
    for (const auto& name : dirtyJobs_) {
      writeJob(w, name, collector_, jobs_.at(name));
      w.u64(version);
    }
    auto done = writer_->query(insertSql("jobs", kJobColumnsCollector, true), w.data());
    if (!done) return Status::error(done.code(), "storage: storing jobs: " + done.message());
    dirtyJobs_.clear();
  }
  if (!dirtyNodes_.empty()) {
    RowWriter w;
    const uint64_t version = nextVersionLocked();
    for (const auto& name : dirtyNodes_) {
      writeNode(w, collector_, nodes_.at(name));
      w.u64(version);
    }
    auto done = writer_->query(insertSql("nodes", kNodeColumnsCollector, true), w.data());
    if (!done) return Status::error(done.code(), "storage: storing nodes: " + done.message());
    dirtyNodes_.clear();
  }
  return Status::ok();
}

}  // namespace trainscope::storage
