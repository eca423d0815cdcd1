// A stream of bytes read piece by piece: how a large file (a capture's merged trace, possibly
// decompressed on the way) reaches an HTTP client without being held in memory whole. One
// reader at a time; the HTTP server reads it on the connection's strand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"

namespace trainscope {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Up to `capacity` next bytes into `out`: the count, 0 at the end, or why the stream broke
  // (a reader must then stop: what was sent so far is incomplete).
  virtual Result<size_t> read(char* out, size_t capacity) = 0;
  // Every byte the stream will give when known before reading (sent as Content-Length);
  // nullopt when only the end tells (a decompressed stream).
  virtual std::optional<uint64_t> size() const = 0;
};

// The whole stream as a string, failing past `maxBytes`: for tests and small files.
inline Result<std::string> readAll(ByteSource& source, uint64_t maxBytes) {
  std::string out;
  char buffer[64 * 1024];
  for (;;) {
    auto n = source.read(buffer, sizeof buffer);
    if (!n) return n.status();
    if (*n == 0) return out;
    if (out.size() + *n > maxBytes) {
      return Result<std::string>::error("stream longer than " + std::to_string(maxBytes) +
                                        " bytes");
    }
    out.append(buffer, *n);
  }
}

}  // namespace trainscope
