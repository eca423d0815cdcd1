// Reading and writing the gzip files of captures (rank files, merged traces) with zlib, with
// bounds on how far a file may expand. The functions are safe from any thread; one reader or
// GzipWriter belongs to one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/byte_source.h"
#include "common/status.h"

namespace trainscope::capture {

// How far a gzip file may expand. Trace JSON compresses about 8x (10x merged); gzip can reach
// ~1,000x, which is how a 204 KB file became 200 MB in the merge. A file may decompress to at
// most max(kGzipFloorBytes, its size x maxRatio) and never past maxBytes.
struct DecompressLimits {
  uint64_t maxBytes = 1ull << 30;
  uint64_t maxRatio = 64;
};
inline constexpr uint64_t kGzipFloorBytes = 1u << 20;

// The most a gzip file of `compressedBytes` may decompress to under `limits`.
uint64_t decompressBound(uint64_t compressedBytes, const DecompressLimits& limits);

// Decompresses a gzip file piece by piece, failing once the output passes decompressBound of
// the file's size (a gzip bomb), or on a corrupt or truncated file. Errors name the path.
class GzipReader final : public ByteSource {
 public:
  ~GzipReader() override;
  GzipReader(const GzipReader&) = delete;
  GzipReader& operator=(const GzipReader&) = delete;

  static Result<std::unique_ptr<GzipReader>> open(const std::string& path,
                                                  const DecompressLimits& limits);
  Result<size_t> read(char* out, size_t capacity) override;
  std::optional<uint64_t> size() const override { return std::nullopt; }

 private:
  GzipReader() = default;
  void* file_ = nullptr;  // gzFile
  std::string path_;
  uint64_t compressed_ = 0;
  uint64_t bound_ = 0;
  uint64_t produced_ = 0;
  bool finished_ = false;
};

// A file's bytes as stored (a gzip file sent with Content-Encoding: gzip), of known size.
class FileSource final : public ByteSource {
 public:
  ~FileSource() override;
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

  static Result<std::unique_ptr<FileSource>> open(const std::string& path);
  Result<size_t> read(char* out, size_t capacity) override;
  std::optional<uint64_t> size() const override { return size_; }

 private:
  FileSource() = default;
  int fd_ = -1;
  std::string path_;
  uint64_t size_ = 0;
};

// The decompressed content of a gzip file under `limits` (see GzipReader). Errors name the
// path.
Result<std::string> readGzipFile(const std::string& path, const DecompressLimits& limits);

// The raw bytes of a file.
Result<std::string> readFileBytes(const std::string& path);

// Streams text into a gzip file. close() reports the first error; the destructor closes
// without reporting.
class GzipWriter {
 public:
  GzipWriter() = default;
  ~GzipWriter();
  GzipWriter(const GzipWriter&) = delete;
  GzipWriter& operator=(const GzipWriter&) = delete;

  Status open(const std::string& path);
  void write(std::string_view text);
  Status close();

 private:
  void* file_ = nullptr;  // gzFile
  std::string path_;
  std::string buffer_;  // collects small writes; zlib calls per event would dominate
  bool failed_ = false;
  void flushBuffer();
};

}  // namespace trainscope::capture
