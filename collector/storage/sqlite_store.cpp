#include "collector/storage/sqlite_store.h"

#include <filesystem>
#include <map>
#include <string_view>
#include <utility>

#include <sqlite3.h>

#include "collector/storage/sqlite_internal.h"
#include "collector/storage/store_rows.h"
#include "common/clock.h"
#include "common/log.h"

namespace trainscope::storage {
namespace {

using namespace internal;  // NOLINT(google-build-using-namespace): this folder's own helpers

constexpr const char* kComponent = "storage";

// Schema history. The step key (job, rank, step) is enforced by the unique index steps_key; its
// column order (job_id, step, rank) makes it double as the (job, step) index that step pages
// and summaries read in order. Ops and collectives live in `detail`, a serialized
// wire::StepReport, decoded only when a query asks for detail.
const std::vector<Migration>& migrationList() {
  static const std::vector<Migration> kMigrations = {
      {1, R"sql(
CREATE TABLE jobs(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  world_size INTEGER NOT NULL DEFAULT 0,
  first_seen_ns INTEGER NOT NULL,
  last_seen_ns INTEGER NOT NULL,
  latest_step INTEGER NOT NULL DEFAULT -1,
  step_rows INTEGER NOT NULL DEFAULT 0);
CREATE TABLE ranks(
  job_id INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  world_size INTEGER NOT NULL DEFAULT 0,
  local_rank INTEGER NOT NULL DEFAULT 0,
  host TEXT NOT NULL DEFAULT '',
  node TEXT NOT NULL DEFAULT '',
  pid INTEGER NOT NULL DEFAULT 0,
  probe_version TEXT NOT NULL DEFAULT '',
  first_seen_ns INTEGER NOT NULL,
  last_seen_ns INTEGER NOT NULL,
  latest_step INTEGER NOT NULL DEFAULT -1,
  ended INTEGER NOT NULL DEFAULT 0,
  ended_step INTEGER NOT NULL DEFAULT -1,
  PRIMARY KEY(job_id, rank)) WITHOUT ROWID;
CREATE TABLE steps(
  id INTEGER PRIMARY KEY,
  job_id INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  step INTEGER NOT NULL,
  start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL,
  duration_ns INTEGER NOT NULL,
  compute_ns INTEGER NOT NULL,
  comm_ns INTEGER NOT NULL,
  exposed_comm_ns INTEGER NOT NULL,
  data_ns INTEGER NOT NULL,
  records INTEGER NOT NULL,
  dropped INTEGER NOT NULL,
  received_ns INTEGER NOT NULL,
  detail BLOB);
CREATE UNIQUE INDEX steps_key ON steps(job_id, step, rank);
CREATE TABLE nodes(
  name TEXT PRIMARY KEY,
  host TEXT NOT NULL DEFAULT '',
  agent_version TEXT NOT NULL DEFAULT '',
  pid INTEGER NOT NULL DEFAULT 0,
  first_seen_ns INTEGER NOT NULL,
  last_seen_ns INTEGER NOT NULL,
  offset_ns INTEGER NOT NULL DEFAULT 0,
  rtt_ns INTEGER NOT NULL DEFAULT 0,
  spool_bytes INTEGER NOT NULL DEFAULT 0,
  spool_dropped INTEGER NOT NULL DEFAULT 0,
  ranks INTEGER NOT NULL DEFAULT 0,
  latest_host_ns INTEGER NOT NULL DEFAULT 0,
  latest_host BLOB);
CREATE TABLE host_samples(
  id INTEGER PRIMARY KEY,
  node TEXT NOT NULL,
  time_ns INTEGER NOT NULL,
  received_ns INTEGER NOT NULL,
  sample BLOB NOT NULL);
)sql"},
      // Host time series are read per node over a time range.
      {2, "CREATE INDEX host_samples_node_time ON host_samples(node, time_ns);"},
      // Detected regressions. ranks, nodes, evidence and labels are JSON; the API serves
      // them whole, never queries inside them. Reads go by job or by updated_ns (polling).
      {3, R"sql(
CREATE TABLE anomalies(
  id TEXT PRIMARY KEY,
  job TEXT NOT NULL,
  kind TEXT NOT NULL,
  ranks TEXT NOT NULL DEFAULT '[]',
  nodes TEXT NOT NULL DEFAULT '[]',
  onset_step INTEGER NOT NULL DEFAULT -1,
  detected_step INTEGER NOT NULL DEFAULT -1,
  detected_ns INTEGER NOT NULL,
  magnitude REAL NOT NULL DEFAULT 1,
  confidence REAL NOT NULL DEFAULT 0,
  evidence TEXT NOT NULL DEFAULT '{}',
  labels TEXT NOT NULL DEFAULT '{}',
  state TEXT NOT NULL DEFAULT 'open',
  resolved_step INTEGER,
  resolved_ns INTEGER,
  summary TEXT NOT NULL DEFAULT '',
  capture_id TEXT,
  updated_ns INTEGER NOT NULL);
CREATE INDEX anomalies_job ON anomalies(job, detected_ns);
CREATE INDEX anomalies_updated ON anomalies(updated_ns);
)sql"},
      // Captures (docs/CAPTURE.md). ranks and rank_status are JSON, served whole; reads go by
      // job (newest first) or by updated_ns (polling, restart recovery).
      {4, R"sql(
CREATE TABLE captures(
  id TEXT PRIMARY KEY,
  job TEXT NOT NULL,
  kind TEXT NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NOT NULL DEFAULT '',
  anomaly_id TEXT,
  ranks TEXT NOT NULL DEFAULT '[]',
  start_step INTEGER NOT NULL DEFAULT -1,
  steps INTEGER NOT NULL DEFAULT 0,
  history INTEGER NOT NULL DEFAULT 0,
  max_bytes INTEGER NOT NULL DEFAULT 0,
  created_ns INTEGER NOT NULL,
  updated_ns INTEGER NOT NULL,
  finished_ns INTEGER,
  deadline_ns INTEGER NOT NULL DEFAULT 0,
  trace_bytes INTEGER,
  summary TEXT NOT NULL DEFAULT '',
  rank_status TEXT NOT NULL DEFAULT '[]');
CREATE INDEX captures_job ON captures(job, created_ns);
CREATE INDEX captures_updated ON captures(updated_ns);
)sql"},
      // Process groups a rank declared (issue 11): the latest set per rank, as a serialized
      // wire::RankHello holding only `groups`, and the probe's time of that declaration, so a
      // replayed older hello never replaces a newer set.
      {5, R"sql(
ALTER TABLE ranks ADD COLUMN groups_declared_ns INTEGER NOT NULL DEFAULT 0;
ALTER TABLE ranks ADD COLUMN groups BLOB;
)sql"},
      // A capture's per-rank states, a row per rank (issue 33): a running capture's tick
      // writes only the ranks that changed, where rewriting the rank_status JSON of 16,384
      // ranks took 53-148 ms under the write lock. Existing rank_status lists move here; a
      // list that is not valid JSON stays in its column, unread (it failed every read before).
      {6, R"sql(
CREATE TABLE capture_ranks(
  capture_id TEXT NOT NULL,
  rank INTEGER NOT NULL,
  node TEXT NOT NULL DEFAULT '',
  state TEXT NOT NULL,
  detail TEXT NOT NULL DEFAULT '',
  bytes INTEGER NOT NULL DEFAULT 0,
  truncated INTEGER NOT NULL DEFAULT 0,
  first_step INTEGER NOT NULL DEFAULT -1,
  last_step INTEGER NOT NULL DEFAULT -1,
  updated_ns INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY(capture_id, rank)) WITHOUT ROWID;
INSERT OR REPLACE INTO capture_ranks(capture_id, rank, node, state, detail, bytes, truncated,
  first_step, last_step, updated_ns)
SELECT c.id, coalesce(json_extract(e.value, '$.rank'), 0),
  coalesce(json_extract(e.value, '$.node'), ''),
  coalesce(json_extract(e.value, '$.state'), 'pending'),
  coalesce(json_extract(e.value, '$.detail'), ''),
  coalesce(json_extract(e.value, '$.bytes'), 0),
  coalesce(json_extract(e.value, '$.truncated'), 0),
  coalesce(json_extract(e.value, '$.first_step'), -1),
  coalesce(json_extract(e.value, '$.last_step'), -1),
  coalesce(json_extract(e.value, '$.updated_ns'), 0)
FROM captures AS c,
  json_each(CASE WHEN json_valid(c.rank_status) THEN c.rank_status ELSE '[]' END) AS e
WHERE json_type(e.value) = 'object';
UPDATE captures SET rank_status = '[]' WHERE json_valid(rank_status);
)sql"},
      // The GPU each rank computes on (RankInfo.gpu_uuid, issue 35).
      {7, "ALTER TABLE ranks ADD COLUMN gpu_uuid TEXT NOT NULL DEFAULT '';"},
  };
  return kMigrations;
}

constexpr const char* kStmtSql[kStmtCount] = {
    "BEGIN IMMEDIATE",
    "COMMIT",
    "ROLLBACK",
    "INSERT OR IGNORE INTO steps(job_id, rank, step, start_ns, end_ns, duration_ns, compute_ns,"
    " comm_ns, exposed_comm_ns, data_ns, records, dropped, received_ns, detail)"
    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    // A new pid means the rank restarted: it has not ended any more.
    "INSERT INTO ranks(job_id, rank, world_size, local_rank, host, node, pid, probe_version,"
    " first_seen_ns, last_seen_ns, gpu_uuid) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?10)"
    " ON CONFLICT(job_id, rank) DO UPDATE SET world_size = excluded.world_size,"
    " local_rank = excluded.local_rank, host = excluded.host,"
    " node = CASE WHEN excluded.node <> '' THEN excluded.node ELSE node END,"
    " ended = CASE WHEN pid <> excluded.pid THEN 0 ELSE ended END,"
    " ended_step = CASE WHEN pid <> excluded.pid THEN -1 ELSE ended_step END,"
    " pid = excluded.pid, probe_version = excluded.probe_version, gpu_uuid = excluded.gpu_uuid,"
    " last_seen_ns = max(last_seen_ns, excluded.last_seen_ns)",
    "INSERT INTO ranks(job_id, rank, first_seen_ns, last_seen_ns, latest_step)"
    " VALUES(?1, ?2, ?3, ?3, ?4) ON CONFLICT(job_id, rank) DO UPDATE SET"
    " last_seen_ns = max(last_seen_ns, excluded.last_seen_ns),"
    " latest_step = max(latest_step, excluded.latest_step)",
    "INSERT INTO ranks(job_id, rank, first_seen_ns, last_seen_ns, ended, ended_step)"
    " VALUES(?1, ?2, ?3, ?3, 1, ?4) ON CONFLICT(job_id, rank) DO UPDATE SET ended = 1,"
    " ended_step = excluded.ended_step, last_seen_ns = max(last_seen_ns, excluded.last_seen_ns)",
    "UPDATE jobs SET last_seen_ns = max(last_seen_ns, ?2), latest_step = max(latest_step, ?3),"
    " step_rows = step_rows + ?4 WHERE id = ?1",
    "UPDATE jobs SET world_size = ?2, last_seen_ns = max(last_seen_ns, ?3) WHERE id = ?1",
    "INSERT OR IGNORE INTO jobs(name, first_seen_ns, last_seen_ns) VALUES(?1, ?2, ?2)",
    "SELECT id FROM jobs WHERE name = ?1",
    // Hello and heartbeat each carry part of a node's state: keep what this update lacks.
    "INSERT INTO nodes(name, host, agent_version, pid, first_seen_ns, last_seen_ns, offset_ns,"
    " rtt_ns, spool_bytes, spool_dropped, ranks)"
    " VALUES(?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7, ?8, ?9, ?10)"
    " ON CONFLICT(name) DO UPDATE SET"
    " host = CASE WHEN excluded.host <> '' THEN excluded.host ELSE host END,"
    " agent_version = CASE WHEN excluded.agent_version <> '' THEN excluded.agent_version"
    " ELSE agent_version END,"
    " pid = CASE WHEN excluded.pid <> 0 THEN excluded.pid ELSE pid END,"
    " last_seen_ns = max(last_seen_ns, excluded.last_seen_ns),"
    " offset_ns = CASE WHEN ?11 THEN excluded.offset_ns ELSE offset_ns END,"
    " rtt_ns = CASE WHEN ?11 THEN excluded.rtt_ns ELSE rtt_ns END,"
    " spool_bytes = CASE WHEN ?11 THEN excluded.spool_bytes ELSE spool_bytes END,"
    " spool_dropped = CASE WHEN ?11 THEN excluded.spool_dropped ELSE spool_dropped END,"
    " ranks = CASE WHEN ?11 THEN excluded.ranks ELSE ranks END",
    "INSERT INTO host_samples(node, time_ns, received_ns, sample) VALUES(?1, ?2, ?3, ?4)",
    "INSERT INTO nodes(name, first_seen_ns, last_seen_ns, latest_host_ns, latest_host)"
    " VALUES(?1, ?2, ?2, ?3, ?4) ON CONFLICT(name) DO UPDATE SET"
    " latest_host_ns = excluded.latest_host_ns, latest_host = excluded.latest_host"
    " WHERE excluded.latest_host_ns >= nodes.latest_host_ns",
    // Re-detection (same id) keeps the first detection time; a capture id, once set, stays.
    "INSERT INTO anomalies(id, job, kind, ranks, nodes, onset_step, detected_step, detected_ns,"
    " magnitude, confidence, evidence, labels, state, resolved_step, resolved_ns, summary,"
    " capture_id, updated_ns)"
    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)"
    " ON CONFLICT(id) DO UPDATE SET kind = excluded.kind, ranks = excluded.ranks,"
    " nodes = excluded.nodes, onset_step = excluded.onset_step,"
    " detected_step = min(detected_step, excluded.detected_step),"
    " detected_ns = min(detected_ns, excluded.detected_ns),"
    " magnitude = excluded.magnitude, confidence = excluded.confidence,"
    " evidence = excluded.evidence, labels = excluded.labels, state = excluded.state,"
    " resolved_step = excluded.resolved_step, resolved_ns = excluded.resolved_ns,"
    " summary = excluded.summary, capture_id = coalesce(excluded.capture_id, capture_id),"
    " updated_ns = max(updated_ns, excluded.updated_ns)",
    // rank_status stays '[]': the ranks are rows of capture_ranks (migration 6).
    "INSERT OR REPLACE INTO captures(id, job, kind, state, reason, anomaly_id, ranks, start_step,"
    " steps, history, max_bytes, created_ns, updated_ns, finished_ns, deadline_ns, trace_bytes,"
    " summary)"
    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
    // A rank's declared groups: only a later declaration replaces the stored set.
    "INSERT INTO ranks(job_id, rank, first_seen_ns, last_seen_ns, groups_declared_ns, groups)"
    " VALUES(?1, ?2, ?3, ?3, ?4, ?5) ON CONFLICT(job_id, rank) DO UPDATE SET"
    " groups_declared_ns = excluded.groups_declared_ns, groups = excluded.groups"
    " WHERE excluded.groups_declared_ns > ranks.groups_declared_ns",
    "DELETE FROM capture_ranks WHERE capture_id = ?1",
    "INSERT OR REPLACE INTO capture_ranks(capture_id, rank, node, state, detail, bytes, truncated,"
    " first_step, last_step, updated_ns) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    // A running capture's progress: its rank rows are written beside this. A capture stored
    // final is not changed by progress any more.
    "UPDATE captures SET summary = ?2, updated_ns = ?3 WHERE id = ?1 AND state = 'running'",
};

void bindBlob(sqlite3_stmt* s, int index, std::string_view blob) {
  sqlite3_bind_blob(s, index, blob.data(), static_cast<int>(blob.size()), SQLITE_STATIC);
}

int64_t toI64(uint64_t v) {
  return static_cast<int64_t>(v);
}

}  // namespace

const std::vector<Migration>& migrations() {
  return migrationList();
}
int currentSchemaVersion() {
  return migrationList().back().version;
}

Result<std::unique_ptr<Store>> openSqliteStore(const SqliteOptions& options) {
  auto store = SqliteStore::open(options);
  if (!store) return store.status();
  return std::unique_ptr<Store>(std::move(store.value()));
}

SqliteStore::SqliteStore(SqliteOptions options) : options_(std::move(options)) {
  inMemory_ = options_.path == ":memory:" || options_.path.empty();
  stmts_.assign(kStmtCount, nullptr);
}

SqliteStore::~SqliteStore() {
  for (auto* s : stmts_) sqlite3_finalize(s);
  if (readDb_ != nullptr) sqlite3_close(readDb_);
  if (writeDb_ != nullptr) sqlite3_close(writeDb_);
}

Result<std::unique_ptr<SqliteStore>> SqliteStore::open(const SqliteOptions& options) {
  if (options.retentionNs < 0) {
    return Result<std::unique_ptr<SqliteStore>>::error(
        "storage: retentionNs must be >= 0 (0 keeps everything)");
  }
  std::unique_ptr<SqliteStore> store(new SqliteStore(options));
  // Nobody else sees the store yet; the lock is for the analysis (the fields it guards).
  MutexLock lock(&store->writeMu_);
  if (auto s = store->openConnections(); !s) return s;
  if (auto s = store->migrate(); !s) return s;
  if (auto s = store->prepareWriteStatements(); !s) return s;
  if (!store->inMemory_) {
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
    if (sqlite3_open_v2(options.path.c_str(), &store->readDb_, flags, nullptr) != SQLITE_OK) {
      return Status::error(
          sqlError(store->readDb_, "storage: opening read connection to " + options.path));
    }
    sqlite3_busy_timeout(store->readDb_, 5000);
    if (auto s = exec(store->readDb_, "PRAGMA query_only = 1", "storage: read connection"); !s) {
      return s;
    }
  }
  // The running totals stats() reports start from what the database already holds.
  ReadStmt count(store->writeDb_, "SELECT coalesce(sum(step_rows), 0) FROM jobs");
  if (!count.ok() || sqlite3_step(count.get()) != SQLITE_ROW) {
    return Status::error(count.error("storage: counting step rows"));
  }
  store->stepRows_ = static_cast<uint64_t>(sqlite3_column_int64(count.get(), 0));
  return store;
}

Status SqliteStore::openConnections() {
  std::string path = inMemory_ ? ":memory:" : options_.path;
  // SQLite takes an empty file for a new database. A 0-byte file where a database was expected
  // is usually one that lost its contents (a truncation, a failed copy): say so, then go on.
  std::error_code ec;
  if (!inMemory_ && std::filesystem::is_regular_file(path, ec) &&
      std::filesystem::file_size(path, ec) == 0 && !ec) {
    logWarn(kComponent, "database file " + path +
                            " is empty (0 bytes): starting a new, empty database in it; if it "
                            "held data before, that data is gone");
  }
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  if (sqlite3_open_v2(path.c_str(), &writeDb_, flags, nullptr) != SQLITE_OK) {
    return Status::error(sqlError(writeDb_, "storage: opening " + path));
  }
  sqlite3_busy_timeout(writeDb_, 5000);
  std::string pragmas =
      "PRAGMA page_size = 16384; PRAGMA journal_mode = WAL; PRAGMA temp_store = MEMORY;"
      " PRAGMA cache_size = -65536; PRAGMA wal_autocheckpoint = 2048;";
  pragmas +=
      options_.synchronousFull ? " PRAGMA synchronous = FULL;" : " PRAGMA synchronous = NORMAL;";
  return exec(writeDb_, pragmas.c_str(), "storage: configuring " + path);
}

Status SqliteStore::migrate() {
  ReadStmt version(writeDb_, "PRAGMA user_version");
  if (!version.ok() || sqlite3_step(version.get()) != SQLITE_ROW) {
    return Status::error(version.error("storage: reading schema version"));
  }
  int have = sqlite3_column_int(version.get(), 0);
  if (have > currentSchemaVersion()) {
    return Status::error("storage: database " + options_.path + " has schema version " +
                         std::to_string(have) + ", newer than this collector knows (" +
                         std::to_string(currentSchemaVersion()) + ")");
  }
  for (const auto& m : migrationList()) {
    if (m.version <= have) continue;
    if (auto s = exec(writeDb_, "BEGIN IMMEDIATE", "storage: migration begin"); !s) return s;
    std::string sql =
        std::string(m.sql) + "\nPRAGMA user_version = " + std::to_string(m.version) + ";";
    auto s =
        exec(writeDb_, sql.c_str(), "storage: migration to version " + std::to_string(m.version));
    if (s) s = exec(writeDb_, "COMMIT", "storage: migration commit");
    if (!s) {
      (void)exec(writeDb_, "ROLLBACK", "storage: migration rollback");  // `s` says why
      return s;
    }
    logInfo(kComponent,
            "migrated " + options_.path + " to schema version " + std::to_string(m.version));
  }
  return Status::ok();
}

Status SqliteStore::prepareWriteStatements() {
  for (size_t i = 0; i < kStmtCount; ++i) {
    if (sqlite3_prepare_v3(writeDb_, kStmtSql[i], -1, SQLITE_PREPARE_PERSISTENT, &stmts_[i],
                           nullptr) != SQLITE_OK) {
      return Status::error(sqlError(writeDb_, std::string("storage: preparing ") + kStmtSql[i]));
    }
  }
  return Status::ok();
}

Result<int64_t> SqliteStore::jobIdLocked(const std::string& job, int64_t nowNs) {
  if (auto it = jobIds_.find(job); it != jobIds_.end()) return it->second;
  auto* insert = stmts_[kInsertJob];
  bindText(insert, 1, job);
  sqlite3_bind_int64(insert, 2, nowNs);
  if (auto s = step(writeDb_, insert, "storage: inserting job"); !s) return s;
  auto* select = stmts_[kSelectJob];
  bindText(select, 1, job);
  int rc = sqlite3_step(select);
  int64_t id = rc == SQLITE_ROW ? sqlite3_column_int64(select, 0) : -1;
  sqlite3_reset(select);
  sqlite3_clear_bindings(select);
  if (id < 0) return Result<int64_t>::error(sqlError(writeDb_, "storage: looking up job " + job));
  // A cache, not the jobs: past the bound it starts over (a miss costs one lookup), so jobs
  // long ended leave memory however many a sender made.
  if (jobIds_.size() >= kMaxCachedJobIds) jobIds_.clear();
  jobIds_.emplace(job, id);
  return id;
}

Status SqliteStore::write(const WriteBatch& batch) {
  if (batch.empty()) return Status::ok();
  MutexLock lock(&writeMu_);
  if (auto s = step(writeDb_, stmts_[kBegin], "storage: begin"); !s) return s;
  uint64_t inserted = 0;
  uint64_t duplicates = 0;
  Status s = writeLocked(batch, &inserted, &duplicates);
  if (s) s = step(writeDb_, stmts_[kCommit], "storage: commit");
  if (!s) {
    (void)step(writeDb_, stmts_[kRollback], "storage: rollback");  // `s` says why
    // Job ids inserted by the rolled-back transaction are gone again.
    jobIds_.clear();
    return s;
  }
  stepRows_ += inserted;
  duplicates_ += duplicates;
  ++transactions_;
  return Status::ok();
}

Status SqliteStore::writeLocked(const WriteBatch& batch, uint64_t* inserted, uint64_t* duplicates) {
  const int64_t now = batch.receivedNs != 0 ? batch.receivedNs : wallNowNs();

  for (const auto& info : batch.ranks) {
    auto jobId = jobIdLocked(info.job(), now);
    if (!jobId) return jobId.status();
    auto* s = stmts_[kUpsertRankInfo];
    sqlite3_bind_int64(s, 1, *jobId);
    sqlite3_bind_int64(s, 2, info.rank());
    sqlite3_bind_int64(s, 3, info.world_size());
    sqlite3_bind_int64(s, 4, info.local_rank());
    bindText(s, 5, info.host());
    bindText(s, 6, info.node());
    sqlite3_bind_int64(s, 7, info.pid());
    bindText(s, 8, info.probe_version());
    sqlite3_bind_int64(s, 9, now);
    bindText(s, 10, info.gpu_uuid());
    if (auto st = step(writeDb_, s, "storage: storing rank"); !st) return st;
    auto* w = stmts_[kJobWorldSize];
    sqlite3_bind_int64(w, 1, *jobId);
    sqlite3_bind_int64(w, 2, info.world_size());
    sqlite3_bind_int64(w, 3, now);
    if (auto st = step(writeDb_, w, "storage: storing world size"); !st) return st;
  }

  // Aggregates are folded here and written once per job and rank, not once per row.
  struct JobAgg {
    int64_t latestStep = -1;
    uint64_t inserted = 0;
  };
  std::map<int64_t, JobAgg> jobAgg;
  std::map<std::pair<int64_t, uint32_t>, int64_t> rankLatest;
  std::string detail;
  const std::string* lastJob = nullptr;
  int64_t lastJobId = -1;
  auto* insert = stmts_[kInsertStep];
  for (size_t i = 0; i < batch.steps.size(); ++i) {
    const auto& report = batch.steps[i];
    if (lastJob == nullptr || *lastJob != report.job()) {
      auto jobId = jobIdLocked(report.job(), now);
      if (!jobId) return jobId.status();
      lastJob = &report.job();
      lastJobId = *jobId;
    }
    const std::string_view blob = stepDetail(batch, i, &detail);
    sqlite3_bind_int64(insert, 1, lastJobId);
    sqlite3_bind_int64(insert, 2, report.rank());
    sqlite3_bind_int64(insert, 3, report.step());
    sqlite3_bind_int64(insert, 4, report.start_ns());
    sqlite3_bind_int64(insert, 5, report.end_ns());
    sqlite3_bind_int64(insert, 6, report.duration_ns());
    sqlite3_bind_int64(insert, 7, report.compute_ns());
    sqlite3_bind_int64(insert, 8, report.comm_ns());
    sqlite3_bind_int64(insert, 9, report.exposed_comm_ns());
    sqlite3_bind_int64(insert, 10, report.data_ns());
    sqlite3_bind_int64(insert, 11, toI64(report.records()));
    sqlite3_bind_int64(insert, 12, toI64(report.dropped()));
    sqlite3_bind_int64(insert, 13, now);
    bindBlob(insert, 14, blob);
    int rc = sqlite3_step(insert);
    sqlite3_reset(insert);
    if (rc != SQLITE_DONE) return Status::error(sqlError(writeDb_, "storage: inserting step"));
    auto& agg = jobAgg[lastJobId];
    agg.latestStep = std::max(agg.latestStep, report.step());
    if (sqlite3_changes(writeDb_) > 0) {
      ++agg.inserted;
      ++*inserted;
    } else {
      ++*duplicates;
    }
    auto [it, fresh] = rankLatest.try_emplace({lastJobId, report.rank()}, report.step());
    if (!fresh) it->second = std::max(it->second, report.step());
  }
  sqlite3_clear_bindings(insert);
  for (const auto& [key, latest] : rankLatest) {
    auto* s = stmts_[kRankSteps];
    sqlite3_bind_int64(s, 1, key.first);
    sqlite3_bind_int64(s, 2, key.second);
    sqlite3_bind_int64(s, 3, now);
    sqlite3_bind_int64(s, 4, latest);
    if (auto st = step(writeDb_, s, "storage: updating rank"); !st) return st;
  }
  for (const auto& [jobId, agg] : jobAgg) {
    auto* s = stmts_[kJobAggregate];
    sqlite3_bind_int64(s, 1, jobId);
    sqlite3_bind_int64(s, 2, now);
    sqlite3_bind_int64(s, 3, agg.latestStep);
    sqlite3_bind_int64(s, 4, toI64(agg.inserted));
    if (auto st = step(writeDb_, s, "storage: updating job"); !st) return st;
  }

  for (const auto& update : batch.groups) {
    auto jobId = jobIdLocked(update.job, now);
    if (!jobId) return jobId.status();
    wire::RankHello holder;
    for (const auto& g : update.groups.groups) *holder.add_groups() = g;
    detail.clear();
    holder.SerializeToString(&detail);
    auto* s = stmts_[kRankGroups];
    sqlite3_bind_int64(s, 1, *jobId);
    sqlite3_bind_int64(s, 2, update.groups.rank);
    sqlite3_bind_int64(s, 3, now);
    sqlite3_bind_int64(s, 4, update.groups.declaredNs);
    bindBlob(s, 5, detail);
    if (auto st = step(writeDb_, s, "storage: storing process groups"); !st) return st;
  }

  for (const auto& bye : batch.goodbyes) {
    auto jobId = jobIdLocked(bye.job(), now);
    if (!jobId) return jobId.status();
    auto* s = stmts_[kGoodbye];
    sqlite3_bind_int64(s, 1, *jobId);
    sqlite3_bind_int64(s, 2, bye.rank());
    sqlite3_bind_int64(s, 3, now);
    sqlite3_bind_int64(s, 4, bye.last_step());
    if (auto st = step(writeDb_, s, "storage: storing goodbye"); !st) return st;
  }

  std::map<std::string, const wire::HostSample*> latestHost;
  for (const auto& host : batch.hosts) {
    detail.clear();
    host.SerializeToString(&detail);
    auto* s = stmts_[kInsertHost];
    bindText(s, 1, host.node());
    sqlite3_bind_int64(s, 2, host.time_ns());
    sqlite3_bind_int64(s, 3, now);
    bindBlob(s, 4, detail);
    if (auto st = step(writeDb_, s, "storage: storing host sample"); !st) return st;
    auto& slot = latestHost[host.node()];
    if (slot == nullptr || slot->time_ns() <= host.time_ns()) slot = &host;
  }
  for (const auto& [node, host] : latestHost) {
    detail.clear();
    host->SerializeToString(&detail);
    auto* s = stmts_[kNodeHost];
    bindText(s, 1, node);
    sqlite3_bind_int64(s, 2, now);
    sqlite3_bind_int64(s, 3, host->time_ns());
    bindBlob(s, 4, detail);
    if (auto st = step(writeDb_, s, "storage: updating node host sample"); !st) return st;
  }

  for (const auto& node : batch.nodes) {
    auto* s = stmts_[kUpsertNode];
    bindText(s, 1, node.node);
    bindText(s, 2, node.host);
    bindText(s, 3, node.agentVersion);
    sqlite3_bind_int64(s, 4, node.pid);
    sqlite3_bind_int64(s, 5, node.seenNs != 0 ? node.seenNs : now);
    sqlite3_bind_int64(s, 6, node.offsetNs);
    sqlite3_bind_int64(s, 7, node.rttNs);
    sqlite3_bind_int64(s, 8, toI64(node.spoolBytes));
    sqlite3_bind_int64(s, 9, toI64(node.spoolDropped));
    sqlite3_bind_int64(s, 10, node.ranks);
    sqlite3_bind_int(s, 11, node.hasClock ? 1 : 0);
    if (auto st = step(writeDb_, s, "storage: storing node"); !st) return st;
  }
  return Status::ok();
}

}  // namespace trainscope::storage
