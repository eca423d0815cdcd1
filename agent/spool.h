// Spool: the agent's bounded on-disk queue of telemetry items waiting for the collector's ack.
// Not thread-safe: the agent's event-loop thread owns it.
//
// Layout under the spool directory:
//   LOCK                   flock()ed while an agent has the spool open (one agent per dir)
//   <20-digit base>.seg    segment files, append-only; base is the index of the first record
//   acked                  decimal index: every record below it was acked by the collector
// A record is one serialized item Envelope (StepReport, HostSample, RankHello, ...), framed as
//   [u32 payload length, little endian][u32 crc32 of payload, little endian][payload]
// Records are numbered consecutively from 0 for the life of the spool directory (numbering
// survives restarts), so "records below index N" is a cumulative position. The agent uses
// that index as the upstream Batch.seq, which makes an Ack{seq} map straight to ack(seq).
//
// Durability: append() returns after write(2), so an item survives an agent crash (not a power
// loss) before the probe is acked; sync() fsyncs the active segment and persists the acked
// index (write to acked.tmp, rename). A crash between syncs replays some already-acked
// records again; the collector's idempotent keys make that harmless.
// Bound: before an append would take the directory past maxBytes, whole oldest segments are
// deleted, acked or not; their unacked records count in droppedItems.
// Torn tail: open() checks every record's length and CRC; at the first bad one it logs, cuts
// the file there (so appends continue cleanly) and counts the cut in tornRecords.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace trainscope::agent {

struct SpoolOptions {
  // Directory holding the segments; created if missing.
  std::string dir;
  // Bound on the bytes of all segment files together.
  uint64_t maxBytes = 1ull << 30;
  // A segment is closed and a new one started past this size; clamped to maxBytes / 4.
  uint64_t segmentBytes = 4ull << 20;
};

struct SpoolStats {
  uint64_t bytes = 0;            // all segment files now
  uint64_t segments = 0;         // segment files now
  uint64_t droppedItems = 0;     // unacked records lost to the size bound, since open
  uint64_t droppedSegments = 0;  // segments deleted by the size bound, since open
  uint64_t tornRecords = 0;      // bad tails cut at open (one per cut)
  uint64_t corruptReads = 0;     // records that failed their CRC when read back
  uint64_t appended = 0;         // records appended since open
};

class Spool {
 public:
  // Opens (or creates) the spool in opts.dir, takes its lock, and recovers what a previous
  // agent left. Fails when the directory cannot be used or another agent holds it.
  static Result<std::unique_ptr<Spool>> open(const SpoolOptions& opts);
  ~Spool();
  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;

  // Appends records with a single write; all or none are stored. A record larger than the
  // bound, or empty, is refused.
  Status append(const std::vector<std::string>& records);
  Status append(std::string_view record);

  // Reads consecutive records from `from` on (from the first one still held, when `from` was
  // dropped), at most maxItems and maxBytes of payload, but at least one record when any is
  // held. *next is the index after the last record returned (== from when none).
  Status read(uint64_t from, size_t maxItems, size_t maxBytes, std::vector<std::string>* out,
              uint64_t* next);

  // Every record below `upTo` is delivered; segments wholly below it are deleted. Acks past
  // nextIndex() are clamped; acks below the current position are ignored.
  void ack(uint64_t upTo);

  // fsyncs the active segment and persists the acked index.
  Status sync();

  uint64_t ackedIndex() const { return acked_; }
  uint64_t nextIndex() const { return next_; }
  // Index of the first record still held at or past the acked position (== nextIndex() when
  // everything is acked).
  uint64_t firstUnacked() const;
  // Records held that are not acked yet.
  uint64_t pendingItems() const;
  SpoolStats stats() const;

 private:
  struct Segment {
    uint64_t base = 0;              // index of the first record
    std::vector<uint64_t> offsets;  // file offset of each record
    uint64_t bytes = 0;             // file size
    std::string path;
    int fd = -1;  // read/write; the active (last) one is appended to
    uint64_t end() const { return base + offsets.size(); }
  };

  explicit Spool(SpoolOptions opts);
  Status recover();
  Status recoverSegment(Segment& seg, bool last);
  Status startSegment();
  void dropSegment(bool countLoss);
  Status persistAcked();

  SpoolOptions opts_;
  int lockFd_ = -1;
  std::deque<Segment> segments_;
  uint64_t acked_ = 0;
  uint64_t next_ = 0;
  uint64_t totalBytes_ = 0;
  bool ackDirty_ = false;
  bool dataDirty_ = false;
  SpoolStats stats_;
};

}  // namespace trainscope::agent
