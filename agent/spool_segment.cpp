#include "agent/spool_segment.h"

#include <algorithm>
#include <cstring>

#include <zlib.h>

namespace trainscope::agent {
namespace {

constexpr char kMagic[8] = {'T', 'S', 'S', 'P', 'O', 'O', 'L', '\x02'};
// The smallest record: a header and one payload byte (empty records are never written).
constexpr uint64_t kMinRecordBytes = kRecordHeaderBytes + 1;

uint32_t crcOf(const char* data, size_t size) {
  // zlib takes uInt lengths: feed large payloads in pieces.
  uLong crc = crc32(0L, Z_NULL, 0);
  while (size > 0) {
    const auto n = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data), n);
    data += n;
    size -= n;
  }
  return static_cast<uint32_t>(crc);
}

uint32_t getU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

uint64_t getU64(const char* p) {
  return static_cast<uint64_t>(getU32(p)) | (static_cast<uint64_t>(getU32(p + 4)) << 32);
}

void putU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// The payload length of a record header at `pos` when it frames a record that fits in `data`
// (0 otherwise). Cheap: no checksum.
uint32_t framedLength(std::string_view data, size_t pos) {
  if (data.size() - pos < kMinRecordBytes) return 0;
  const uint32_t len = getU32(data.data() + pos);
  if (len == 0 || len > data.size() - pos - kRecordHeaderBytes) return 0;
  return len;
}

// Reads the records of one segment, slot by slot, and skips damaged regions.
class Scanner {
 public:
  Scanner(std::string_view data, bool v2, SegmentScan& out)
      : data_(data),
        v2_(v2),
        out_(out),
        budget_(8 * static_cast<uint64_t>(data.size()) + (64u << 10)) {}

  void run(size_t start) {
    size_t pos = start;
    out_.dataEnd = start;
    while (pos < data_.size()) {
      const uint64_t index = out_.end();
      if (index >= kMaxSpoolIndex) break;  // numbering ends here; the rest counts as tail
      const uint32_t len = framedLength(data_, pos);
      if (len != 0 && matches(pos, len, index)) {
        out_.slots.push_back(pos);
        pos += kRecordHeaderBytes + len;
        out_.dataEnd = pos;
        continue;
      }
      uint64_t found = 0;
      uint64_t lost = 0;
      if (!resync(pos, index, &found, &lost)) break;
      for (uint64_t k = 0; k < lost; ++k) out_.slots.push_back(pos | kHoleBit);
      out_.lostRecords += lost;
      out_.damagedBytes += found - pos;
      pos = found;
    }
    out_.tailBytes = data_.size() - out_.dataEnd;
  }

 private:
  bool matches(size_t pos, uint32_t len, uint64_t index) {
    const std::string_view payload = data_.substr(pos + kRecordHeaderBytes, len);
    const uint32_t check = getU32(data_.data() + pos + 4);
    return v2_ ? recordCheck(payload, index) == check : crcOf(payload.data(), len) == check;
  }

  // The next intact record after a damaged one at `pos` (which held record `index`): its
  // offset, and how many records the damage took. Format 2 reads that count from the found
  // record's check (an index that fits the gap: at least one record, at most one per 9 bytes
  // skipped); format 1 cannot know it and counts one.
  bool resync(size_t pos, uint64_t index, uint64_t* found, uint64_t* lost) {
    for (size_t p = pos + 1; p + kMinRecordBytes <= data_.size(); ++p) {
      const uint32_t len = framedLength(data_, p);
      if (len == 0) continue;
      // A real record ends at the end of the data or where another framed record starts.
      const size_t next = p + kRecordHeaderBytes + len;
      if (next != data_.size() && framedLength(data_, next) == 0) continue;
      if (budget_ < len) return false;  // crafted bytes: give up, the rest is tail
      budget_ -= len;
      const uint32_t crc = crcOf(data_.data() + p + kRecordHeaderBytes, len);
      const uint32_t check = getU32(data_.data() + p + 4);
      if (!v2_) {
        if (crc != check) continue;
        *found = p;
        *lost = 1;
        return true;
      }
      // check = crc ^ low32(index): the found record's index, relative to the lost one.
      const uint64_t ahead = static_cast<uint32_t>((crc ^ check) - static_cast<uint32_t>(index));
      const uint64_t most = (p - pos) / kMinRecordBytes;
      if (ahead == 0 || ahead > most || index + ahead >= kMaxSpoolIndex) continue;
      *found = p;
      *lost = ahead;
      return true;
    }
    return false;
  }

  std::string_view data_;
  bool v2_;
  SegmentScan& out_;
  uint64_t budget_;  // checksum bytes resync may still spend
};

}  // namespace

uint32_t recordCheck(std::string_view payload, uint64_t index) {
  return crcOf(payload.data(), payload.size()) ^ static_cast<uint32_t>(index);
}

std::string segmentHeader(uint64_t base) {
  std::string out(kMagic, sizeof kMagic);
  putU32(out, static_cast<uint32_t>(base));
  putU32(out, static_cast<uint32_t>(base >> 32));
  return out;
}

void appendRecord(std::string& out, std::string_view payload, uint64_t index) {
  putU32(out, static_cast<uint32_t>(payload.size()));
  putU32(out, recordCheck(payload, index));
  out.append(payload);
}

SegmentScan scanSegment(std::string_view data, uint64_t base) {
  SegmentScan s;
  s.base = base;
  if (data.empty()) return s;
  const size_t magicBytes = std::min(data.size(), sizeof kMagic);
  const bool magic = std::memcmp(data.data(), kMagic, magicBytes) == 0;
  if (magic && data.size() < kSegmentHeaderBytes) {
    // A crash while the header was written: an empty segment.
    s.tailBytes = data.size();
    return s;
  }
  if (magic) {
    const uint64_t named = getU64(data.data() + sizeof kMagic);
    if (named != base) {
      s.format = SegmentScan::Format::kJunk;
      s.junk = "its header says it starts at record " + std::to_string(named) + ", its name says " +
               std::to_string(base);
      return s;
    }
    s.format = SegmentScan::Format::kV2;
    Scanner(data, true, s).run(kSegmentHeaderBytes);
    return s;
  }
  s.format = SegmentScan::Format::kV1;
  Scanner(data, false, s).run(0);
  if (s.slots.empty()) {
    // Without a header, bytes that frame no record at all are not a segment.
    s = SegmentScan{};
    s.base = base;
    s.format = SegmentScan::Format::kJunk;
    s.junk = "it has no segment header and no intact record in its " + std::to_string(data.size()) +
             " bytes";
  }
  return s;
}

}  // namespace trainscope::agent
