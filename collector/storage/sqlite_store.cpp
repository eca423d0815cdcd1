#include "collector/storage/sqlite_store.h"

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include "common/clock.h"
#include "common/log.h"

namespace trainscope::storage {
namespace {

constexpr const char* kComponent = "storage";

// Rows deleted per retention transaction, so a large expiry never holds the writer for long.
constexpr int64_t kRetentionChunkRows = 20000;

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
  };
  return kMigrations;
}

// Indexes into SqliteStore::stmts_.
enum Stmt : size_t {
  kBegin,
  kCommit,
  kRollback,
  kInsertStep,
  kUpsertRankInfo,
  kRankSteps,
  kGoodbye,
  kJobAggregate,
  kJobWorldSize,
  kInsertJob,
  kSelectJob,
  kUpsertNode,
  kInsertHost,
  kNodeHost,
  kUpsertAnomaly,
  kStmtCount,
};

constexpr const char* kStmtSql[kStmtCount] = {
    "BEGIN IMMEDIATE",
    "COMMIT",
    "ROLLBACK",
    "INSERT OR IGNORE INTO steps(job_id, rank, step, start_ns, end_ns, duration_ns, compute_ns,"
    " comm_ns, exposed_comm_ns, data_ns, records, dropped, received_ns, detail)"
    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    // A new pid means the rank restarted: it has not ended any more.
    "INSERT INTO ranks(job_id, rank, world_size, local_rank, host, node, pid, probe_version,"
    " first_seen_ns, last_seen_ns) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9)"
    " ON CONFLICT(job_id, rank) DO UPDATE SET world_size = excluded.world_size,"
    " local_rank = excluded.local_rank, host = excluded.host,"
    " node = CASE WHEN excluded.node <> '' THEN excluded.node ELSE node END,"
    " ended = CASE WHEN pid <> excluded.pid THEN 0 ELSE ended END,"
    " ended_step = CASE WHEN pid <> excluded.pid THEN -1 ELSE ended_step END,"
    " pid = excluded.pid, probe_version = excluded.probe_version,"
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
};

std::string sqlError(sqlite3* db, const std::string& what) {
  return what + ": " + (db != nullptr ? sqlite3_errmsg(db) : "no database");
}

Status exec(sqlite3* db, const char* sql, const std::string& what) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string message = what + ": " + (err != nullptr ? err : "unknown error");
    sqlite3_free(err);
    return Status::error(message);
  }
  return Status::ok();
}

// A statement prepared for one read, finalized on scope exit.
class ReadStmt {
 public:
  ReadStmt(sqlite3* db, const std::string& sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &stmt_, nullptr);
  }
  ~ReadStmt() { sqlite3_finalize(stmt_); }
  ReadStmt(const ReadStmt&) = delete;
  ReadStmt& operator=(const ReadStmt&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return stmt_; }
  std::string error(const std::string& what) const { return sqlError(db_, what); }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

std::string columnText(sqlite3_stmt* s, int col) {
  const auto* text = sqlite3_column_text(s, col);
  return text != nullptr ? std::string(reinterpret_cast<const char*>(text),
                                       static_cast<size_t>(sqlite3_column_bytes(s, col)))
                         : std::string();
}

void bindText(sqlite3_stmt* s, int index, const std::string& text) {
  sqlite3_bind_text(s, index, text.data(), static_cast<int>(text.size()), SQLITE_STATIC);
}

void bindBlob(sqlite3_stmt* s, int index, const std::string& blob) {
  sqlite3_bind_blob(s, index, blob.data(), static_cast<int>(blob.size()), SQLITE_STATIC);
}

int64_t toI64(uint64_t v) {
  return static_cast<int64_t>(v);
}

// Runs a prepared write statement to completion and resets it for the next use.
Status step(sqlite3* db, sqlite3_stmt* s, const char* what) {
  int rc = sqlite3_step(s);
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return Status::error(sqlError(db, what));
  return Status::ok();
}

// JSON text of an anomaly's lists and maps. Non-finite evidence becomes null (JSON has no NaN)
// and is left out again when read back.
std::string jsonText(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status parseAnomalyJson(sqlite3_stmt* s, AnomalyRow* row) {
  auto parse = [&](int col, const char* what) -> Result<nlohmann::json> {
    auto j = nlohmann::json::parse(columnText(s, col), nullptr, false);
    if (j.is_discarded()) {
      return Result<nlohmann::json>::error("storage: anomaly " + row->id + ": " + what +
                                           " is not JSON");
    }
    return j;
  };
  auto ranks = parse(3, "ranks");
  if (!ranks) return ranks.status();
  auto nodes = parse(4, "nodes");
  if (!nodes) return nodes.status();
  auto evidence = parse(10, "evidence");
  if (!evidence) return evidence.status();
  auto labels = parse(11, "labels");
  if (!labels) return labels.status();
  for (const auto& r : *ranks) {
    if (r.is_number_unsigned()) row->ranks.push_back(r.get<uint32_t>());
  }
  for (const auto& n : *nodes) {
    if (n.is_string()) row->nodes.push_back(n.get<std::string>());
  }
  for (const auto& [k, v] : evidence->items()) {
    if (v.is_number()) row->evidence[k] = v.get<double>();
  }
  for (const auto& [k, v] : labels->items()) {
    if (v.is_string()) row->labels[k] = v.get<std::string>();
  }
  return Status::ok();
}

uint64_t fileSize(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_size);
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
      exec(writeDb_, "ROLLBACK", "storage: migration rollback");
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
  jobIds_.emplace(job, id);
  return id;
}

Status SqliteStore::write(const WriteBatch& batch) {
  if (batch.empty()) return Status::ok();
  std::lock_guard lock(writeMu_);
  if (auto s = step(writeDb_, stmts_[kBegin], "storage: begin"); !s) return s;
  uint64_t inserted = 0;
  uint64_t duplicates = 0;
  Status s = writeLocked(batch, &inserted, &duplicates);
  if (s) s = step(writeDb_, stmts_[kCommit], "storage: commit");
  if (!s) {
    step(writeDb_, stmts_[kRollback], "storage: rollback");
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
  const bool haveDetails = batch.stepDetails.size() == batch.steps.size();
  for (size_t i = 0; i < batch.steps.size(); ++i) {
    const auto& report = batch.steps[i];
    if (lastJob == nullptr || *lastJob != report.job()) {
      auto jobId = jobIdLocked(report.job(), now);
      if (!jobId) return jobId.status();
      lastJob = &report.job();
      lastJobId = *jobId;
    }
    const std::string* blob = &detail;
    if (haveDetails) {
      blob = &batch.stepDetails[i];
    } else {
      detail.clear();
      report.SerializeToString(&detail);
    }
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
    bindBlob(insert, 14, *blob);
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

Result<std::vector<JobRow>> SqliteStore::jobs() {
  std::lock_guard lock(readMutex());
  ReadStmt q(readDb(),
             "SELECT j.name, j.world_size,"
             " (SELECT count(*) FROM ranks r WHERE r.job_id = j.id),"
             " j.first_seen_ns, j.last_seen_ns, j.latest_step, j.step_rows,"
             " (SELECT count(*) FROM ranks r WHERE r.job_id = j.id AND r.ended)"
             " FROM jobs j ORDER BY j.last_seen_ns DESC, j.name");
  if (!q.ok()) return Result<std::vector<JobRow>>::error(q.error("storage: listing jobs"));
  std::vector<JobRow> out;
  int rc;
  while ((rc = sqlite3_step(q.get())) == SQLITE_ROW) {
    JobRow row;
    row.job = columnText(q.get(), 0);
    row.worldSize = static_cast<uint32_t>(sqlite3_column_int64(q.get(), 1));
    row.ranksSeen = static_cast<uint32_t>(sqlite3_column_int64(q.get(), 2));
    row.firstSeenNs = sqlite3_column_int64(q.get(), 3);
    row.lastSeenNs = sqlite3_column_int64(q.get(), 4);
    row.latestStep = sqlite3_column_int64(q.get(), 5);
    row.stepRows = static_cast<uint64_t>(sqlite3_column_int64(q.get(), 6));
    row.ranksEnded = static_cast<uint32_t>(sqlite3_column_int64(q.get(), 7));
    out.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return Result<std::vector<JobRow>>::error(q.error("storage: jobs"));
  return out;
}

Result<bool> SqliteStore::jobExists(const std::string& job) {
  std::lock_guard lock(readMutex());
  ReadStmt q(readDb(), "SELECT 1 FROM jobs WHERE name = ?1");
  if (!q.ok()) return Result<bool>::error(q.error("storage: looking up job"));
  bindText(q.get(), 1, job);
  int rc = sqlite3_step(q.get());
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
    return Result<bool>::error(q.error("storage: looking up job"));
  }
  return rc == SQLITE_ROW;
}

Result<std::vector<RankRow>> SqliteStore::ranks(const std::string& job) {
  std::lock_guard lock(readMutex());
  ReadStmt q(readDb(),
             "SELECT r.rank, r.world_size, r.local_rank, r.host, r.node, r.pid, r.probe_version,"
             " r.first_seen_ns, r.last_seen_ns, r.latest_step, r.ended, r.ended_step"
             " FROM ranks r JOIN jobs j ON j.id = r.job_id WHERE j.name = ?1 ORDER BY r.rank");
  if (!q.ok()) return Result<std::vector<RankRow>>::error(q.error("storage: listing ranks"));
  bindText(q.get(), 1, job);
  std::vector<RankRow> out;
  int rc;
  while ((rc = sqlite3_step(q.get())) == SQLITE_ROW) {
    auto* s = q.get();
    RankRow row;
    row.job = job;
    row.rank = static_cast<uint32_t>(sqlite3_column_int64(s, 0));
    row.worldSize = static_cast<uint32_t>(sqlite3_column_int64(s, 1));
    row.localRank = static_cast<uint32_t>(sqlite3_column_int64(s, 2));
    row.host = columnText(s, 3);
    row.node = columnText(s, 4);
    row.pid = static_cast<uint32_t>(sqlite3_column_int64(s, 5));
    row.probeVersion = columnText(s, 6);
    row.firstSeenNs = sqlite3_column_int64(s, 7);
    row.lastSeenNs = sqlite3_column_int64(s, 8);
    row.latestStep = sqlite3_column_int64(s, 9);
    row.ended = sqlite3_column_int64(s, 10) != 0;
    row.endedStep = sqlite3_column_int64(s, 11);
    out.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return Result<std::vector<RankRow>>::error(q.error("storage: ranks"));
  return out;
}

Result<std::vector<StepRow>> SqliteStore::steps(const StepQuery& query) {
  using R = Result<std::vector<StepRow>>;
  std::lock_guard lock(readMutex());
  std::string sql =
      "SELECT rank, step, start_ns, end_ns, duration_ns, compute_ns, comm_ns, exposed_comm_ns,"
      " data_ns, records, dropped";
  sql += query.detail ? ", detail" : ", NULL";
  sql += " FROM steps WHERE job_id = (SELECT id FROM jobs WHERE name = ?1)";
  if (query.rank) sql += " AND rank = ?2";
  if (query.fromStep) sql += " AND step >= ?3";
  if (query.toStep) sql += " AND step <= ?4";
  sql += " ORDER BY step, rank LIMIT ?5";
  ReadStmt q(readDb(), sql);
  if (!q.ok()) return R::error(q.error("storage: querying steps"));
  auto* s = q.get();
  bindText(s, 1, query.job);
  if (query.rank) sqlite3_bind_int64(s, 2, *query.rank);
  if (query.fromStep) sqlite3_bind_int64(s, 3, *query.fromStep);
  if (query.toStep) sqlite3_bind_int64(s, 4, *query.toStep);
  sqlite3_bind_int64(s, 5, static_cast<int64_t>(std::min<size_t>(query.limit, INT64_MAX)));
  std::vector<StepRow> out;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    StepRow row;
    row.job = query.job;
    row.rank = static_cast<uint32_t>(sqlite3_column_int64(s, 0));
    row.step = sqlite3_column_int64(s, 1);
    row.startNs = sqlite3_column_int64(s, 2);
    row.endNs = sqlite3_column_int64(s, 3);
    row.durationNs = sqlite3_column_int64(s, 4);
    row.computeNs = sqlite3_column_int64(s, 5);
    row.commNs = sqlite3_column_int64(s, 6);
    row.exposedCommNs = sqlite3_column_int64(s, 7);
    row.dataNs = sqlite3_column_int64(s, 8);
    row.records = static_cast<uint64_t>(sqlite3_column_int64(s, 9));
    row.dropped = static_cast<uint64_t>(sqlite3_column_int64(s, 10));
    if (query.detail && sqlite3_column_type(s, 11) == SQLITE_BLOB) {
      wire::StepReport detail;
      if (!detail.ParseFromArray(sqlite3_column_blob(s, 11), sqlite3_column_bytes(s, 11))) {
        return R::error("storage: step detail of job " + query.job + " rank " +
                        std::to_string(row.rank) + " step " + std::to_string(row.step) +
                        " is corrupt");
      }
      row.ops.assign(detail.ops().begin(), detail.ops().end());
      row.collectives.assign(detail.collectives().begin(), detail.collectives().end());
    }
    out.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return R::error(q.error("storage: querying steps"));
  return out;
}

Result<std::vector<StepSummaryRow>> SqliteStore::summary(const SummaryQuery& query) {
  using R = Result<std::vector<StepSummaryRow>>;
  std::lock_guard lock(readMutex());
  // Reads the page's rows in steps_key order (job, step, rank) and stops after `limit` whole
  // steps, so the cost is the rows of the page, not of the job.
  std::string sql =
      "SELECT step, rank, duration_ns FROM steps"
      " WHERE job_id = (SELECT id FROM jobs WHERE name = ?1)";
  if (query.fromStep) sql += " AND step >= ?2";
  if (query.toStep) sql += " AND step <= ?3";
  sql += " ORDER BY step, rank";
  ReadStmt q(readDb(), sql);
  if (!q.ok()) return R::error(q.error("storage: summarizing steps"));
  auto* s = q.get();
  bindText(s, 1, query.job);
  if (query.fromStep) sqlite3_bind_int64(s, 2, *query.fromStep);
  if (query.toStep) sqlite3_bind_int64(s, 3, *query.toStep);

  std::vector<StepSummaryRow> out;
  std::vector<std::pair<int64_t, uint32_t>> durations;  // (duration, rank) of the current step
  int64_t current = 0;
  auto flush = [&] {
    if (durations.empty()) return;
    StepSummaryRow row;
    row.step = current;
    row.ranks = static_cast<uint32_t>(durations.size());
    std::sort(durations.begin(), durations.end());
    row.minNs = durations.front().first;
    size_t n = durations.size();
    // Even counts take the mean of the two middle values.
    row.medianNs = n % 2 == 1 ? durations[n / 2].first
                              : durations[n / 2 - 1].first +
                                    (durations[n / 2].first - durations[n / 2 - 1].first) / 2;
    int64_t maxNs = durations.back().first;
    row.maxNs = maxNs;
    // The slowest rank; on a tie the lowest rank number, so the answer is stable.
    auto first =
        std::lower_bound(durations.begin(), durations.end(), std::make_pair(maxNs, uint32_t{0}));
    row.slowestRank = first->second;
    out.push_back(row);
    durations.clear();
  };
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    int64_t stepNo = sqlite3_column_int64(s, 0);
    if (!durations.empty() && stepNo != current) {
      flush();
      if (out.size() >= query.limit) break;
    }
    current = stepNo;
    durations.emplace_back(sqlite3_column_int64(s, 2),
                           static_cast<uint32_t>(sqlite3_column_int64(s, 1)));
  }
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return R::error(q.error("storage: summary"));
  if (out.size() < query.limit) flush();
  return out;
}

Result<std::vector<NodeRow>> SqliteStore::nodes() {
  using R = Result<std::vector<NodeRow>>;
  std::lock_guard lock(readMutex());
  ReadStmt q(readDb(),
             "SELECT name, host, agent_version, pid, first_seen_ns, last_seen_ns, offset_ns,"
             " rtt_ns, spool_bytes, spool_dropped, ranks, latest_host FROM nodes ORDER BY name");
  if (!q.ok()) return R::error(q.error("storage: listing nodes"));
  auto* s = q.get();
  std::vector<NodeRow> out;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    NodeRow row;
    row.node = columnText(s, 0);
    row.host = columnText(s, 1);
    row.agentVersion = columnText(s, 2);
    row.pid = static_cast<uint32_t>(sqlite3_column_int64(s, 3));
    row.firstSeenNs = sqlite3_column_int64(s, 4);
    row.lastSeenNs = sqlite3_column_int64(s, 5);
    row.offsetNs = sqlite3_column_int64(s, 6);
    row.rttNs = sqlite3_column_int64(s, 7);
    row.spoolBytes = static_cast<uint64_t>(sqlite3_column_int64(s, 8));
    row.spoolDropped = static_cast<uint64_t>(sqlite3_column_int64(s, 9));
    row.ranks = static_cast<uint32_t>(sqlite3_column_int64(s, 10));
    if (sqlite3_column_type(s, 11) == SQLITE_BLOB) {
      wire::HostSample host;
      if (host.ParseFromArray(sqlite3_column_blob(s, 11), sqlite3_column_bytes(s, 11))) {
        row.latestHost = std::move(host);
      }
    }
    out.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return R::error(q.error("storage: listing nodes"));
  return out;
}

Result<uint64_t> SqliteStore::applyRetention(int64_t nowNs) {
  if (options_.retentionNs == 0) return uint64_t{0};
  const int64_t horizon = nowNs - options_.retentionNs;
  uint64_t deleted = 0;
  // Rows are appended in arrival order, so the expired rows are (nearly) a prefix of the id
  // order: find the first id still inside the horizon and delete everything before it, in
  // chunks so the ingest writer never waits long. A row that arrived out of order behind a
  // newer one is deleted by a later pass.
  for (const char* table : {"steps", "host_samples"}) {
    const bool isSteps = std::string_view(table) == "steps";
    for (;;) {
      std::lock_guard lock(writeMu_);
      std::string t(table);
      std::string boundsSql = "SELECT min(id), coalesce((SELECT id FROM ";
      boundsSql += t;
      boundsSql += " WHERE received_ns >= ?1 ORDER BY id LIMIT 1), max(id) + 1) FROM ";
      boundsSql += t;
      ReadStmt bounds(writeDb_, boundsSql);
      if (!bounds.ok()) return Result<uint64_t>::error(bounds.error("storage: retention"));
      sqlite3_bind_int64(bounds.get(), 1, horizon);
      if (sqlite3_step(bounds.get()) != SQLITE_ROW ||
          sqlite3_column_type(bounds.get(), 0) == SQLITE_NULL) {
        break;  // empty table
      }
      int64_t first = sqlite3_column_int64(bounds.get(), 0);
      int64_t keepFrom = sqlite3_column_int64(bounds.get(), 1);
      sqlite3_reset(bounds.get());
      if (keepFrom <= first) break;
      int64_t upTo = std::min(keepFrom, first + kRetentionChunkRows);
      if (auto s = exec(writeDb_, "BEGIN IMMEDIATE", "storage: retention begin"); !s) return s;
      Status s;
      if (isSteps) {
        ReadStmt counts(writeDb_,
                        "UPDATE jobs SET step_rows = step_rows - c.n FROM"
                        " (SELECT job_id, count(*) AS n FROM steps WHERE id < ?1"
                        " GROUP BY job_id) AS c WHERE jobs.id = c.job_id");
        if (!counts.ok()) {
          s = Status::error(counts.error("storage: retention"));
        } else {
          sqlite3_bind_int64(counts.get(), 1, upTo);
          if (sqlite3_step(counts.get()) != SQLITE_DONE) {
            s = Status::error(counts.error("storage: retention counts"));
          }
        }
      }
      uint64_t n = 0;
      if (s) {
        ReadStmt del(writeDb_, "DELETE FROM " + t + " WHERE id < ?1");
        if (!del.ok()) {
          s = Status::error(del.error("storage: retention"));
        } else {
          sqlite3_bind_int64(del.get(), 1, upTo);
          if (sqlite3_step(del.get()) != SQLITE_DONE) {
            s = Status::error(del.error("storage: retention delete"));
          }
          n = static_cast<uint64_t>(sqlite3_changes(writeDb_));
        }
      }
      if (s) s = exec(writeDb_, "COMMIT", "storage: retention commit");
      if (!s) {
        exec(writeDb_, "ROLLBACK", "storage: retention rollback");
        return s;
      }
      ++transactions_;
      deleted += n;
      if (isSteps) stepRows_ -= std::min<uint64_t>(n, stepRows_.load());
      if (upTo >= keepFrom) break;
    }
  }
  return deleted;
}

Status SqliteStore::writeAnomalies(const std::vector<AnomalyRow>& rows) {
  if (rows.empty()) return Status::ok();
  const int64_t now = wallNowNs();
  std::lock_guard lock(writeMu_);
  if (auto s = step(writeDb_, stmts_[kBegin], "storage: begin"); !s) return s;
  Status st;
  auto* s = stmts_[kUpsertAnomaly];
  for (const auto& row : rows) {
    if (row.id.empty() || row.job.empty() || row.kind.empty()) {
      st = Status::error("storage: anomaly without " +
                         std::string(row.id.empty()    ? "id"
                                     : row.job.empty() ? "job"
                                                       : "kind") +
                         (row.id.empty() ? std::string() : " (id " + row.id + ")"));
      break;
    }
    if (row.state != "open" && row.state != "resolved") {
      st = Status::error("storage: anomaly " + row.id + ": state must be open or resolved, got '" +
                         row.state + "'");
      break;
    }
    const bool resolved = row.state == "resolved";
    const std::string ranks = jsonText(nlohmann::json(row.ranks));
    const std::string nodes = jsonText(nlohmann::json(row.nodes));
    const std::string evidence = jsonText(nlohmann::json(row.evidence));
    const std::string labels = jsonText(nlohmann::json(row.labels));
    bindText(s, 1, row.id);
    bindText(s, 2, row.job);
    bindText(s, 3, row.kind);
    bindText(s, 4, ranks);
    bindText(s, 5, nodes);
    sqlite3_bind_int64(s, 6, row.onsetStep);
    sqlite3_bind_int64(s, 7, row.detectedStep);
    sqlite3_bind_int64(s, 8, row.detectedNs);
    sqlite3_bind_double(s, 9, row.magnitude);
    sqlite3_bind_double(s, 10, row.confidence);
    bindText(s, 11, evidence);
    bindText(s, 12, labels);
    bindText(s, 13, row.state);
    if (resolved) {
      sqlite3_bind_int64(s, 14, row.resolvedStep);
      sqlite3_bind_int64(s, 15, row.resolvedNs);
    } else {
      sqlite3_bind_null(s, 14);
      sqlite3_bind_null(s, 15);
    }
    bindText(s, 16, row.summary);
    if (row.captureId) {
      bindText(s, 17, *row.captureId);
    } else {
      sqlite3_bind_null(s, 17);
    }
    sqlite3_bind_int64(s, 18, row.updatedNs != 0 ? row.updatedNs : now);
    st = step(writeDb_, s, "storage: storing anomaly");
    if (!st) break;
  }
  if (st) st = step(writeDb_, stmts_[kCommit], "storage: commit");
  if (!st) {
    step(writeDb_, stmts_[kRollback], "storage: rollback");
    return st;
  }
  ++transactions_;
  return Status::ok();
}

Result<std::vector<AnomalyRow>> SqliteStore::queryAnomalies(const std::string& where,
                                                           const std::string* job,
                                                           int64_t sinceNs) {
  using R = Result<std::vector<AnomalyRow>>;
  std::lock_guard lock(readMutex());
  ReadStmt q(readDb(),
             "SELECT id, job, kind, ranks, nodes, onset_step, detected_step, detected_ns,"
             " magnitude, confidence, evidence, labels, state, resolved_step, resolved_ns,"
             " summary, capture_id, updated_ns FROM anomalies WHERE " +
                 where + " ORDER BY detected_ns, id");
  if (!q.ok()) return R::error(q.error("storage: querying anomalies"));
  auto* s = q.get();
  if (job != nullptr) {
    bindText(s, 1, *job);
  } else {
    sqlite3_bind_int64(s, 1, sinceNs);
  }
  std::vector<AnomalyRow> out;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    AnomalyRow row;
    row.id = columnText(s, 0);
    row.job = columnText(s, 1);
    row.kind = columnText(s, 2);
    if (auto st = parseAnomalyJson(s, &row); !st) return st;
    row.onsetStep = sqlite3_column_int64(s, 5);
    row.detectedStep = sqlite3_column_int64(s, 6);
    row.detectedNs = sqlite3_column_int64(s, 7);
    row.magnitude = sqlite3_column_double(s, 8);
    row.confidence = sqlite3_column_double(s, 9);
    row.state = columnText(s, 12);
    if (sqlite3_column_type(s, 13) != SQLITE_NULL) row.resolvedStep = sqlite3_column_int64(s, 13);
    if (sqlite3_column_type(s, 14) != SQLITE_NULL) row.resolvedNs = sqlite3_column_int64(s, 14);
    row.summary = columnText(s, 15);
    if (sqlite3_column_type(s, 16) != SQLITE_NULL) row.captureId = columnText(s, 16);
    row.updatedNs = sqlite3_column_int64(s, 17);
    out.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return R::error(q.error("storage: querying anomalies"));
  return out;
}

Result<std::vector<AnomalyRow>> SqliteStore::anomalies(const std::string& job) {
  return queryAnomalies("job = ?1", &job, 0);
}

Result<std::vector<AnomalyRow>> SqliteStore::anomaliesSince(int64_t sinceNs) {
  return queryAnomalies("updated_ns >= ?1", nullptr, sinceNs);
}

StoreStats SqliteStore::stats() {
  StoreStats out;
  out.stepRows = stepRows_.load();
  out.duplicateSteps = duplicates_.load();
  out.transactions = transactions_.load();
  if (!inMemory_) {
    out.bytesOnDisk = fileSize(options_.path) + fileSize(options_.path + "-wal");
  }
  return out;
}

}  // namespace trainscope::storage
