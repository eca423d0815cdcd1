// Test helper: what a piece of code writes to stderr (the daemons' log), for tests that check a
// log line. Redirects file descriptor 2, so not for tests with other threads writing there.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

namespace trainscope::testing {

// Runs `body` with stderr sent to a temporary file and returns what was written there.
template <typename Body>
std::string captureStderr(Body body) {
  char path[] = "/tmp/trainscope-stderr-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  body();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path);
  return text.str();
}

}  // namespace trainscope::testing
