// What every C++ test shares: a temporary directory, waiting on a condition, and skipping a
// test that cannot run here. Header-only; include it, do not copy it.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <system_error>
#include <thread>

namespace trainscope::tests {

// A fresh directory under $TMPDIR (else /tmp), removed with everything in it by the
// destructor; TRAINSCOPE_TEST_KEEP=1 keeps it (its path is printed) to look at after a failure.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/trainscope-test-XXXXXX";
    const char* made = ::mkdtemp(pattern.data());
    if (made == nullptr) {
      std::perror(("mkdtemp " + pattern).c_str());
      std::abort();
    }
    path_ = made;
  }
  ~TempDir() {
    if (std::getenv("TRAINSCOPE_TEST_KEEP") != nullptr) {
      std::fprintf(stderr, "test: kept %s\n", path_.c_str());
      return;
    }
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/rel; nothing is created.
  std::string sub(const std::string& rel) const { return path_ + "/" + rel; }
  std::string operator/(const std::string& rel) const { return sub(rel); }

  // Writes `text` to path()/rel, creating parent directories.
  void write(const std::string& rel, const std::string& text) const {
    const std::filesystem::path p = sub(rel);
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
  }

 private:
  std::string path_;
};

// Polls `pred` every `interval` until it holds or `timeout` has passed; returns whether it
// held. A test waits on what it can observe, never for a fixed time.
inline bool waitFor(const std::function<bool()>& pred,
                    std::chrono::milliseconds timeout = std::chrono::seconds(10),
                    std::chrono::milliseconds interval = std::chrono::milliseconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(interval);
  }
}
inline bool waitFor(const std::function<bool()>& pred, int timeoutMs) {
  return waitFor(pred, std::chrono::milliseconds(timeoutMs));
}

// A test that cannot run here says so as a skip, so the suite's count shows it: it exits 77,
// which meson counts as skipped. Tests that need root are tagged [root] and their executable
// runs them as a meson test of their own (tests/agent/meson.build), so that a skip there
// hides nothing else.
[[noreturn]] inline void skipTest(const std::string& why) {
  std::fprintf(stderr, "skipped: %s\n", why.c_str());
  std::fflush(nullptr);
  std::_Exit(77);
}

// Skips unless this process runs as root; `what` says what needs it.
inline void requireRoot(const std::string& what) {
  if (::geteuid() != 0) skipTest("not root: " + what);
}

}  // namespace trainscope::tests
