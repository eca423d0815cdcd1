// What the capture manager's sources share (manager.cpp: requests, commands, statuses and
// chunks; manager_tick.cpp: deadlines and merges; manager_store.cpp: storing captures and
// recovering them; manager_files.cpp: their files on disk): names, checks, the merge count and
// the final row. For those files only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "collector/storage/store.h"
#include "schema/capture_state.h"

namespace trainscope::capture::internal {

inline constexpr const char* kComponent = "capture";

// The merges begun on a capture, counted in a file of its directory before each one and
// removed when it ends: a merge that takes the collector down (one did, on a rank file nested
// 100,000 levels deep) would otherwise be begun again by every restart's recovery, a crash
// loop. One retry is allowed, for a collector that was merely killed during a merge.
inline constexpr const char* kMergeAttemptsFile = "merge-attempts";
inline constexpr int kMaxMergeAttempts = 2;

inline int mergeAttempts(const std::filesystem::path& dir) {
  std::ifstream in(dir / kMergeAttemptsFile);
  int n = 0;
  return in >> n && n > 0 ? n : 0;
}

inline void setMergeAttempts(const std::filesystem::path& dir, int n) {
  std::ofstream out(dir / kMergeAttemptsFile, std::ios::trunc);
  out << n << "\n";
}

inline std::string rankFileName(uint32_t rank) {
  return "rank-" + std::to_string(rank) + ".json.gz";
}

// The row as it ends: `failures` (from the merge) applied, the final state chosen by how many
// ranks are done (manager.cpp).
storage::CaptureRow finalRow(storage::CaptureRow row,
                             const std::map<uint32_t, std::string>& failures, int64_t nowNs);

inline bool allFinal(const storage::CaptureRow& row) {
  return std::all_of(row.rankStatus.begin(), row.rankStatus.end(),
                     [](const auto& r) { return wire::isFinal(r.state); });
}

inline bool safeId(const std::string& id) {
  return !id.empty() && id.size() <= 128 && std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  });
}

inline bool safeFileName(const std::string& name) {
  if (name == "trace.json.gz") return true;
  const std::string prefix = "rank-";
  const std::string suffix = ".json.gz";
  if (name.size() <= prefix.size() + suffix.size()) return false;
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  return digits.find_first_not_of("0123456789") == std::string::npos;
}

inline std::string summaryOf(size_t done, size_t failed, size_t ranks) {
  std::string out = std::to_string(done) + " of " + std::to_string(ranks) +
                    (ranks == 1 ? " rank done" : " ranks done");
  if (failed > 0) out += ", " + std::to_string(failed) + " failed";
  return out;
}

}  // namespace trainscope::capture::internal
