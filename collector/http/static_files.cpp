#include "collector/http/static_files.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

namespace trainscope::http {
namespace {

namespace fs = std::filesystem;

// Segments are already percent-decoded, so "%2e%2e" arrives here as ".." and is refused too.
bool unsafeSegment(const std::string& s) {
  if (s == "." || s == "..") return true;
  for (char c : s) {
    if (c == '/' || c == '\\' || c == '\0') return true;
  }
  return false;
}

bool isWithin(const fs::path& root, const fs::path& p) {
  auto r = root.begin();
  auto q = p.begin();
  for (; r != root.end(); ++r, ++q) {
    if (q == p.end() || *r != *q) return false;
  }
  return true;
}

}  // namespace

std::string contentTypeFor(const std::string& fileName) {
  std::string ext = fs::path(fileName).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext == ".html" || ext == ".htm") return "text/html; charset=utf-8";
  if (ext == ".js" || ext == ".mjs") return "text/javascript; charset=utf-8";
  if (ext == ".css") return "text/css; charset=utf-8";
  if (ext == ".json" || ext == ".map") return "application/json";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".png") return "image/png";
  if (ext == ".jpg" || ext == ".jpeg") return "image/jpeg";
  if (ext == ".gif") return "image/gif";
  if (ext == ".ico") return "image/x-icon";
  if (ext == ".woff2") return "font/woff2";
  if (ext == ".woff") return "font/woff";
  if (ext == ".txt") return "text/plain; charset=utf-8";
  if (ext == ".wasm") return "application/wasm";
  return "application/octet-stream";
}

ApiResponse serveStaticFile(const std::string& webRoot, const std::vector<std::string>& segments) {
  std::string shown = "/";
  fs::path rel;
  for (size_t i = 0; i < segments.size(); ++i) {
    if (unsafeSegment(segments[i])) {
      return errorResponse(400, "path must not contain '..', '.', '\\' or encoded '/' segments");
    }
    rel /= segments[i];
    shown += segments[i] + (i + 1 < segments.size() ? "/" : "");
  }
  std::error_code ec;
  fs::path root = fs::weakly_canonical(fs::path(webRoot), ec);
  if (ec) return errorResponse(404, "no file " + shown);
  fs::path file = root / rel;
  if (segments.empty() || fs::is_directory(file, ec)) file /= "index.html";
  // A symlink inside the web root must not lead out of it either.
  fs::path real = fs::weakly_canonical(file, ec);
  if (ec || !isWithin(root, real)) return errorResponse(404, "no file " + shown);
  if (!fs::is_regular_file(real, ec)) return errorResponse(404, "no file " + shown);

  std::ifstream in(real, std::ios::binary);
  if (!in) return errorResponse(500, "cannot read " + shown);
  ApiResponse r;
  r.body.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) return errorResponse(500, "cannot read " + shown);
  r.contentType = contentTypeFor(real.filename().string());
  return r;
}

}  // namespace trainscope::http
