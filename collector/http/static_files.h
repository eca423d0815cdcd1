// Serving the dashboard's static files from a web root, refusing anything that would leave it.
// Pure file reads; safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "collector/http/api.h"

namespace trainscope::http {

// Content type for a file name by its extension ("application/octet-stream" if unknown).
std::string contentTypeFor(const std::string& fileName);

// Serves `segments` (decoded path segments; empty means "/", which serves index.html) from
// `webRoot`. 400 for ".." or other unsafe segments, 404 if absent, 500 if unreadable.
ApiResponse serveStaticFile(const std::string& webRoot, const std::vector<std::string>& segments);

}  // namespace trainscope::http
