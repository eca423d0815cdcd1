// A gzip file written as a stream (zlib deflate with a gzip wrapper), which knows how many
// compressed bytes it has put in the file, so a capture can keep its file under a size bound.
// One owner thread at a time; nothing here is shared.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "common/status.h"

namespace trainscope::probe {

// Creates `dir` and its parents (mkdir -p). The error names the directory and the errno text.
Status makeDirectories(const std::string& dir);

class GzipWriter {
 public:
  GzipWriter() = default;
  ~GzipWriter();  // an unfinished file is closed and removed
  GzipWriter(const GzipWriter&) = delete;
  GzipWriter& operator=(const GzipWriter&) = delete;

  // Creates (truncates) `path`. `level` is zlib's 1 (fast) .. 9 (small).
  Status open(const std::string& path, int level = Z_BEST_SPEED);
  // Compresses `data`; zlib may keep some of it back until the next flush.
  Status write(std::string_view data);
  // Pushes everything written so far into the file (Z_SYNC_FLUSH): compressedBytes() is then
  // exact. Each flush costs a few bytes and a little ratio.
  Status flush();
  // Writes the gzip trailer and closes the file.
  Status finish();
  // Closes and removes the file (a failed or dropped capture).
  void abandon();

  bool isOpen() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }
  uint64_t compressedBytes() const { return written_; }   // in the file so far
  uint64_t unflushedBytes() const { return unflushed_; }  // input since the last flush

 private:
  Status pump(int flushMode);

  std::string path_;
  FILE* file_ = nullptr;
  z_stream zs_{};
  bool zInit_ = false;
  uint64_t written_ = 0;
  uint64_t unflushed_ = 0;
};

}  // namespace trainscope::probe
