// CaptureManager, storing captures: the rows a tick flushes (only the ranks that changed), the
// final rows, and recovery of the captures a previous collector left running.
#include "collector/capture/manager.h"

#include <algorithm>
#include <cassert>
#include <filesystem>
#include <system_error>
#include <utility>

#include "collector/capture/manager_internal.h"

namespace trainscope::capture {

namespace fs = std::filesystem;
using namespace internal;  // this stage's own helpers
using wire::CaptureState;
using wire::RankState;

void CaptureManager::persistLocked(storage::CaptureRow& row) {
  row.updatedNs = std::max(clock_.nowNs(), row.updatedNs);
  row.summary = captureSummary(row);
  if (Status s = store_.writeCapture(row); !s) {
    ++stats_.storeFailures;
    storeLog_.log(LogLevel::kError, kComponent, "storing capture " + row.id + ": " + s.message());
  }
}

bool CaptureManager::storeRow(storage::CaptureRow& row) {
  row.updatedNs = std::max(clock_.nowNs(), row.updatedNs);
  row.summary = captureSummary(row);
  Status s = store_.writeCapture(row);
  if (s) return true;
  {
    MutexLock lock(&mu_);
    ++stats_.storeFailures;
  }
  storeLog_.log(LogLevel::kError, kComponent, "storing capture " + row.id + ": " + s.message());
  return false;
}

void CaptureManager::storeFinal(storage::CaptureRow& row) {
  MutexLock write(&storeMu_);
  storeRow(row);
}

void CaptureManager::flush() {
  MutexLock write(&storeMu_);
  std::vector<storage::CaptureProgress> progress;
  {
    // Only the changed ranks are copied under mu_ (the socket thread waits for the copy); the
    // write is made outside it.
    MutexLock lock(&mu_);
    const int64_t now = clock_.nowNs();
    for (auto& [id, a] : active_) {
      if (a.changed.empty()) continue;
      storage::CaptureProgress p;
      p.id = id;
      takeChangedLocked(a, &p.ranks);
      p.summary = summaryOf(a.done, a.failed, a.row.rankStatus.size());
      p.updatedNs = std::max(now, a.row.updatedNs);
      progress.push_back(std::move(p));
    }
  }
  for (const auto& p : progress) {
    Status s = store_.writeCaptureProgress(p);
    if (s) continue;
    storeLog_.log(LogLevel::kError, kComponent, "storing capture " + p.id + ": " + s.message());
    MutexLock lock(&mu_);  // stored nothing: the next flush tries these ranks again
    ++stats_.storeFailures;
    auto it = active_.find(p.id);
    if (it == active_.end()) continue;
    for (const auto& r : p.ranks) {
      if (auto* rs = rankOf(it->second, r.rank)) changedLocked(it->second, *rs);
    }
  }
}

void CaptureManager::indexLocked(Active& a) {
  if (!a.index.empty() || a.row.rankStatus.empty()) return;
  const auto& ranks = a.row.rankStatus;
  a.marked.assign(ranks.size(), false);
  a.counted.resize(ranks.size());
  a.done = 0;
  a.failed = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    a.index[ranks[i].rank] = i;
    a.counted[i] = ranks[i].state;
    if (ranks[i].state == RankState::kDone) ++a.done;
    if (ranks[i].state == RankState::kFailed) ++a.failed;
  }
}

storage::CaptureRankRow* CaptureManager::rankOf(Active& a, uint32_t rank) {
  indexLocked(a);
  auto it = a.index.find(rank);
  return it == a.index.end() ? nullptr : &a.row.rankStatus[it->second];
}

void CaptureManager::changedLocked(Active& a, const storage::CaptureRankRow& r) {
  indexLocked(a);
  const auto i = static_cast<size_t>(&r - a.row.rankStatus.data());
  assert(i < a.row.rankStatus.size());
  if (a.marked[i]) return;
  a.marked[i] = true;
  a.changed.push_back(i);
}

void CaptureManager::takeChangedLocked(Active& a, std::vector<storage::CaptureRankRow>* out) {
  for (size_t i : a.changed) {
    const auto& r = a.row.rankStatus[i];
    a.marked[i] = false;
    if (a.counted[i] == RankState::kDone) --a.done;
    if (a.counted[i] == RankState::kFailed) --a.failed;
    if (r.state == RankState::kDone) ++a.done;
    if (r.state == RankState::kFailed) ++a.failed;
    a.counted[i] = r.state;
    if (out != nullptr) out->push_back(r);
  }
  a.changed.clear();
}

void CaptureManager::recover() {
  auto rows = store_.capturesSince(0);
  if (!rows) {
    logError(kComponent, "reading captures left running: " + rows.message());
    return;
  }
  MutexLock lock(&mu_);
  for (auto& row : *rows) {
    if (row.state != CaptureState::kRunning) continue;
    Active a;
    a.row = std::move(row);
    const fs::path dir = directory(a.row.id);
    for (auto& r : a.row.rankStatus) {
      if (wire::isFinal(r.state)) continue;
      // The rank file is renamed into place only once complete and checked: a rank that has
      // one was done, its state still waiting for a flush when the collector stopped.
      std::error_code ec;
      const fs::path file = dir / rankFileName(r.rank);
      if (fs::is_regular_file(fs::symlink_status(file, ec))) {
        const auto size = fs::file_size(file, ec);
        if (!ec) {
          r.state = RankState::kDone;
          r.bytes = size;
          r.updatedNs = clock_.nowNs();
          changedLocked(a, r);
          continue;
        }
      }
      failRankLocked(a, r, "collector restarted during the capture");
    }
    if (const int n = mergeAttempts(dir); n >= kMaxMergeAttempts) {
      // Its done ranks are failed too: with none done, the next tick fails the capture
      // instead of merging it again. Their files stay for download.
      const std::string why = "the collector stopped during each of " + std::to_string(n) +
                              " merges of this capture (a crash on its files?); not merged again";
      for (auto& r : a.row.rankStatus) {
        if (r.state == RankState::kDone) failRankLocked(a, r, why);
      }
      logError(kComponent, "capture " + a.row.id + ": " + why);
    }
    persistLocked(a.row);
    takeChangedLocked(a, nullptr);  // stored whole just now
    logInfo(kComponent, "capture " + a.row.id + " was running when the collector stopped: " +
                            "its unfinished ranks are failed");
    active_.emplace(a.row.id, std::move(a));
  }
}

}  // namespace trainscope::capture
