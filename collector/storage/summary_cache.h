// The SQLite store's cache of step summaries (SqliteStore::summary). Not thread-safe: used
// under the store's read lock, except `stale`, which retention sets from the writer's side.
#pragma once

#include <atomic>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <sqlite3.h>

#include "collector/storage/store.h"
#include "common/status.h"

namespace trainscope::storage::internal {

// Step summaries already computed, kept beside the read connection, so a page of 1,000 steps
// of a 1,024-rank job costs 1,000 map entries instead of a million rows once it was read.
// A step's rows only ever grow (INSERT OR IGNORE) or go with retention, so the cache stays
// exact by re-reading the steps that got rows since it last looked (rows with a larger id:
// ids only grow) and by dropping everything when retention deleted rows. Used under the
// store's read lock; `stale` is set by retention from the writer's side.
struct SummaryCache {
  // Past this many new rows since the last look, dropping the cache is cheaper than patching.
  static constexpr int64_t kMaxCatchUpRows = 200000;
  // Memory bounds (SqliteOptions::summaryCache*), at about 100 bytes a cached step: a job past
  // maxStepsPerJob starts over (its next pages are read from the store once more: 0.3 s a page
  // at 100 M rows, after 65,536 new steps by default), and over every job the least recently
  // read jobs go first. The cache follows each new step of a range read up to the newest (the
  // live tail), so before these bounds a job's cache grew with it up to 2 M steps, ~200 MB.
  size_t maxSteps = 262'144;
  size_t maxStepsPerJob = 65'536;
  // Jobs held at most, also those with no steps cached: every job summarized once (the live
  // feed's first poll) would otherwise stay forever, ended jobs too. About 200 bytes each.
  size_t maxJobs = 16'384;

  struct Job {
    int64_t jobId = -1;
    std::map<int64_t, int64_t> covered;  // [lo, hi] ranges read completely, disjoint, by lo
    std::map<int64_t, StepSummaryRow> rows;
    uint64_t lastRead = 0;  // SummaryCache::reads when it was last read
    size_t counted = 0;     // rows.size() as SummaryCache::steps_ counts it

    // Past the bound: nothing cached (covered nothing), read again as needed.
    void bound(size_t maxSteps) {
      if (rows.size() <= maxSteps) return;
      rows.clear();
      covered.clear();
    }

    bool isCovered(int64_t step) const {
      auto it = covered.upper_bound(step);
      return it != covered.begin() && std::prev(it)->second >= step;
    }

    // The answer from the cache when [from, to] (or its first `limit` steps) was read.
    std::optional<std::vector<StepSummaryRow>> lookup(int64_t from, int64_t to,
                                                      size_t limit) const {
      auto range = covered.upper_bound(from);
      if (range == covered.begin()) return std::nullopt;
      --range;
      if (range->second < from) return std::nullopt;
      std::vector<StepSummaryRow> out;
      for (auto it = rows.lower_bound(from); it != rows.end() && it->first <= to; ++it) {
        if (out.size() >= limit) return out;
        if (it->first > range->second) break;
        out.push_back(it->second);
      }
      if (to <= range->second || out.size() >= limit) return out;
      return std::nullopt;  // the range goes past what was read
    }

    void remember(int64_t from, int64_t to, const std::vector<StepSummaryRow>& fresh) {
      for (const auto& r : fresh) rows[r.step] = r;
      // Merge [from, to] with the ranges it touches.
      int64_t lo = from, hi = to;
      auto it = covered.upper_bound(lo);
      if (it != covered.begin() && std::prev(it)->second >= (lo == INT64_MIN ? lo : lo - 1)) --it;
      while (it != covered.end() && it->first <= (hi == INT64_MAX ? hi : hi + 1)) {
        lo = std::min(lo, it->first);
        hi = std::max(hi, it->second);
        it = covered.erase(it);
      }
      covered.emplace(lo, hi);
    }
  };

  std::atomic<bool> stale{false};
  uint64_t reads = 0;   // job() calls so far: the clock of Job::lastRead
  int64_t seenId = -1;  // largest steps.id folded in; -1: not looked yet
  std::map<std::string, Job> jobs;

  // Finds (or makes) a job's entry and marks it read now.
  Job& job(const std::string& name, int64_t jobId);

  // Steps cached over every job (kept as a running total: summing them per call made the live
  // feed's first poll, one call per job, quadratic in the jobs).
  size_t steps() const { return steps_; }

  // `keep` (the job just read and remembered into) within maxStepsPerJob; then, over maxSteps
  // or maxJobs, the least recently read jobs leave (never `keep`). Visits only `keep` and the
  // jobs that leave.
  void bound(const std::string& keep);

  void clear(int64_t newSeenId);

  // Re-reads the cached steps that got rows since the last call.
  Status catchUp(sqlite3* db);

  // Job entries examined by job(), bound() and catchUp() so far: the cache's work, which must
  // stay proportional to the jobs each call touches, not to every job cached (a test holds it).
  uint64_t visits = 0;

 private:
  // Brings steps_ up to date with the job's rows after they changed.
  void account(Job& j);
  // Removes a job's entry and its index entries.
  void drop(std::map<std::string, Job>::iterator it);

  size_t steps_ = 0;
  std::map<uint64_t, std::string> byLastRead_;        // Job::lastRead -> name: eviction order
  std::unordered_map<int64_t, std::string> byJobId_;  // Job::jobId -> name: catchUp's lookup
};

}  // namespace trainscope::storage::internal
