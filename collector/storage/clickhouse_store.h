// The ClickHouse engine behind storage::Store, over ClickHouse's HTTP interface (18.16 and
// later): rows go in as RowBinary, one insert per table per WriteBatch, and every read is one
// query. Every method is safe from any thread: writes are serialized by the store's write lock,
// reads take a connection from a small pool.
//
// Tables (created when missing, in the database the URL names):
//   steps         ReplacingMergeTree ORDER BY (job, step, rank), PARTITION BY receive time
//   host_samples  ReplacingMergeTree ORDER BY (node, time_ns),  PARTITION BY receive time
//   jobs, ranks, nodes, anomalies, captures
//                 ReplacingMergeTree(version): each write inserts the row's whole new state
//                 with a larger version; reads take the latest with FINAL
//   meta          the schema version and the partition length the tables were made with
// Several collectors may share the database (agents send each job to one of them, and move it
// when that one goes: agent/routing.h). Each collector has a name (ClickHouseOptions.collector)
// and jobs and nodes hold one row per job (node) and collector: what that collector stored of
// the job, or heard of the node. jobs() sums and combines them, and names as the job's
// collector the one that stored its data last, so counts stay exact when a job moves and two
// collectors never overwrite each other's counts. Ranks are one row each; a collector reads a
// job's ranks again before writing them when it stored nothing of the job for a few seconds
// (another collector may have owned it meanwhile), and recounts its share of the job's rows
// from the table then (rows a killed collector stored but never counted are counted here).
// A cluster (URL ?cluster=NAME, the servers of every shard listed): each data table is
// NAME_local on every shard plus a Distributed table over them sharded by sipHash64(job) (host
// samples and nodes by node), created by the store on each server (18.16 has no ON CLUSTER
// without ZooKeeper). Writes go through the Distributed tables of the first server with
// insert_distributed_sync=1 (acked only once every shard has its rows), reads through them;
// a job's rows all lie on one shard, so FINAL stays exact. Retention drops partitions on each
// shard.
// Why this shape:
// - Idempotency. A step report is stored once: before inserting, the writer asks which of the
//   batch's (job, step, rank) keys are stored already and inserts only the others, so the
//   first write wins and duplicates are counted, as in SQLite. What that check cannot see (an
//   insert repeated because its reply was lost, another collector writing the same key) the
//   ReplacingMergeTree key absorbs: merges keep one row per key, and reads use FINAL so they
//   never see the second copy before the merge. FINAL and not argMax/GROUP BY: the step
//   queries filter on key columns only (job, step, rank), where FINAL is exact, keeps the
//   query's shape (no aggregate over every column) and still reads by the primary key.
//   Filters on other columns (updated_ns, received_ns) go outside the FINAL subquery.
// - Upserts. ClickHouse 18.16 has no UPDATE fit for ingest, so the merge rules SQLite runs in
//   its ON CONFLICT clauses (a heartbeat keeps the hello's host, a new pid un-ends a rank, a
//   re-detected anomaly keeps its first detection time) run here in C++ on the writer's copy
//   of jobs, ranks and nodes (loaded at open), and the changed rows are inserted whole.
// - Retention. 18.16 has no TTL: rows are partitioned by receive time and applyRetention drops
//   each partition whose whole time range lies before the horizon (ALTER TABLE DROP
//   PARTITION, instant, no rewrite).
// - Compression. 18.16 has no per-column CODEC; the detail column (a serialized StepReport)
//   gets the server's default, LZ4 (a <compression> rule in the server's config can pick zstd).
// - Query size. ClickHouse parses at most 256 KiB of a query (max_query_size), so the lookups
//   that name a commit's jobs (stored step keys, a taken-over job's ranks and counts) go out
//   in lists of at most 64 KiB each (clickhouse::kMaxListBytes), one query per list: a commit
//   of thousands of jobs costs more queries, never a refused one.
// - Atomicity. Each table's insert is atomic (one block), but a batch spans tables: steps and
//   host samples go first; when a later insert of the job/rank/node rows fails, those rows stay
//   marked and go with the next write, and the error is returned.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "collector/storage/clickhouse_http.h"
#include "collector/storage/store.h"
#include "common/thread_annotations.h"

namespace trainscope::storage {

class ClickHouseStore final : public Store {
 public:
  ~ClickHouseStore() override;
  ClickHouseStore(const ClickHouseStore&) = delete;
  ClickHouseStore& operator=(const ClickHouseStore&) = delete;

  static Result<std::unique_ptr<ClickHouseStore>> open(const ClickHouseOptions& options);

  Status write(const WriteBatch& batch) override;
  Result<std::vector<JobRow>> jobs() override;
  Result<bool> jobExists(const std::string& job) override;
  Result<std::vector<RankRow>> ranks(const std::string& job) override;
  Result<std::vector<topology::RankGroups>> groups(const std::string& job) override;
  Result<std::vector<StepRow>> steps(const StepQuery& query) override;
  Result<std::vector<StepSummaryRow>> summary(const SummaryQuery& query) override;
  Result<std::vector<NodeRow>> nodes() override;
  Result<std::vector<wire::HostSample>> hostSamples(const HostSampleQuery& query) override;
  Result<uint64_t> applyRetention(int64_t nowNs) override;
  StoreStats stats() override;
  Status writeAnomalies(const std::vector<AnomalyRow>& rows) override;
  Result<std::vector<AnomalyRow>> anomalies(const std::string& job) override;
  Result<std::vector<AnomalyRow>> anomaliesSince(int64_t sinceNs) override;
  Status writeCapture(const CaptureRow& row) override;
  Result<std::optional<CaptureRow>> capture(const std::string& id) override;
  Result<std::vector<CaptureRow>> captures(const std::string& job) override;
  Result<std::vector<CaptureRow>> capturesSince(int64_t sinceNs) override;

  // The partition length the tables were created with (meta), which retention works in.
  int64_t partitionNs() const { return partitionNs_; }

  // Jobs this collector stored nothing of for this long leave the writer's memory (their job
  // and rank rows); a later write of one reads them back, as when a job moves between
  // collectors (takeOverLocked). Without it every job and rank ever stored stayed in memory.
  static constexpr int64_t kForgetJobNs = 10LL * 60 * 1'000'000'000;
  // Jobs and ranks the writer holds in memory now.
  std::pair<size_t, size_t> heldInMemory();

  // The writer's view of one job, rank and node: the row as stored, plus what the write
  // rules need that the API rows leave out.
  struct JobState {
    uint32_t worldSize = 0;
    int64_t firstSeenNs = 0;
    int64_t lastSeenNs = 0;
    int64_t latestStep = -1;
    uint64_t stepRows = 0;
  };
  struct RankState {
    RankRow row;
    int64_t groupsDeclaredNs = 0;
    std::string groups;  // a serialized wire::RankHello holding only `groups`
  };
  struct NodeState {
    NodeRow row;  // row.latestHost unused here: latestHost holds it serialized
    int64_t latestHostNs = 0;
    std::optional<std::string> latestHost;
  };

 private:
  using RankKey = std::pair<std::string, uint32_t>;
  ClickHouseStore(const ClickHouseOptions& options, clickhouse::Endpoint endpoint);
  Status createSchema();
  Status loadState();
  // A client from the pool (a new one when none is idle); give it back when done.
  std::unique_ptr<clickhouse::HttpClient> lease();
  void giveBack(std::unique_ptr<clickhouse::HttpClient> client);
  // Runs a read query on a leased connection.
  Result<std::string> read(const std::string& sql);
  // Inserts the dirty jobs, ranks and nodes (writeMu_ held); clears the marks on success.
  Status flushStateLocked() REQUIRES(writeMu_);
  // For the batch's jobs this collector stored nothing of lately: reads their ranks and sets its
  // own row count of each from the stored rows (writeMu_ held).
  Status takeOverLocked(const WriteBatch& batch, int64_t nowNs) REQUIRES(writeMu_);
  // Forgets the jobs idle for kForgetJobNs and the ranks of jobs not held (nothing unflushed),
  // at most once a minute of batch time (writeMu_ held).
  void forgetIdleJobsLocked(int64_t nowNs) REQUIRES(writeMu_);
  // Reads this collector's own row of each of `names` it does not hold (forgotten while idle)
  // back into jobs_, so first-seen time, world size, latest step and count carry on.
  Status restoreJobsLocked(const std::vector<std::string>& names) REQUIRES(writeMu_);
  // CREATE TABLE of kSchema's `table` (as table_local when `local`).
  std::string createSql(const char* table, bool local) const;
  // Runs a DDL statement on every server (writeMu_ held).
  Status onEveryServer(const std::string& sql, const std::string& what) REQUIRES(writeMu_);
  uint64_t nextVersionLocked() REQUIRES(writeMu_);
  Result<std::vector<AnomalyRow>> queryAnomalies(const std::string& where);
  Result<std::vector<CaptureRow>> queryCaptures(const std::string& where, const char* order);

  ClickHouseOptions options_;
  clickhouse::Endpoint endpoint_;
  int64_t partitionNs_ = 0;  // set once at open
  std::string cluster_;      // "" for one server; set once at open
  std::string collector_;    // this collector's name in jobs and nodes; set once at open
  std::vector<clickhouse::Endpoint> serverEndpoints_;  // one, or each shard's; set at open

  Mutex writeMu_;
  std::unique_ptr<clickhouse::HttpClient> writer_ GUARDED_BY(writeMu_);
  // One client per server (DDL, retention's partitions).
  std::vector<std::unique_ptr<clickhouse::HttpClient>> servers_ GUARDED_BY(writeMu_);
  std::map<std::string, JobState> jobs_ GUARDED_BY(writeMu_);
  std::map<RankKey, RankState> ranks_ GUARDED_BY(writeMu_);
  std::map<std::string, NodeState> nodes_ GUARDED_BY(writeMu_);
  // Rows changed in memory and not yet stored (a failed state insert).
  std::set<std::string> dirtyJobs_ GUARDED_BY(writeMu_);
  std::set<RankKey> dirtyRanks_ GUARDED_BY(writeMu_);
  std::set<std::string> dirtyNodes_ GUARDED_BY(writeMu_);
  uint64_t lastVersion_ GUARDED_BY(writeMu_) = 0;
  int64_t lastForgetNs_ GUARDED_BY(writeMu_) = 0;

  Mutex poolMu_;
  std::vector<std::unique_ptr<clickhouse::HttpClient>> idle_ GUARDED_BY(poolMu_);

  std::atomic<uint64_t> stepRows_{0};
  std::atomic<uint64_t> duplicates_{0};
  std::atomic<uint64_t> transactions_{0};
};

}  // namespace trainscope::storage
