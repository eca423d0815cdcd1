// The SQLite engine behind storage::Store: WAL mode, versioned migrations, one transaction per
// WriteBatch with prepared statements reused, and a separate read connection so queries do not
// wait for a commit. Every method is safe from any thread (writes and reads each take their
// own lock).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "collector/storage/store.h"
#include "common/thread_annotations.h"

struct sqlite3;
struct sqlite3_stmt;

namespace trainscope::storage {

// One step of the schema's history. Steps are applied in order, each inside its own
// transaction, and PRAGMA user_version records the last one applied.
struct Migration {
  int version;
  const char* sql;
};

// Every migration, oldest first. The store refuses a database newer than the last entry.
const std::vector<Migration>& migrations();
// The schema version a fully migrated database has.
int currentSchemaVersion();

// Retention is by *receive time* (the collector's clock when the row arrived), not by the
// step's end time: agents' clocks may be off, and a spool replayed after an outage should not be
// deleted the moment it lands.
class SqliteStore final : public Store {
 public:
  ~SqliteStore() override;
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  static Result<std::unique_ptr<SqliteStore>> open(const SqliteOptions& options);

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
  Status writeCaptureProgress(const CaptureProgress& progress) override;
  Result<std::optional<CaptureRow>> capture(const std::string& id) override;
  Result<std::vector<CaptureRow>> captures(const std::string& job) override;
  Result<std::vector<CaptureRow>> capturesSince(int64_t sinceNs) override;

 private:
  explicit SqliteStore(SqliteOptions options);
  Status openConnections() REQUIRES(writeMu_);
  Status migrate() REQUIRES(writeMu_);
  Status prepareWriteStatements() REQUIRES(writeMu_);
  Status writeLocked(const WriteBatch& batch, uint64_t* inserted, uint64_t* duplicates)
      REQUIRES(writeMu_);
  Result<int64_t> jobIdLocked(const std::string& job, int64_t nowNs) REQUIRES(writeMu_);
  // Writes each of `ranks` as capture `id`'s row for that rank, inside the caller's transaction.
  Status upsertCaptureRanksLocked(const std::string& id, const std::vector<CaptureRankRow>& ranks)
      REQUIRES(writeMu_);
  // Commits the transaction begun with kBegin when `st` is ok (counted), else rolls it back;
  // returns `st` or the commit's error.
  Status endTransactionLocked(Status st) REQUIRES(writeMu_);
  // Anomaly rows matching `where` (one parameter ?1: the job when `job` is set, else sinceNs).
  Result<std::vector<AnomalyRow>> queryAnomalies(const std::string& where, const std::string* job,
                                                 int64_t sinceNs);
  // Capture rows matching `where` (one parameter ?1: text when `text` is set, else sinceNs),
  // in `order`.
  Result<std::vector<CaptureRow>> queryCaptures(const std::string& where, const std::string* text,
                                                int64_t sinceNs, const char* order);
  // The connection reads use: the read connection, or the write one for ":memory:", under
  // readMutex(): readMu_, or writeMu_ for ":memory:" (one connection for both).
  sqlite3* readDb() REQUIRES(readMutex()) { return readDbAddress(); }
  Mutex& readMutex() { return readDb_ != nullptr ? readMu_ : writeMu_; }
  // readDb() without the lock, only as a key (the summary cache's): the connection may not be
  // used through it. The analysis cannot follow readMutex()'s choice of lock, hence none here.
  sqlite3* readDbAddress() const NO_THREAD_SAFETY_ANALYSIS {
    return readDb_ != nullptr ? readDb_ : writeDb_;
  }

  SqliteOptions options_;
  bool inMemory_ = false;

  Mutex writeMu_;
  sqlite3* writeDb_ GUARDED_BY(writeMu_) = nullptr;
  // job -> jobs.id of the jobs written lately, at most kMaxCachedJobIds.
  static constexpr size_t kMaxCachedJobIds = 65'536;
  std::unordered_map<std::string, int64_t> jobIds_ GUARDED_BY(writeMu_);
  // Prepared write statements (indexes into stmts_).
  std::vector<sqlite3_stmt*> stmts_ GUARDED_BY(writeMu_);

  Mutex readMu_;
  // Set once by open(), before any other thread can see the store; used under readMutex()
  // (readDb()). Null for ":memory:".
  sqlite3* readDb_ = nullptr;

  std::atomic<uint64_t> stepRows_{0};
  std::atomic<uint64_t> duplicates_{0};
  std::atomic<uint64_t> transactions_{0};
};

}  // namespace trainscope::storage
