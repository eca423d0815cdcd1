// Decoding the JSON values the reader hands out (trace_reader.h): strings with their escapes
// resolved, integers, doubles, microseconds as exact nanoseconds, and the members of an object.
#include "importer/trace_reader.h"

#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "importer/json_lexer.h"

namespace trainscope::importer {
namespace {

using json_lexer::hexValue;
using json_lexer::Lexer;
using json_lexer::Res;

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

}  // namespace trainscope::importer
