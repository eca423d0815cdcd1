// libFuzzer target: the agent's spool recovering a directory a previous agent (or anyone) left:
// a segment file whose name and bytes come from the input, up to two of them, and an "acked"
// file. Then the agent's use of it: read everything pending, append, ack, and reopen.
// Input: [flags u8][acked u64][base u64][split u16][segment bytes...]; flags bit 0 writes the
// acked file, bit 1 splits the bytes into a second segment at `split` whose base follows.
// Properties beyond "no crash, leak or UB": open never fails on bad content, a read returns only
// non-empty records, and a record appended is read back as written, also after a reopen.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "agent/spool.h"
#include "tests/common/support.h"
#include "tests/fuzz/fuzz_util.h"

using namespace trainscope;

namespace {

using fuzz::check;

template <typename T>
T take(const uint8_t*& data, size_t& size) {
  T v{};
  const size_t n = size < sizeof v ? size : sizeof v;
  std::memcpy(&v, data, n);
  data += n;
  size -= n;
  return v;
}

void writeFile(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

std::string segmentPath(const std::string& dir, uint64_t base) {
  char name[32];
  std::snprintf(name, sizeof name, "%020llu.seg", static_cast<unsigned long long>(base));
  return dir + "/" + name;
}

// Reads every pending record (a bounded number of calls), checking each is non-empty.
void drain(agent::Spool& spool) {
  uint64_t from = spool.firstUnacked();
  for (int i = 0; i < 64 && from < spool.nextIndex(); ++i) {
    std::vector<std::string> out;
    uint64_t next = from;
    if (!spool.read(from, 16, 4096, &out, &next).isOk()) return;
    for (const auto& r : out) check(!r.empty());
    if (next <= from) return;
    from = next;
  }
}

std::string readAt(agent::Spool& spool, uint64_t index) {
  std::vector<std::string> out;
  uint64_t next = 0;
  check(spool.read(index, 1, 1 << 20, &out, &next).isOk());
  return out.empty() ? std::string() : out.front();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto flags = take<uint8_t>(data, size);
  const auto acked = take<uint64_t>(data, size);
  const auto base = take<uint64_t>(data, size);
  const auto split = take<uint16_t>(data, size);

  tests::TempDir dir;
  if (dir.path().empty()) return 0;
  if ((flags & 1) != 0) {
    std::ofstream(dir.sub("acked")) << acked << "\n";
  }
  if ((flags & 2) != 0 && split < size) {
    writeFile(segmentPath(dir.path(), base), data, split);
    writeFile(segmentPath(dir.path(), base + 1 + split / 8), data + split, size - split);
  } else {
    writeFile(segmentPath(dir.path(), base), data, size);
  }

  agent::SpoolOptions o;
  o.dir = dir.path();
  o.maxBytes = 64 << 10;
  o.segmentBytes = 4 << 10;
  auto opened = agent::Spool::open(o);
  check(opened.isOk());
  auto& spool = *opened.value();
  drain(spool);

  const std::string record = "record after recovery";
  const uint64_t at = spool.nextIndex();
  if (!spool.append(record).isOk()) return 0;
  check(spool.nextIndex() > at);
  check(readAt(spool, at) == record);
  spool.ack(spool.nextIndex() - 1);
  check(spool.sync().isOk());
  opened.value().reset();

  auto again = agent::Spool::open(o);
  check(again.isOk());
  check(readAt(*again.value(), at) == record);
  drain(*again.value());
  return 0;
}
