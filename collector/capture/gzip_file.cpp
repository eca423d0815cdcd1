#include "collector/capture/gzip_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include <zlib.h>

namespace trainscope::capture {
namespace {

constexpr size_t kBufferBytes = 1 << 20;

// A descriptor open for reading on `path` and the file's size, or why not: a missing file,
// or something that is not a regular file (a FIFO would block a reader, a directory fail late).
Result<std::pair<int, uint64_t>> openRegularFile(const std::string& path) {
  using R = Result<std::pair<int, uint64_t>>;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return R::error("cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return R::error("cannot read " + path + ": not a regular file");
  }
  return std::make_pair(fd, static_cast<uint64_t>(st.st_size));
}

}  // namespace

uint64_t decompressBound(uint64_t compressedBytes, const DecompressLimits& limits) {
  uint64_t byRatio = 0;
  if (__builtin_mul_overflow(compressedBytes, limits.maxRatio, &byRatio)) byRatio = UINT64_MAX;
  return std::min(limits.maxBytes, std::max(kGzipFloorBytes, byRatio));
}

GzipReader::~GzipReader() {
  if (file_ != nullptr) gzclose(static_cast<gzFile>(file_));
}

Result<std::unique_ptr<GzipReader>> GzipReader::open(const std::string& path,
                                                     const DecompressLimits& limits) {
  using R = Result<std::unique_ptr<GzipReader>>;
  // The size is taken from the descriptor zlib reads, so it is the file that is read.
  auto opened = openRegularFile(path);
  if (!opened) return opened.status();
  const auto [fd, size] = *opened;
  gzFile f = gzdopen(fd, "rb");
  if (f == nullptr) {
    ::close(fd);
    return R::error("cannot open " + path + ": " + std::strerror(errno));
  }
  // zlib's buffers are this (compressed input) and twice this (output): 256 KiB reads few
  // times on large files; a small file needs no more than its own size.
  gzbuffer(f, static_cast<unsigned>(
                  std::clamp<uint64_t>(size, uint64_t{8} * 1024, uint64_t{256} * 1024)));
  std::unique_ptr<GzipReader> r(new GzipReader());
  r->file_ = f;
  r->path_ = path;
  r->compressed_ = size;
  r->bound_ = decompressBound(r->compressed_, limits);
  return r;
}

Result<size_t> GzipReader::read(char* out, size_t capacity) {
  if (finished_ || capacity == 0) return size_t{0};
  // At most one byte past the bound is asked for: enough to tell "exactly at" from "over".
  const uint64_t room = bound_ - std::min(bound_, produced_) + 1;
  const auto want = static_cast<unsigned>(std::min<uint64_t>({capacity, room, 1u << 30}));
  int n = gzread(static_cast<gzFile>(file_), out, want);
  if (n < 0) {
    int code = 0;
    return Result<size_t>::error(
        path_ + " is not a valid gzip file: " + gzerror(static_cast<gzFile>(file_), &code));
  }
  produced_ += static_cast<uint64_t>(n);
  if (produced_ > bound_) {
    return Result<size_t>::error(path_ + " decompresses to more than " + std::to_string(bound_) +
                                 " bytes (from " + std::to_string(compressed_) +
                                 " compressed): refused as a likely gzip bomb");
  }
  if (n == 0) {
    finished_ = true;
    int rc = gzclose(static_cast<gzFile>(file_));
    file_ = nullptr;
    if (rc != Z_OK) return Result<size_t>::error(path_ + " is not a valid gzip file (truncated?)");
  }
  return static_cast<size_t>(n);
}

FileSource::~FileSource() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::unique_ptr<FileSource>> FileSource::open(const std::string& path) {
  auto opened = openRegularFile(path);
  if (!opened) return opened.status();
  const auto [fd, size] = *opened;
  std::unique_ptr<FileSource> r(new FileSource());
  r->fd_ = fd;
  r->path_ = path;
  r->size_ = size;
  return r;
}

Result<size_t> FileSource::read(char* out, size_t capacity) {
  for (;;) {
    ssize_t n = ::read(fd_, out, capacity);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) {
      return Result<size_t>::error("cannot read " + path_ + ": " + std::strerror(errno));
    }
  }
}

Result<std::string> readGzipFile(const std::string& path, const DecompressLimits& limits) {
  auto reader = GzipReader::open(path, limits);
  if (!reader) return reader.status();
  // readAll's own bound is never the one that stops: the reader's is lower or equal.
  return readAll(**reader, UINT64_MAX);
}

Result<std::string> readFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Result<std::string>::error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Result<std::string>::error("cannot read " + path);
  return ss.str();
}

GzipWriter::~GzipWriter() {
  if (file_ != nullptr) gzclose(static_cast<gzFile>(file_));
}

Status GzipWriter::open(const std::string& path) {
  path_ = path;
  // Level 6: the merged trace is written once and read many times; faster levels made files
  // about a third larger on trace JSON.
  gzFile f = gzopen(path.c_str(), "wb6");
  if (f == nullptr) return Status::error("cannot create " + path + ": " + std::strerror(errno));
  file_ = f;
  // buffer_ grows to kBufferBytes as it is written and keeps its capacity: a small file never
  // holds the full size.
  return Status::ok();
}

void GzipWriter::flushBuffer() {
  if (buffer_.empty() || file_ == nullptr || failed_) {
    buffer_.clear();
    return;
  }
  int n =
      gzwrite(static_cast<gzFile>(file_), buffer_.data(), static_cast<unsigned>(buffer_.size()));
  if (n <= 0 || static_cast<size_t>(n) != buffer_.size()) failed_ = true;
  buffer_.clear();
}

void GzipWriter::write(std::string_view text) {
  buffer_.append(text);
  if (buffer_.size() >= kBufferBytes) flushBuffer();
}

Status GzipWriter::close() {
  flushBuffer();
  if (file_ == nullptr) return Status::error("cannot write " + path_ + ": not open");
  int rc = gzclose(static_cast<gzFile>(file_));
  file_ = nullptr;
  if (failed_ || rc != Z_OK) return Status::error("writing " + path_ + " failed");
  return Status::ok();
}

}  // namespace trainscope::capture
