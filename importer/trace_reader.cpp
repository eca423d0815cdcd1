#include "importer/trace_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace trainscope::importer {
namespace {

// The reader's first buffer: a small file is read whole into it; a large one doubles it up to
// ReadOptions::bufferBytes, read by read.
constexpr size_t kFirstBufferBytes = 64 * 1024;

// ---- sources -------------------------------------------------------------------------------

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

// ---- lexing --------------------------------------------------------------------------------

enum class Res : uint8_t { kOk, kNeedMore, kError };

bool isWs(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Length of the UTF-8 sequence starting at p (lead byte >= 0x80) if valid, 0 if invalid, -1
// when it runs past `e`.
int utf8Length(const unsigned char* p, const unsigned char* e) {
  const unsigned char c = p[0];
  int n = 0;
  unsigned lo = 0x80;
  unsigned hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no UTF-16 surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (e - p < n) return -1;
  if (p[1] < lo || p[1] > hi) return 0;
  for (int i = 2; i < n; ++i) {
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  }
  return n;
}

// A strict JSON lexer over [p, e): every function either consumes a whole unit (kOk), stops
// because the unit runs past e (kNeedMore: the caller refills and starts the unit again), or
// fails with a message and the position it failed at.
struct Lexer {
  Lexer(const char* begin, const char* end, int depth) : p(begin), e(end), maxDepth(depth) {}

  const char* p;
  const char* e;
  int maxDepth;
  const char* errAt = nullptr;
  std::string err;

  Res fail(const char* at, std::string message) {
    errAt = at;
    err = std::move(message);
    return Res::kError;
  }

  // Skips whitespace; false when the data ran out.
  bool ws() {
    while (p < e && isWs(*p)) ++p;
    return p < e;
  }

  Res string(JsonValue* out) {
    const char* start = p;
    ++p;  // the opening quote
    while (true) {
      // The common case: a run of plain ASCII.
      while (p < e) {
        const unsigned char c = static_cast<unsigned char>(*p);
        if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
        ++p;
      }
      if (p >= e) return Res::kNeedMore;
      const unsigned char c = static_cast<unsigned char>(*p);
      if (c == '"') {
        ++p;
        if (out != nullptr) *out = {JsonValue::Type::kString, std::string_view(start, p - start)};
        return Res::kOk;
      }
      if (c == '\\') {
        if (e - p < 2) return Res::kNeedMore;
        const char k = p[1];
        if (k == 'u') {
          if (e - p < 6) return Res::kNeedMore;
          for (int i = 2; i < 6; ++i) {
            if (hexValue(p[i]) < 0) return fail(p, "bad \\u escape in a string");
          }
          p += 6;
        } else if (k == '"' || k == '\\' || k == '/' || k == 'b' || k == 'f' || k == 'n' ||
                   k == 'r' || k == 't') {
          p += 2;
        } else {
          return fail(p, std::string("bad escape '\\") + k + "' in a string");
        }
        continue;
      }
      if (c < 0x20) return fail(p, "control character in a string (a string not closed?)");
      const int n = utf8Length(reinterpret_cast<const unsigned char*>(p),
                               reinterpret_cast<const unsigned char*>(e));
      if (n < 0) return Res::kNeedMore;
      if (n == 0) return fail(p, "invalid UTF-8 in a string");
      p += n;
    }
  }

  Res number(JsonValue* out) {
    const char* start = p;
    if (*p == '-') ++p;
    if (p >= e) return Res::kNeedMore;
    if (*p == '0') {
      ++p;
    } else if (*p >= '1' && *p <= '9') {
      while (p < e && *p >= '0' && *p <= '9') ++p;
    } else {
      return fail(p, "bad number");
    }
    if (p >= e) return Res::kNeedMore;
    if (*p == '.') {
      ++p;
      const char* digits = p;
      while (p < e && *p >= '0' && *p <= '9') ++p;
      if (p >= e) return Res::kNeedMore;
      if (p == digits) return fail(p, "bad number: no digits after '.'");
    }
    if (*p == 'e' || *p == 'E') {
      ++p;
      if (p >= e) return Res::kNeedMore;
      if (*p == '+' || *p == '-') ++p;
      const char* digits = p;
      while (p < e && *p >= '0' && *p <= '9') ++p;
      if (p >= e) return Res::kNeedMore;
      if (p == digits) return fail(p, "bad number: no exponent digits");
    }
    if (out != nullptr) *out = {JsonValue::Type::kNumber, std::string_view(start, p - start)};
    return Res::kOk;
  }

  Res literal(std::string_view word, JsonValue::Type type, JsonValue* out) {
    const char* start = p;
    const size_t have = static_cast<size_t>(e - p);
    if (have < word.size()) {
      if (std::memcmp(p, word.data(), have) != 0) return fail(p, "unexpected character");
      return Res::kNeedMore;
    }
    if (std::memcmp(p, word.data(), word.size()) != 0) return fail(p, "unexpected character");
    p += word.size();
    if (out != nullptr) *out = {type, std::string_view(start, word.size())};
    return Res::kOk;
  }

  Res value(int depth, JsonValue* out) {
    if (!ws()) return Res::kNeedMore;
    switch (*p) {
      case '"':
        return string(out);
      case '{':
        return object(depth, out);
      case '[':
        return array(depth, out);
      case 't':
        return literal("true", JsonValue::Type::kTrue, out);
      case 'f':
        return literal("false", JsonValue::Type::kFalse, out);
      case 'n':
        return literal("null", JsonValue::Type::kNull, out);
      default:
        if (*p == '-' || (*p >= '0' && *p <= '9')) return number(out);
        return fail(p, std::string("unexpected character '") + printable(*p) +
                           "' where a value should start");
    }
  }

  static std::string printable(char c) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) return std::string(1, c);
    char buf[8];
    std::snprintf(buf, sizeof(buf), "\\x%02x", u);
    return buf;
  }

  Res object(int depth, JsonValue* out) {
    if (depth >= maxDepth) return fail(p, "nested deeper than " + std::to_string(maxDepth));
    const char* start = p;
    ++p;
    if (!ws()) return Res::kNeedMore;
    if (*p == '}') {
      ++p;
      if (out != nullptr) *out = {JsonValue::Type::kObject, std::string_view(start, p - start)};
      return Res::kOk;
    }
    while (true) {
      if (!ws()) return Res::kNeedMore;
      if (*p != '"') return fail(p, "expected a member name in quotes");
      if (Res r = string(nullptr); r != Res::kOk) return r;
      if (!ws()) return Res::kNeedMore;
      if (*p != ':') return fail(p, "expected ':' after a member name");
      ++p;
      if (Res r = value(depth + 1, nullptr); r != Res::kOk) return r;
      if (!ws()) return Res::kNeedMore;
      if (*p == ',') {
        ++p;
        continue;
      }
      if (*p == '}') {
        ++p;
        if (out != nullptr) *out = {JsonValue::Type::kObject, std::string_view(start, p - start)};
        return Res::kOk;
      }
      return fail(p, "expected ',' or '}' in an object");
    }
  }

  Res array(int depth, JsonValue* out) {
    if (depth >= maxDepth) return fail(p, "nested deeper than " + std::to_string(maxDepth));
    const char* start = p;
    ++p;
    if (!ws()) return Res::kNeedMore;
    if (*p == ']') {
      ++p;
      if (out != nullptr) *out = {JsonValue::Type::kArray, std::string_view(start, p - start)};
      return Res::kOk;
    }
    while (true) {
      if (Res r = value(depth + 1, nullptr); r != Res::kOk) return r;
      if (!ws()) return Res::kNeedMore;
      if (*p == ',') {
        ++p;
        continue;
      }
      if (*p == ']') {
        ++p;
        if (out != nullptr) *out = {JsonValue::Type::kArray, std::string_view(start, p - start)};
        return Res::kOk;
      }
      return fail(p, "expected ',' or ']' in a list");
    }
  }

  // One event object at `depth`, filling `ev` (its raw text, members and the fields events
  // are recognized by).
  Res event(int depth, EventView* ev) {
    if (*p != '{') {
      return fail(p, std::string("an event must be an object, found '") + printable(*p) + "'");
    }
    const char* start = p;
    ++p;
    ev->members.clear();
    ev->ph = 0;
    ev->ts = ev->dur = ev->pid = ev->tid = ev->args = JsonValue{};
    nameValue = catValue = JsonValue{};
    if (!ws()) return Res::kNeedMore;
    if (*p != '}') {
      while (true) {
        if (!ws()) return Res::kNeedMore;
        if (*p != '"') return fail(p, "expected a member name in quotes");
        const char* memberStart = p;
        JsonValue key;
        if (Res r = string(&key); r != Res::kOk) return r;
        if (!ws()) return Res::kNeedMore;
        if (*p != ':') return fail(p, "expected ':' after a member name");
        ++p;
        JsonValue v;
        if (Res r = value(depth + 1, &v); r != Res::kOk) return r;
        const std::string_view k = key.text.substr(1, key.text.size() - 2);
        ev->members.push_back({k, std::string_view(memberStart, p - memberStart)});
        switch (k.size()) {
          case 2:
            if (k == "ph" && v.type == JsonValue::Type::kString && v.text.size() > 2) {
              ev->ph = v.text[1];
            } else if (k == "ts") {
              ev->ts = v;
            }
            break;
          case 3:
            if (k == "cat") {
              catValue = v;
            } else if (k == "dur") {
              ev->dur = v;
            } else if (k == "pid") {
              ev->pid = v;
            } else if (k == "tid") {
              ev->tid = v;
            }
            break;
          case 4:
            if (k == "name") {
              nameValue = v;
            } else if (k == "args") {
              ev->args = v;
            }
            break;
          default:
            break;
        }
        if (!ws()) return Res::kNeedMore;
        if (*p == ',') {
          ++p;
          continue;
        }
        if (*p == '}') break;
        return fail(p, "expected ',' or '}' in an event");
      }
    }
    ++p;
    ev->raw = std::string_view(start, p - start);
    return Res::kOk;
  }

  JsonValue nameValue;
  JsonValue catValue;
};

// ---- the reader ----------------------------------------------------------------------------

class Reader {
 public:
  Reader(ByteSource& src, TraceHandler& handler, const ReadOptions& options)
      : src_(src), handler_(handler), o_(options) {
    buf_.resize(std::clamp<size_t>(o_.bufferBytes, 4096, kFirstBufferBytes));
  }

  Result<ReadSummary> run() {
    if (Status s = topLevel(); !s) return s;
    summary_.bytes = base_ + end_;
    return summary_;
  }

 private:
  uint64_t offsetOf(const char* p) const { return base_ + static_cast<uint64_t>(p - buf_.data()); }

  std::string at(uint64_t offset) const { return "byte " + std::to_string(offset); }

  // Moves [keep, end) to the front and reads more. False at the end of the data.
  Result<bool> refill(size_t keep, size_t unitLimit, const char* what) {
    if (keep > 0) {
      std::memmove(buf_.data(), buf_.data() + keep, end_ - keep);
      base_ += keep;
      end_ -= keep;
      pos_ -= std::min(pos_, keep);
    }
    if (end_ == buf_.size()) {
      if (buf_.size() >= unitLimit + 8) {
        const std::string bound = unitLimit % (1u << 20) == 0
                                      ? std::to_string(unitLimit >> 20) + " MiB"
                                      : std::to_string(unitLimit) + " bytes";
        return Result<bool>::error(std::string(what) + " at " + at(base_) + " is larger than " +
                                   bound);
      }
      buf_.resize(std::min(buf_.size() * 2, unitLimit + 8));
    } else if (lastReadFull_ && buf_.size() < o_.bufferBytes) {
      buf_.resize(std::min(buf_.size() * 2, o_.bufferBytes));
    }
    if (eof_) return false;
    const size_t want = buf_.size() - end_;
    auto n = src_.read(buf_.data() + end_, want);
    if (!n) return n.status();
    if (*n == 0) {
      eof_ = true;
      return false;
    }
    end_ += *n;
    lastReadFull_ = *n == want;
    return true;
  }

  Status truncated(const std::string& where) {
    return Status::error("the file ends " + where + " at " + at(base_ + end_) +
                         " (truncated or not a whole trace)");
  }

  // Whitespace, refilling as needed; false at the end of the data.
  Result<bool> skipWs() {
    while (true) {
      while (pos_ < end_ && isWs(buf_[pos_])) ++pos_;
      if (pos_ < end_) return true;
      auto more = refill(pos_, o_.maxEventBytes, "whitespace");
      if (!more) return more.status();
      if (!*more) return false;
    }
  }

  // Runs `unit` (a Lexer member parse starting at pos_) until it completes, refilling when it
  // needs more; on success pos_ is past it. `limit` bounds the unit's size.
  // `eventIndex` >= 0 names the event in errors.
  template <typename Fn>
  Status parseUnit(Fn&& unit, size_t limit, const char* what, int64_t eventIndex = -1) {
    auto where = [&] {
      return eventIndex < 0 ? std::string() : "event #" + std::to_string(eventIndex) + ", ";
    };
    while (true) {
      Lexer lx{buf_.data() + pos_, buf_.data() + end_, o_.maxDepth};
      const Res r = unit(lx);
      if (r == Res::kOk) {
        pos_ = static_cast<size_t>(lx.p - buf_.data());
        lexer_ = std::move(lx);
        return Status::ok();
      }
      if (r == Res::kError) {
        return Status::error(where() + at(offsetOf(lx.errAt)) + ": " + lx.err);
      }
      auto more = refill(pos_, limit, what);
      if (!more) return Status::error(where() + more.message());
      if (!*more) return truncated(std::string("inside ") + what);
    }
  }

  Status expectChar(char c, const char* context) {
    auto more = skipWs();
    if (!more) return more.status();
    if (!*more) return truncated(context);
    if (buf_[pos_] != c) {
      return Status::error(at(offsetOf(buf_.data() + pos_)) + ": expected '" + std::string(1, c) +
                           "' " + context + ", found '" + Lexer::printable(buf_[pos_]) + "'");
    }
    ++pos_;
    return Status::ok();
  }

  Status topLevel() {
    auto more = skipWs();
    if (!more) return more.status();
    if (!*more) return Status::error("the file is empty");
    const char first = buf_[pos_];
    Status s;
    if (first == '[') {
      summary_.bareArray = true;
      ++pos_;
      s = events(1);
    } else if (first == '{') {
      ++pos_;
      s = object();
    } else {
      return Status::error(at(offsetOf(buf_.data() + pos_)) +
                           ": a trace is a JSON object with traceEvents (or a list of events); "
                           "found '" +
                           Lexer::printable(first) + "'");
    }
    if (!s) return s;
    more = skipWs();
    if (!more) return more.status();
    if (*more) {
      return Status::error(at(offsetOf(buf_.data() + pos_)) +
                           ": unexpected data after the end of the trace");
    }
    return Status::ok();
  }

  Status object() {
    auto more = skipWs();
    if (!more) return more.status();
    if (!*more) return truncated("inside the top-level object");
    if (buf_[pos_] == '}') {
      ++pos_;
      return Status::error("the trace has no traceEvents list");
    }
    while (true) {
      more = skipWs();
      if (!more) return more.status();
      if (!*more) return truncated("inside the top-level object");
      if (buf_[pos_] != '"') {
        return Status::error(at(offsetOf(buf_.data() + pos_)) +
                             ": expected a member name in quotes at the top level");
      }
      JsonValue key;
      if (Status s = parseUnit([&](Lexer& lx) { return lx.string(&key); }, o_.maxTopLevelBytes,
                               "a member name");
          !s) {
        return s;
      }
      std::string scratch;
      const std::string name(stringOf(key, &scratch));
      if (Status s = expectChar(':', "after a top-level member name"); !s) return s;
      if (name == "traceEvents") {
        if (Status s = expectChar('[', "to open traceEvents (it must be a list)"); !s) return s;
        summary_.hadTraceEvents = true;
        if (Status s = events(2); !s) return s;
      } else {
        more = skipWs();
        if (!more) return more.status();
        if (!*more) return truncated("inside the top-level object");
        JsonValue v;
        const std::string what = "the top-level member \"" + name + "\"";
        if (Status s = parseUnit([&](Lexer& lx) { return lx.value(1, &v); }, o_.maxTopLevelBytes,
                                 what.c_str());
            !s) {
          return s;
        }
        if (std::find(o_.topLevelKeys.begin(), o_.topLevelKeys.end(), name) !=
            o_.topLevelKeys.end()) {
          if (Status s = handler_.onTopLevel(name, v.text); !s) {
            return Status::error(what + ": " + s.message());
          }
        }
      }
      more = skipWs();
      if (!more) return more.status();
      if (!*more) return truncated("inside the top-level object");
      if (buf_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (buf_[pos_] == '}') {
        ++pos_;
        break;
      }
      return Status::error(at(offsetOf(buf_.data() + pos_)) +
                           ": expected ',' or '}' in the top-level object");
    }
    if (!summary_.hadTraceEvents) return Status::error("the trace has no traceEvents list");
    return Status::ok();
  }

  Status events(int depth) {
    auto more = skipWs();
    if (!more) return more.status();
    if (!*more) return truncated("inside traceEvents");
    if (buf_[pos_] == ']') {
      ++pos_;
      return Status::ok();
    }
    EventView ev;
    std::string nameScratch;
    std::string catScratch;
    while (true) {
      more = skipWs();
      if (!more) return more.status();
      if (!*more) {
        // Here only after a ',' (an empty list was handled above).
        return truncated("inside traceEvents after event #" + std::to_string(summary_.events - 1));
      }
      if (Status s = parseUnit([&](Lexer& lx) { return lx.event(depth, &ev); }, o_.maxEventBytes,
                               "an event", static_cast<int64_t>(summary_.events));
          !s) {
        return s;
      }
      ev.index = summary_.events;
      ev.offset = offsetOf(ev.raw.data());
      ev.name = stringOf(lexer_.nameValue, &nameScratch);
      ev.cat = stringOf(lexer_.catValue, &catScratch);
      if (Status s = handler_.onEvent(ev); !s) {
        return Status::error("event #" + std::to_string(ev.index) + " at " + at(ev.offset) + ": " +
                             s.message());
      }
      ++summary_.events;
      more = skipWs();
      if (!more) return more.status();
      if (!*more) {
        return truncated("inside traceEvents after event #" + std::to_string(summary_.events - 1));
      }
      if (buf_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (buf_[pos_] == ']') {
        ++pos_;
        return Status::ok();
      }
      return Status::error(at(offsetOf(buf_.data() + pos_)) +
                           ": expected ',' or ']' after event #" +
                           std::to_string(summary_.events - 1));
    }
  }

  ByteSource& src_;
  TraceHandler& handler_;
  const ReadOptions& o_;
  std::vector<char> buf_;
  size_t pos_ = 0;
  size_t end_ = 0;
  uint64_t base_ = 0;  // stream offset of buf_[0]
  bool eof_ = false;
  bool lastReadFull_ = false;  // the last read filled the buffer: the file goes on, read more
  Lexer lexer_{nullptr, nullptr, 0};  // the last completed unit's lexer (name/cat values)
  ReadSummary summary_;
};

void appendUtf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t hex4(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = v * 16 + static_cast<uint32_t>(hexValue(p[i]));
  return v;
}

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

std::string_view stringOf(const JsonValue& v, std::string* scratch) {
  if (v.type != JsonValue::Type::kString || v.text.size() < 2) return {};
  const std::string_view body = v.text.substr(1, v.text.size() - 2);
  if (body.find('\\') == std::string_view::npos) return body;
  // The lexer checked every escape, so this decoding cannot meet a malformed one.
  scratch->clear();
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\') {
      scratch->push_back(c);
      continue;
    }
    const char k = body[++i];
    switch (k) {
      case 'b':
        scratch->push_back('\b');
        break;
      case 'f':
        scratch->push_back('\f');
        break;
      case 'n':
        scratch->push_back('\n');
        break;
      case 'r':
        scratch->push_back('\r');
        break;
      case 't':
        scratch->push_back('\t');
        break;
      case 'u': {
        uint32_t cp = hex4(body.data() + i + 1);
        i += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 < body.size() && body[i + 1] == '\\' &&
            body[i + 2] == 'u') {
          const uint32_t lo = hex4(body.data() + i + 3);
          if (lo >= 0xDC00 && lo <= 0xDFFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            i += 6;
          }
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;  // a lone surrogate
        appendUtf8(scratch, cp);
        break;
      }
      default:  // '"', '\\', '/'
        scratch->push_back(k);
        break;
    }
  }
  return *scratch;
}

bool intOf(const JsonValue& v, int64_t* out) {
  std::string_view t = v.text;
  if (v.type == JsonValue::Type::kString) {
    if (t.size() < 3) return false;
    t = t.substr(1, t.size() - 2);
  } else if (v.type != JsonValue::Type::kNumber) {
    return false;
  }
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (ec != std::errc()) return false;
  if (ptr != t.data() + t.size()) {
    if (*ptr != '.' && *ptr != 'e' && *ptr != 'E') return false;
    double d = 0;
    if (!doubleOf(v, &d) || !std::isfinite(d) || std::fabs(d) >= 9.2e18) return false;
    value = static_cast<int64_t>(d);
  }
  *out = value;
  return true;
}

bool doubleOf(const JsonValue& v, double* out) {
  std::string_view t = v.text;
  if (v.type == JsonValue::Type::kString) {
    if (t.size() < 3) return false;
    t = t.substr(1, t.size() - 2);
  } else if (v.type != JsonValue::Type::kNumber) {
    return false;
  }
  char buf[64];
  if (t.size() >= sizeof(buf)) return false;
  std::memcpy(buf, t.data(), t.size());
  buf[t.size()] = '\0';
  char* endp = nullptr;
  const double d = std::strtod(buf, &endp);
  if (endp != buf + t.size()) return false;
  *out = d;
  return true;
}

bool microsToNs(const JsonValue& v, int64_t* ns) {
  if (v.type != JsonValue::Type::kNumber) return false;
  // Exact decimal arithmetic: digits x 10^(exponent + 3 - decimals) nanoseconds, rounded half
  // up past the nanosecond. A double would lose the nanoseconds of a Unix time, in the plain
  // form ("1700000000123456.789") and in the exponent form some writers use ("1.7e+15").
  const std::string_view t = v.text;
  size_t i = 0;
  const bool negative = i < t.size() && t[i] == '-';
  if (negative) ++i;
  uint64_t digits = 0;
  int significant = 0;
  int exponent = 0;  // power of ten the digits are scaled by
  bool dot = false;
  bool roundUp = false;
  bool dropped = false;
  for (; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '.') {
      dot = true;
      continue;
    }
    if (c < '0' || c > '9') break;
    if (significant < 19) {
      if (digits != 0 || c != '0') ++significant;
      digits = digits * 10 + (c - '0');
      if (dot) --exponent;
    } else {
      // Beyond 19 digits (all a uint64 holds): integer digits still scale, later ones round.
      if (!dot) ++exponent;
      if (!dropped) roundUp = c >= '5';
      dropped = true;
    }
  }
  if (roundUp) digits += 1;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    int64_t e = 0;
    bool eNegative = false;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) eNegative = t[i++] == '-';
    for (; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i) {
      if (e < 1000) e = e * 10 + (t[i] - '0');
    }
    exponent += static_cast<int>(eNegative ? -e : e);
  }
  if (i != t.size()) return false;
  exponent += 3;  // microseconds -> nanoseconds
  constexpr auto kLimit = static_cast<uint64_t>(INT64_MAX);
  if (exponent >= 0) {
    for (int k = 0; k < exponent; ++k) {
      if (digits > kLimit / 10) return false;
      digits *= 10;
    }
  } else {
    for (int k = 0; k < -exponent && digits != 0; ++k) {
      const bool up = k == -exponent - 1 && digits % 10 >= 5;
      digits = digits / 10 + (up ? 1 : 0);
    }
  }
  if (digits > kLimit) return false;
  const auto value = static_cast<int64_t>(digits);
  *ns = negative ? -value : value;
  return true;
}

Status forEachMember(std::string_view objectText,
                     const std::function<bool(std::string_view key, const JsonValue&)>& fn) {
  Lexer lx{objectText.data(), objectText.data() + objectText.size(), 512};
  auto where = [&](const char* p) {
    return " at character " + std::to_string(p - objectText.data());
  };
  if (!lx.ws() || *lx.p != '{') return Status::error("not an object");
  ++lx.p;
  if (!lx.ws()) return Status::error("the object ends early");
  if (*lx.p == '}') return Status::ok();
  std::string scratch;
  while (true) {
    if (!lx.ws()) return Status::error("the object ends early");
    if (*lx.p != '"') return Status::error("expected a member name" + where(lx.p));
    JsonValue key;
    Res r = lx.string(&key);
    if (r != Res::kOk) {
      return Status::error(r == Res::kError ? lx.err + where(lx.errAt) : "the object ends early");
    }
    if (!lx.ws() || *lx.p != ':') return Status::error("expected ':'" + where(lx.p));
    ++lx.p;
    JsonValue v;
    r = lx.value(1, &v);
    if (r != Res::kOk) {
      return Status::error(r == Res::kError ? lx.err + where(lx.errAt) : "the object ends early");
    }
    if (!fn(stringOf(key, &scratch), v)) return Status::ok();
    if (!lx.ws()) return Status::error("the object ends early");
    if (*lx.p == ',') {
      ++lx.p;
      continue;
    }
    if (*lx.p == '}') return Status::ok();
    return Status::error("expected ',' or '}'" + where(lx.p));
  }
}

Result<ReadSummary> readTrace(ByteSource& source, TraceHandler& handler,
                              const ReadOptions& options) {
  Reader reader(source, handler, options);
  return reader.run();
}

Result<ReadSummary> readTraceBytes(std::string_view bytes, TraceHandler& handler,
                                   const ReadOptions& options) {
  auto src = memorySource(bytes);
  return readTrace(*src, handler, options);
}

}  // namespace trainscope::importer
