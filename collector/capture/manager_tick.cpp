// CaptureManager on the clock: tick() applies the deadlines (a rank still on its way gets more
// time), ends the captures whose ranks are all final, and merges their files into one
// clock-aligned trace (merge.h). The rest of the manager: manager.cpp, manager_store.cpp,
// manager_files.cpp.
#include <malloc.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "collector/capture/manager.h"
#include "collector/capture/manager_internal.h"
#include "collector/capture/merge.h"
#include "common/log.h"

namespace trainscope::capture {

namespace fs = std::filesystem;
using namespace internal;  // this stage's own helpers
using wire::RankState;

void CaptureManager::tick(int64_t nowNs) {
  std::vector<storage::CaptureRow> ready;
  std::vector<storage::CaptureRow> ended;  // final without a merge: stored below
  // A trace deadline is reckoned from the job's step time when the capture started; a job that
  // slowed since (often what raised the anomaly), or whose reports lag behind a loaded host,
  // takes longer to reach the steps. So at the deadline a rank still on its way is given another
  // deadlineSlackNs: one heard from within that time (RankRow.lastSeenNs) whose latest stored
  // step has not passed the capture's last step, or that is uploading. Any other is failed: it
  // went silent, or got past the steps without recording them (the command was lost).
  std::map<std::string, JobRanks> onTheWay;  // capture id -> its job's ranks
  {
    std::vector<std::pair<std::string, std::string>> due;  // (capture id, job)
    {
      MutexLock lock(&mu_);
      for (const auto& [id, a] : active_) {
        if (!a.merging && a.row.kind == "trace" && nowNs >= a.row.deadlineNs && !allFinal(a.row))
          due.emplace_back(id, a.row.job);
      }
    }
    for (const auto& [id, job] : due) {
      auto ranks = jobRanks(job);                          // not under mu_: a store query
      if (ranks) onTheWay.emplace(id, std::move(*ranks));  // moved: byRank stays valid
    }
  }
  {
    MutexLock lock(&mu_);
    for (auto it = active_.begin(); it != active_.end();) {
      Active& a = it->second;
      if (a.merging) {
        ++it;
        continue;
      }
      if (nowNs >= a.row.deadlineNs && !allFinal(a.row)) {
        const auto ranks = onTheWay.find(a.row.id);
        const int64_t lastStep = a.row.startStep + static_cast<int64_t>(a.row.steps) - 1;
        auto stillComing = [&](const storage::CaptureRankRow& r) {
          if (ranks == onTheWay.end()) return false;
          const auto row = ranks->second.byRank.find(r.rank);
          if (row == ranks->second.byRank.end()) return false;
          const storage::RankRow& seen = *row->second;
          return !seen.ended && nowNs - seen.lastSeenNs <= options_.deadlineSlackNs &&
                 (r.state == RankState::kUploading || seen.latestStep < lastStep);
        };
        bool extended = false;
        for (auto& r : a.row.rankStatus) {
          if (wire::isFinal(r.state)) continue;
          if (stillComing(r)) {
            extended = true;
          } else {
            failRankLocked(a, r, std::string("timed out in state ") + wire::toString(r.state));
          }
        }
        if (extended) a.row.deadlineNs = nowNs + options_.deadlineSlackNs;
      }
      if (!allFinal(a.row)) {
        ++it;
        continue;
      }
      const bool anyDone = std::any_of(a.row.rankStatus.begin(), a.row.rankStatus.end(),
                                       [](const auto& r) { return r.state == RankState::kDone; });
      if (!anyDone) {
        finalizeLocked(a, {}, std::nullopt);
        ended.push_back(std::move(a.row));
        it = active_.erase(it);
        continue;
      }
      a.merging = true;
      ready.push_back(a.row);
      ++it;
    }
  }
  for (auto& row : ended) storeFinal(row);
  flush();
  if (ready.empty()) return;

  std::map<std::string, int64_t> offsets;
  if (auto nodes = store_.nodes(); nodes) {
    for (const auto& n : *nodes) offsets[n.node] = n.offsetNs;
  } else {
    logWarn(kComponent,
            "reading node clock offsets: " + nodes.message() + " (merging without alignment)");
  }
  for (const auto& row : ready) {
    const fs::path dir = directory(row.id);
    std::vector<RankFile> files;
    for (const auto& r : row.rankStatus) {
      if (r.state != RankState::kDone) continue;
      RankFile f;
      f.rank = r.rank;
      f.node = r.node;
      auto off = offsets.find(r.node);
      // An import's files are on one clock already (the importer aligned them); its ranks ran
      // on no agent's node.
      f.offsetNs = off != offsets.end() && row.kind != "import" ? off->second : 0;
      f.path = (dir / rankFileName(r.rank)).string();
      files.push_back(std::move(f));
    }
    const int64_t mergeNow = clock_.nowNs();
    DescribeCapture trailer = [&](const std::map<uint32_t, std::string>& failures) {
      return describe(finalRow(row, failures, mergeNow));
    };
    setMergeAttempts(dir, mergeAttempts(dir) + 1);
    const fs::path tmp = dir / "trace.json.gz.tmp";
    auto merged = row.kind == "stacks" ? mergeStacks(files, trailer, tmp.string(), options_.merge)
                                       : mergeTrace(files, trailer, tmp.string(), options_.merge);
    std::map<uint32_t, std::string> failures;
    std::optional<uint64_t> bytes;
    if (merged) {
      failures = merged->failures;
      std::error_code ec;
      fs::rename(tmp, dir / "trace.json.gz", ec);
      if (ec) {
        for (const auto& f : files)
          failures[f.rank] = "cannot store the merged trace: " + ec.message();
      } else {
        bytes = merged->bytes;
      }
    } else {
      logError(kComponent, "capture " + row.id + ": merge failed: " + merged.message());
      for (const auto& f : files) failures[f.rank] = "merge failed: " + merged.message();
    }
    storage::CaptureRow endRow;
    {
      MutexLock lock(&mu_);
      auto it = active_.find(row.id);
      if (it == active_.end()) continue;
      finalizeLocked(it->second, failures, bytes);
      endRow = std::move(it->second.row);
      active_.erase(it);
    }
    storeFinal(endRow);
    std::error_code ec;
    fs::remove(dir / kMergeAttemptsFile, ec);  // after the final row: else merged again
    flush();                                   // what came in during a long merge
  }
  // A merge holds one event at a time, but a few large ones leave free pages behind: hand
  // them back.
  malloc_trim(0);
}

}  // namespace trainscope::capture
