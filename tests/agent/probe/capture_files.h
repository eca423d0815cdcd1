// Test helpers for capture files: read a gzip file whole and parse it as JSON.
#pragma once

#include <zlib.h>

#include <string>

#include <nlohmann/json.hpp>

namespace trainscope::probe::testing {

// The decompressed content of a gzip file ("" when it cannot be read).
inline std::string gunzipFile(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return "";
  std::string out;
  char buf[65536];
  int n = 0;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return out;
}

// The JSON in a gzip file; a discarded value when it is not valid JSON.
inline nlohmann::json readJsonGz(const std::string& path) {
  return nlohmann::json::parse(gunzipFile(path), nullptr, false);
}

}  // namespace trainscope::probe::testing
