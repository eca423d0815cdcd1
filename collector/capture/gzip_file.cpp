#include "collector/capture/gzip_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <zlib.h>

namespace trainscope::capture {
namespace {

constexpr size_t kBufferBytes = 1 << 20;

}  // namespace

Result<std::string> readGzipFile(const std::string& path, uint64_t maxBytes) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return Result<std::string>::error("cannot open " + path + ": " + std::strerror(errno));
  }
  gzbuffer(f, 256 * 1024);
  std::string out;
  char chunk[64 * 1024];
  for (;;) {
    int n = gzread(f, chunk, sizeof chunk);
    if (n < 0) {
      int code = 0;
      std::string why = gzerror(f, &code);
      gzclose(f);
      return Result<std::string>::error(path + " is not a valid gzip file: " + why);
    }
    if (n == 0) break;
    out.append(chunk, static_cast<size_t>(n));
    if (out.size() > maxBytes) {
      gzclose(f);
      return Result<std::string>::error(path + " decompresses to more than " +
                                        std::to_string(maxBytes) + " bytes");
    }
  }
  if (gzclose(f) != Z_OK) {
    return Result<std::string>::error(path + " is not a valid gzip file (truncated?)");
  }
  return out;
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
  buffer_.reserve(kBufferBytes + 4096);
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
