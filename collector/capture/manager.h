// The capture stage's engine (docs/CAPTURE.md): starts captures (from a request or an anomaly),
// sends their commands to agents, follows every rank's status and file chunks, fails ranks that
// are gone or late, and merges the rank files once every rank is final. Any thread may call
// any method; one mutex guards the running captures. tick() does the merges, outside that
// mutex, so the ingest socket thread (onCommandItem) never waits for one: call it from one
// thread (the collector's main loop).
// A rank status or chunk only changes the capture in memory and marks that rank changed;
// flush() (each tick(), and the destructor) stores, off ingest's threads, only the ranks that
// changed (Store::writeCaptureProgress), copying only those under the lock. Storing the whole
// row per status cost the socket thread O(ranks) per status (20 ms at 8,192 ranks, O(ranks^2)
// over a capture), and a whole row per tick still cost 53-148 ms of the store's write lock at
// 16,384 ranks. A capture's start and its final state are stored whole at once; a rank's
// state reaches the store within one tick, and a rank whose file was complete before a crash
// is found done again by recover() (the file's rename is what makes a rank done).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collector/capture/auto_capture.h"
#include "collector/capture/merge.h"
#include "collector/capture/request.h"
#include "collector/storage/store.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "schema/capture_state.h"
#include "schema/wire.h"

namespace trainscope::capture {

struct CaptureManagerOptions {
  // Capture files live in DIR/<id>/ (rank-<R>.json.gz, trace.json.gz); created as needed.
  std::string dir = "./trainscope-data/captures";
  // max_bytes of a request that names none: larger keeps longer traces, costs disk and upload.
  uint64_t defaultMaxBytes = kDefaultMaxBytes;
  // Added to every trace deadline: covers upload and a slow first step; longer waits longer for
  // a rank that will never answer.
  int64_t deadlineSlackNs = 30'000'000'000;
  // Deadline of a stacks capture: the probe answers within about a second.
  int64_t stacksDeadlineNs = 30'000'000'000;
  // A request without a start step starts at the job's latest stored step + max(2, this time
  // in steps): the stored latest step lags the ranks by the probes' and agents' batching (a few
  // hundred ms), and the command needs time to reach them. Longer makes a passed start step
  // rarer; shorter makes the capture start sooner.
  int64_t minLeadNs = 1'000'000'000;
  // Step time assumed for a job with no step summary yet (deadline and lead arithmetic).
  int64_t fallbackStepNs = 1'000'000'000;
  // A rank file may exceed max_bytes by this much (the probe's cut marker, gzip trailer) before
  // the rank is failed: bounds disk per rank against a misbehaving probe.
  uint64_t chunkSlackBytes = 1u << 20;
  // Automatic captures (auto_capture.h): which anomalies take one, within a budget per job and
  // interval. autoCapture.intervalNs 0 turns them off.
  AutoCaptureOptions autoCapture;
  uint32_t autoSteps = 3;    // N of automatic trace captures
  uint32_t autoHistory = 4;  // least K of automatic trace captures
  // Most K of an automatic trace capture: K grows so the history reaches the anomaly's onset
  // (detection, the decision window and the lead put the start step 1-3 s after it: some 150
  // steps at 17 ms a step), up to this. The probe's flight recorder holds 256 steps by default
  // (agent/probe/config.h; fewer when its byte bound is reached first): more than it holds
  // only makes the capture say its history was short.
  uint32_t autoMaxHistory = 256;
  MergeOptions merge;
  // Disk held by finished captures and committed imports (pruneStoredFiles): their files are
  // removed once the capture is older than filesRetentionNs (0: kept for good), and the
  // oldest are removed while all of them together hold more than maxStoredBytes (0: no
  // bound). The rows stay, saying that their files were removed and why.
  int64_t filesRetentionNs = 0;
  uint64_t maxStoredBytes = 0;
  // How far a file sent decompressed (to a client that does not take gzip) may expand. The
  // merged trace is written by the merge (about 10x); a rank file comes from a probe.
  DecompressLimits download{uint64_t{64} << 30, 64};
  // The capture JSON carried inside merged files (http::captureJson; the collector wires it).
  // Unset: {"id", "job", "kind", "state"} only.
  std::function<nlohmann::json(const storage::CaptureRow&)> describe;
};

// Where commands go: the ingest server's sendCommand (an error when the node's agent is not
// connected). Called with the manager's mutex held; must not call back into the manager.
using CommandSink = std::function<Status(const std::string& node, const wire::Command& command)>;

// Counters since start, for /metrics.
struct CaptureStats {
  std::map<std::pair<std::string, std::string>, uint64_t> started;  // (kind, trigger) -> count
  std::map<wire::CaptureState, uint64_t> finished;                  // final state -> count
  uint64_t bytes = 0;          // rank-file bytes written from chunks
  uint64_t chunks = 0;         // chunks written
  uint64_t chunksIgnored = 0;  // repeats, or for captures/ranks no longer running
  uint64_t autoSkipped = 0;    // anomalies not captured (the policy's skips, refusals)
  AutoCaptureSkips autoSkips;  // the policy's skips by reason (part of autoSkipped)
  size_t autoCandidates = 0;   // open anomalies waiting for a decision now
  uint64_t storeFailures = 0;  // capture rows the store refused
};

// Prometheus text: trainscope_captures_started_total{kind,trigger},
// trainscope_captures_finished_total{state}, trainscope_capture_bytes_total and a few more.
std::string captureMetricsText(const CaptureStats& stats);

// "2 of 3 ranks done, 1 failed".
std::string captureSummary(const storage::CaptureRow& row);

class CaptureManager {
 public:
  // `store` and `clock` must outlive the manager.
  CaptureManager(CaptureManagerOptions options, storage::Store& store, const Clock& clock,
                 CommandSink sink);
  CaptureManager(const CaptureManager&) = delete;
  CaptureManager& operator=(const CaptureManager&) = delete;
  // Stores what changed since the last flush().
  ~CaptureManager();

  // Captures a previous collector left "running" are not resumed: their unfinished ranks fail
  // with "collector restarted during the capture", except a rank whose complete file is on
  // disk (its done state was not stored yet), which is done; ranks done are merged by the next
  // tick() (a partial capture). Call once, before anything else.
  void recover();

  // Validates `request` against job `job` and, when it is acceptable, stores the capture and
  // sends its commands; returns the stored row. `trigger` is "request" or "anomaly" (for
  // /metrics). Refusals say why with their code: kInvalidArgument (a field or rank out of
  // range), kNotFound (no such job), kConflict (the start step passed, or a capture is already
  // running on a rank), kError (the store or the file system failed).
  Result<storage::CaptureRow> start(const std::string& job, const CaptureRequest& request,
                                    const std::optional<std::string>& anomalyId = std::nullopt,
                                    const std::string& trigger = "request");
  // Automatic captures (docs/CAPTURE.md). offerAnomaly: every anomaly row the detect runner
  // stores (opened, refreshed, resolved, ended). pickAutoCaptures: the policy's decisions at
  // `nowNs` (auto_capture.h): starts a capture for each anomaly it picks and returns those
  // anomalies' rows (as last offered) with capture_id set, for the caller to store. The detect
  // runner calls both under its lock, so the rows returned are the latest stored.
  void offerAnomaly(const storage::AnomalyRow& anomaly);
  std::vector<storage::AnomalyRow> pickAutoCaptures(int64_t nowNs);
  // The automatic capture for `anomaly` now, whatever the policy: its ranks plus a healthy
  // reference rank, stacks for a hang, else a trace whose history reaches the onset (up to
  // autoMaxHistory). Refusals as start()'s; kFailedPrecondition when automatic captures are
  // off, the anomaly is not open or its ranks all ended.
  Result<storage::CaptureRow> startForAnomaly(const storage::AnomalyRow& anomaly);

  // Takes in the timelines of an import (collector/ingest/import_receiver.h): `row` is kind
  // "import" with every rank "done" and its rank files already in directory(row.id). Stores it
  // and merges it at the next tick(), like a capture whose ranks all finished; the merge keeps
  // the files' times (the importer aligned them). Fails on a bad id or a store error.
  Result<storage::CaptureRow> adoptImport(const storage::CaptureRow& row);

  // ingest's onCommandItem: CommandStatus and FileChunk items (socket thread).
  void onCommandItem(const std::string& node, const wire::Envelope& item);
  // ingest's onCommitted: goodbyes and vanished processes fail the ranks they end.
  void onCommitted(const storage::WriteBatch& batch);
  // Applies deadlines at `nowNs`, stores what changed (flush()) and merges captures whose ranks
  // are all final. About once a second, from one thread.
  void tick(int64_t nowNs);
  // Stores every running capture changed since the last flush: one write per capture of the
  // ranks that changed (however many statuses and chunks changed each) and its summary.
  // tick() calls it; any thread but ingest's.
  void flush();

  // A stored file of capture `id` ("trace.json.gz" or "rank-<R>.json.gz") as a stream: the
  // gzip bytes as stored when `gzip`, else decompressed piece by piece under
  // options.download (so a download holds one buffer, not the file, and a gzip bomb stops).
  Result<std::unique_ptr<ByteSource>> openFile(const std::string& id, const std::string& name,
                                               bool gzip) const;
  // DIR/<id>.
  std::string directory(const std::string& id) const;
  // Applies filesRetentionNs and maxStoredBytes to the files of finished captures (running
  // ones and open imports are left alone), oldest first; returns the bytes removed. Reads
  // every capture row and walks their directories: call it now and then (the collector does
  // with its hourly retention), from any thread.
  Result<uint64_t> pruneStoredFiles(int64_t nowNs);
  CaptureStats stats() const;

 private:
  struct Active {
    storage::CaptureRow row;
    std::map<uint32_t, uint64_t> written;  // bytes of each rank's .part so far
    // rank -> its index in row.rankStatus (whose order never changes), so a status finds its
    // rank in O(log n), not by a scan of 16,384 ranks. Built with the fields below by
    // indexLocked on first use.
    std::map<uint32_t, size_t> index;
    // Indexes into row.rankStatus of the ranks changed since they were last stored (each once:
    // `marked`), so a flush copies and writes those, not every rank.
    std::vector<size_t> changed;
    std::vector<bool> marked;
    // The summary's counts as of the ranks' `counted` states, brought up to date rank by rank
    // as changed ranks are taken (takeChangedLocked): a flush's summary costs what changed.
    std::vector<wire::RankState> counted;
    size_t done = 0;
    size_t failed = 0;
    bool merging = false;  // handed to tick()'s merge
  };

  // The job's ranks as stored, for start.
  struct JobRanks {
    std::vector<storage::RankRow> rows;
    std::map<uint32_t, const storage::RankRow*> byRank;  // into rows
    std::vector<uint32_t> known;
    uint32_t worldSize = 0;
    int64_t latest = -1;  // the highest step stored
  };
  // start, in order: the job's ranks, the row (its trace schedule), no overlap with a running
  // capture, the commands.
  Result<JobRanks> jobRanks(const std::string& job);
  // Sets the row's start step, steps, history and deadline; kConflict when the start step
  // is out of reach or a rank already passed it.
  Status scheduleTrace(const CaptureRequest& request, const JobRanks& ranks, int64_t nowNs,
                       storage::CaptureRow* row);
  // kConflict when a running capture of the job holds one of the row's ranks.
  Status overlapLocked(const storage::CaptureRow& row) const REQUIRES(mu_);
  // One command per agent, naming that agent's selected ranks; the ranks of an agent it cannot
  // reach fail. Returns whether any rank failed.
  bool sendCommandsLocked(Active& a) REQUIRES(mu_);

  storage::CaptureRankRow* rankOf(Active& a, uint32_t rank);
  static void indexLocked(Active& a);
  void failRankLocked(Active& a, storage::CaptureRankRow& r, const std::string& detail)
      REQUIRES(mu_);
  // Stores `row` now (start, recover, an ended capture): sets its update time and summary.
  void persistLocked(storage::CaptureRow& row) REQUIRES(mu_);
  // A status, chunk, deadline or failure changed rank `r` (an element of a.row.rankStatus):
  // the next flush() stores it. Every change of a rank's state in a running capture goes
  // through here, or the summary's counts go stale.
  static void changedLocked(Active& a, const storage::CaptureRankRow& r);
  // Brings the counts of `a` up to date with its changed ranks and forgets them as changed;
  // appends copies of them to `out` when set (a flush), else drops them (the whole row was
  // just stored).
  static void takeChangedLocked(Active& a, std::vector<storage::CaptureRankRow>* out);
  // Sets the final state of `a` (not stored: the caller erases `a` from active_, then stores
  // the row with storeFinal, so no flush of an older copy can land after it).
  void finalizeLocked(Active& a, const std::map<uint32_t, std::string>& failures,
                      std::optional<uint64_t> traceBytes) REQUIRES(mu_);
  void storeFinal(storage::CaptureRow& row) EXCLUDES(mu_);
  // Writes `row` with its update time and summary set; false (counted, logged) on a refusal.
  bool storeRow(storage::CaptureRow& row) EXCLUDES(mu_);
  void onStatusLocked(const wire::CommandStatus& status) REQUIRES(mu_);
  void onChunkLocked(const wire::FileChunk& chunk) REQUIRES(mu_);
  // Median step time over the job's steps before `latest` (its highest stored step; -1: none).
  int64_t medianStepNs(const std::string& job, int64_t latest);
  nlohmann::json describe(const storage::CaptureRow& row) const;

  CaptureManagerOptions options_;
  storage::Store& store_;
  const Clock& clock_;
  CommandSink sink_;

  // Held over every write of a running or just ended capture (flush, storeFinal), taken before
  // mu_: a flush writes copies made under mu_ after releasing it, and must not write an older
  // copy over a newer one, or over the final row.
  Mutex storeMu_;
  mutable Mutex mu_;
  std::map<std::string, Active> active_ GUARDED_BY(mu_);  // running captures by id
  // Taken before mu_ (pickAutoCaptures starts captures while holding it), never inside it.
  mutable Mutex autoMu_;
  AutoCapturePolicy policy_ GUARDED_BY(autoMu_);
  uint64_t autoRefused_ GUARDED_BY(autoMu_) = 0;  // picks whose start failed for good
  CaptureStats stats_ GUARDED_BY(mu_);
  RateLimitedLog storeLog_{std::chrono::seconds(10)};
};

}  // namespace trainscope::capture
