// The collector's detect runner: feeds every committed step report into one
// detect::DetectorSet, tells it about goodbyes and vanished processes, ticks it for hangs and
// stores the anomalies it emits. onCommitted() runs on ingest's writer thread, tick() on the
// collector's main thread; one mutex serializes every call into the (not thread-safe)
// detectors. stats() may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "collector/detect/anomaly.h"
#include "collector/detect/detector_set.h"
#include "collector/detect/options.h"
#include "collector/ingest/ingest.h"
#include "collector/storage/store.h"
#include "common/clock.h"
#include "common/thread_annotations.h"

namespace trainscope::collector {

struct PipelineOptions {
  detect::DetectOptions detect{};  // thresholds and windows; defaults are DetectOptions{}'s
  // How often a report from a rank whose node is not known yet may make the runner read the
  // job's ranks from the store: lower finds nodes sooner after a restart, higher reads less.
  int64_t lookupIntervalNs = 5'000'000'000;
  // At most one detector-reject log line per this interval (the count is always kept): lower
  // shows more examples, higher keeps a misbehaving probe from flooding the log.
  int64_t rejectLogIntervalNs = 10'000'000'000;
  // Anomaly rows kept for a retry while the store refuses them: more survives a longer outage.
  size_t maxPendingRows = 10000;
  // Automatic captures (collector/capture's CaptureManager). onStored sees every anomaly row
  // once stored (opened, refreshed, resolved, ended; under the runner's lock, on the thread
  // that fed or ticked it). pickCaptures(nowNs), called from tick() under the same lock,
  // returns the rows of the anomalies it started captures for, capture_id set; they are
  // stored. The lock makes those rows the latest stored: no detector write lands between.
  // Unset: no automatic captures.
  std::function<void(const storage::AnomalyRow&)> onStored;
  std::function<std::vector<storage::AnomalyRow>(int64_t nowNs)> pickCaptures;
  // A job is over when every rank of its world said goodbye, or when nothing of it (steps,
  // the ranks' hellos every 2 s) reached the store for this long: a job killed with its agent,
  // or one whose goodbyes were lost. Its open anomalies then end (state "ended", with the
  // job's last step), so /metrics stops counting them and alerts on them stop. Shorter ends a
  // silent job's anomalies sooner; 0: only goodbyes end a job. A hung job is not silent: its
  // live ranks' hellos keep it seen.
  int64_t jobEndIdleNs = 600'000'000'000;
  // How often tick() looks for jobs that are over among those with open anomalies (reads the
  // store's jobs): shorter ends anomalies sooner after the last goodbye.
  int64_t jobEndCheckIntervalNs = 5'000'000'000;
};

struct PipelineStats {
  uint64_t reportsFed = 0;       // step reports passed to the detectors
  uint64_t rejected = 0;         // refused by the detectors (bad fields)
  uint64_t goodbyes = 0;         // rankEnded calls
  uint64_t gone = 0;             // rankGone calls (process exited without a goodbye)
  uint64_t anomaliesOpened = 0;  // events written with state open
  uint64_t anomaliesResolved = 0;
  uint64_t writeFailures = 0;    // store refused a write (rows kept for a retry)
  uint64_t storeLookups = 0;     // rank/node reads from the store for missing context
  uint64_t capturesStarted = 0;  // automatic captures pickCaptures started
  uint64_t anomaliesEnded = 0;   // open anomalies ended with their job
  uint64_t progressFed = 0;      // rank progresses (from hellos) passed to the detectors
  uint64_t jobsReleased = 0;     // jobs dropped because another collector owns them now
};

// storage::AnomalyRow of an anomaly (kind and state by their stable names).
storage::AnomalyRow toAnomalyRow(const detect::Anomaly& anomaly, int64_t updatedNs);

// The runner's and the detectors' counters in Prometheus exposition format (for /metrics).
std::string detectMetricsText(const PipelineStats& stats, const detect::DetectStats& detect);

class DetectPipeline {
 public:
  // `store` and `clock` must outlive the pipeline. The clock is the collector clock the
  // batches' receivedNs use (wall time).
  DetectPipeline(PipelineOptions options, storage::Store& store, const Clock& clock);
  DetectPipeline(const DetectPipeline&) = delete;
  DetectPipeline& operator=(const DetectPipeline&) = delete;

  // ingest's onCommitted hook: registrations, heartbeat offsets, step reports, goodbyes and
  // host samples (alive=false) of one committed batch, in that order.
  void onCommitted(const storage::WriteBatch& batch);
  // The same, moving the batch's step reports into the detectors instead of copying them (a
  // report is some 80 allocations deep); they are left empty, the rest of the batch as it was.
  // For ingest's writer, which only frees the batch afterwards.
  void takeCommitted(storage::WriteBatch& batch);
  // ingest's onRankProgress hook (socket thread): keeps the rank's latest progress for the
  // detectors, which take it in after the next committed batch or tick, so the socket thread
  // never waits for a detection pass. Its time is the hello's sent_ns on the collector clock
  // (no later than its arrival), so a hello replayed from a spool reads as old.
  void onRankProgress(const ingest::RankProgressUpdate& update);
  // Time-based detection (hangs), automatic captures (pickCaptures) and, every
  // jobEndCheckIntervalNs, ending the open anomalies of jobs that are over (also those that
  // ended while the collector was down: the first check reads every open anomaly stored);
  // call about once a second, from one thread.
  void tick();
  // Several collectors sharing one store: drops the detector state of every job whose data
  // another collector than `self` stored last (storage::JobRow::collector), so detection for
  // a job runs only on the collector its agents send it to (agent/routing.h), and a job that
  // moved away is not reported hung here for going silent. Reads the store's jobs; call every
  // few seconds from the thread that calls tick(). Returns the jobs dropped.
  size_t releaseJobsOwnedElsewhere(const std::string& self);

  PipelineStats stats() const;
  detect::DetectStats detectStats() const;

 private:
  struct JobContext {
    uint32_t worldSize = 0;
    std::map<uint32_t, std::string> nodes;  // rank -> node
    int64_t lastLookupNs = 0;
    // The groups each rank declared (latest declaration), for the detectors' layout.
    std::map<uint32_t, topology::RankGroups> groups;
  };

  // onCommitted and takeCommitted: Batch is const or not, and the reports copied or moved.
  template <class Batch>
  void committed(Batch& batch);
  void lookupJobLocked(const std::string& job, JobContext& ctx, int64_t nowNs) REQUIRES(mu_);
  // Derives the job's layout from ctx.groups and hands it to the detectors.
  void topologyLocked(const std::string& job, const JobContext& ctx) REQUIRES(mu_);
  int64_t offsetLocked(const std::string& node, int64_t nowNs) REQUIRES(mu_);
  void noteRejectLocked(const Status& status, int64_t nowNs) REQUIRES(mu_);
  void flushLocked() REQUIRES(mu_);
  // Stores `rows` and hands each to onStored; on a refusal keeps them for a retry (false).
  bool storeLocked(std::vector<storage::AnomalyRow> rows) REQUIRES(mu_);
  void captureLocked(int64_t nowNs) REQUIRES(mu_);
  // Ends the open anomalies of the jobs in `jobs` that are over (see jobEndIdleNs).
  void endJobsLocked(const std::vector<storage::JobRow>& jobs, int64_t nowNs) REQUIRES(mu_);
  void feedProgressLocked() REQUIRES(mu_) EXCLUDES(progressMu_);

  PipelineOptions options_;
  storage::Store& store_;
  const Clock& clock_;

  mutable Mutex mu_;
  detect::DetectorSet detectors_ GUARDED_BY(mu_);
  std::map<std::string, JobContext> jobs_ GUARDED_BY(mu_);
  std::map<std::string, int64_t> offsets_ GUARDED_BY(mu_);  // node -> clock offset
  int64_t lastNodeLookupNs_ GUARDED_BY(mu_) = 0;
  std::set<std::pair<std::string, uint32_t>> gone_ GUARDED_BY(mu_);  // rankGone already sent
  std::vector<storage::AnomalyRow> pending_ GUARDED_BY(mu_);         // rows the store refused
  // Jobs that may have open anomalies: written open since start, or found open in the store by
  // the first job-end check (openJobsLoaded_). Only these are checked for their end.
  std::set<std::string> openJobs_ GUARDED_BY(mu_);
  bool openJobsLoaded_ GUARDED_BY(mu_) = false;
  int64_t nextEndCheckNs_ = 0;  // tick()'s thread only
  int64_t lastRejectLogNs_ GUARDED_BY(mu_) = 0;
  uint64_t rejectsUnlogged_ GUARDED_BY(mu_) = 0;
  PipelineStats stats_ GUARDED_BY(mu_);
  // Latest progress per (job, rank) not yet fed; bounded by kMaxProgressInbox.
  Mutex progressMu_;
  std::map<std::pair<std::string, uint32_t>, ingest::RankProgressUpdate> progressInbox_
      GUARDED_BY(progressMu_);
};

}  // namespace trainscope::collector
