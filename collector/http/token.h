// Reading the HTTP access token (HttpOptions::authToken) from a file, for the collector's
// --http-token-file flag, so the secret stays out of the process list. Any thread.
#pragma once

#include <string>

#include "common/status.h"

namespace trainscope::http {

// The file's first line with surrounding whitespace removed. Fails naming `flag` and the path
// when the file cannot be read or the token is empty or contains spaces or control characters.
Result<std::string> readTokenFile(const std::string& path, const std::string& flag);

}  // namespace trainscope::http
