// Reading capture files: how far a gzip file may expand (floor, ratio to its stored size,
// absolute bound), streaming it piece by piece, and the raw stored bytes with their size.
#include "collector/capture/gzip_file.h"

#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "tests/collector/capture/capture_fixture.h"

using namespace trainscope;
using namespace trainscope::capture;

TEST_CASE("decompress bound: at least the floor, else ratio x stored size, never past the max") {
  DecompressLimits l{100u << 20, 64};
  CHECK(decompressBound(0, l) == kGzipFloorBytes);
  CHECK(decompressBound(1000, l) == kGzipFloorBytes);
  CHECK(decompressBound(1u << 20, l) == 64u << 20);
  CHECK(decompressBound(10u << 20, l) == 100u << 20);
  CHECK(decompressBound(UINT64_MAX, l) == 100u << 20);  // no overflow in size x ratio
}

TEST_CASE("a gzip bomb is refused once it passes its bound; the same text within bounds reads") {
  testing::TempDir dir;
  const std::string text(8u << 20, 'x');  // 8 MiB that gzip packs ~1,000x
  const std::string gz = testing::gzipText(dir.sub("bomb.gz"), text);
  REQUIRE(gz.size() * 64 < text.size());
  auto refused = readGzipFile(dir.sub("bomb.gz"), DecompressLimits{});
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.message(), Catch::Matchers::Contains("refused as a likely gzip bomb"));
  CHECK_THAT(refused.message(), Catch::Matchers::Contains(dir.sub("bomb.gz")));
  // A looser ratio lets it through whole; an absolute bound below it stops it.
  auto read = readGzipFile(dir.sub("bomb.gz"), DecompressLimits{1u << 30, 10000});
  REQUIRE(read);
  CHECK(*read == text);
  CHECK_FALSE(readGzipFile(dir.sub("bomb.gz"), DecompressLimits{(8u << 20) - 1, 10000}));
  CHECK(readGzipFile(dir.sub("bomb.gz"), DecompressLimits{8u << 20, 10000}));  // exactly at
}

TEST_CASE("a gzip reader streams piece by piece; corrupt and missing files fail naming the path") {
  testing::TempDir dir;
  std::string text;
  for (int i = 0; i < 200000; ++i) text += std::to_string(i * 7919 % 100003) + ",";
  testing::gzipText(dir.sub("t.gz"), text);
  auto reader = GzipReader::open(dir.sub("t.gz"), DecompressLimits{});
  REQUIRE(reader);
  CHECK_FALSE((*reader)->size());
  std::string out;
  char buf[4096];
  size_t reads = 0;
  for (;;) {
    auto n = (*reader)->read(buf, sizeof buf);
    REQUIRE(n);
    if (*n == 0) break;
    out.append(buf, *n);
    ++reads;
  }
  CHECK(out == text);
  CHECK(reads > 100);  // never more than one buffer at a time

  auto raw = FileSource::open(dir.sub("t.gz"));
  REQUIRE(raw);
  auto bytes = readAll(**raw, 1u << 30);
  REQUIRE(bytes);
  CHECK((*raw)->size() == bytes->size());
  CHECK(*bytes == *readFileBytes(dir.sub("t.gz")));

  std::string cut = bytes->substr(0, bytes->size() / 2);
  { std::ofstream(dir.sub("cut.gz"), std::ios::binary) << cut; }
  auto truncated = readGzipFile(dir.sub("cut.gz"), DecompressLimits{});
  REQUIRE_FALSE(truncated);
  CHECK_THAT(truncated.message(), Catch::Matchers::Contains(dir.sub("cut.gz")));
  CHECK_FALSE(GzipReader::open(dir.sub("none.gz"), DecompressLimits{}));
  CHECK_FALSE(FileSource::open(dir.path()));  // a directory is not a file
}
