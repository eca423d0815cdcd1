#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "common/clock.h"
#include "common/status.h"

using namespace trainscope;

TEST_CASE("Result carries a value or the reason there is none") {
  Result<int> good = 42;
  REQUIRE(good.isOk());
  CHECK(*good == 42);
  Result<int> bad = Result<int>::error("no value");
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.message() == "no value");
}

TEST_CASE("ManualClock moves only when told") {
  ManualClock clock(100);
  CHECK(clock.nowNs() == 100);
  clock.advance(5);
  CHECK(clock.nowNs() == 105);
}

namespace {

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

size_t countOf(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("protobuf's own error log goes through a rate limit once routed") {
  wire::Envelope env;
  env.mutable_rank_hello()->mutable_rank()->set_job("bad\xff\xfe");
  env.set_schema_version(wire::kSchemaVersion);
  std::string frame;
  env.SerializePartialToString(&frame);
  auto decodeMany = [&] {
    for (int i = 0; i < 1000; ++i) {
      auto r = wire::decode(frame.data(), frame.size());
      REQUIRE_FALSE(r);  // invalid UTF-8 in a string field: malformed
    }
  };
  wire::routeProtobufLogs();
  std::string text = captureStderr(decodeMany);
  INFO(text);
  CHECK(countOf(text, "invalid UTF-8") == 1);  // was 1,000: one line per frame
  CHECK(countOf(text, " protobuf: ") == 1);
}
