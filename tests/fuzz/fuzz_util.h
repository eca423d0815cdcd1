// Helpers the libFuzzer targets share: a property check that stops the target (libFuzzer keeps
// the input as a crash), an in-memory gzip and a raw write for the rank and chunk files the
// targets write.
// Test-only; called from the fuzzing thread.
#pragma once

#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace trainscope::fuzz {

// A property the target asserts; abort() so libFuzzer records the input.
inline void check(bool ok) {
  if (!ok) std::abort();
}

// gzip of `text` at level 1, with the smallest window (512 bytes) and memory level: the
// target's own cost, a deflate state per file, stays out of the way of the code under test
// (zlib's defaults, a 256 KiB state allocated and cleared per file under ASan, took a third of
// capture_chunks' time). Any gzip reader reads the stream.
inline std::string gzipOf(const std::string& text) {
  z_stream z{};
  check(deflateInit2(&z, 1, Z_DEFLATED, 9 + 16, 1, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, text.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  check(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// Writes `bytes` to `path` as they are (a rank or chunk file the code under test reads).
inline void writeRaw(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  check(f != nullptr);
  check(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  std::fclose(f);
}

}  // namespace trainscope::fuzz
