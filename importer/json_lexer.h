// The strict, resumable JSON lexer under the trace reader (trace_reader.cpp) and forEachMember
// (json_values.cpp): it works on a window of bytes and says when a unit runs past the window,
// so the reader can refill its buffer and start the unit again. Internal to importer/; defined
// here, inline, so the reader's hot loop is compiled with it as before. One lexer per thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "importer/trace_reader.h"

namespace trainscope::importer::json_lexer {

enum class Res : uint8_t { kOk, kNeedMore, kError };

inline bool isWs(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

inline int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Length of the UTF-8 sequence starting at p (lead byte >= 0x80) if valid, 0 if invalid, -1
// when it runs past `e`.
inline int utf8Length(const unsigned char* p, const unsigned char* e) {
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

}  // namespace trainscope::importer::json_lexer
