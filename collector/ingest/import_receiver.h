// Ingest's second door: existing traces imported by `trainscope import` (importer/), over the
// HTTP API. A client opens a session for a job, uploads its bundle's files in chunks
//   steps.pb          the job's RankHello, StepReport and RankGoodbye envelopes, each preceded
//                     by its length as a varint (importer/import_job.h)
//   rank-<R>.json.gz  each rank's timeline, a per-rank capture file (docs/CAPTURE.md)
// and commits. The commit checks every item as the socket checks an agent's (validate.h),
// writes them all in one storage transaction and hands that batch to the same onCommitted hook
// as the socket's writer (detectors, captures), so imported steps are stored, judged and served
// like live ones. Anything wrong fails the commit and nothing is stored. The timelines then
// become a capture of kind "import" (onTimeline) that the capture stage merges and serves.
// Thread-safe: one mutex guards the sessions; a commit runs on its caller's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "collector/ingest/validate.h"
#include "collector/storage/store.h"
#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace trainscope::ingest {

struct ImportReceiverOptions {
  // Sessions stage their files in DIR/<id>/. The capture directory: a committed import's rank
  // files are then where the capture stage serves them, with no copy.
  std::string dir = "./trainscope-data/captures";
  // Bound on steps.pb: the commit holds all of it in memory (about 3x) while it checks and
  // writes. Larger imports are refused with 413.
  uint64_t maxStepsBytes = 256ull << 20;
  // Bound on one rank's timeline file (the capture merge parses it whole).
  uint64_t maxTimelineBytes = 1ull << 30;
  uint32_t maxRanks = 1u << 16;  // rank files one import may hold
  // Bounds on what open imports hold on disk together, so that uploads cannot fill it: at most
  // maxOpen sessions at once (a new one is refused with 503 until one commits, is aborted or
  // expires), maxOpenBytes staged over all of them, and every chunk leaves at least
  // minFreeBytes free on the disk of `dir` (a chunk past either is refused with 413, the
  // session kept so that it can resume when room is made). A committed import's files count
  // with the captures (the capture stage's bound on stored traces).
  uint32_t maxOpen = 8;
  uint64_t maxOpenBytes = 8ull << 30;
  uint64_t minFreeBytes = 1ull << 30;
  // A session not touched for this long is dropped with its files: bounds disk held by
  // clients that went away mid-upload.
  int64_t idleTimeoutNs = 600'000'000'000;
  ValidationLimits limits;  // item checks, as for agents
  // Called after the commit's transaction with its batch (the detectors and the capture stage
  // hook in here, as for the socket's commits). Runs on the committing thread.
  std::function<void(const storage::WriteBatch&)> onCommitted;
  // Turns the committed timelines into a capture (kind "import", every rank done); returns the
  // stored row. Unset: timelines are refused.
  std::function<Result<storage::CaptureRow>(const storage::CaptureRow&)> onTimeline;
};

// An answer for the HTTP layer, which maps the code to an HTTP status (http::httpStatusOf).
// nlohmann::json's destructor may allocate (it unwinds deep values on a heap stack), which
// bugprone-exception-escape reports; out of memory there ends the process either way.
struct ImportReply {     // NOLINT(bugprone-exception-escape)
  Status status;         // ok, or the refusal with its code and message
  bool created = false;  // a new import session (HTTP 201)
  nlohmann::json body;   // the answer; with a refused chunk, where to resume
};

struct ImportStats {
  uint64_t begun = 0;
  uint64_t committed = 0;
  uint64_t failed = 0;   // commits refused
  uint64_t aborted = 0;  // by the client or expired
  uint64_t steps = 0;    // step reports stored by commits
  uint64_t bytes = 0;    // file bytes received
};

class ImportReceiver {
 public:
  // `store` and `clock` must outlive the receiver.
  ImportReceiver(ImportReceiverOptions options, storage::Store& store, const Clock& clock);

  // Removes staging directories a previous collector left (sessions do not outlive it). Call
  // once at start-up, before any request.
  void recover();

  // Opens a session for `job`. Body (JSON object, may be empty): "reason" (text), "append"
  // (bool: allow a job that exists already; otherwise 409). 201 {"id", "job"}.
  ImportReply begin(const std::string& job, std::string_view body);
  // Writes `data` at `offset` of file `name` (steps.pb or rank-<R>.json.gz). The offset must
  // be the bytes received so far (409 with "bytes" otherwise: the client resumes there).
  // 200 {"name", "bytes"}.
  ImportReply put(const std::string& id, const std::string& name, uint64_t offset,
                  std::string_view data);
  // Stores the import. Body: {"files": [{"name", "bytes", "crc32", and for rank files
  // "first_step", "last_step", "truncated", "source"}]}, naming every file uploaded. 201 {"job",
  // "ranks", "steps", "world_size", "capture": the capture row's id or null, "capture_error"}.
  ImportReply commit(const std::string& id, std::string_view body);
  // Drops a session and its files. 200 {"id"}.
  ImportReply abort(const std::string& id);

  ImportStats stats() const;

 private:
  struct FileState {
    uint64_t bytes = 0;
  };
  struct Session {
    std::string id;
    std::string job;
    std::string reason;
    bool append = false;
    int64_t touchedNs = 0;
    uint64_t bytes = 0;  // all its files together, counted in stagedBytes_
    std::map<std::string, FileState> files;
  };

  ImportReply commitLocked(Session& s, std::string_view body) REQUIRES(mu_);
  // Refusal of `bytes` more for a session, or none (the disk bounds above).
  std::optional<ImportReply> roomFor(uint64_t bytes) const REQUIRES(mu_);
  void eraseLocked(const std::string& id) REQUIRES(mu_);  // forgets it, files kept
  void expireLocked(int64_t nowNs) REQUIRES(mu_);
  void dropLocked(const std::string& id) REQUIRES(mu_);
  std::string directory(const std::string& id) const;

  ImportReceiverOptions options_;
  storage::Store& store_;
  const Clock& clock_;
  mutable Mutex mu_;
  std::map<std::string, Session> sessions_ GUARDED_BY(mu_);
  ImportStats stats_ GUARDED_BY(mu_);
  uint64_t stagedBytes_ GUARDED_BY(mu_) = 0;  // the open sessions' files together
};

}  // namespace trainscope::ingest
