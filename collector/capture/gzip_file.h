// Reading and writing the gzip files of captures (rank files, merged traces) with zlib. The
// functions are safe from any thread; one GzipWriter belongs to one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace trainscope::capture {

// The decompressed content of a gzip file, at most `maxBytes` of it (a larger one fails, so a
// hostile file cannot exhaust memory). Errors name the path.
Result<std::string> readGzipFile(const std::string& path, uint64_t maxBytes);

// The raw bytes of a file (sent as stored with Content-Encoding: gzip).
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
