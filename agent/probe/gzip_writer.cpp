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
  pending_.clear();
  if (level < 1 || level > ISAL_DEF_MAX_LEVEL) {
    return Status::error("cannot write " + path + ": compression level " + std::to_string(level) +
                         " is not in 1.." + std::to_string(ISAL_DEF_MAX_LEVEL));
  }
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr) return Status::error("cannot write " + path + ": " + std::strerror(errno));
  isal_deflate_init(&zs_);
  zs_.gzip_flag = IGZIP_GZIP;  // a gzip header and trailer around the deflate stream
  zs_.level = static_cast<uint32_t>(level);
  static constexpr uint32_t kLevelBufBytes[] = {0, ISAL_DEF_LVL1_DEFAULT, ISAL_DEF_LVL2_DEFAULT,
                                                ISAL_DEF_LVL3_DEFAULT};
  const uint32_t bufBytes = kLevelBufBytes[level];
  levelBuf_ = std::make_unique<uint8_t[]>(bufBytes);
  zs_.level_buf = levelBuf_.get();
  zs_.level_buf_size = bufBytes;
  return Status::ok();
}

Status GzipWriter::compress(std::string_view data, uint16_t flush, bool last) {
  uint8_t out[64 * 1024];
  zs_.next_in = reinterpret_cast<uint8_t*>(const_cast<char*>(data.data()));
  zs_.avail_in = static_cast<uint32_t>(data.size());
  zs_.flush = flush;
  zs_.end_of_stream = last ? 1 : 0;
  for (;;) {
    zs_.next_out = out;
    zs_.avail_out = sizeof(out);
    const int rc = isal_deflate(&zs_);
    if (rc != COMP_OK) {
      return Status::error("cannot write " + path_ + ": deflate failed (ISA-L error " +
                           std::to_string(rc) + ")");
    }
    const size_t have = sizeof(out) - zs_.avail_out;
    if (have > 0 && std::fwrite(out, 1, have, file_) != have) {
      return Status::error("cannot write " + path_ + ": " + std::strerror(errno));
    }
    written_ += have;
    // It returns when the input is used up or the output buffer is full; a flush (or the end)
    // is complete once a call leaves room in the buffer.
    if (zs_.avail_out == 0 || zs_.avail_in > 0) continue;
    if (last && zs_.internal_state.state != ZSTATE_END) continue;
    return Status::ok();
  }
}

Status GzipWriter::write(std::string_view data) {
  if (file_ == nullptr) return Status::error("cannot write " + path_ + ": the file is not open");
  unflushed_ += data.size();
  // Small writes (one trace event each) are gathered first: each isal_deflate call moves its
  // window, which costs more than compressing a couple of hundred bytes.
  if (pending_.size() + data.size() < kChunkBytes) {
    pending_.append(data);
    return Status::ok();
  }
  if (Status s = compressPending(NO_FLUSH, false); !s) return s;
  if (data.size() < kChunkBytes) {
    pending_.append(data);
    return Status::ok();
  }
  return compress(data, NO_FLUSH, false);
}

Status GzipWriter::compressPending(uint16_t flush, bool last) {
  Status s = compress(pending_, flush, last);
  pending_.clear();
  return s;
}

Status GzipWriter::flush() {
  if (file_ == nullptr) return Status::error("cannot write " + path_ + ": the file is not open");
  unflushed_ = 0;
  return compressPending(SYNC_FLUSH, false);
}

Status GzipWriter::finish() {
  if (file_ == nullptr) return Status::error("cannot write " + path_ + ": the file is not open");
  Status s = compressPending(NO_FLUSH, true);
  levelBuf_.reset();
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
  levelBuf_.reset();
  pending_.clear();
  if (file_ != nullptr) {
    std::fclose(file_);
    file_ = nullptr;
    std::remove(path_.c_str());
  }
}

}  // namespace trainscope::probe
