// The probe's gzip writer (ISA-L deflate): what it writes reads back exactly with zlib (the
// collector's and every tool's reader), small and large writes alike; compressedBytes() counts
// every byte written (the file's size once finished) and is exact after a flush; the
// worst-case bound holds for input that does not compress; a bad level and an unwritable path
// are refused; an abandoned file is removed.
#include "agent/probe/gzip_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <random>
#include <string>

#include "tests/agent/probe/capture_files.h"

namespace trainscope::probe {
namespace {

uint64_t fileSize(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

std::string tempPath(const char* name) {
  return "/tmp/ts_gzip_writer_" + std::to_string(getpid()) + "_" + name + ".gz";
}

std::string randomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

TEST_CASE("small and large writes read back exactly, compressedBytes is the file's size") {
  const std::string path = tempPath("mixed");
  GzipWriter w;
  REQUIRE(w.open(path));
  std::string expected;
  for (int i = 0; i < 20000; ++i) {  // small events, about 1.4 MB: several gathered chunks
    const std::string ev =
        "{\"name\": \"aten::mm\", \"ph\": \"X\", \"ts\": " + std::to_string(i * 17) +
        ", \"dur\": 3.5, \"pid\": 0},\n";
    REQUIRE(w.write(ev));
    expected += ev;
    if (i % 5000 == 4999) {
      REQUIRE(w.flush());
      CHECK(w.unflushedBytes() == 0);
      CHECK(w.compressedBytes() >= fileSize(path));  // all of it handed to the file
    }
  }
  const std::string big = randomBytes(size_t{700} * 1024, 1);  // one write larger than a chunk
  REQUIRE(w.write(big));
  expected += big;
  REQUIRE(w.write(""));
  REQUIRE(w.finish());
  CHECK_FALSE(w.isOpen());
  CHECK(w.compressedBytes() == fileSize(path));
  CHECK(testing::gunzipFile(path) == expected);
  CHECK(fileSize(path) < expected.size());
  ::unlink(path.c_str());
}

TEST_CASE("input that does not compress stays within worstCaseBytes at every level") {
  for (int level = 1; level <= 3; ++level) {
    const std::string path = tempPath("random");
    GzipWriter w;
    REQUIRE(w.open(path, level));
    uint64_t input = 0;
    for (uint32_t i = 0; i < 8; ++i) {
      const std::string piece = randomBytes(100 * 1024 + i * 4099, 10 + i);
      REQUIRE(w.write(piece));
      input += piece.size();
      REQUIRE(w.flush());
      CHECK(w.compressedBytes() <= GzipWriter::worstCaseBytes(input));
    }
    REQUIRE(w.finish());
    CHECK(fileSize(path) <= GzipWriter::worstCaseBytes(input));
    CHECK(testing::gunzipFile(path).size() == input);
    ::unlink(path.c_str());
  }
}

TEST_CASE("a bad level or path is refused naming it; an abandoned file is removed") {
  GzipWriter w;
  for (int level : {0, 4}) {
    Status bad = w.open(tempPath("level"), level);
    REQUIRE_FALSE(bad);
    CHECK(bad.message().find("level " + std::to_string(level)) != std::string::npos);
  }
  Status noDir = w.open("/nonexistent-dir/x.gz");
  REQUIRE_FALSE(noDir);
  CHECK(noDir.message().find("/nonexistent-dir/x.gz") != std::string::npos);
  CHECK_FALSE(w.write("x"));

  const std::string path = tempPath("abandon");
  {
    GzipWriter a;
    REQUIRE(a.open(path));
    REQUIRE(a.write("partial"));
    a.abandon();
    CHECK(fileSize(path) == 0);
    CHECK(::access(path.c_str(), F_OK) != 0);
    GzipWriter b;  // destroyed unfinished: removed too
    REQUIRE(b.open(path));
    REQUIRE(b.write("partial"));
  }
  CHECK(::access(path.c_str(), F_OK) != 0);
}

}  // namespace
}  // namespace trainscope::probe
