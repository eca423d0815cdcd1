// Spool: the agent's bounded on-disk queue of telemetry items waiting for the collector's ack.
// Not thread-safe: the agent's event-loop thread owns it.
//
// The directory is private (mode 0700, made or checked by ensurePrivateDir): the agent refuses
// one another user owns. Layout under it:
//   LOCK                   flock()ed while an agent has the spool open (one agent per dir)
//   <20-digit base>.seg    segment files, append-only; base is the index of the first record
//   acked                  decimal index: every record below it was acked by the collector
//   quarantine/            files that were found in place of segments or of `acked` and are
//                          not trusted: moved here, logged as errors and counted, never read
// A record is one serialized item Envelope (StepReport, HostSample, RankHello, ...); the
// segment format (a header, then records framed with a length and a check bound to the
// record's index) is in agent/spool_segment.h, with its reader.
// Records are numbered consecutively from 0 for the life of the spool directory (numbering
// survives restarts), so "records below index N" is a cumulative position. The agent uses
// that index as the upstream Batch.seq, which makes an Ack{seq} map straight to ack(seq).
//
// Durability: append() returns after write(2), so an item survives an agent crash (not a power
// loss) before the probe is acked; sync() fsyncs the active segment and persists the acked
// index (write to acked.tmp, rename). A crash between syncs replays some already-acked
// records again; the collector's idempotent keys make that harmless.
// Bound: before an append would take the directory past maxBytes, whole oldest segments are
// deleted, acked or not; their unacked records count in droppedItems. An append that must not
// do that (capture-file chunks: agent/uploads.h) asks for Evict::kNever and is refused instead.
// Recovery at open: every segment is read through scanSegment. A damaged region inside a
// segment costs only the records in it (counted in lostRecords; the records after it keep
// their numbers); bytes after the last intact record (a crash mid-write) are cut and counted
// in tornRecords. Files that cannot be segments (a name outside the numbering, a header that
// disagrees with the name, no intact record, not a regular file, larger than the bound,
// overlapping another segment) and an unreadable `acked` are quarantined, so a stray file can
// never shift the numbering and make appended records unreachable.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agent/spool_segment.h"
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
  uint64_t lostRecords = 0;      // records inside damaged regions, skipped at open
  uint64_t quarantined = 0;      // files moved to quarantine/ at open
  uint64_t corruptReads = 0;     // records that failed their check when read back
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

  // Whether an append may delete the oldest segments to stay within the bound.
  enum class Evict { kOldest, kNever };
  // Appends records with a single write; all or none are stored. A record larger than the
  // bound, or empty, is refused. With Evict::kNever, an append that would need to delete a
  // segment is refused too (noRoom() is then true until something is acked).
  Status append(const std::vector<std::string>& records, Evict evict = Evict::kOldest);
  Status append(std::string_view record, Evict evict = Evict::kOldest);
  // The last append failed only because Evict::kNever found no room.
  bool noRoom() const { return noRoom_; }

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
    uint64_t base = 0;            // index of the first record
    std::vector<uint64_t> slots;  // file offset of each record; kHoleBit: lost at recovery
    uint64_t dataEnd = 0;         // end of the last record: where appends continue
    uint64_t bytes = 0;           // file size
    bool v2 = true;  // format 2; a format 1 segment of an older agent is read, never appended to
    std::string path;
    int fd = -1;  // read/write; the active (last) one is appended to
    uint64_t end() const { return base + slots.size(); }
    // End of slot i's bytes: the next slot's start, or dataEnd for the last.
    uint64_t slotEnd(size_t i) const;
  };

  explicit Spool(SpoolOptions opts);
  Status recover();
  Status readAcked();
  // Opens and scans one segment file; *keep false when it was quarantined or was empty.
  Status recoverSegment(const std::string& name, uint64_t base, bool last, Segment* seg,
                        bool* keep);
  Status quarantine(const std::string& name, const std::string& why);
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
  bool noRoom_ = false;
  SpoolStats stats_;
};

}  // namespace trainscope::agent
