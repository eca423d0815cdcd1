// Parsing of an HTTP request target ("/api/v1/jobs/a%20b/steps?rank=3") into decoded path
// segments and query parameters, and typed reading of those parameters with error messages
// that name the parameter. Pure functions, safe from any thread.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/percent_encode.h"
#include "common/status.h"

namespace trainscope::http {

// Decodes %XX escapes; with plusIsSpace also '+' (query strings). Fails on a malformed escape.
Result<std::string> percentDecode(std::string_view in, bool plusIsSpace);
// percentEncode (building targets) is in common/percent_encode.h.

struct RequestTarget {
  std::string rawPath;                // the path as sent, before decoding
  std::vector<std::string> segments;  // decoded, split on '/', empty segments dropped
  std::vector<std::pair<std::string, std::string>> query;  // decoded, in order
};

// Splits and decodes a target. Segments are decoded after splitting, so "%2F" stays inside
// one segment (a job name may contain a slash).
Result<RequestTarget> parseRequestTarget(std::string_view target);

// Typed access to query parameters. Every error names the parameter and quotes the value.
class QueryParams {
 public:
  explicit QueryParams(const std::vector<std::pair<std::string, std::string>>& query)
      : query_(query) {}

  // Fails naming the first parameter that is not in `allowed`, or one given twice.
  Status checkAllowed(std::span<const std::string_view> allowed) const;
  Status checkAllowed(std::initializer_list<std::string_view> allowed) const {
    return checkAllowed(std::span<const std::string_view>(allowed.begin(), allowed.size()));
  }

  std::optional<std::string> raw(std::string_view name) const;
  // Absent -> nullopt. Present but not a non-negative integer (or above max) -> error.
  Result<std::optional<uint64_t>> unsignedInt(std::string_view name, uint64_t max) const;
  // Absent -> nullopt. Present but not an integer -> error.
  Result<std::optional<int64_t>> signedInt(std::string_view name) const;
  // Absent -> fallback. Accepts 1/0/true/false/yes/no.
  Result<bool> boolean(std::string_view name, bool fallback) const;

 private:
  const std::vector<std::pair<std::string, std::string>>& query_;
};

}  // namespace trainscope::http
