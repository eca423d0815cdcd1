// CaptureManager, the files of captures on disk: reading them for downloads and removing
// those past the retention or the byte bound.
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

std::string CaptureManager::directory(const std::string& id) const {
  return (fs::path(options_.dir) / id).string();
}

Result<std::unique_ptr<ByteSource>> CaptureManager::openFile(const std::string& id,
                                                             const std::string& name,
                                                             bool gzip) const {
  using R = Result<std::unique_ptr<ByteSource>>;
  if (!safeId(id)) return R::error("capture id '" + id + "' is not valid");
  if (!safeFileName(name)) return R::error("no capture file named " + name);
  const std::string path = (fs::path(directory(id)) / name).string();
  if (gzip) {
    auto raw = FileSource::open(path);
    if (!raw) return raw.status();
    return std::unique_ptr<ByteSource>(std::move(raw.value()));
  }
  auto reader = GzipReader::open(path, options_.download);
  if (!reader) return reader.status();
  return std::unique_ptr<ByteSource>(std::move(reader.value()));
}

Result<uint64_t> CaptureManager::pruneStoredFiles(int64_t nowNs) {
  if (options_.filesRetentionNs == 0 && options_.maxStoredBytes == 0) return uint64_t{0};
  auto rows = store_.capturesSince(0);
  if (!rows) return rows.status();
  struct Held {
    storage::CaptureRow row;
    uint64_t bytes = 0;
  };
  std::vector<Held> held;
  uint64_t total = 0;
  for (auto& row : *rows) {
    if (row.state == CaptureState::kRunning || !safeId(row.id)) continue;
    std::error_code ec;
    uint64_t bytes = 0;
    for (const auto& e : fs::directory_iterator(directory(row.id), ec)) {
      std::error_code sizeEc;
      if (e.is_regular_file(sizeEc)) bytes += e.file_size(sizeEc);
    }
    if (ec || bytes == 0) continue;  // removed already (or never had files)
    total += bytes;
    held.push_back({std::move(row), bytes});
  }
  std::sort(held.begin(), held.end(), [](const Held& a, const Held& b) {
    return a.row.createdNs != b.row.createdNs ? a.row.createdNs < b.row.createdNs
                                              : a.row.id < b.row.id;
  });
  uint64_t removed = 0;
  for (auto& h : held) {
    std::string why;
    if (options_.filesRetentionNs > 0 && nowNs - h.row.createdNs > options_.filesRetentionNs) {
      why = "older than the retention (--retention-hours)";
    } else if (options_.maxStoredBytes > 0 && total > options_.maxStoredBytes) {
      why = "the oldest while captures held more than " + std::to_string(options_.maxStoredBytes) +
            " bytes (--captures-max-bytes)";
    } else {
      continue;
    }
    std::error_code ec;
    fs::remove_all(directory(h.row.id), ec);
    if (ec) {
      logWarn(kComponent, "removing the files of capture " + h.row.id + ": " + ec.message());
      continue;
    }
    total -= h.bytes;
    removed += h.bytes;
    h.row.traceBytes.reset();
    for (auto& r : h.row.rankStatus) r.bytes = 0;
    h.row.summary += "; files removed: " + why;
    h.row.updatedNs = nowNs;
    if (Status s = store_.writeCapture(h.row); !s) {
      logWarn(kComponent, "capture " + h.row.id +
                              ": its files are removed, its row not updated: " + s.message());
    }
    logInfo(kComponent, "removed the files of capture " + h.row.id + " (" +
                            std::to_string(h.bytes) + " bytes): " + why);
  }
  return removed;
}

}  // namespace trainscope::capture
