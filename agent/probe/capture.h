// CaptureRecorder runs one probe instance's trace captures (docs/CAPTURE.md): it accepts or
// rejects a CaptureCommand, takes the flight recorder's steps before the start step, then the
// records of every folded step up to the last one, and streams them into a gzip Chrome-trace
// file under a size bound. Single-threaded: one thread at a time owns it (the probe runs it on
// a CaptureWorker thread, capture_worker.h, since compression costs ~0.5-0.7 us per record:
// tools/bench/capture_bench). It streams: only the step in hand is in memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "agent/probe/config.h"
#include "agent/probe/flight_recorder.h"
#include "agent/probe/gzip_writer.h"
#include "agent/probe/record.h"
#include "schema/capture_state.h"
#include "schema/trainscope.pb.h"

namespace trainscope::probe {

// Who writes the file (copied into its "trainscope" object and into every status).
struct CaptureIdentity {
  std::string job;
  uint32_t rank = 0;
  std::string host;
  uint32_t pid = 0;
};

struct CaptureOptions {
  std::string dir = kDefaultCaptureDir;    // files go to <dir>/<capture_id>/rank-<R>.json.gz
  uint64_t defaultMaxBytes = 64ull << 20;  // bound when the command says 0 (CAPTURE.md)
  uint32_t maxSteps = 1000;                // N limit (CAPTURE.md); more is rejected
  uint32_t maxHistory = 1000;              // K limit (CAPTURE.md); more is rejected
  uint64_t flushEveryBytes = 32u << 10;    // JSON between zlib sync flushes: smaller keeps
                                           // the file closer to its bound, costs ratio
  int zlibLevel = 1;                       // 1 = fastest (runtime thread), 9 = smallest
};

class CaptureRecorder {
 public:
  CaptureRecorder(CaptureIdentity identity, CaptureOptions options);

  // Handles `cmd` (its `capture` part): answers `recording` (and writes the history held in
  // `flight` at once) or `failed` with the reason. `lastFinalStep` is the instance's last
  // folded step (-1 before any). A repeat of the running command answers `recording` again.
  // A second status follows `recording` when the history alone filled the bound (`uploading`)
  // or could not be written (`failed`).
  std::vector<wire::CommandStatus> start(const wire::Command& cmd, int64_t lastFinalStep,
                                         const FlightRecorder& flight);
  // start() in two parts, for a caller that takes the history on one thread and writes it on
  // another: the steps [first, second] to take from the flight recorder (empty when first >
  // second); the decision, which opens the file (`*started` true when a new capture began;
  // `firstHeldStep` is the oldest step taken, -1 for none); then the history itself.
  static std::pair<int64_t, int64_t> historyRange(const wire::CaptureCommand& c);
  wire::CommandStatus begin(const wire::Command& cmd, int64_t lastFinalStep, int64_t firstHeldStep,
                            bool* started);
  std::optional<wire::CommandStatus> writeHistory(const std::vector<HeldStep>& held);
  // Ends the running capture early with what it has, truncated (the writer fell behind).
  std::optional<wire::CommandStatus> cutShort(std::string detail);
  // Offers one folded step (bounds and its records). Returns the final status (`uploading` or
  // `failed`) when this step completes the capture, or the trace hit its bound.
  std::optional<wire::CommandStatus> offer(int64_t step, int64_t startNs, int64_t endNs,
                                           const std::vector<Record>& records);
  // The instance is closing at `lastStep`: writes what it has ("rank ended at step X").
  std::optional<wire::CommandStatus> close(int64_t lastStep);

  bool active() const { return active_; }
  const std::string& activeId() const { return commandId_; }

 private:
  wire::CommandStatus status(const std::string& id, wire::RankState state,
                             std::string detail) const;
  wire::CommandStatus fail(std::string detail);
  // Writes one step (a ProfilerStep event and its records); false once the bound is hit or
  // writing failed (see truncated_ / error_).
  bool writeStep(int64_t step, int64_t startNs, int64_t endNs, const std::vector<Record>& records);
  bool writeEvent(const std::string& event, int64_t tNs);
  wire::CommandStatus finishFile(std::string detail);
  const std::string& jsonName(uint32_t id);

  CaptureIdentity identity_;
  CaptureOptions options_;
  std::unordered_map<uint32_t, std::string> names_;  // name id -> JSON string literal

  bool active_ = false;
  std::string commandId_;
  std::string captureId_;
  int64_t start_ = 0;
  uint32_t steps_ = 0;
  uint32_t history_ = 0;
  uint64_t maxBytes_ = 0;
  uint64_t reserve_ = 0;     // compressed bytes kept for the marker and the tail
  uint64_t flushEvery_ = 0;  // input between zlib sync flushes for this capture
  GzipWriter file_;
  bool anyEvent_ = false;
  bool truncated_ = false;
  std::string error_;
  int64_t firstStep_ = -1;
  int64_t lastStep_ = -1;
  int64_t lastSeen_ = -1;  // newest step offered or written, so repeats are skipped
  std::string buf_;
};

// A capture id becomes a directory name: letters, digits, '-', '_', '.', at most 128, not
// "." or "..", so nothing can leave the capture directory.
bool safeCaptureId(const std::string& id);
inline constexpr const char* kBadCaptureId =
    "is not a valid capture id (letters, digits, '-', '_', '.'; at most 128)";

// "64 MiB", "512 KiB" or "1000 bytes": how the truncation marker names the bound.
std::string formatBound(uint64_t bytes);

}  // namespace trainscope::probe
