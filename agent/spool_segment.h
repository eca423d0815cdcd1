// The spool's on-disk segment format and its reader. Pure functions on byte buffers: the spool
// calls them on a mapped segment file at start-up, a fuzz target calls them on any bytes. No
// I/O, no shared state; any thread.
//
// A segment file (format 2) is a 16-byte header and a sequence of framed records:
//   header   "TSSPOOL" 0x02 (8 bytes), then u64 base (little endian): the index of record 0
//   record   [u32 payload length][u32 check][payload]   (little endian)
//   check    crc32(payload) XOR (the record's index, low 32 bits)
// Binding the check to the index does two things. A damaged region can be skipped without
// losing count: the next intact record says by its own check which index it holds, so the
// records after a flipped byte keep their numbers (and their acked-or-not state), and only the
// records inside the damage are lost. And a segment renamed or copied to another base fails
// every check instead of replaying under the wrong numbers.
// Format 1 (agents before this header existed) has no header and check = crc32(payload); it is
// still read, with a damaged region counted as one lost record, and never appended to.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trainscope::agent {

inline constexpr size_t kSegmentHeaderBytes = 16;
inline constexpr size_t kRecordHeaderBytes = 8;
// Record indices stay below this. At a million records a second it lasts 146,000 years, so an
// index (or a segment name) above it is junk, and the sums below can never overflow.
inline constexpr uint64_t kMaxSpoolIndex = 1ull << 62;
// Marks a record slot whose bytes were damaged: its index is known, its payload is lost.
inline constexpr uint64_t kHoleBit = 1ull << 63;

// What scanSegment found in one segment's bytes.
struct SegmentScan {
  enum class Format { kEmpty, kV1, kV2, kJunk };
  Format format = Format::kEmpty;
  uint64_t base = 0;  // index of record slot 0 (the caller's, checked against a v2 header)
  // File offset of each record slot, in index order; kHoleBit set on a lost record, whose
  // offset is where its damaged region starts (several lost records may share one).
  std::vector<uint64_t> slots;
  uint64_t dataEnd = 0;       // end of the last intact record (a v2 header alone: 16)
  uint64_t lostRecords = 0;   // hole slots
  uint64_t damagedBytes = 0;  // bytes skipped between intact records
  uint64_t tailBytes = 0;     // bytes after the last intact record: a torn write, or damage
  std::string junk;           // Format::kJunk: why these bytes are not a segment of `base`
  uint64_t end() const { return base + slots.size(); }
  // Records with their payload intact.
  uint64_t intactRecords() const { return slots.size() - lostRecords; }
};

// Reads the framing of a segment named for `base` (its file name). Never reads outside
// `data`; does at most a bounded multiple of data.size() in checksum work, however the bytes
// were made. Junk: a v2 header naming another base, or bytes that are neither format.
SegmentScan scanSegment(std::string_view data, uint64_t base);

// Format 2 writers: the header of a new segment and one framed record at `index`.
std::string segmentHeader(uint64_t base);
void appendRecord(std::string& out, std::string_view payload, uint64_t index);

// The check of a format 2 record, and whether `check` fits `payload` at `index`.
uint32_t recordCheck(std::string_view payload, uint64_t index);

}  // namespace trainscope::agent
