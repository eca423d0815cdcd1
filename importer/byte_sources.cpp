// The byte sources a trace is read from (trace_reader.h): a file, plain or gzip, through zlib's
// gzread, and bytes in memory, inflated as they are read when they are gzip.
#include "importer/trace_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

namespace trainscope::importer {
namespace {

// zlib's gzread reads gzip and plain files alike (a file without the magic is passed through)
// and continues over concatenated members.
class GzFileSource final : public ByteSource {
 public:
  GzFileSource(gzFile f, std::string path) : f_(f), path_(std::move(path)) {}
  ~GzFileSource() override { gzclose(f_); }
  Result<size_t> read(char* buffer, size_t cap) override {
    const unsigned want = static_cast<unsigned>(std::min<size_t>(cap, 1u << 30));
    const int n = gzread(f_, buffer, want);
    if (n < 0) {
      int code = 0;
      const char* msg = gzerror(f_, &code);
      return Result<size_t>::error(path_ + ": " +
                                   (code == Z_ERRNO ? std::string(std::strerror(errno))
                                                    : "corrupt gzip data (" + std::string(msg) +
                                                          ") near compressed byte " +
                                                          std::to_string(gzoffset(f_))));
    }
    if (n == 0 && !gzeof(f_)) {
      int code = 0;
      const char* msg = gzerror(f_, &code);
      if (code != Z_OK) return Result<size_t>::error(path_ + ": " + msg);
    }
    return static_cast<size_t>(n);
  }

 private:
  gzFile f_;
  std::string path_;
};

class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(std::string_view bytes) : bytes_(bytes) {
    gzip_ = bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
            static_cast<unsigned char>(bytes[1]) == 0x8b;
    if (gzip_) {
      zs_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
      zs_.avail_in = static_cast<uInt>(std::min<size_t>(bytes.size(), UINT32_MAX));
      inflateInit2(&zs_, 15 + 32);  // gzip or zlib header, detected
      init_ = true;
    }
  }
  ~MemorySource() override {
    if (init_) inflateEnd(&zs_);
  }
  Result<size_t> read(char* buffer, size_t cap) override {
    if (!gzip_) {
      const size_t n = std::min(cap, bytes_.size() - pos_);
      std::memcpy(buffer, bytes_.data() + pos_, n);
      pos_ += n;
      return n;
    }
    if (done_) return size_t{0};
    zs_.next_out = reinterpret_cast<Bytef*>(buffer);
    zs_.avail_out = static_cast<uInt>(std::min<size_t>(cap, 1u << 30));
    while (zs_.avail_out > 0) {
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        // Another member may follow (a concatenated gzip file).
        if (zs_.avail_in == 0) {
          done_ = true;
          break;
        }
        inflateReset(&zs_);
        continue;
      }
      if (rc == Z_BUF_ERROR && zs_.avail_in == 0) {
        return Result<size_t>::error("the gzip data ends early (truncated)");
      }
      if (rc != Z_OK) {
        return Result<size_t>::error("corrupt gzip data (" +
                                     std::string(zs_.msg ? zs_.msg : "inflate failed") +
                                     ") near compressed byte " + std::to_string(zs_.total_in));
      }
    }
    return static_cast<size_t>(reinterpret_cast<char*>(zs_.next_out) - buffer);
  }

 private:
  std::string_view bytes_;
  size_t pos_ = 0;
  bool gzip_ = false;
  bool init_ = false;
  bool done_ = false;
  z_stream zs_{};
};

}  // namespace

Result<std::unique_ptr<ByteSource>> openFileSource(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return Result<std::unique_ptr<ByteSource>>::error(path + ": " + std::strerror(errno));
  }
  gzbuffer(f, 256u << 10);
  return std::unique_ptr<ByteSource>(std::make_unique<GzFileSource>(f, path));
}

std::unique_ptr<ByteSource> memorySource(std::string_view bytes) {
  return std::make_unique<MemorySource>(bytes);
}

}  // namespace trainscope::importer
