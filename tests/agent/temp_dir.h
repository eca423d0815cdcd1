// A temporary directory for one test, removed with everything in it when the test ends.
// Test-only; single-threaded use.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace trainscope::agent::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "ts-agent-test-XXXXXX").string();
    char* made = ::mkdtemp(pattern.data());
    path_ = made != nullptr ? made : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string sub(const std::string& rel) const { return path_ + "/" + rel; }

  // Writes `text` to path()/rel, creating parent directories.
  void write(const std::string& rel, const std::string& text) const {
    std::filesystem::path p = sub(rel);
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::trunc) << text;
  }

 private:
  std::string path_;
};

}  // namespace trainscope::agent::testing
