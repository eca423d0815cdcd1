#include "agent/spool.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/agent/temp_dir.h"

using trainscope::agent::Spool;
using trainscope::agent::SpoolOptions;
using trainscope::agent::testing::TempDir;

namespace {

std::string rec(int i, size_t size = 16) {
  std::string s = "record-" + std::to_string(i) + "-";
  s.resize(std::max(size, s.size()), 'x');
  return s;
}

std::unique_ptr<Spool> openSpool(const std::string& dir, uint64_t maxBytes = 1 << 20,
                                 uint64_t segmentBytes = 4096) {
  SpoolOptions o;
  o.dir = dir;
  o.maxBytes = maxBytes;
  o.segmentBytes = segmentBytes;
  auto r = Spool::open(o);
  REQUIRE(r.isOk());
  return std::move(*r);
}

std::vector<std::string> readAll(Spool& s, uint64_t from) {
  std::vector<std::string> out;
  uint64_t next = from;
  while (true) {
    uint64_t n = 0;
    REQUIRE(s.read(next, 7, 1 << 20, &out, &n).isOk());
    if (n == next) break;
    next = n;
  }
  return out;
}

size_t segmentFiles(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".seg") ++n;
  }
  return n;
}

std::string onlySegment(const std::string& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".seg") return e.path().string();
  }
  return "";
}

}  // namespace

TEST_CASE("spool returns appended records in order and resumes after an ack") {
  TempDir tmp;
  auto s = openSpool(tmp.sub("spool"));
  for (int i = 0; i < 10; ++i) REQUIRE(s->append(rec(i)).isOk());
  CHECK(s->nextIndex() == 10);
  CHECK(s->pendingItems() == 10);

  auto all = readAll(*s, 0);
  REQUIRE(all.size() == 10);
  for (int i = 0; i < 10; ++i) CHECK(all[static_cast<size_t>(i)] == rec(i));

  std::vector<std::string> some;
  uint64_t next = 0;
  REQUIRE(s->read(2, 3, 1 << 20, &some, &next).isOk());
  CHECK(some == std::vector<std::string>{rec(2), rec(3), rec(4)});
  CHECK(next == 5);

  // A byte limit smaller than one record still yields that record.
  some.clear();
  REQUIRE(s->read(0, 100, 1, &some, &next).isOk());
  CHECK(some.size() == 1);
  CHECK(next == 1);

  s->ack(4);
  CHECK(s->ackedIndex() == 4);
  CHECK(s->firstUnacked() == 4);
  CHECK(s->pendingItems() == 6);
  auto rest = readAll(*s, s->firstUnacked());
  REQUIRE(rest.size() == 6);
  CHECK(rest.front() == rec(4));

  // Acks past the end are clamped; older acks are ignored.
  s->ack(100);
  CHECK(s->ackedIndex() == 10);
  s->ack(3);
  CHECK(s->ackedIndex() == 10);
  CHECK(s->pendingItems() == 0);
}

TEST_CASE("spool deletes segments once every record in them is acked") {
  TempDir tmp;
  auto s = openSpool(tmp.sub("spool"), 1 << 20, 4096);
  // 1000-byte records: four fit one 4 KiB segment.
  for (int i = 0; i < 20; ++i) REQUIRE(s->append(rec(i, 1000)).isOk());
  CHECK(segmentFiles(tmp.sub("spool")) == 5);
  s->ack(12);
  CHECK(segmentFiles(tmp.sub("spool")) == 2);
  auto rest = readAll(*s, s->firstUnacked());
  REQUIRE(rest.size() == 8);
  CHECK(rest.front() == rec(12, 1000));
  // Everything acked: the active segment stays for appends.
  s->ack(20);
  CHECK(segmentFiles(tmp.sub("spool")) == 1);
  REQUIRE(s->append(rec(20, 1000)).isOk());
  CHECK(readAll(*s, s->firstUnacked()) == std::vector<std::string>{rec(20, 1000)});
}

TEST_CASE("spool stays within its bound by dropping and counting the oldest records") {
  TempDir tmp;
  const uint64_t bound = 16384;
  auto s = openSpool(tmp.sub("spool"), bound, 4096);
  for (int i = 0; i < 40; ++i) REQUIRE(s->append(rec(i, 1000)).isOk());
  auto st = s->stats();
  CHECK(st.bytes <= bound);
  CHECK(st.droppedItems > 0);
  CHECK(st.droppedSegments > 0);
  // Nothing is lost silently: what is held plus what was dropped is everything appended.
  CHECK(s->pendingItems() + st.droppedItems == 40);
  auto held = readAll(*s, 0);  // from a dropped index: starts at the oldest held
  REQUIRE(held.size() == s->pendingItems());
  CHECK(held.back() == rec(39, 1000));
  CHECK(held.front() == rec(static_cast<int>(40 - held.size()), 1000));

  // A record larger than the bound allows is refused, not half-written.
  CHECK_FALSE(s->append(std::string(bound, 'y')).isOk());
  CHECK_FALSE(s->append(std::string()).isOk());
}

TEST_CASE("spool replays exactly the unacked records after a restart") {
  TempDir tmp;
  {
    auto s = openSpool(tmp.sub("spool"), 1 << 20, 4096);
    for (int i = 0; i < 30; ++i) REQUIRE(s->append(rec(i, 300)).isOk());
    s->ack(17);
    REQUIRE(s->sync().isOk());
  }
  auto s = openSpool(tmp.sub("spool"), 1 << 20, 4096);
  CHECK(s->ackedIndex() == 17);
  CHECK(s->firstUnacked() == 17);
  CHECK(s->nextIndex() == 30);
  auto rest = readAll(*s, s->firstUnacked());
  REQUIRE(rest.size() == 13);
  for (size_t i = 0; i < rest.size(); ++i) CHECK(rest[i] == rec(static_cast<int>(17 + i), 300));
  // Numbering continues where the last agent stopped.
  REQUIRE(s->append(rec(30, 300)).isOk());
  CHECK(s->nextIndex() == 31);
}

TEST_CASE("spool numbering survives a restart after everything was acked") {
  TempDir tmp;
  {
    auto s = openSpool(tmp.sub("spool"));
    for (int i = 0; i < 5; ++i) REQUIRE(s->append(rec(i)).isOk());
    s->ack(5);
  }  // the destructor syncs
  auto s = openSpool(tmp.sub("spool"));
  CHECK(s->nextIndex() == 5);
  CHECK(s->pendingItems() == 0);
  REQUIRE(s->append(rec(5)).isOk());
  CHECK(readAll(*s, s->firstUnacked()) == std::vector<std::string>{rec(5)});
}

TEST_CASE("spool skips a torn tail left by a crash mid-write and keeps appending") {
  TempDir tmp;
  {
    auto s = openSpool(tmp.sub("spool"));
    for (int i = 0; i < 5; ++i) REQUIRE(s->append(rec(i, 100)).isOk());
  }
  std::string seg = onlySegment(tmp.sub("spool"));
  REQUIRE(!seg.empty());
  auto goodSize = std::filesystem::file_size(seg);
  {
    // Header of a 100-byte record followed by only part of its payload.
    std::ofstream out(seg, std::ios::app | std::ios::binary);
    const char header[8] = {100, 0, 0, 0, 1, 2, 3, 4};
    out.write(header, 8);
    out << "partial";
  }
  {
    auto s = openSpool(tmp.sub("spool"));
    CHECK(s->stats().tornRecords == 1);
    CHECK(std::filesystem::file_size(seg) == goodSize);
    auto all = readAll(*s, 0);
    REQUIRE(all.size() == 5);
    CHECK(all.back() == rec(4, 100));
    REQUIRE(s->append(rec(5, 100)).isOk());
  }
  auto s = openSpool(tmp.sub("spool"));
  CHECK(s->stats().tornRecords == 0);
  auto all = readAll(*s, 0);
  REQUIRE(all.size() == 6);
  CHECK(all.back() == rec(5, 100));
}

TEST_CASE("spool drops a last record whose checksum does not match") {
  TempDir tmp;
  {
    auto s = openSpool(tmp.sub("spool"));
    for (int i = 0; i < 3; ++i) REQUIRE(s->append(rec(i, 50)).isOk());
  }
  std::string seg = onlySegment(tmp.sub("spool"));
  {
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('#');
  }
  auto s = openSpool(tmp.sub("spool"));
  CHECK(s->stats().tornRecords == 1);
  CHECK(readAll(*s, 0) == std::vector<std::string>{rec(0, 50), rec(1, 50)});
}

TEST_CASE("spool refuses a directory another agent holds") {
  TempDir tmp;
  auto first = openSpool(tmp.sub("spool"));
  SpoolOptions o;
  o.dir = tmp.sub("spool");
  auto second = Spool::open(o);
  REQUIRE_FALSE(second.isOk());
  CHECK_THAT(second.message(), Catch::Contains("in use by another agent"));
}
