// The collector's storage interface: what ingest writes and what the API reads. SQLite is the
// default engine (sqlite_store.h); ClickHouse (clickhouse_store.h) takes its place when one
// machine's disk is not enough or several collectors share one database.
// Every method is safe to call from any thread; writes are serialized inside the store.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collector/topology/topology.h"
#include "common/status.h"
#include "schema/capture_state.h"
#include "schema/trainscope.pb.h"

namespace trainscope::storage {

// What one agent told us about itself, from its hello and heartbeats.
struct NodeUpdate {
  std::string node;
  std::string host;
  std::string agentVersion;
  uint32_t pid = 0;
  int64_t seenNs = 0;    // collector clock
  int64_t offsetNs = 0;  // collector clock - agent clock
  int64_t rttNs = 0;
  uint64_t spoolBytes = 0;
  uint64_t spoolDropped = 0;
  uint32_t ranks = 0;
  bool hasClock = false;  // offsetNs/rttNs/spool fields are valid (from a heartbeat)
};

// The process groups one rank declared (RankHello.groups), as of its declaration time. A store
// keeps, per rank, the set with the latest declaredNs: a replayed older hello changes nothing.
struct GroupsUpdate {
  std::string job;
  topology::RankGroups groups;
};

// One transaction's worth of ingested data. Keys are idempotent: a step report for a
// (job, rank, step) already stored is ignored, so replays never duplicate rows.
struct WriteBatch {
  std::vector<wire::StepReport> steps;
  std::vector<wire::RankInfo> ranks;  // registrations (node filled in by the agent)
  std::vector<wire::RankGoodbye> goodbyes;
  std::vector<wire::HostSample> hosts;
  std::vector<NodeUpdate> nodes;
  std::vector<GroupsUpdate> groups;  // after `ranks`: a rank's registration comes first
  int64_t receivedNs = 0;            // collector clock when the batch arrived
  // Optional: stepDetails[i] is steps[i] already serialized (a wire::StepReport). When its size
  // matches steps, the store keeps these bytes instead of encoding each report again, which
  // lets ingest do that work on its socket thread, off the single writer.
  std::vector<std::string> stepDetails;
  // Optional, and preferred to stepDetails when its size matches steps: views of those bytes
  // where they already lie (ingest points them into the frames it received and keeps those
  // alive with the batch), so a report's detail is neither encoded nor copied before the insert.
  std::vector<std::string_view> stepDetailViews;
  bool empty() const {
    return steps.empty() && ranks.empty() && goodbyes.empty() && hosts.empty() && nodes.empty() &&
           groups.empty();
  }
};

struct JobRow {
  std::string job;
  uint32_t worldSize = 0;
  uint32_t ranksSeen = 0;
  int64_t firstSeenNs = 0;
  int64_t lastSeenNs = 0;   // last time any rank of it reported (collector clock)
  int64_t latestStep = -1;  // highest step any rank reported
  uint64_t stepRows = 0;
  uint32_t ranksEnded = 0;  // ranks that said goodbye
  // The collector that stored the job's data last, when collectors share the store
  // (ClickHouse: ClickHouseOptions.collector); "" from an engine of one collector (SQLite).
  std::string collector;
};

struct RankRow {
  std::string job;
  uint32_t rank = 0;
  uint32_t worldSize = 0;
  uint32_t localRank = 0;
  std::string host;
  std::string node;
  uint32_t pid = 0;
  std::string probeVersion;
  std::string gpuUuid;  // the GPU the rank computes on (RankInfo.gpu_uuid); "" = none known
  int64_t firstSeenNs = 0;
  int64_t lastSeenNs = 0;
  int64_t latestStep = -1;
  bool ended = false;  // said goodbye
  int64_t endedStep = -1;
};

struct StepRow {
  std::string job;
  uint32_t rank = 0;
  int64_t step = 0;
  int64_t startNs = 0;
  int64_t endNs = 0;
  int64_t durationNs = 0;
  int64_t computeNs = 0;
  int64_t commNs = 0;
  int64_t exposedCommNs = 0;
  int64_t dataNs = 0;
  uint64_t records = 0;
  uint64_t dropped = 0;
  // Per-operator and per-collective totals, filled only when a query asks for detail.
  std::vector<wire::OpTotal> ops;
  std::vector<wire::CollectiveTotal> collectives;
  // Detail too: the parallel-layout split of the step (StepReport fields 17..25; 0 from
  // older probes and jobs without p2p or stated FLOPs).
  std::vector<wire::P2pTotal> p2p;
  int64_t p2pNs = 0;
  int64_t bubbleNs = 0;
  int64_t collectiveNs = 0;
  int64_t exposedCollectiveNs = 0;
  int64_t allToAllNs = 0;
  double modelFlops = 0;
  double hardwareFlops = 0;
  double peakFlops = 0;
  // Detail: where the rank's operators ran (StepReport field 26: "cuda", ...; "" = the host).
  std::string device;
  // Detail: the training thread's wait for a CPU in the step (StepReport field 27; 0: none or
  // not measured).
  int64_t cpuWaitNs = 0;
  // Detail: the device time of the rank's NCCL kernels in the step, and the NCCL operations
  // the profiler plugin could not time (StepReport fields 28 and 29; 0 without the plugin).
  int64_t deviceCommNs = 0;
  uint64_t deviceDropped = 0;
};

struct StepQuery {
  std::string job;
  std::optional<uint32_t> rank;
  std::optional<int64_t> fromStep;  // inclusive
  std::optional<int64_t> toStep;    // inclusive
  size_t limit = 1000;              // rows at most, ordered by (step, rank)
  bool detail = false;              // fill ops and collectives
};

// One step across the ranks that reported it.
// A node's host samples (with their GPU samples and events) over a time range.
struct HostSampleQuery {
  std::string node;
  int64_t fromNs = 0;                                  // HostSample.time_ns, inclusive
  int64_t toNs = std::numeric_limits<int64_t>::max();  // inclusive
  size_t limit = 600;                                  // samples at most: the newest, oldest first
};

struct StepSummaryRow {
  int64_t step = 0;
  uint32_t ranks = 0;
  int64_t minNs = 0;
  int64_t medianNs = 0;
  int64_t maxNs = 0;
  uint32_t slowestRank = 0;
};

struct SummaryQuery {
  std::string job;
  std::optional<int64_t> fromStep;
  std::optional<int64_t> toStep;
  size_t limit = 1000;  // steps at most, ordered by step
};

struct NodeRow {
  std::string node;
  std::string host;
  std::string agentVersion;
  uint32_t pid = 0;
  int64_t firstSeenNs = 0;
  int64_t lastSeenNs = 0;
  int64_t offsetNs = 0;
  int64_t rttNs = 0;
  uint64_t spoolBytes = 0;
  uint64_t spoolDropped = 0;
  uint32_t ranks = 0;
  std::optional<wire::HostSample> latestHost;
};

// An anomaly is open until its detector sees the cause gone (resolved) or its job ends while it
// is open (ended: every rank said goodbye, or the job went silent for the collector's job-end
// time; nothing will resolve it any more). Both are final for that run of the job.
enum class AnomalyState { kOpen, kResolved, kEnded };
// "open", "resolved", "ended": the names the API serves and the stores keep. Defined in
// store_rows.cpp.
const char* toString(AnomalyState state);
// The inverse of toString; nullopt for any other text.
std::optional<AnomalyState> parseAnomalyState(std::string_view text);

// One detected regression as stored (collector/detect's Anomaly, converted by the collector's
// detect runner: storage does not depend on the detect stage). `id` is the key: writing a row
// whose id is stored already updates it (a resolution flips state and fills resolved_*).
struct AnomalyRow {
  std::string id;  // "<job>/<kind>/<onset step>/<subject>", stable across restarts
  std::string job;
  std::string kind;  // "step_shift", "straggler", "slow_comm", "op_regression", "hang", "spike"
  std::vector<uint32_t> ranks;
  std::vector<std::string> nodes;
  int64_t onsetStep = -1;
  int64_t detectedStep = -1;
  int64_t detectedNs = 0;  // collector clock
  double magnitude = 1.0;  // slowdown ratio new/baseline
  double confidence = 0.0;
  std::map<std::string, double> evidence;
  std::map<std::string, std::string> labels;
  AnomalyState state = AnomalyState::kOpen;
  // Resolved: the first step back to normal and when it was seen. Ended: the job's last step
  // and when the collector found the job over (served as ended_step, ended_ns).
  int64_t resolvedStep = -1;
  int64_t resolvedNs = 0;
  std::string summary;
  std::optional<std::string> captureId;  // the capture taken for it; kept when a write has none
  int64_t updatedNs = 0;                 // collector clock of this write; 0 = the store's clock now
};

// One rank's part of a capture (docs/CAPTURE.md): pending, recording, uploading, done, failed.
struct CaptureRankRow {
  uint32_t rank = 0;
  std::string node;
  wire::RankState state = wire::RankState::kPending;
  std::string detail;      // why it failed, or what the probe said
  uint64_t bytes = 0;      // size of its stored file once done
  bool truncated = false;  // cut at the size bound
  int64_t firstStep = -1;  // steps its file covers
  int64_t lastStep = -1;
  int64_t updatedNs = 0;  // collector clock
};

// A capture request and its progress. `id` is the key: writing a stored id replaces the row.
struct CaptureRow {
  std::string id;  // "cap-<unix ms>-<4 hex>"
  std::string job;
  std::string kind = "trace";  // "trace" or "stacks"
  wire::CaptureState state = wire::CaptureState::kRunning;
  std::string reason;
  std::optional<std::string> anomalyId;  // set for automatic captures
  std::vector<uint32_t> ranks;
  int64_t startStep = -1;
  uint32_t steps = 0;
  uint32_t history = 0;
  uint64_t maxBytes = 0;
  int64_t createdNs = 0;
  int64_t updatedNs = 0;
  std::optional<int64_t> finishedNs;
  int64_t deadlineNs = 0;
  std::optional<uint64_t> traceBytes;  // size of the merged trace once written
  std::string summary;                 // "2 of 2 ranks done"
  std::vector<CaptureRankRow> rankStatus;
};

// What changed in a running capture since it was last written (CaptureManager::flush): the
// ranks whose state changed, and the capture's new summary and update time. Everything else of
// the stored capture stays as it is.
struct CaptureProgress {
  std::string id;
  std::string summary;
  int64_t updatedNs = 0;              // collector clock; 0 = the store's clock now
  std::vector<CaptureRankRow> ranks;  // only the changed ranks, each replacing its stored one
};

struct StoreStats {
  uint64_t stepRows = 0;
  uint64_t duplicateSteps = 0;  // step reports ignored because the key was stored already
  uint64_t transactions = 0;
  uint64_t bytesOnDisk = 0;  // database and WAL
  // Memory the engine holds in this process: SQLite's heap (page caches, statements; all SQLite
  // stores of the process together) and the step summaries kept for reads. 0 where not kept.
  uint64_t memoryBytes = 0;
  uint64_t cachedSummarySteps = 0;
};

class Store {
 public:
  virtual ~Store() = default;

  // Writes everything in one transaction. On failure nothing of the batch is stored.
  virtual Status write(const WriteBatch& batch) = 0;

  virtual Result<std::vector<JobRow>> jobs() = 0;
  // Empty result (not an error) for an unknown job; callers check jobExists first.
  virtual Result<bool> jobExists(const std::string& job) = 0;
  virtual Result<std::vector<RankRow>> ranks(const std::string& job) = 0;
  virtual Result<std::vector<StepRow>> steps(const StepQuery& query) = 0;
  virtual Result<std::vector<StepSummaryRow>> summary(const SummaryQuery& query) = 0;
  virtual Result<std::vector<NodeRow>> nodes() = 0;

  // Deletes step rows and host samples older than the retention horizon. Returns rows deleted.
  virtual Result<uint64_t> applyRetention(int64_t nowNs) = 0;

  virtual StoreStats stats() = 0;

  // The groups each rank of `job` declared (the latest set per rank), ordered by rank; ranks
  // that declared nothing are left out. Empty for a job that declared nothing. (Added after
  // the first engines; an engine that does not keep groups serves every job as undeclared.)
  virtual Result<std::vector<topology::RankGroups>> groups(const std::string& job) {
    (void)job;
    return std::vector<topology::RankGroups>{};
  }

  // A node's host samples in a time range (the newest `limit`, returned oldest first); empty
  // for an unknown node. (Added after the first engines; the default serves none.)
  virtual Result<std::vector<wire::HostSample>> hostSamples(const HostSampleQuery& query) {
    (void)query;
    return std::vector<wire::HostSample>{};
  }

  // Anomalies (added after the first engines; the defaults refuse, so an engine without
  // anomaly support still builds). Upserts by id, all rows in one transaction.
  virtual Status writeAnomalies(const std::vector<AnomalyRow>& rows) {
    (void)rows;
    return Status::error("storage: this store does not keep anomalies");
  }
  // A job's anomalies, ordered by detected_ns (then id).
  virtual Result<std::vector<AnomalyRow>> anomalies(const std::string& job) {
    (void)job;
    return Result<std::vector<AnomalyRow>>::error("storage: this store does not keep anomalies");
  }
  // Every anomaly written (opened, resolved or otherwise updated) at or after `sinceNs`
  // (updated_ns >= sinceNs), ordered by detected_ns (then id): a client polling with the
  // largest updated_ns it saw also sees resolutions of older anomalies.
  virtual Result<std::vector<AnomalyRow>> anomaliesSince(int64_t sinceNs) {
    (void)sinceNs;
    return Result<std::vector<AnomalyRow>>::error("storage: this store does not keep anomalies");
  }

  // Captures (docs/CAPTURE.md; the defaults refuse like the anomaly ones). Upserts by id.
  virtual Status writeCapture(const CaptureRow& row) {
    (void)row;
    return Status::error("storage: this store does not keep captures");
  }
  // Applies `progress` to the stored capture `progress.id` (an error when it is not stored, or
  // stored final: a late progress write never changes a capture's final row):
  // what a running capture's statuses changed, written as often as the collector's tick. An
  // engine that keeps a row per rank writes only the changed ranks, so the write costs what
  // changed, not the capture's size (16,384 ranks rewritten per tick took SQLite 53-148 ms
  // under its write lock, which ingest's writer needs too). This default reads the capture
  // and writes it whole, for engines that keep a capture as one row.
  virtual Status writeCaptureProgress(const CaptureProgress& progress);
  // One capture; an empty optional when the id is unknown.
  virtual Result<std::optional<CaptureRow>> capture(const std::string& id) {
    (void)id;
    return Result<std::optional<CaptureRow>>::error("storage: this store does not keep captures");
  }
  // A job's captures, newest (created_ns) first.
  virtual Result<std::vector<CaptureRow>> captures(const std::string& job) {
    (void)job;
    return Result<std::vector<CaptureRow>>::error("storage: this store does not keep captures");
  }
  // Every capture written at or after `sinceNs` (updated_ns >= sinceNs), oldest update first.
  virtual Result<std::vector<CaptureRow>> capturesSince(int64_t sinceNs) {
    (void)sinceNs;
    return Result<std::vector<CaptureRow>>::error("storage: this store does not keep captures");
  }
};

struct SqliteOptions {
  std::string path;                                       // database file; ":memory:" for tests
  int64_t retentionNs = 7LL * 24 * 3600 * 1'000'000'000;  // keep a week; 0 keeps everything
  bool synchronousFull = false;  // FULL survives power loss; NORMAL (default) survives
                                 // process crashes, which is what WAL needs here
  // Step summaries kept in memory for reads (about 100 bytes each): over all jobs, and per
  // job, past which that job's start over (see sqlite_queries.cpp). Tests make them small.
  size_t summaryCacheSteps = 262'144;
  size_t summaryCacheStepsPerJob = 65'536;
};

// Opens (creating and migrating as needed) a SQLite store. Defined in sqlite_store.cpp.
Result<std::unique_ptr<Store>> openSqliteStore(const SqliteOptions& options);

struct ClickHouseOptions {
  std::string url;                                        // clickhouse://HOST:PORT/DB
  int64_t retentionNs = 7LL * 24 * 3600 * 1'000'000'000;  // keep a week; 0 keeps everything
  // Rows go into partitions of this much receive time, and retention drops whole partitions:
  // a row lives at most one partition longer than retentionNs. 0 picks it from retentionNs
  // (a seventh of it, between an hour and a day). Fixed when the tables are created.
  int64_t partitionNs = 0;
  int64_t timeoutMs = 30000;  // per HTTP request to the server
  // This collector's name in the rows kept per collector (jobs, nodes): unique among the
  // collectors sharing the database while they run. It names the job's collector in the API.
  std::string collector = "collector";
};

// Opens a ClickHouse store, creating the database and tables when missing. Defined in
// clickhouse_store.cpp.
Result<std::unique_ptr<Store>> openClickHouseStore(const ClickHouseOptions& options);

// The scheme every ClickHouse store URL starts with; --store names SQLite otherwise.
inline constexpr std::string_view kClickHouseScheme = "clickhouse://";
inline bool isClickHouseUrl(std::string_view store) {
  return store.substr(0, kClickHouseScheme.size()) == kClickHouseScheme;
}

}  // namespace trainscope::storage
