#include "agent/spool.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <iterator>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/private_dir.h"
#include "common/log.h"
#include "common/str_cat.h"

namespace trainscope::agent {
namespace {

constexpr std::string_view kLog = "spool";
constexpr uint64_t kMinSegmentBytes = 4096;
constexpr const char* kQuarantineDir = "quarantine";

std::string errnoText(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

uint32_t getU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::string segmentName(uint64_t base) {
  char name[40];
  std::snprintf(name, sizeof name, "%020" PRIu64 ".seg", base);
  return name;
}

Status writeAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::error(std::strerror(errno));
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return Status::ok();
}

Status readAll(int fd, uint64_t offset, size_t size, std::string* out) {
  out->resize(size);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, out->data() + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::error(std::strerror(errno));
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  out->resize(done);
  return Status::ok();
}

}  // namespace

uint64_t Spool::Segment::slotEnd(size_t i) const {
  return i + 1 < slots.size() ? slots[i + 1] & ~kHoleBit : dataEnd;
}

Spool::Spool(SpoolOptions opts) : opts_(std::move(opts)) {
  uint64_t cap = std::max<uint64_t>(opts_.maxBytes / 4, kMinSegmentBytes);
  opts_.segmentBytes = std::clamp<uint64_t>(opts_.segmentBytes, kMinSegmentBytes, cap);
}

Result<std::unique_ptr<Spool>> Spool::open(const SpoolOptions& opts) {
  if (opts.dir.empty()) return Result<std::unique_ptr<Spool>>::error("spool: no directory given");
  if (opts.maxBytes < 4 * kMinSegmentBytes) {
    return Result<std::unique_ptr<Spool>>::error(
        "spool: max bytes " + std::to_string(opts.maxBytes) + " is below the minimum of 16384");
  }
  std::unique_ptr<Spool> spool(new Spool(opts));
  Status st = spool->recover();
  if (!st) return st;
  return spool;
}

Spool::~Spool() {
  Status st = sync();
  if (!st) logError(kLog, "final sync failed: " + st.message());
  for (auto& seg : segments_) {
    if (seg.fd >= 0) ::close(seg.fd);
  }
  if (lockFd_ >= 0) ::close(lockFd_);
}

Status Spool::quarantine(const std::string& name, const std::string& why) {
  const std::string dir = opts_.dir + "/" + kQuarantineDir;
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::error("spool: " + errnoText("cannot create", dir) + " to quarantine " + name +
                         " (" + why + "); move the file away by hand");
  }
  std::string to = dir + "/" + name;
  for (int n = 1; ::access(to.c_str(), F_OK) == 0; ++n) {
    to = strCat(dir, "/", name, ".", std::to_string(n));
  }
  const std::string from = opts_.dir + "/" + name;
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return Status::error("spool: " + errnoText("cannot move", from) + " to quarantine (" + why +
                         "); move the file away by hand");
  }
  ++stats_.quarantined;
  logError(kLog, "quarantined " + from + ": " + why + ". It was moved to " + to +
                     " and is not used; inspect or delete it");
  return Status::ok();
}

Status Spool::readAcked() {
  const std::string path = opts_.dir + "/acked";
  std::ifstream in(path);
  if (!in) return Status::ok();  // a new spool
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  uint64_t v = 0;
  bool ok = !text.empty() && text.size() <= 20;
  for (char c : text) {
    if (!ok || c < '0' || c > '9') {
      ok = false;
      break;
    }
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (!ok || v > kMaxSpoolIndex) {
    // Every held record is replayed instead: the collector's keys make the repeats harmless.
    return quarantine(
        "acked", "it does not hold an acked position (0.." + std::to_string(kMaxSpoolIndex) + ")");
  }
  acked_ = v;
  return Status::ok();
}

Status Spool::recover() {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(opts_.dir).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec)
    return Status::error("spool: cannot create directory " + parent.string() + ": " + ec.message());
  // Telemetry waits here: no other user may read it, or plant files.
  if (Status st = ensurePrivateDir(opts_.dir, "spool directory"); !st) {
    return Status::error("spool: " + st.message());
  }

  std::string lockPath = opts_.dir + "/LOCK";
  lockFd_ = ::open(lockPath.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (lockFd_ < 0) return Status::error("spool: " + errnoText("cannot open", lockPath));
  if (::flock(lockFd_, LOCK_EX | LOCK_NB) != 0) {
    return Status::error("spool: directory " + opts_.dir +
                         " is in use by another agent (its LOCK is held); give each agent its "
                         "own --spool-dir");
  }
  if (Status st = readAcked(); !st) return st;

  std::vector<std::pair<uint64_t, std::string>> named;
  std::vector<std::string> junk;
  for (const auto& entry : std::filesystem::directory_iterator(opts_.dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name == "LOCK" || name == "acked" || name == "acked.tmp" || name == "uploads" ||
        name == kQuarantineDir) {
      continue;
    }
    if (name.size() < 4 || name.compare(name.size() - 4, 4, ".seg") != 0) {
      logWarn(kLog, "ignoring " + entry.path().string() + ": not a file the spool writes");
      continue;
    }
    // Only names the spool itself writes: 20 digits that parse back to the same name, within
    // the index range. Anything else would move the numbering.
    char* end = nullptr;
    errno = 0;
    const uint64_t base = std::strtoull(name.c_str(), &end, 10);
    if (name.size() != 24 || end != name.c_str() + 20 || errno != 0 || segmentName(base) != name ||
        base >= kMaxSpoolIndex) {
      junk.push_back(name);
      continue;
    }
    named.emplace_back(base, name);
  }
  if (ec) return Status::error("spool: cannot list " + opts_.dir + ": " + ec.message());
  for (const std::string& name : junk) {
    Status st = quarantine(name, "its name is not a segment number the spool writes (0.." +
                                     std::to_string(kMaxSpoolIndex - 1) + ", 20 digits)");
    if (!st) return st;
  }
  std::sort(named.begin(), named.end());

  for (size_t i = 0; i < named.size(); ++i) {
    Segment seg;
    bool keep = false;
    Status st = recoverSegment(named[i].second, named[i].first, i + 1 == named.size(), &seg, &keep);
    if (!st) return st;
    if (!keep) continue;
    // A later segment must start at or after this one's end; overlapping files mean someone
    // copied files around. Keep the earlier records.
    if (!segments_.empty() && seg.base < segments_.back().end()) {
      ::close(seg.fd);
      st = quarantine(named[i].second, "it overlaps the records of " + segments_.back().path);
      if (!st) return st;
      continue;
    }
    totalBytes_ += seg.bytes;
    segments_.push_back(std::move(seg));
  }
  next_ = acked_;
  if (!segments_.empty()) next_ = std::max(next_, segments_.back().end());

  // Segments wholly acked before the last agent stopped.
  while (segments_.size() > 1 && segments_.front().end() <= acked_) dropSegment(false);

  if (!segments_.empty()) {
    logInfo(kLog, "recovered " + std::to_string(segments_.size()) + " segments in " + opts_.dir +
                      ": " + std::to_string(pendingItems()) + " unacked records from index " +
                      std::to_string(firstUnacked()));
  }
  return Status::ok();
}

Status Spool::recoverSegment(const std::string& name, uint64_t base, bool last, Segment* seg,
                             bool* keep) {
  *keep = false;
  seg->base = base;
  seg->path = opts_.dir + "/" + name;
  // Never follow a link or block on a FIFO someone put here.
  int fd = ::open(seg->path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0 && (errno == ELOOP || errno == ENXIO || errno == EISDIR || errno == EWOULDBLOCK)) {
    return quarantine(name, "it is not a regular file");
  }
  if (fd < 0) return Status::error("spool: " + errnoText("cannot open", seg->path));
  struct stat sb {};
  if (::fstat(fd, &sb) != 0) {
    ::close(fd);
    return Status::error("spool: " + errnoText("cannot stat", seg->path));
  }
  if (!S_ISREG(sb.st_mode)) {
    ::close(fd);
    return quarantine(name, "it is not a regular file");
  }
  const auto size = static_cast<uint64_t>(sb.st_size);
  if (size > opts_.maxBytes) {
    ::close(fd);
    return quarantine(name, std::to_string(size) + " bytes is more than the spool bound (" +
                                std::to_string(opts_.maxBytes) + ")");
  }
  SegmentScan scan;
  if (size > 0) {
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      ::close(fd);
      return Status::error("spool: " + errnoText("cannot map", seg->path));
    }
    scan = scanSegment(std::string_view(static_cast<const char*>(map), size), base);
    ::munmap(map, size);
  }
  if (scan.format == SegmentScan::Format::kJunk) {
    ::close(fd);
    return quarantine(name, "it is not a spool segment: " + scan.junk);
  }
  if (scan.lostRecords > 0) {
    stats_.lostRecords += scan.lostRecords;
    logWarn(kLog, seg->path + ": " + std::to_string(scan.lostRecords) + " records lost to " +
                      std::to_string(scan.damagedBytes) + " damaged bytes; the " +
                      std::to_string(scan.intactRecords()) +
                      " intact records around them are kept with their numbers");
  }
  if (scan.slots.empty() && !(last && scan.format == SegmentScan::Format::kV2)) {
    // Nothing in it (an empty file, a torn header): it holds no record, so it cannot move the
    // numbering either.
    ::close(fd);
    if (::unlink(seg->path.c_str()) != 0) logWarn(kLog, errnoText("cannot delete", seg->path));
    return Status::ok();
  }
  if (scan.tailBytes > 0) {
    logWarn(kLog, "cutting a torn or corrupt tail of " + std::to_string(scan.tailBytes) +
                      " bytes at offset " + std::to_string(scan.dataEnd) + " of " + seg->path +
                      " (records before it are kept)" +
                      (last ? "" : "; it is not the newest segment"));
    if (::ftruncate(fd, static_cast<off_t>(scan.dataEnd)) != 0) {
      ::close(fd);
      return Status::error("spool: " + errnoText("cannot truncate", seg->path));
    }
    ++stats_.tornRecords;
  }
  if (::lseek(fd, static_cast<off_t>(scan.dataEnd), SEEK_SET) < 0) {
    ::close(fd);
    return Status::error("spool: " + errnoText("cannot seek", seg->path));
  }
  seg->fd = fd;
  seg->slots = std::move(scan.slots);
  seg->dataEnd = scan.dataEnd;
  seg->bytes = scan.dataEnd;
  seg->v2 = scan.format == SegmentScan::Format::kV2;
  *keep = true;
  return Status::ok();
}

Status Spool::startSegment() {
  Segment seg;
  seg.base = next_;
  seg.path = opts_.dir + "/" + segmentName(seg.base);
  seg.fd = ::open(seg.path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (seg.fd < 0) return Status::error("spool: " + errnoText("cannot create", seg.path));
  const std::string header = segmentHeader(seg.base);
  if (Status st = writeAll(seg.fd, header.data(), header.size()); !st) {
    ::close(seg.fd);
    ::unlink(seg.path.c_str());
    return Status::error("spool: cannot write " + seg.path + ": " + st.message());
  }
  seg.dataEnd = seg.bytes = header.size();
  totalBytes_ += seg.bytes;
  // The previous segment is finished: make it durable once instead of on every sync.
  if (!segments_.empty() && dataDirty_) {
    ::fdatasync(segments_.back().fd);
    dataDirty_ = false;
  }
  segments_.push_back(std::move(seg));
  return Status::ok();
}

void Spool::dropSegment(bool countLoss) {
  Segment& seg = segments_.front();
  if (countLoss) {
    uint64_t lost = seg.end() > acked_ ? seg.end() - std::max(seg.base, acked_) : 0;
    stats_.droppedItems += lost;
    ++stats_.droppedSegments;
  }
  if (seg.fd >= 0) ::close(seg.fd);
  if (::unlink(seg.path.c_str()) != 0 && errno != ENOENT) {
    logWarn(kLog, errnoText("cannot delete", seg.path));
  }
  totalBytes_ -= seg.bytes;
  segments_.pop_front();
}

Status Spool::append(std::string_view record, Evict evict) {
  // One copy into the framing buffer either way; keep one code path.
  std::vector<std::string> one;
  one.emplace_back(record);
  return append(one, evict);
}

Status Spool::append(const std::vector<std::string>& records, Evict evict) {
  noRoom_ = false;
  if (records.empty()) return Status::ok();
  if (next_ + records.size() >= kMaxSpoolIndex) {
    // Unreachable by counting; refusing keeps the probes' batches unacked rather than lost.
    return Status::error("spool: record numbering is exhausted at " + std::to_string(next_));
  }
  size_t total = 0;
  for (const auto& r : records) {
    if (r.empty()) return Status::error("spool: refusing an empty record");
    if (r.size() > UINT32_MAX) return Status::error("spool: record too large");
    total += kRecordHeaderBytes + r.size();
  }
  if (total > opts_.maxBytes - opts_.segmentBytes) {
    return Status::error("spool: " + std::to_string(total) +
                         " bytes in one append exceed what the spool bound allows");
  }
  const bool fresh = segments_.empty() || !segments_.back().v2 || segments_.back().end() != next_ ||
                     (segments_.back().dataEnd > kSegmentHeaderBytes &&
                      segments_.back().dataEnd + total > opts_.segmentBytes);
  const uint64_t needed = total + (fresh ? kSegmentHeaderBytes : 0);
  if (evict == Evict::kNever && totalBytes_ + needed > opts_.maxBytes) {
    noRoom_ = true;
    return Status::error("spool: no room for " + std::to_string(total) + " bytes (" +
                         std::to_string(totalBytes_) + " of " + std::to_string(opts_.maxBytes) +
                         " bytes held) without dropping unacked records");
  }
  if (fresh) {
    Status st = startSegment();
    if (!st) return st;
  }
  while (totalBytes_ + total > opts_.maxBytes && segments_.size() > 1) {
    logWarn(kLog, "spool is full (" + std::to_string(totalBytes_) + " of " +
                      std::to_string(opts_.maxBytes) + " bytes): dropping the oldest segment " +
                      segments_.front().path);
    dropSegment(true);
  }
  Segment& seg = segments_.back();
  std::string buf;
  buf.reserve(total);
  for (size_t i = 0; i < records.size(); ++i) appendRecord(buf, records[i], next_ + i);
  Status st = writeAll(seg.fd, buf.data(), buf.size());
  if (!st) {
    // Cut back whatever part of the write landed so the file stays a clean sequence.
    if (::ftruncate(seg.fd, static_cast<off_t>(seg.dataEnd)) != 0 ||
        ::lseek(seg.fd, static_cast<off_t>(seg.dataEnd), SEEK_SET) < 0) {
      logError(kLog, errnoText("cannot undo a partial write to", seg.path));
    }
    return Status::error("spool: write to " + seg.path + " failed: " + st.message());
  }
  uint64_t off = seg.dataEnd;
  for (const auto& r : records) {
    seg.slots.push_back(off);
    off += kRecordHeaderBytes + r.size();
  }
  seg.dataEnd = seg.bytes = off;
  totalBytes_ += buf.size();
  next_ = seg.end();
  stats_.appended += records.size();
  dataDirty_ = true;
  return Status::ok();
}

Status Spool::read(uint64_t from, size_t maxItems, size_t maxBytes, std::vector<std::string>* out,
                   uint64_t* next) {
  *next = from;
  size_t bytes = 0;
  size_t items = 0;
  for (auto& seg : segments_) {
    if (seg.end() <= from || seg.slots.empty()) continue;
    uint64_t first = std::max(from, seg.base);
    // Plan the run of records in this segment that fits the limits, then read it in one go.
    // Lost slots are passed over (the cursor moves past them) without counting as items.
    uint64_t last = first;  // exclusive
    while (last < seg.end() && items < maxItems) {
      size_t i = last - seg.base;
      if ((seg.slots[i] & kHoleBit) == 0) {
        size_t payload = seg.slotEnd(i) - seg.slots[i] - kRecordHeaderBytes;
        if (items > 0 && bytes + payload > maxBytes) break;
        bytes += payload;
        ++items;
      }
      ++last;
    }
    if (last == first) break;
    const uint64_t startOff = seg.slots[first - seg.base] & ~kHoleBit;
    const uint64_t runBytes = seg.slotEnd(last - 1 - seg.base) - startOff;
    std::string buf;
    Status st = readAll(seg.fd, startOff, runBytes, &buf);
    if (!st) return Status::error("spool: read of " + seg.path + " failed: " + st.message());
    if (buf.size() != runBytes)
      return Status::error("spool: " + seg.path + " is shorter than its index");
    for (uint64_t idx = first; idx < last; ++idx) {
      const size_t i = idx - seg.base;
      if ((seg.slots[i] & kHoleBit) != 0) continue;
      const size_t pos = seg.slots[i] - startOff;
      const size_t len = seg.slotEnd(i) - seg.slots[i] - kRecordHeaderBytes;
      const std::string_view payload(buf.data() + pos + kRecordHeaderBytes, len);
      const uint32_t check = getU32(buf.data() + pos + 4);
      const bool intact = getU32(buf.data() + pos) == len &&
                          // Format 1's check is the plain crc32: the check at index 0.
                          recordCheck(payload, seg.v2 ? idx : 0) == check;
      if (!intact) {
        ++stats_.corruptReads;
        logWarn(kLog, "record " + std::to_string(idx) + " in " + seg.path +
                          " failed its check on read; skipping it");
      } else {
        out->emplace_back(payload);
      }
    }
    *next = last;
    from = last;
    if (items >= maxItems || bytes >= maxBytes || last < seg.end()) break;
  }
  return Status::ok();
}

void Spool::ack(uint64_t upTo) {
  upTo = std::min(upTo, next_);
  if (upTo <= acked_) return;
  acked_ = upTo;
  ackDirty_ = true;
  // Keep the active segment even when it is wholly acked: appends continue there.
  while (segments_.size() > 1 && segments_.front().end() <= acked_) dropSegment(false);
}

Status Spool::sync() {
  if (dataDirty_ && !segments_.empty()) {
    if (::fdatasync(segments_.back().fd) != 0) {
      return Status::error("spool: " + errnoText("fdatasync failed for", segments_.back().path));
    }
    dataDirty_ = false;
  }
  if (ackDirty_) return persistAcked();
  return Status::ok();
}

Status Spool::persistAcked() {
  std::string tmp = opts_.dir + "/acked.tmp";
  std::string path = opts_.dir + "/acked";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::error("spool: " + errnoText("cannot write", tmp));
  std::string text = std::to_string(acked_) + "\n";
  Status st = writeAll(fd, text.data(), text.size());
  if (st && ::fdatasync(fd) != 0) st = Status::error(std::strerror(errno));
  ::close(fd);
  if (!st) return Status::error("spool: cannot write " + tmp + ": " + st.message());
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::error("spool: " + errnoText("cannot rename to", path));
  }
  ackDirty_ = false;
  return Status::ok();
}

uint64_t Spool::firstUnacked() const {
  for (const auto& seg : segments_) {
    if (seg.end() > acked_ && !seg.slots.empty()) return std::max(seg.base, acked_);
  }
  return next_;
}

uint64_t Spool::pendingItems() const {
  uint64_t n = 0;
  for (const auto& seg : segments_) {
    if (seg.end() > acked_) n += seg.end() - std::max(seg.base, acked_);
  }
  return n;
}

SpoolStats Spool::stats() const {
  SpoolStats s = stats_;
  s.bytes = totalBytes_;
  s.segments = segments_.size();
  return s;
}

}  // namespace trainscope::agent
