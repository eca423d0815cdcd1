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

// The tables (ClickHouseStore's header says why they look like this). `{P}` is the partition
// length in nanoseconds.
constexpr const char* kSchema[] = {
    "CREATE TABLE IF NOT EXISTS meta (key String, value String, version UInt64)"
    " ENGINE = ReplacingMergeTree(version) ORDER BY key",
    "CREATE TABLE IF NOT EXISTS steps (job String, rank UInt32, step Int64, start_ns Int64,"
    " end_ns Int64, duration_ns Int64, compute_ns Int64, comm_ns Int64, exposed_comm_ns Int64,"
    " data_ns Int64, records UInt64, dropped UInt64, received_ns Int64, detail String)"
    " ENGINE = ReplacingMergeTree() PARTITION BY intDiv(received_ns, {P})"
    " ORDER BY (job, step, rank)",
    "CREATE TABLE IF NOT EXISTS host_samples (node String, time_ns Int64, received_ns Int64,"
    " sample String) ENGINE = ReplacingMergeTree() PARTITION BY intDiv(received_ns, {P})"
    " ORDER BY (node, time_ns)",
    "CREATE TABLE IF NOT EXISTS jobs (job String, world_size UInt32, first_seen_ns Int64,"
    " last_seen_ns Int64, latest_step Int64, step_rows UInt64, version UInt64)"
    " ENGINE = ReplacingMergeTree(version) ORDER BY job",
    "CREATE TABLE IF NOT EXISTS ranks (job String, rank UInt32, world_size UInt32,"
    " local_rank UInt32, host String, node String, pid UInt32, probe_version String,"
    " first_seen_ns Int64, last_seen_ns Int64, latest_step Int64, ended UInt8, ended_step Int64,"
    " groups_declared_ns Int64, groups String, version UInt64)"
    " ENGINE = ReplacingMergeTree(version) ORDER BY (job, rank)",
    "CREATE TABLE IF NOT EXISTS nodes (name String, host String, agent_version String,"
    " pid UInt32, first_seen_ns Int64, last_seen_ns Int64, offset_ns Int64, rtt_ns Int64,"
    " spool_bytes UInt64, spool_dropped UInt64, ranks UInt32, latest_host_ns Int64,"
    " latest_host Nullable(String), version UInt64)"
    " ENGINE = ReplacingMergeTree(version) ORDER BY name",
    "CREATE TABLE IF NOT EXISTS anomalies (id String, job String, kind String, ranks String,"
    " nodes String, onset_step Int64, detected_step Int64, detected_ns Int64, magnitude Float64,"
    " confidence Float64, evidence String, labels String, state String, resolved_step Int64,"
    " resolved_ns Int64, summary String, capture_id Nullable(String), updated_ns Int64,"
    " version UInt64) ENGINE = ReplacingMergeTree(version) ORDER BY (job, id)",
    "CREATE TABLE IF NOT EXISTS captures (id String, job String, kind String, state String,"
    " reason String, anomaly_id Nullable(String), ranks String, start_step Int64, steps UInt32,"
    " history UInt32, max_bytes UInt64, created_ns Int64, updated_ns Int64,"
    " finished_ns Nullable(Int64), deadline_ns Int64, trace_bytes Nullable(Int64),"
    " summary String, rank_status String, version UInt64)"
    " ENGINE = ReplacingMergeTree(version) ORDER BY (job, id)",
};

int64_t defaultPartitionNs(int64_t retentionNs) {
  if (retentionNs == 0) return kDayNs;
  return std::clamp(retentionNs / 7 / kHourNs * kHourNs, kHourNs, kDayNs);
}

}  // namespace

namespace clickhouse {

void writeJob(RowWriter& w, const std::string& job, const ClickHouseStore::JobState& s) {
  w.str(job);
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
  return s;
}

void writeNode(RowWriter& w, const ClickHouseStore::NodeState& s) {
  const NodeRow& n = s.row;
  w.str(n.node);
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
  auto endpoint = parseUrl(options.url);
  if (!endpoint) return R::error(endpoint.code(), "storage: " + endpoint.message());
  std::unique_ptr<ClickHouseStore> store(new ClickHouseStore(options, std::move(*endpoint)));
  if (auto s = store->createSchema(); !s) return s;
  if (auto s = store->loadState(); !s) return s;
  return store;
}

Status ClickHouseStore::createSchema() {
  std::lock_guard lock(writeMu_);
  auto created = writer_->query("CREATE DATABASE IF NOT EXISTS " + endpoint_.database, {}, false);
  if (!created) return Status::error(created.code(), "storage: " + created.message());
  // The partition length is the one the tables were made with, when they exist.
  auto stored =
      writer_->query("SELECT value FROM meta FINAL WHERE key = 'partition_ns' FORMAT TabSeparated");
  if (stored && !stored->empty()) {
    partitionNs_ = std::stoll(*stored);
  } else {
    partitionNs_ =
        options_.partitionNs != 0 ? options_.partitionNs : defaultPartitionNs(options_.retentionNs);
  }
  for (const char* sql : kSchema) {
    std::string text(sql);
    for (size_t at; (at = text.find("{P}")) != std::string::npos;) {
      text.replace(at, 3, std::to_string(partitionNs_));
    }
    auto done = writer_->query(text);
    if (!done) return Status::error(done.code(), "storage: creating tables: " + done.message());
  }
  if (!stored || stored->empty()) {
    RowWriter w;
    const std::vector<std::pair<std::string, std::string>> meta = {
        {"schema_version", std::to_string(kSchemaVersion)},
        {"partition_ns", std::to_string(partitionNs_)}};
    for (const auto& [key, value] : meta) {
      w.str(key);
      w.str(value);
      w.u64(1);
    }
    auto done = writer_->query("INSERT INTO meta (key, value, version) FORMAT RowBinary", w.data());
    if (!done) return Status::error(done.code(), "storage: " + done.message());
  }
  auto version = writer_->query(
      "SELECT value FROM meta FINAL WHERE key = 'schema_version' FORMAT TabSeparated");
  if (!version) return Status::error(version.code(), "storage: " + version.message());
  if (!version->empty() && std::stoi(*version) > kSchemaVersion) {
    return Status::error(StatusCode::kUnsupported, "storage: database " + endpoint_.database +
                                                       " has schema version " +
                                                       std::to_string(std::stoi(*version)) +
                                                       ", newer than this collector knows (" +
                                                       std::to_string(kSchemaVersion) + ")");
  }
  logInfo(kComponent, "ClickHouse store at " + endpoint_.host + ':' + endpoint_.port + '/' +
                          endpoint_.database + " (partitions of " +
                          std::to_string(partitionNs_ / kHourNs) + " h)");
  return Status::ok();
}

Status ClickHouseStore::loadState() {
  std::lock_guard lock(writeMu_);
  auto jobs = writer_->query(std::string("SELECT ") + kJobColumns + ", version FROM jobs FINAL" +
                             " FORMAT RowBinary");
  if (!jobs) return Status::error(jobs.code(), "storage: loading jobs: " + jobs.message());
  uint64_t rows = 0;
  for (RowReader r(*jobs); !r.atEnd();) {
    auto [name, state] = readJob(r);
    lastVersion_ = std::max(lastVersion_, r.u64());
    if (r.failed()) return Status::error(StatusCode::kMalformed, "storage: jobs do not decode");
    rows += state.stepRows;
    jobs_[name] = state;
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
                              ", version FROM nodes FINAL FORMAT RowBinary");
  if (!nodes) return Status::error(nodes.code(), "storage: loading nodes: " + nodes.message());
  for (RowReader r(*nodes); !r.atEnd();) {
    auto state = readNode(r);
    lastVersion_ = std::max(lastVersion_, r.u64());
    if (r.failed()) return Status::error(StatusCode::kMalformed, "storage: nodes do not decode");
    std::string name = state.row.node;
    nodes_[name] = std::move(state);
  }
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
    std::lock_guard lock(poolMu_);
    if (!idle_.empty()) {
      auto client = std::move(idle_.back());
      idle_.pop_back();
      return client;
    }
  }
  return std::make_unique<HttpClient>(endpoint_, std::chrono::milliseconds(options_.timeoutMs));
}

void ClickHouseStore::giveBack(std::unique_ptr<HttpClient> client) {
  std::lock_guard lock(poolMu_);
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
  std::lock_guard lock(writeMu_);
  const int64_t now = batch.receivedNs != 0 ? batch.receivedNs : wallNowNs();

  // The batch's changes, applied to copies of the rows they touch; kept only once the step
  // and host rows are stored.
  std::map<std::string, JobState> touchedJobs;
  std::map<RankKey, RankState> touchedRanks;
  std::map<std::string, NodeState> touchedNodes;
  auto job = [&](const std::string& name) -> JobState& {
    auto it = touchedJobs.find(name);
    if (it != touchedJobs.end()) return it->second;
    auto stored = jobs_.find(name);
    JobState fresh;
    fresh.firstSeenNs = fresh.lastSeenNs = now;
    return touchedJobs.emplace(name, stored != jobs_.end() ? stored->second : fresh).first->second;
  };
  // Returns the rank's row and whether it was stored before this batch touched it.
  auto rank = [&](const std::string& jobName, uint32_t r) -> std::pair<RankState&, bool> {
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
  auto node = [&](const std::string& name, int64_t seenNs) -> std::pair<NodeState&, bool> {
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
    std::string where;
    for (const auto& [name, span] : spans) {
      if (!where.empty()) where += " OR ";
      where += "(job = " + quote(name) + " AND step BETWEEN " + std::to_string(span.first) +
               " AND " + std::to_string(span.second) + ')';
    }
    if (!where.empty()) {
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
      writeJob(w, name, jobs_.at(name));
      w.u64(version);
    }
    auto done = writer_->query(insertSql("jobs", kJobColumns, true), w.data());
    if (!done) return Status::error(done.code(), "storage: storing jobs: " + done.message());
    dirtyJobs_.clear();
  }
  if (!dirtyNodes_.empty()) {
    RowWriter w;
    const uint64_t version = nextVersionLocked();
    for (const auto& name : dirtyNodes_) {
      writeNode(w, nodes_.at(name));
      w.u64(version);
    }
    auto done = writer_->query(insertSql("nodes", kNodeColumns, true), w.data());
    if (!done) return Status::error(done.code(), "storage: storing nodes: " + done.message());
    dirtyNodes_.clear();
  }
  return Status::ok();
}

}  // namespace trainscope::storage
