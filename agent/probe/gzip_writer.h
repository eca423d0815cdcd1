// A gzip file written as a stream, which knows how many compressed bytes it has put in the
// file, so a capture can keep its file under a size bound. One owner thread at a time; nothing
// here is shared.
//
// Deflate is Intel's ISA-L (igzip), not zlib: at its level 1 it compresses the JSON traces we
// write about 7 times faster than zlib's fastest level, to a slightly smaller file (a 28 MB
// imported timeline: 0.02 s and 2.23 MB against 0.14 s and 2.27 MB), and the output is one
// ordinary gzip member that every reader takes.
#pragma once

#include <isa-l/igzip_lib.h>

#include <cstdint>
#include <cstdio>
#include <memory>
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

  // Creates (truncates) `path`. `level` is ISA-L's 1 (fastest; about zlib's level 1 in size)
  // .. 3 (smallest). Level 0 is refused: its fixed code tables grow input that does not
  // compress by about a quarter, where 1..3 store such blocks as they are.
  Status open(const std::string& path, int level = 1);
  // Compresses `data`; the compressor may keep some of it back until the next flush.
  Status write(std::string_view data);
  // Pushes everything written so far into the file (a sync flush): compressedBytes() is then
  // exact. Each flush costs a few bytes and a little ratio.
  Status flush();
  // Writes the gzip trailer and closes the file.
  Status finish();
  // Closes and removes the file (a failed or dropped capture).
  void abandon();

  // The most compressed bytes `input` bytes of input (with their flush) can become: the size
  // bounds count unflushed input at this. Generous: levels 1..3 store what does not compress
  // (random bytes grow by 0.01 %), and block headers and a flush add a few bytes.
  static uint64_t worstCaseBytes(uint64_t input) { return input + input / 32 + 512; }

  bool isOpen() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }
  uint64_t compressedBytes() const { return written_; }   // in the file so far
  uint64_t unflushedBytes() const { return unflushed_; }  // input since the last flush

 private:
  static constexpr size_t kChunkBytes = size_t{256} * 1024;  // input gathered per compressor call

  // Runs the compressor over `data` with `flush`, writing what it gives; with `last`, until the
  // gzip trailer is out.
  Status compress(std::string_view data, uint16_t flush, bool last);
  Status compressPending(uint16_t flush, bool last);  // compress(pending_), then empties it

  std::string path_;
  FILE* file_ = nullptr;
  isal_zstream zs_{};
  std::unique_ptr<uint8_t[]> levelBuf_;
  std::string pending_;  // written, not yet given to the compressor (< kChunkBytes)  // the level's
                         // hash tables (ISA-L's suggested size)
  uint64_t written_ = 0;
  uint64_t unflushed_ = 0;
};

}  // namespace trainscope::probe
