// Percent-encoding for building URL paths and queries (job and capture ids in API targets),
// shared by the collector's HTTP layer, the CLI and the tests. Pure; any thread.
#pragma once

#include <string>
#include <string_view>

namespace trainscope {

// Escapes everything but RFC 3986 unreserved characters (A-Z a-z 0-9 - . _ ~) as %XX.
std::string percentEncode(std::string_view in);

}  // namespace trainscope
