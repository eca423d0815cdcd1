#include "agent/spool.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <sys/stat.h>

#include <zlib.h>
#include <catch2/catch.hpp>

#include "tests/common/support.h"

using trainscope::agent::Spool;
using trainscope::agent::SpoolOptions;
using trainscope::tests::TempDir;

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
    // Framing of a 100-byte record followed by only part of its payload.
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

namespace {

std::vector<std::string> quarantined(const std::string& spoolDir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(spoolDir + "/quarantine", ec)) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void flipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x5a));
}

// Records and their indices as read from `from` on, one at a time (so the index of each is
// known: read returns next = index + 1 for a single intact record).
std::vector<std::pair<uint64_t, std::string>> readIndexed(Spool& s, uint64_t from) {
  std::vector<std::pair<uint64_t, std::string>> out;
  uint64_t at = from;
  while (true) {
    std::vector<std::string> one;
    uint64_t next = at;
    REQUIRE(s.read(at, 1, 1 << 20, &one, &next).isOk());
    if (next == at) break;
    if (!one.empty()) out.emplace_back(next - 1, one[0]);
    at = next;
  }
  return out;
}

}  // namespace

TEST_CASE("spool quarantines a stray segment named past the index range; new records still flow") {
  // The report: 18446744073709551615.seg made every new record unreachable, so the
  // agent acked probes and never sent (a new job got 0 rows).
  TempDir tmp;
  const std::string dir = tmp.sub("spool");
  {
    auto s = openSpool(dir);
    for (int i = 0; i < 3; ++i) REQUIRE(s->append(rec(i)).isOk());
    s->ack(3);
  }
  tmp.write("spool/18446744073709551615.seg", "junk");
  tmp.write("spool/99999999999999999999.seg", "");  // not even a uint64
  tmp.write("spool/12.seg", "");                    // not a name the spool writes
  auto s = openSpool(dir);
  CHECK(s->stats().quarantined == 3);
  CHECK(quarantined(dir) ==
        std::vector<std::string>{"12.seg", "18446744073709551615.seg", "99999999999999999999.seg"});
  CHECK(s->nextIndex() == 3);
  REQUIRE(s->append(rec(3)).isOk());
  REQUIRE(s->append(rec(4)).isOk());
  CHECK(readAll(*s, s->firstUnacked()) == std::vector<std::string>{rec(3), rec(4)});
}

TEST_CASE("a flipped byte costs only the damaged record; the records after it keep their numbers") {
  // The report: 4 flipped bytes cost 779 records (everything after the first one in
  // its segment). Damage in a payload, a length, a check and a length's high byte.
  TempDir tmp;
  const std::string dir = tmp.sub("spool");
  const int kRecords = 1000;
  const size_t kSize = 200;  // framed: 208 bytes each, after the 16-byte segment header
  {
    auto s = openSpool(dir, 8 << 20, 2 << 20);
    for (int i = 0; i < kRecords; ++i) REQUIRE(s->append(rec(i, kSize)).isOk());
    s->ack(50);
  }
  const std::string seg = onlySegment(dir);
  auto at = [&](int record) -> uint64_t { return 16 + static_cast<uint64_t>(record) * 208; };
  flipByte(seg, at(100) + 8 + 150);  // payload
  flipByte(seg, at(300) + 1);        // length, low bytes
  flipByte(seg, at(500) + 5);        // check
  flipByte(seg, at(700) + 3);        // length, high byte
  auto s = openSpool(dir, 8 << 20, 2 << 20);
  CHECK(s->stats().lostRecords == 4);
  CHECK(s->stats().tornRecords == 0);
  CHECK(s->stats().quarantined == 0);
  CHECK(s->pendingItems() == kRecords - 50);
  auto got = readIndexed(*s, 50);
  CHECK(got.size() == kRecords - 50 - 4);
  for (const auto& [index, payload] : got) {
    INFO("index " << index);
    CHECK(payload == rec(static_cast<int>(index), kSize));
    CHECK(index != 100);
    CHECK(index != 300);
    CHECK(index != 500);
    CHECK(index != 700);
  }
  // Appends continue after the last record with the next number.
  REQUIRE(s->append(rec(kRecords, kSize)).isOk());
  CHECK(s->nextIndex() == kRecords + 1);
}

TEST_CASE("a damaged run of several records loses exactly those records") {
  TempDir tmp;
  const std::string dir = tmp.sub("spool");
  {
    auto s = openSpool(dir, 8 << 20, 2 << 20);
    for (int i = 0; i < 40; ++i) REQUIRE(s->append(rec(i, 100)).isOk());
  }
  const std::string seg = onlySegment(dir);
  {
    // Zero records 10, 11 and 12 (a block the disk lost).
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(16 + 10 * 108);
    f << std::string(size_t{3} * 108, '\0');
  }
  auto s = openSpool(dir, 8 << 20, 2 << 20);
  CHECK(s->stats().lostRecords == 3);
  auto got = readIndexed(*s, 0);
  REQUIRE(got.size() == 37);
  for (const auto& [index, payload] : got) CHECK(payload == rec(static_cast<int>(index), 100));
  CHECK(got[10].first == 13);
}

TEST_CASE("spool quarantines segments that are not what their names say") {
  TempDir tmp;
  const std::string dir = tmp.sub("spool");
  {
    auto s = openSpool(dir);
    for (int i = 0; i < 5; ++i) REQUIRE(s->append(rec(i)).isOk());
  }
  const std::string seg = onlySegment(dir);
  // A copy under another number: its header names base 0.
  std::filesystem::copy_file(seg, dir + "/00000000000000000900.seg");
  // Bytes that are not a segment at all, and a segment overlapping another.
  tmp.write("spool/00000000000000000950.seg", std::string(300, 'z'));
  // A FIFO and a link named like segments: opening them must neither block nor follow.
  REQUIRE(::mkfifo((dir + "/00000000000000001000.seg").c_str(), 0600) == 0);
  std::filesystem::create_symlink(seg, dir + "/00000000000000001100.seg");
  auto s = openSpool(dir);
  CHECK(s->stats().quarantined == 4);
  CHECK(quarantined(dir).size() == 4);
  CHECK(s->nextIndex() == 5);
  CHECK(readAll(*s, 0).size() == 5);
}

TEST_CASE("spool quarantines an unreadable acked position and replays what it holds") {
  TempDir tmp;
  const std::string dir = tmp.sub("spool");
  {
    auto s = openSpool(dir);
    for (int i = 0; i < 5; ++i) REQUIRE(s->append(rec(i)).isOk());
    s->ack(2);
  }
  tmp.write("spool/acked", "18446744073709551615\n");
  auto s = openSpool(dir);
  CHECK(s->stats().quarantined == 1);
  CHECK(s->ackedIndex() == 0);
  CHECK(s->firstUnacked() == 0);
  CHECK(readAll(*s, 0).size() == 5);
}

TEST_CASE("spool reads a segment an older agent wrote and appends after it in a new one") {
  TempDir tmp;
  const std::string dir = tmp.sub("spool");
  std::filesystem::create_directories(dir);
  {
    // Format 1: [len][crc32(payload)][payload], no header.
    std::string bytes;
    for (int i = 0; i < 3; ++i) {
      const std::string r = rec(i);
      uint32_t len = static_cast<uint32_t>(r.size());
      uint32_t crc = static_cast<uint32_t>(
          crc32(0L, reinterpret_cast<const Bytef*>(r.data()), static_cast<uInt>(r.size())));
      for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<char>(len >> (8 * b)));
      for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<char>(crc >> (8 * b)));
      bytes += r;
    }
    tmp.write("spool/00000000000000000000.seg", bytes);
  }
  auto s = openSpool(dir);
  CHECK(s->nextIndex() == 3);
  REQUIRE(s->append(rec(3)).isOk());
  CHECK(segmentFiles(dir) == 2);
  CHECK(readAll(*s, 0) == std::vector<std::string>{rec(0), rec(1), rec(2), rec(3)});
}

TEST_CASE("an append that may not evict is refused when the spool is full, and drops nothing") {
  TempDir tmp;
  auto s = openSpool(tmp.sub("spool"), 64 << 10, 4096);
  int n = 0;
  while (s->stats().bytes + 2000 < (64u << 10)) REQUIRE(s->append(rec(n++, 900)).isOk());
  trainscope::Status st = s->append(rec(n, 8000), Spool::Evict::kNever);
  CHECK_FALSE(st.isOk());
  CHECK(s->noRoom());
  CHECK(s->stats().droppedItems == 0);
  CHECK(s->pendingItems() == static_cast<uint64_t>(n));
  // Once the collector acks, the room is there again.
  s->ack(static_cast<uint64_t>(n));
  CHECK(s->append(rec(n, 8000), Spool::Evict::kNever).isOk());
  CHECK_FALSE(s->noRoom());
  CHECK(s->stats().droppedItems == 0);
}
