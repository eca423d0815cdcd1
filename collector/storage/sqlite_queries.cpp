// The read side of SqliteStore: jobs, ranks, steps, summaries, nodes, stats, and retention
// (which deletes through the write connection but belongs with the queries it bounds).
#include "collector/storage/sqlite_store.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <sqlite3.h>

#include "collector/storage/sqlite_internal.h"
#include "collector/storage/store_rows.h"
#include "collector/storage/summary_cache.h"
#include "common/thread_annotations.h"

namespace trainscope::storage {
namespace {

using namespace internal;  // NOLINT(google-build-using-namespace): this folder's own helpers

// Rows deleted per retention transaction, so a large expiry never holds the writer for long.
constexpr int64_t kRetentionChunkRows = 20000;

uint64_t fileSize(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_size);
}

// Reads a job's rows in steps_key order (job, step, rank) and stops after `limit` whole steps,
// so the cost is the rows of the page, not of the job. *reachedEnd: no rows were left.
Status scanSummary(sqlite3* db, int64_t jobId, std::optional<int64_t> fromStep,
                   std::optional<int64_t> toStep, size_t limit, std::vector<StepSummaryRow>* out,
                   bool* reachedEnd) {
  std::string sql = "SELECT step, rank, duration_ns FROM steps WHERE job_id = ?1";
  if (fromStep) sql += " AND step >= ?2";
  if (toStep) sql += " AND step <= ?3";
  sql += " ORDER BY step, rank";
  ReadStmt q(db, sql);
  if (!q.ok()) return Status::error(q.error("storage: summarizing steps"));
  auto* s = q.get();
  sqlite3_bind_int64(s, 1, jobId);
  if (fromStep) sqlite3_bind_int64(s, 2, *fromStep);
  if (toStep) sqlite3_bind_int64(s, 3, *toStep);
  std::vector<std::pair<int64_t, uint32_t>> durations;  // (duration, rank) of the current step
  int64_t current = 0;
  int rc;
  *reachedEnd = false;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    int64_t stepNo = sqlite3_column_int64(s, 0);
    if (!durations.empty() && stepNo != current) {
      out->push_back(summarizeStep(current, durations));
      durations.clear();
      if (out->size() >= limit) break;
    }
    current = stepNo;
    durations.emplace_back(sqlite3_column_int64(s, 2),
                           static_cast<uint32_t>(sqlite3_column_int64(s, 1)));
  }
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return Status::error(q.error("storage: summary"));
  if (rc == SQLITE_DONE) {
    *reachedEnd = true;
    if (!durations.empty() && out->size() < limit)
      out->push_back(summarizeStep(current, durations));
  }
  return Status::ok();
}

// The cache lives as long as the read connection: it is registered with the connection as the
// user data of a SQL function whose destructor runs when the connection closes, so a new store
// that gets the same connection address never finds an old store's cache.
Mutex gSummaryCachesMu;
std::unordered_map<sqlite3*, SummaryCache*> gSummaryCaches GUARDED_BY(gSummaryCachesMu);

void destroySummaryCache(void* p) {
  auto* cache = static_cast<SummaryCache*>(p);
  {
    MutexLock lock(&gSummaryCachesMu);
    for (auto it = gSummaryCaches.begin(); it != gSummaryCaches.end(); ++it) {
      if (it->second == cache) {
        gSummaryCaches.erase(it);
        break;
      }
    }
  }
  delete cache;
}

void noopFunction(sqlite3_context* ctx, int, sqlite3_value**) {
  sqlite3_result_null(ctx);
}

SummaryCache& summaryCacheFor(sqlite3* db, const SqliteOptions& options) {
  MutexLock lock(&gSummaryCachesMu);
  auto it = gSummaryCaches.find(db);
  if (it != gSummaryCaches.end()) return *it->second;
  auto* cache = new SummaryCache();  // owned by the connection from here (destroySummaryCache)
  cache->maxSteps = options.summaryCacheSteps;
  cache->maxStepsPerJob = options.summaryCacheStepsPerJob;
  gSummaryCaches[db] = cache;
  if (sqlite3_create_function_v2(db, "trainscope_summary_cache", 0, SQLITE_UTF8, cache,
                                 noopFunction, nullptr, nullptr,
                                 destroySummaryCache) != SQLITE_OK) {
    // SQLite called destroySummaryCache already, which unregistered it; fall back to a cache
    // that is dropped at every use (correct, just not faster).
    static thread_local SummaryCache fallback;
    fallback.stale = true;
    return fallback;
  }
  return *cache;
}

// Retention deleted rows of `db`'s store: its cached summaries may name deleted rows.
void markSummaryCacheStale(sqlite3* db) {
  MutexLock lock(&gSummaryCachesMu);
  auto it = gSummaryCaches.find(db);
  if (it != gSummaryCaches.end()) it->second->stale = true;
}

}  // namespace

Result<std::vector<JobRow>> SqliteStore::jobs() {
  MutexLock lock(&readMutex());
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
  MutexLock lock(&readMutex());
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
  MutexLock lock(&readMutex());
  ReadStmt q(readDb(),
             "SELECT r.rank, r.world_size, r.local_rank, r.host, r.node, r.pid, r.probe_version,"
             " r.first_seen_ns, r.last_seen_ns, r.latest_step, r.ended, r.ended_step, r.gpu_uuid"
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
    row.gpuUuid = columnText(s, 12);
    out.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return Result<std::vector<RankRow>>::error(q.error("storage: ranks"));
  return out;
}

Result<std::vector<topology::RankGroups>> SqliteStore::groups(const std::string& job) {
  using R = Result<std::vector<topology::RankGroups>>;
  MutexLock lock(&readMutex());
  ReadStmt q(readDb(),
             "SELECT r.rank, r.groups_declared_ns, r.groups FROM ranks r JOIN jobs j"
             " ON j.id = r.job_id WHERE j.name = ?1 AND r.groups_declared_ns > 0 ORDER BY r.rank");
  if (!q.ok()) return R::error(q.error("storage: listing process groups"));
  bindText(q.get(), 1, job);
  std::vector<topology::RankGroups> out;
  int rc;
  while ((rc = sqlite3_step(q.get())) == SQLITE_ROW) {
    auto* s = q.get();
    topology::RankGroups row;
    row.rank = static_cast<uint32_t>(sqlite3_column_int64(s, 0));
    row.declaredNs = sqlite3_column_int64(s, 1);
    wire::RankHello holder;
    if (!holder.ParseFromArray(sqlite3_column_blob(s, 2), sqlite3_column_bytes(s, 2))) {
      return R::error("storage: the process groups of rank " + std::to_string(row.rank) +
                      " of job " + job + " do not decode");
    }
    row.groups.assign(holder.groups().begin(), holder.groups().end());
    out.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return R::error(q.error("storage: process groups"));
  return out;
}

Result<std::vector<StepRow>> SqliteStore::steps(const StepQuery& query) {
  using R = Result<std::vector<StepRow>>;
  MutexLock lock(&readMutex());
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
      std::string_view blob(static_cast<const char*>(sqlite3_column_blob(s, 11)),
                            static_cast<size_t>(sqlite3_column_bytes(s, 11)));
      if (auto st = fillStepDetail(blob, &row); !st) return st;
    }
    out.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return R::error(q.error("storage: querying steps"));
  return out;
}

Result<std::vector<StepSummaryRow>> SqliteStore::summary(const SummaryQuery& query) {
  using R = Result<std::vector<StepSummaryRow>>;
  MutexLock lock(&readMutex());
  sqlite3* db = readDb();
  SummaryCache& cache = summaryCacheFor(db, options_);
  if (auto s = cache.catchUp(db); !s) return R::error(s.message());

  ReadStmt job(db, "SELECT id FROM jobs WHERE name = ?1");
  if (!job.ok()) return R::error(job.error("storage: summarizing steps"));
  bindText(job.get(), 1, query.job);
  int rc = sqlite3_step(job.get());
  if (rc == SQLITE_DONE) return std::vector<StepSummaryRow>{};
  if (rc != SQLITE_ROW) return R::error(job.error("storage: summarizing steps"));
  const int64_t jobId = sqlite3_column_int64(job.get(), 0);

  SummaryCache::Job& cached = cache.job(query.job, jobId);
  cache.bound(query.job);  // what catchUp added
  const int64_t from = query.fromStep.value_or(INT64_MIN);
  const int64_t to = query.toStep.value_or(INT64_MAX);
  if (auto hit = cached.lookup(from, to, query.limit)) return std::move(*hit);

  std::vector<StepSummaryRow> out;
  bool reachedEnd = false;
  if (auto s = scanSummary(db, jobId, query.fromStep, query.toStep, query.limit, &out, &reachedEnd);
      !s) {
    return R::error(s.message());
  }
  // What the scan saw completely: [from, to] when it ran out of rows, else up to the last
  // step it returned (it stops at a step boundary).
  cached.remember(from, reachedEnd || out.empty() ? to : out.back().step, out);
  cache.bound(query.job);
  return out;
}

Result<std::vector<wire::HostSample>> SqliteStore::hostSamples(const HostSampleQuery& query) {
  using R = Result<std::vector<wire::HostSample>>;
  MutexLock lock(&readMutex());
  // The newest `limit` of the range (host_samples_node_time), turned oldest first. A replayed
  // sample is stored again (host_samples has no key); one per time is served.
  ReadStmt q(readDb(),
             "SELECT sample FROM host_samples WHERE node = ?1 AND time_ns >= ?2 AND time_ns <= ?3"
             " GROUP BY time_ns ORDER BY time_ns DESC LIMIT ?4");
  if (!q.ok()) return R::error(q.error("storage: reading host samples"));
  auto* s = q.get();
  bindText(s, 1, query.node);
  sqlite3_bind_int64(s, 2, query.fromNs);
  sqlite3_bind_int64(s, 3, query.toNs);
  sqlite3_bind_int64(s, 4, static_cast<int64_t>(query.limit));
  std::vector<wire::HostSample> out;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    wire::HostSample host;
    // A row that does not parse is left out, as nodes() leaves out a bad latest sample.
    if (host.ParseFromArray(sqlite3_column_blob(s, 0), sqlite3_column_bytes(s, 0))) {
      out.push_back(std::move(host));
    }
  }
  if (rc != SQLITE_DONE) return R::error(q.error("storage: reading host samples"));
  std::reverse(out.begin(), out.end());
  return out;
}

Result<std::vector<NodeRow>> SqliteStore::nodes() {
  using R = Result<std::vector<NodeRow>>;
  MutexLock lock(&readMutex());
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
      MutexLock lock(&writeMu_);
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
        (void)exec(writeDb_, "ROLLBACK", "storage: retention rollback");  // `s` says why
        return s;
      }
      ++transactions_;
      deleted += n;
      if (isSteps) {
        stepRows_ -= std::min<uint64_t>(n, stepRows_.load());
        if (n > 0) markSummaryCacheStale(readDbAddress());
      }
      if (upTo >= keepFrom) break;
    }
  }
  return deleted;
}

StoreStats SqliteStore::stats() {
  StoreStats out;
  out.stepRows = stepRows_.load();
  out.duplicateSteps = duplicates_.load();
  out.transactions = transactions_.load();
  if (!inMemory_) {
    out.bytesOnDisk = fileSize(options_.path) + fileSize(options_.path + "-wal");
  }
  out.memoryBytes = static_cast<uint64_t>(sqlite3_memory_used());
  MutexLock lock(&readMutex());
  MutexLock caches(&gSummaryCachesMu);
  if (auto it = gSummaryCaches.find(readDb()); it != gSummaryCaches.end()) {
    out.cachedSummarySteps = it->second->steps();
  }
  return out;
}

}  // namespace trainscope::storage
