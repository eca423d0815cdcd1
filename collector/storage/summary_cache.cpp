#include "collector/storage/summary_cache.h"

#include <utility>

#include "collector/storage/sqlite_internal.h"
#include "collector/storage/store_rows.h"

namespace trainscope::storage::internal {

SummaryCache::Job& SummaryCache::job(const std::string& name, int64_t jobId) {
  ++visits;
  auto [it, fresh] = jobs.try_emplace(name);
  Job& j = it->second;
  if (!fresh) byLastRead_.erase(j.lastRead);
  if (fresh || j.jobId != jobId) {
    // A new job, or the name's job was deleted and made again under a new id.
    if (!fresh) {
      if (auto old = byJobId_.find(j.jobId); old != byJobId_.end() && old->second == name) {
        byJobId_.erase(old);
      }
      steps_ -= j.counted;
    }
    j = Job{};
    j.jobId = jobId;
    byJobId_[jobId] = name;
  }
  j.lastRead = ++reads;
  byLastRead_.emplace(j.lastRead, name);
  return j;
}

void SummaryCache::account(Job& j) {
  steps_ = steps_ - j.counted + j.rows.size();
  j.counted = j.rows.size();
}

void SummaryCache::drop(std::map<std::string, Job>::iterator it) {
  Job& j = it->second;
  steps_ -= j.counted;
  byLastRead_.erase(j.lastRead);
  if (auto id = byJobId_.find(j.jobId); id != byJobId_.end() && id->second == it->first) {
    byJobId_.erase(id);
  }
  jobs.erase(it);
}

void SummaryCache::bound(const std::string& keep) {
  if (auto it = jobs.find(keep); it != jobs.end()) {
    ++visits;
    it->second.bound(maxStepsPerJob);
    account(it->second);
  }
  while (steps_ > maxSteps || jobs.size() > maxJobs) {
    auto oldest = byLastRead_.begin();
    if (oldest != byLastRead_.end() && oldest->second == keep) ++oldest;
    if (oldest == byLastRead_.end()) return;
    ++visits;
    drop(jobs.find(oldest->second));
  }
}

void SummaryCache::clear(int64_t newSeenId) {
  jobs.clear();
  byLastRead_.clear();
  byJobId_.clear();
  steps_ = 0;
  seenId = newSeenId;
}

Status SummaryCache::catchUp(sqlite3* db) {
  ReadStmt maxId(db, "SELECT coalesce(max(id), 0) FROM steps");
  if (!maxId.ok() || sqlite3_step(maxId.get()) != SQLITE_ROW) {
    return Status::error(maxId.error("storage: summary cache"));
  }
  const int64_t newest = sqlite3_column_int64(maxId.get(), 0);
  if (stale.exchange(false) || seenId < 0 || newest < seenId || newest - seenId > kMaxCatchUpRows) {
    clear(newest);
    return Status::ok();
  }
  if (newest == seenId || jobs.empty()) {
    seenId = newest;
    return Status::ok();
  }
  std::map<int64_t, std::vector<int64_t>> dirty;  // job id -> steps
  {
    ReadStmt fresh(db, "SELECT DISTINCT job_id, step FROM steps WHERE id > ?1 AND id <= ?2");
    if (!fresh.ok()) return Status::error(fresh.error("storage: summary cache"));
    sqlite3_bind_int64(fresh.get(), 1, seenId);
    sqlite3_bind_int64(fresh.get(), 2, newest);
    int rc;
    while ((rc = sqlite3_step(fresh.get())) == SQLITE_ROW) {
      dirty[sqlite3_column_int64(fresh.get(), 0)].push_back(sqlite3_column_int64(fresh.get(), 1));
    }
    if (rc != SQLITE_DONE) return Status::error(fresh.error("storage: summary cache"));
  }
  ReadStmt one(db, "SELECT duration_ns, rank FROM steps WHERE job_id = ?1 AND step = ?2");
  if (!one.ok()) return Status::error(one.error("storage: summary cache"));
  std::vector<std::pair<int64_t, uint32_t>> durations;
  // Only the cached jobs that got rows: every cached job per call made a poll over every job
  // quadratic while ingest went on.
  for (auto& [jobId, steps] : dirty) {
    auto name = byJobId_.find(jobId);
    if (name == byJobId_.end()) continue;
    ++visits;
    Job& j = jobs.at(name->second);
    for (int64_t step : steps) {
      if (!j.isCovered(step)) continue;
      sqlite3_reset(one.get());
      sqlite3_bind_int64(one.get(), 1, j.jobId);
      sqlite3_bind_int64(one.get(), 2, step);
      durations.clear();
      int rc;
      while ((rc = sqlite3_step(one.get())) == SQLITE_ROW) {
        durations.emplace_back(sqlite3_column_int64(one.get(), 0),
                               static_cast<uint32_t>(sqlite3_column_int64(one.get(), 1)));
      }
      if (rc != SQLITE_DONE) return Status::error(one.error("storage: summary cache"));
      if (durations.empty()) {
        j.rows.erase(step);
      } else {
        j.rows[step] = summarizeStep(step, durations);
      }
    }
    j.bound(maxStepsPerJob);
    account(j);
  }
  seenId = newest;
  return Status::ok();
}

}  // namespace trainscope::storage::internal
