// A blocking client for ClickHouse's HTTP interface (Boost.Beast), and the RowBinary encoding
// the ClickHouse store writes and reads rows in. One connection, kept alive and reopened when
// the server closed it. Not thread-safe: each user (the store's writer, its readers) holds its
// own client or a lock around it.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace trainscope::storage::clickhouse {

// Where a ClickHouse server and database are: clickhouse://HOST:PORT/DB.
struct Endpoint {
  std::string host = "127.0.0.1";
  std::string port = "8123";
  std::string database = "trainscope";
  // Settings sent with every query as URL parameters ("insert_distributed_sync=1"); "" none.
  std::string settings;
};

// Parses "clickhouse://HOST:PORT/DB" (HOST may be [v6]; DB letters, digits and '_', not
// starting with a digit). Errors name the part at fault.
Result<Endpoint> parseUrl(const std::string& url);

// What --store names: one server, or the servers of a cluster.
struct StoreUrl {
  std::vector<Endpoint> servers;  // one, or every shard's server in remote_servers' order
  std::string cluster;            // "" for one server
};

// Parses "clickhouse://HOST:PORT/DB" or "clickhouse://HOST:PORT,HOST:PORT,.../DB?cluster=NAME"
// (NAME a cluster of the servers' <remote_servers>, letters, digits, '_' and '-'; the servers'
// HTTP endpoints listed one per shard, in the order remote_servers lists the shards). Errors
// name the part at fault.
Result<StoreUrl> parseStoreUrl(const std::string& url);

// SQL string literal of `text`: quoted, with backslash and quote escaped (18.16 has no query
// parameters, so every value in a query goes through this or is a number).
std::string quote(std::string_view text);

class HttpClient {
 public:
  HttpClient(Endpoint endpoint, std::chrono::milliseconds timeout);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Runs `sql` in the endpoint's database and returns the response body. With `data`, sends
  // it as the body and `sql` in the URL (an INSERT ... FORMAT RowBinary). A refused query comes
  // back as an error carrying ClickHouse's message. One retry on a fresh connection covers a
  // kept-alive connection the server closed meanwhile (it drops idle ones after 3 s); that
  // retry may repeat an insert whose reply was lost, which the store's tables absorb (every
  // table is a ReplacingMergeTree over the row's key).
  Result<std::string> query(const std::string& sql, std::optional<std::string_view> data = {},
                            bool withDatabase = true);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Appends rows in RowBinary: little-endian numbers, strings as a LEB128 length and the bytes.
class RowWriter {
 public:
  void i64(int64_t v) { fixed(v); }
  void u64(uint64_t v) { fixed(v); }
  void u32(uint32_t v) { fixed(v); }
  void u8(uint8_t v) { fixed(v); }
  void f64(double v) { fixed(v); }
  void str(std::string_view s) {
    uint64_t n = s.size();
    do {
      uint8_t byte = n & 0x7f;
      n >>= 7;
      buf_.push_back(static_cast<char>(n != 0 ? (byte | 0x80) : byte));
    } while (n != 0);
    buf_.append(s.data(), s.size());
  }
  // Nullable(T): a null flag byte, then the value when there is one.
  void nullStr(const std::optional<std::string>& s) {
    u8(s ? 0 : 1);
    if (s) str(*s);
  }
  void nullI64(const std::optional<int64_t>& v) {
    u8(v ? 0 : 1);
    if (v) i64(*v);
  }
  bool empty() const { return buf_.empty(); }
  const std::string& data() const { return buf_; }
  void clear() { buf_.clear(); }

 private:
  template <typename T>
  void fixed(T v) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));  // x86-64 and aarch64 Linux: little-endian already
    buf_.append(bytes, sizeof(T));
  }
  std::string buf_;
};

// Reads RowBinary rows back. A read past the end sets failed() and returns zeros, so a caller
// reads a whole row and checks once.
class RowReader {
 public:
  explicit RowReader(std::string_view data) : data_(data) {}
  bool atEnd() const { return pos_ >= data_.size(); }
  bool failed() const { return failed_; }
  int64_t i64() { return fixed<int64_t>(); }
  uint64_t u64() { return fixed<uint64_t>(); }
  uint32_t u32() { return fixed<uint32_t>(); }
  uint8_t u8() { return fixed<uint8_t>(); }
  double f64() { return fixed<double>(); }
  // The element count that starts an Array(T).
  uint64_t arrayLength() { return varint(); }
  std::string_view str() {
    uint64_t n = varint();
    if (failed_ || n > data_.size() - pos_) return fail();
    std::string_view out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  std::optional<std::string> nullStr() {
    if (u8() != 0) return std::nullopt;
    return std::string(str());
  }
  std::optional<int64_t> nullI64() {
    if (u8() != 0) return std::nullopt;
    return i64();
  }

 private:
  uint64_t varint() {
    uint64_t n = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) {
        fail();
        return 0;
      }
      auto byte = static_cast<uint8_t>(data_[pos_++]);
      n |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) break;
    }
    return n;
  }
  std::string_view fail() {
    failed_ = true;
    pos_ = data_.size();
    return {};
  }
  template <typename T>
  T fixed() {
    T v{};
    if (pos_ > data_.size() || data_.size() - pos_ < sizeof(T)) {
      fail();
      return v;
    }
    std::memcpy(&v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string_view data_;
  size_t pos_ = 0;
  bool failed_ = false;
};

}  // namespace trainscope::storage::clickhouse
