#include "agent/uploads.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "agent/internal.h"
#include "agent/probe_side.h"
#include "common/clock.h"
#include "common/log.h"
#include "schema/capture_state.h"

namespace trainscope::agent {
using namespace internal;  // NOLINT(google-build-using-namespace): the agent's own constants

namespace {

// Capture-file bytes read and spooled per loop turn: a 64 MiB file takes 16 turns of a few
// milliseconds each instead of one long stall of heartbeats and probe acks.
constexpr uint64_t kUploadBytesPerTurn = 4u << 20;
// Uploads remembered after they finish, so a probe's resent "uploading" status (its ack was
// lost) is not answered with "cannot open" for a file already shipped and deleted.
constexpr size_t kFinishedUploadsKept = 256;
// A chunk the spool refuses is tried again after this long, and the file given up (failed
// status) after kUploadTries refusals in a row.
constexpr int64_t kUploadRetryNs = 1000 * kMs;
constexpr int kUploadTries = 5;
// An upload waiting for room in the spool looks again this often, and fails (its file kept)
// after kUploadGiveUpNs: by then the collector's deadline for the capture has long passed
// (docs/CAPTURE.md: 30 s past the capture's last step).
constexpr int64_t kUploadWaitNs = 200 * kMs;
constexpr int64_t kUploadGiveUpNs = 300'000 * kMs;
// A chunk's record is its data plus an envelope of ids and offsets: a bound for the check
// made before reading it.
constexpr uint64_t kChunkOverheadBytes = 4096;
// Journal entries start with this and the probe's uid.
constexpr const char* kJournalTag = "upload ";

// The resolved path; on failure the message is strerror and *err the errno.
Result<std::string> realPath(const std::string& path, int* err = nullptr) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) {
    int e = errno;
    if (err != nullptr) *err = e;
    return Result<std::string>::error(std::strerror(e));
  }
  return std::string(buf);
}

bool isUnder(const std::string& path, const std::string& root) {
  if (root == "/") return path.size() > 1;
  return path.size() > root.size() + 1 && path.compare(0, root.size(), root) == 0 &&
         path[root.size()] == '/';
}

// Opens the directory at the absolute path `dir` from "/" one component at a time, each with
// O_DIRECTORY|O_NOFOLLOW: the descriptor is of the directory that really lies at that path
// now, never one a link swapped into the path leads to. -1 (errno set) otherwise.
int openDirNoFollow(const std::string& dir) {
  int fd = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  size_t pos = 0;
  while (fd >= 0 && pos < dir.size()) {
    size_t next = dir.find('/', pos);
    if (next == std::string::npos) next = dir.size();
    const std::string part = dir.substr(pos, next - pos);
    pos = next + 1;
    if (part.empty()) continue;
    int sub = -1;
    if (part == "." || part == "..") {
      errno = EINVAL;  // a resolved path has none; refuse rather than walk up
    } else {
      sub = ::openat(fd, part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    const int err = errno;
    ::close(fd);
    errno = err;
    fd = sub;
  }
  return fd;
}

// One upload per (command, rank): the key of the journal entry and of the finished list.
std::string uploadKey(const wire::CommandStatus& st) {
  std::string key;
  for (char c : st.command_id()) {
    bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '_' || c == '.';
    key.push_back(safe ? c : '_');
  }
  return key + "-rank-" + std::to_string(st.rank());
}

}  // namespace

Uploads::Uploads(const AgentOptions& opts, SpoolWriter& spool, std::string spoolDir)
    : opts_(opts),
      spool_(spool),
      spoolDir_(std::move(spoolDir)),
      // finalizeOptions fills the default; an embedder's options may leave it 0.
      fileBudget_(opts.spoolFileBytes != 0 ? opts.spoolFileBytes : opts.spoolMaxBytes / 4) {}

Uploads::~Uploads() {
  for (auto& up : uploads_) {
    if (up.fd >= 0) ::close(up.fd);  // the journal resumes it in the next agent
  }
}

int64_t Uploads::nextDeadline(int64_t now) const {
  if (uploads_.empty()) return INT64_MAX;
  return std::max(now, retryAtMono_);  // the next chunks at once
}

void Uploads::fill(AgentStats& s) const {
  s.filesShipped = filesShipped_;
  s.filesFailed = filesFailed_;
  s.fileBytesShipped = fileBytesShipped_;
  s.uploadsActive = static_cast<uint32_t>(uploads_.size());
  s.fileBytesHeld = heldBytes_;
  s.uploadWaiting = waitingSinceMono_ != 0;
}

void Uploads::queue(const wire::CommandStatus& status, uint32_t uid, bool resumed) {
  const std::string key = uploadKey(status);
  for (const Upload& up : uploads_) {
    if (uploadKey(up.status) == key) return;  // a probe's resend of the same status
  }
  if (std::find(finished_.begin(), finished_.end(), key) != finished_.end()) {
    return;  // shipped already; the probe resent its status because our ack was lost
  }
  const std::string& path = status.file_path();
  auto refuse = [&](const std::string& detail) {
    ++filesFailed_;
    logWarn(kLog, "capture " + status.command_id() + " rank " + std::to_string(status.rank()) +
                      ": " + detail);
    spool_.commandStatus(status.command_id(), status.job(), status.rank(), wire::RankState::kFailed,
                         detail);
  };
  auto root = realPath(opts_.captureDir);
  if (!root) {
    refuse("refusing to ship " + path + ": the capture directory " + opts_.captureDir +
           " cannot be resolved: " + root.message());
    return;
  }
  // The named path itself is opened: O_NOFOLLOW refuses a link in its last component,
  // O_NONBLOCK keeps a FIFO (or a device) from blocking the loop in open(). Everything else
  // is judged on the opened descriptor, so nothing can be swapped in after the check.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    if (resumed && err == ENOENT) return;  // deleted after its last chunk, before the journal
    refuse(err == ELOOP ? "refusing to ship " + path + ": it is a symbolic link"
                        : "cannot read " + path + ": " + std::strerror(err));
    return;
  }
  struct stat sb {};
  auto opened = realPath("/proc/self/fd/" + std::to_string(fd));
  std::string why;
  // The probe's own files are what it may ask for; over tcp its uid is unknown, and only
  // files of the agent's own user are shipped.
  const uint32_t owner = uid != kUnknownUid ? uid : static_cast<uint32_t>(::geteuid());
  if (::fstat(fd, &sb) != 0) {
    why = std::string("cannot stat it: ") + std::strerror(errno);
  } else if (!S_ISREG(sb.st_mode)) {
    why = S_ISFIFO(sb.st_mode) ? "it is a FIFO, not a regular file" : "it is not a regular file";
  } else if (!opened || !isUnder(*opened, *root)) {
    why = "it is not under the capture directory " + *root + " (--capture-dir)";
  } else if (sb.st_nlink != 1) {
    why = "it has " + std::to_string(sb.st_nlink) +
          " hard links (a link to another file is never shipped)";
  } else if (sb.st_uid != owner) {
    why = "it is owned by uid " + std::to_string(sb.st_uid) + ", not by the probe's uid " +
          std::to_string(owner);
  } else if (static_cast<uint64_t>(sb.st_size) > opts_.maxFileBytes) {
    why = std::to_string(sb.st_size) + " bytes is more than --max-file-bytes (" +
          std::to_string(opts_.maxFileBytes) + ")";
  }
  if (!why.empty()) {
    ::close(fd);
    refuse("refusing to ship " + path + ": " + why);
    return;
  }
  Upload up;
  up.status = status;
  up.uid = uid;
  up.resolved = *opened;
  up.fd = fd;
  up.size = static_cast<uint64_t>(sb.st_size);
  // The journal entry is the status and the probe's uid; written before the first chunk.
  std::error_code ec;
  std::filesystem::create_directories(spoolDir_ + "/uploads", ec);
  up.journal = spoolDir_ + "/uploads/" + key;
  if (!resumed) {
    std::string tmp = up.journal + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << kJournalTag << uid << '\n' << status.SerializeAsString();
    }
    std::filesystem::rename(tmp, up.journal, ec);
    if (ec) {
      spool_.logProblem(LogLevel::kWarn, "cannot journal the upload of " + path + ": " +
                                             ec.message() + " (a restart would not resume it)");
    }
  }
  logInfo(kLog, "shipping " + up.resolved + " (" + std::to_string(up.size) +
                    " bytes) for capture " + status.command_id() + " rank " +
                    std::to_string(status.rank()) + (resumed ? ", resumed after a restart" : ""));
  uploads_.push_back(std::move(up));
}

void Uploads::resume() {
  std::error_code ec;
  std::vector<std::string> entries;
  for (const auto& e : std::filesystem::directory_iterator(spoolDir_ + "/uploads", ec)) {
    std::string name = e.path().filename().string();
    if (name.size() > 4 && name.substr(name.size() - 4) == ".tmp") {
      std::filesystem::remove(e.path(), ec);
      continue;
    }
    entries.push_back(e.path().string());
  }
  std::sort(entries.begin(), entries.end());
  for (const std::string& entry : entries) {
    std::ifstream in(entry, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // "upload <uid>\n" and the status; an entry of an older agent is the status alone (its
    // probe's uid unknown).
    uint32_t uid = kUnknownUid;
    if (bytes.compare(0, std::strlen(kJournalTag), kJournalTag) == 0) {
      size_t nl = bytes.find('\n');
      char* end = nullptr;
      const unsigned long v = std::strtoul(bytes.c_str() + std::strlen(kJournalTag), &end, 10);
      if (nl == std::string::npos || end != bytes.c_str() + nl) continue;  // torn: removed below
      uid = static_cast<uint32_t>(std::min<unsigned long>(v, kUnknownUid));
      bytes.erase(0, nl + 1);
    }
    wire::CommandStatus st;
    size_t before = uploads_.size();
    if (st.ParseFromString(bytes) && !st.file_path().empty()) queue(st, uid, true);
    // Shipped completely (file gone), unreadable, or refused: the entry is done with.
    if (uploads_.size() == before) std::filesystem::remove(entry, ec);
  }
}

void Uploads::finish(Upload& up, const std::string& failure) {
  const wire::CommandStatus& st = up.status;
  if (!failure.empty()) {
    ++filesFailed_;
    logWarn(kLog,
            "capture " + st.command_id() + " rank " + std::to_string(st.rank()) + ": " + failure);
    spool_.commandStatus(st.command_id(), st.job(), st.rank(), wire::RankState::kFailed, failure);
  } else {
    ++filesShipped_;
    removeShipped(up);
  }
  if (up.fd >= 0) ::close(up.fd);
  up.fd = -1;
  std::error_code ec;
  if (!up.journal.empty()) std::filesystem::remove(up.journal, ec);
  finished_.push_back(uploadKey(st));
  while (finished_.size() > kFinishedUploadsKept) finished_.pop_front();
}

void Uploads::removeShipped(const Upload& up) {
  // Delete only the file that was shipped, and only in the directory it was opened in: the
  // directory is reached without following links (a parent swapped for a link since the open
  // fails the walk), the name must still be the opened inode there, and the unlink is made
  // relative to that directory's descriptor, so no path is resolved twice.
  const std::filesystem::path resolved(up.resolved);
  const std::string name = resolved.filename().string();
  const std::string parent = resolved.parent_path().string();
  const std::filesystem::path parentPath(parent);
  auto keep = [&](const std::string& why) {
    logWarn(kLog, "shipped " + up.resolved + " but did not delete it: " + why);
  };
  // The capture's own directory goes when it is empty (removed through its parent's
  // descriptor); the capture root stays.
  auto root = realPath(opts_.captureDir);
  const bool removeParent = root && isUnder(parent, *root);
  const int grand = removeParent ? openDirNoFollow(parentPath.parent_path().string()) : -1;
  int dir = -1;
  if (removeParent) {
    if (grand >= 0) {
      dir = ::openat(grand, parentPath.filename().c_str(),
                     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
  } else {
    dir = openDirNoFollow(parent);
  }
  struct stat opened {
  }, now{};
  if (dir < 0) {
    keep(parent + " is no longer a directory reached without links: " + std::strerror(errno));
  } else if (::fstat(up.fd, &opened) != 0 ||
             ::fstatat(dir, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) != 0 ||
             opened.st_dev != now.st_dev || opened.st_ino != now.st_ino) {
    keep("its name there no longer names the file shipped");
  } else if (::unlinkat(dir, name.c_str(), 0) != 0) {
    keep(std::strerror(errno));
  } else if (grand >= 0) {
    (void)::unlinkat(grand, parentPath.filename().c_str(), AT_REMOVEDIR);
  }
  if (dir >= 0) ::close(dir);
  if (grand >= 0) ::close(grand);
}

void Uploads::release() {
  // Chunks the collector acked, or that the spool bound dropped, no longer hold room.
  const uint64_t held = spool_.spool().firstUnacked();
  while (!inSpool_.empty() && inSpool_.front().first < held) {
    heldBytes_ -= inSpool_.front().second;
    inSpool_.pop_front();
  }
}

void Uploads::pump(int64_t now) {
  if (now < retryAtMono_) return;
  release();
  uint64_t budget = kUploadBytesPerTurn;
  std::string data;
  while (!uploads_.empty() && budget > 0) {
    Upload& up = uploads_.front();
    const wire::CommandStatus& st = up.status;
    uint64_t want = std::min<uint64_t>(wire::kMaxChunkBytes, up.size - up.offset);
    // Files never push telemetry out of the spool: within their share (at least one chunk
    // at a time), and only where the spool has room, else the upload waits for acks.
    if (heldBytes_ > 0 && heldBytes_ + want + kChunkOverheadBytes > opts_.spoolFileBytes) {
      wait(up, now,
           "its share of the spool (--spool-file-bytes " + std::to_string(opts_.spoolFileBytes) +
               ") is full of unacked chunks");
      return;
    }
    data.resize(want);
    size_t got = 0;
    std::string failure;
    while (got < want) {
      ssize_t n =
          ::pread(up.fd, data.data() + got, want - got, static_cast<off_t>(up.offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        failure = "cannot read " + st.file_path() + " at offset " +
                  std::to_string(up.offset + got) + ": " + std::strerror(errno);
        break;
      }
      if (n == 0) {
        failure = "cannot read " + st.file_path() + ": it shrank to " +
                  std::to_string(up.offset + got) + " bytes while being shipped (" +
                  std::to_string(up.size) + " at the start)";
        break;
      }
      got += static_cast<size_t>(n);
    }
    if (!failure.empty()) {
      finish(up, failure);
      uploads_.pop_front();
      continue;
    }
    bool last = up.offset + want == up.size;
    wire::Envelope env;
    auto* fc = env.mutable_file_chunk();
    fc->set_command_id(st.command_id());
    fc->set_job(st.job());
    fc->set_rank(st.rank());
    fc->set_offset(up.offset);
    fc->set_crc32(static_cast<uint32_t>(
        ::crc32(0L, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(want))));
    fc->set_data(std::move(data));
    data = std::string();
    if (last) {
      fc->set_last(true);
      fc->set_total_bytes(up.size);
    }
    const std::string record = wire::encode(env);
    const uint64_t index = spool_.spool().nextIndex();
    Status written = spool_.appendOne(record, Spool::Evict::kNever, now);
    if (!written && spool_.spool().noRoom()) {
      wait(up, now, "the spool is full of unacked records");
      return;
    }
    if (!written) {
      // Disk full, or a chunk larger than the spool may hold: retry from the same offset a
      // little later, and give the file up after a few tries.
      if (++failures_ >= kUploadTries) {
        finish(up, "cannot spool a chunk of " + st.file_path() + " at offset " +
                       std::to_string(up.offset) + ": " + written.message());
        uploads_.pop_front();
        failures_ = 0;
        continue;
      }
      spool_.logProblem(LogLevel::kError, "cannot spool a file chunk: " + written.message());
      retryAtMono_ = now + kUploadRetryNs;
      return;
    }
    failures_ = 0;
    waitingSinceMono_ = 0;
    inSpool_.emplace_back(index, record.size());
    heldBytes_ += record.size();
    fileBytesShipped_ += want;
    up.offset += want;
    budget -= std::min(budget, std::max<uint64_t>(want, 1));
    if (last) {
      finish(up, "");
      uploads_.pop_front();
    }
  }
}

void Uploads::wait(Upload& up, int64_t now, const std::string& why) {
  if (waitingSinceMono_ == 0) {
    waitingSinceMono_ = now;
    logInfo(kLog, "upload of " + up.resolved + " waits for the collector: " + why);
  }
  if (now - waitingSinceMono_ >= kUploadGiveUpNs) {
    finish(up, "gave up shipping " + up.status.file_path() + " after " +
                   std::to_string(kUploadGiveUpNs / (1000 * kMs)) + " s without room in the " +
                   "spool (" + why + "; is the collector acknowledging?)");
    uploads_.pop_front();
    waitingSinceMono_ = 0;
  }
  retryAtMono_ = now + kUploadWaitNs;
}

}  // namespace trainscope::agent
