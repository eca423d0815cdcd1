#include "collector/http/request_target.h"

#include <charconv>
#include <limits>
#include <set>

namespace trainscope::http {
namespace {

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string quoted(std::string_view value) {
  // Keep error messages one short line even if a client sends something huge.
  constexpr size_t kMaxShown = 64;
  std::string out(value.substr(0, kMaxShown));
  if (value.size() > kMaxShown) out += "...";
  return out;
}

}  // namespace

Result<std::string> percentDecode(std::string_view in, bool plusIsSpace) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) {
        return Result<std::string>::error("malformed percent escape in '" + quoted(in) + "'");
      }
      int hi = hexValue(in[i + 1]);
      int lo = hexValue(in[i + 2]);
      if (hi < 0 || lo < 0) {
        return Result<std::string>::error("malformed percent escape in '" + quoted(in) + "'");
      }
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plusIsSpace) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

Result<RequestTarget> parseRequestTarget(std::string_view target) {
  RequestTarget out;
  size_t q = target.find('?');
  std::string_view path = target.substr(0, q);
  std::string_view query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
  if (path.empty() || path.front() != '/') {
    return Result<RequestTarget>::error("request target must start with '/'");
  }
  out.rawPath = std::string(path);
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string_view::npos) slash = path.size();
    std::string_view seg = path.substr(pos, slash - pos);
    if (!seg.empty()) {
      auto decoded = percentDecode(seg, false);
      if (!decoded) return decoded.status();
      out.segments.push_back(std::move(*decoded));
    }
    pos = slash + 1;
  }
  pos = 0;
  while (pos < query.size()) {
    size_t amp = query.find('&', pos);
    if (amp == std::string_view::npos) amp = query.size();
    std::string_view item = query.substr(pos, amp - pos);
    if (!item.empty()) {
      size_t eq = item.find('=');
      auto key = percentDecode(item.substr(0, eq), true);
      if (!key) return key.status();
      std::string value;
      if (eq != std::string_view::npos) {
        auto v = percentDecode(item.substr(eq + 1), true);
        if (!v) return v.status();
        value = std::move(*v);
      }
      out.query.emplace_back(std::move(*key), std::move(value));
    }
    pos = amp + 1;
  }
  return out;
}

Status QueryParams::checkAllowed(std::span<const std::string_view> allowed) const {
  std::set<std::string_view> seen;
  for (const auto& [key, value] : query_) {
    bool known = false;
    for (auto a : allowed) known = known || a == key;
    if (!known) {
      std::string list;
      for (auto a : allowed) {
        if (!list.empty()) list += ", ";
        list += a;
      }
      if (list.empty()) list = "none";
      return Status::error("unknown parameter '" + quoted(key) + "' (accepted: " + list + ")");
    }
    if (!seen.insert(key).second) {
      return Status::error("parameter '" + key + "' given more than once");
    }
  }
  return Status::ok();
}

std::optional<std::string> QueryParams::raw(std::string_view name) const {
  for (const auto& [key, value] : query_) {
    if (key == name) return value;
  }
  return std::nullopt;
}

Result<std::optional<uint64_t>> QueryParams::unsignedInt(std::string_view name,
                                                         uint64_t max) const {
  using R = Result<std::optional<uint64_t>>;
  auto v = raw(name);
  if (!v) return std::optional<uint64_t>();
  uint64_t out = 0;
  const char* end = v->data() + v->size();
  auto [ptr, ec] = std::from_chars(v->data(), end, out);
  if (v->empty() || ec != std::errc() || ptr != end) {
    return R::error("parameter '" + std::string(name) + "' must be a non-negative integer, got '" +
                    quoted(*v) + "'");
  }
  if (out > max) {
    return R::error("parameter '" + std::string(name) + "' must be at most " + std::to_string(max) +
                    ", got '" + quoted(*v) + "'");
  }
  return std::optional<uint64_t>(out);
}

Result<std::optional<int64_t>> QueryParams::signedInt(std::string_view name) const {
  using R = Result<std::optional<int64_t>>;
  auto v = raw(name);
  if (!v) return std::optional<int64_t>();
  int64_t out = 0;
  const char* end = v->data() + v->size();
  auto [ptr, ec] = std::from_chars(v->data(), end, out);
  if (v->empty() || ec != std::errc() || ptr != end) {
    return R::error("parameter '" + std::string(name) + "' must be an integer, got '" + quoted(*v) +
                    "'");
  }
  return std::optional<int64_t>(out);
}

Result<bool> QueryParams::boolean(std::string_view name, bool fallback) const {
  auto v = raw(name);
  if (!v) return fallback;
  if (*v == "1" || *v == "true" || *v == "yes") return true;
  if (*v == "0" || *v == "false" || *v == "no") return false;
  return Result<bool>::error("parameter '" + std::string(name) +
                             "' must be 0 or 1 (or true/false), got '" + quoted(*v) + "'");
}

}  // namespace trainscope::http
