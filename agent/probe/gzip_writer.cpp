#include "agent/probe/gzip_writer.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

namespace trainscope::probe {

Status makeDirectories(const std::string& dir) {
  if (dir.empty()) return Status::error("cannot create a directory with an empty name");
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    partial = dir.substr(0, pos);
    if (partial.empty()) continue;
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::error("cannot create directory " + partial + ": " + std::strerror(errno));
    }
  }
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::error("cannot create directory " + dir + ": " +
                         std::strerror(errno != 0 ? errno : ENOTDIR));
  }
  return Status::ok();
}

GzipWriter::~GzipWriter() {
  if (file_ != nullptr) abandon();
}

Status GzipWriter::open(const std::string& path, int level) {
  path_ = path;
  written_ = 0;
  unflushed_ = 0;
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr) return Status::error("cannot write " + path + ": " + std::strerror(errno));
  zs_ = z_stream{};
  // 15 window bits + 16: a gzip header and trailer instead of zlib's.
  if (deflateInit2(&zs_, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    abandon();
    return Status::error("cannot write " + path + ": zlib deflateInit2 failed");
  }
  zInit_ = true;
  return Status::ok();
}

Status GzipWriter::pump(int flushMode) {
  unsigned char out[64 * 1024];
  do {
    zs_.next_out = out;
    zs_.avail_out = sizeof(out);
    const int rc = deflate(&zs_, flushMode);
    if (rc == Z_STREAM_ERROR) return Status::error("cannot write " + path_ + ": zlib stream error");
    const size_t have = sizeof(out) - zs_.avail_out;
    if (have > 0 && std::fwrite(out, 1, have, file_) != have) {
      return Status::error("cannot write " + path_ + ": " + std::strerror(errno));
    }
    written_ += have;
  } while (zs_.avail_out == 0 || (flushMode == Z_FINISH && zs_.avail_in > 0));
  return Status::ok();
}

Status GzipWriter::write(std::string_view data) {
  if (file_ == nullptr) return Status::error("cannot write " + path_ + ": the file is not open");
  zs_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs_.avail_in = static_cast<uInt>(data.size());
  unflushed_ += data.size();
  return pump(Z_NO_FLUSH);
}

Status GzipWriter::flush() {
  if (file_ == nullptr) return Status::error("cannot write " + path_ + ": the file is not open");
  zs_.next_in = nullptr;
  zs_.avail_in = 0;
  unflushed_ = 0;
  return pump(Z_SYNC_FLUSH);
}

Status GzipWriter::finish() {
  if (file_ == nullptr) return Status::error("cannot write " + path_ + ": the file is not open");
  zs_.next_in = nullptr;
  zs_.avail_in = 0;
  Status s = pump(Z_FINISH);
  deflateEnd(&zs_);
  zInit_ = false;
  if (!s) {
    abandon();
    return s;
  }
  unflushed_ = 0;
  const bool flushed = std::fflush(file_) == 0;
  const int err = errno;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!flushed || !closed) {
    std::remove(path_.c_str());
    return Status::error("cannot write " + path_ + ": " + std::strerror(flushed ? errno : err));
  }
  return Status::ok();
}

void GzipWriter::abandon() {
  if (zInit_) deflateEnd(&zs_);
  zInit_ = false;
  if (file_ != nullptr) {
    std::fclose(file_);
    file_ = nullptr;
    std::remove(path_.c_str());
  }
}

}  // namespace trainscope::probe
