#include "agent/spool.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/log.h"

namespace trainscope::agent {
namespace {

constexpr std::string_view kLog = "spool";
constexpr size_t kHeaderBytes = 8;
constexpr uint64_t kMinSegmentBytes = 4096;

std::string errnoText(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

uint32_t crcOf(const char* data, size_t size) {
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(data), static_cast<uInt>(size)));
}

void putU32(std::string& out, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out.append(b, 4);
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

Status Spool::recover() {
  std::error_code ec;
  std::filesystem::create_directories(opts_.dir, ec);
  if (ec) return Status::error("spool: cannot create directory " + opts_.dir + ": " + ec.message());

  std::string lockPath = opts_.dir + "/LOCK";
  lockFd_ = ::open(lockPath.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lockFd_ < 0) return Status::error("spool: " + errnoText("cannot open", lockPath));
  if (::flock(lockFd_, LOCK_EX | LOCK_NB) != 0) {
    return Status::error("spool: directory " + opts_.dir +
                         " is in use by another agent (its LOCK is held); give each agent its "
                         "own --spool-dir");
  }

  {
    std::ifstream in(opts_.dir + "/acked");
    uint64_t v = 0;
    if (in >> v) acked_ = v;
  }

  std::vector<uint64_t> bases;
  for (const auto& entry : std::filesystem::directory_iterator(opts_.dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.size() != 24 || name.substr(20) != ".seg") continue;
    char* end = nullptr;
    uint64_t base = std::strtoull(name.c_str(), &end, 10);
    if (end != name.c_str() + 20) continue;
    bases.push_back(base);
  }
  if (ec) return Status::error("spool: cannot list " + opts_.dir + ": " + ec.message());
  std::sort(bases.begin(), bases.end());

  for (size_t i = 0; i < bases.size(); ++i) {
    Segment seg;
    seg.base = bases[i];
    seg.path = opts_.dir + "/" + segmentName(seg.base);
    seg.fd = ::open(seg.path.c_str(), O_RDWR | O_CLOEXEC);
    if (seg.fd < 0) return Status::error("spool: " + errnoText("cannot open", seg.path));
    Status st = recoverSegment(seg, i + 1 == bases.size());
    if (!st) {
      ::close(seg.fd);
      return st;
    }
    // A later segment must start at or after this one's end; overlapping files mean someone
    // copied files around. Keep the earlier records and ignore the overlap.
    if (!segments_.empty() && seg.base < segments_.back().end()) {
      logWarn(kLog, "segment " + seg.path + " overlaps its predecessor; ignoring it");
      ::close(seg.fd);
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

Status Spool::recoverSegment(Segment& seg, bool last) {
  struct stat sb {};
  if (::fstat(seg.fd, &sb) != 0)
    return Status::error("spool: " + errnoText("cannot stat", seg.path));
  std::string data;
  Status st = readAll(seg.fd, 0, static_cast<size_t>(sb.st_size), &data);
  if (!st) return Status::error("spool: cannot read " + seg.path + ": " + st.message());
  size_t pos = 0;
  while (pos < data.size()) {
    bool ok = data.size() - pos >= kHeaderBytes;
    uint32_t len = 0;
    if (ok) {
      len = getU32(data.data() + pos);
      ok = len > 0 && data.size() - pos - kHeaderBytes >= len &&
           crcOf(data.data() + pos + kHeaderBytes, len) == getU32(data.data() + pos + 4);
    }
    if (!ok) {
      logWarn(kLog, "skipping a torn or corrupt record at offset " + std::to_string(pos) + " of " +
                        seg.path + " (" + std::to_string(data.size() - pos) +
                        " bytes cut; records before it are kept)" +
                        (last ? "" : "; it is not the newest segment"));
      if (::ftruncate(seg.fd, static_cast<off_t>(pos)) != 0) {
        return Status::error("spool: " + errnoText("cannot truncate", seg.path));
      }
      ++stats_.tornRecords;
      break;
    }
    seg.offsets.push_back(pos);
    pos += kHeaderBytes + len;
  }
  seg.bytes = pos;
  if (::lseek(seg.fd, static_cast<off_t>(pos), SEEK_SET) < 0) {
    return Status::error("spool: " + errnoText("cannot seek", seg.path));
  }
  return Status::ok();
}

Status Spool::startSegment() {
  Segment seg;
  seg.base = next_;
  seg.path = opts_.dir + "/" + segmentName(seg.base);
  seg.fd = ::open(seg.path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (seg.fd < 0) return Status::error("spool: " + errnoText("cannot create", seg.path));
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

Status Spool::append(std::string_view record) {
  // One copy into the framing buffer either way; keep one code path.
  std::vector<std::string> one;
  one.emplace_back(record);
  return append(one);
}

Status Spool::append(const std::vector<std::string>& records) {
  if (records.empty()) return Status::ok();
  std::string buf;
  size_t total = 0;
  for (const auto& r : records) total += kHeaderBytes + r.size();
  buf.reserve(total);
  for (const auto& r : records) {
    if (r.empty()) return Status::error("spool: refusing an empty record");
    if (r.size() > UINT32_MAX) return Status::error("spool: record too large");
    putU32(buf, static_cast<uint32_t>(r.size()));
    putU32(buf, crcOf(r.data(), r.size()));
    buf.append(r);
  }
  if (buf.size() > opts_.maxBytes - opts_.segmentBytes) {
    return Status::error("spool: " + std::to_string(buf.size()) +
                         " bytes in one append exceed what the spool bound allows");
  }
  if (segments_.empty() ||
      (segments_.back().bytes > 0 && segments_.back().bytes + buf.size() > opts_.segmentBytes)) {
    Status st = startSegment();
    if (!st) return st;
  }
  while (totalBytes_ + buf.size() > opts_.maxBytes && segments_.size() > 1) {
    logWarn(kLog, "spool is full (" + std::to_string(totalBytes_) + " of " +
                      std::to_string(opts_.maxBytes) + " bytes): dropping the oldest segment " +
                      segments_.front().path);
    dropSegment(true);
  }
  Segment& seg = segments_.back();
  Status st = writeAll(seg.fd, buf.data(), buf.size());
  if (!st) {
    // Cut back whatever part of the write landed so the file stays a clean sequence.
    if (::ftruncate(seg.fd, static_cast<off_t>(seg.bytes)) != 0 ||
        ::lseek(seg.fd, static_cast<off_t>(seg.bytes), SEEK_SET) < 0) {
      logError(kLog, errnoText("cannot undo a partial write to", seg.path));
    }
    return Status::error("spool: write to " + seg.path + " failed: " + st.message());
  }
  uint64_t off = seg.bytes;
  for (const auto& r : records) {
    seg.offsets.push_back(off);
    off += kHeaderBytes + r.size();
  }
  seg.bytes = off;
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
    if (seg.end() <= from || seg.offsets.empty()) continue;
    uint64_t first = std::max(from, seg.base);
    // Plan the run of records in this segment that fits the limits, then read it in one go.
    uint64_t last = first;  // exclusive
    size_t runBytes = 0;
    while (last < seg.end() && items < maxItems) {
      size_t i = last - seg.base;
      uint64_t recEnd = i + 1 < seg.offsets.size() ? seg.offsets[i + 1] : seg.bytes;
      size_t payload = recEnd - seg.offsets[i] - kHeaderBytes;
      if (items > 0 && bytes + payload > maxBytes) break;
      bytes += payload;
      runBytes += recEnd - seg.offsets[i];
      ++items;
      ++last;
    }
    if (last == first) break;
    std::string buf;
    uint64_t startOff = seg.offsets[first - seg.base];
    Status st = readAll(seg.fd, startOff, runBytes, &buf);
    if (!st) return Status::error("spool: read of " + seg.path + " failed: " + st.message());
    if (buf.size() != runBytes)
      return Status::error("spool: " + seg.path + " is shorter than its index");
    size_t pos = 0;
    for (uint64_t idx = first; idx < last; ++idx) {
      uint32_t len = getU32(buf.data() + pos);
      if (crcOf(buf.data() + pos + kHeaderBytes, len) != getU32(buf.data() + pos + 4)) {
        ++stats_.corruptReads;
        logWarn(kLog, "record " + std::to_string(idx) + " in " + seg.path +
                          " failed its CRC on read; skipping it");
      } else {
        out->emplace_back(buf.data() + pos + kHeaderBytes, len);
      }
      pos += kHeaderBytes + len;
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
    if (seg.end() > acked_ && !seg.offsets.empty()) return std::max(seg.base, acked_);
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
