#include "collector/pipeline.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "common/log.h"
#include "common/prometheus_text.h"

namespace trainscope::collector {
namespace {

constexpr const char* kComponent = "detect";

// Bounds the "rankGone already sent" set; clearing it only risks a repeated rankGone call,
// which the detectors take as a no-op for a rank already judged gone.
constexpr size_t kMaxGoneEntries = 100000;
// Ranks whose progress may wait for the detectors at once (one entry per rank, newest wins);
// past it new ranks' progress is dropped until the next pass takes the inbox.
constexpr size_t kMaxProgressInbox = 65536;

}  // namespace

storage::AnomalyRow toAnomalyRow(const detect::Anomaly& a, int64_t updatedNs) {
  storage::AnomalyRow row;
  row.id = a.id;
  row.job = a.job;
  row.kind = detect::anomalyKindName(a.kind);
  row.ranks = a.ranks;
  row.nodes = a.nodes;
  row.onsetStep = a.onsetStep;
  row.detectedStep = a.detectedStep;
  row.detectedNs = a.detectedNs;
  row.magnitude = a.magnitude;
  row.confidence = a.confidence;
  row.evidence = a.evidence;
  row.labels = a.labels;
  row.state = a.state == detect::AnomalyState::kResolved ? storage::AnomalyState::kResolved
                                                         : storage::AnomalyState::kOpen;
  row.resolvedStep = a.resolvedStep;
  row.resolvedNs = a.resolvedNs;
  row.summary = a.summary;
  row.updatedNs = updatedNs;
  return row;
}

std::string detectMetricsText(const PipelineStats& s, const detect::DetectStats& d) {
  MetricsText m;
  auto metric = [&](const char* name, const char* type, const char* help, uint64_t value) {
    m.single(name, type, help, static_cast<double>(value));
  };
  metric("trainscope_detect_reports_total", "counter", "Step reports the detectors accepted.",
         s.reportsFed);
  metric("trainscope_detect_rejected_total", "counter",
         "Step reports the detectors refused (bad fields).", s.rejected);
  metric("trainscope_detect_late_total", "counter",
         "Step reports that arrived after their step was judged.", d.late);
  metric("trainscope_detect_dropped_steps_total", "counter",
         "Steps forced out with too few ranks and not judged.", d.droppedSteps);
  metric("trainscope_detect_partial_steps_total", "counter",
         "Steps judged without every rank (the missing ones were silent or lost).", d.partialSteps);
  metric("trainscope_detect_steps_judged_total", "counter", "Assembled steps fed to the detectors.",
         d.stepsJudged);
  metric("trainscope_detect_anomalies_opened_total", "counter", "Anomalies opened and stored.",
         s.anomaliesOpened);
  metric("trainscope_detect_anomalies_resolved_total", "counter", "Anomaly resolutions stored.",
         s.anomaliesResolved);
  metric("trainscope_detect_anomalies_ended_total", "counter",
         "Open anomalies ended with their job (every rank said goodbye, or the job went silent).",
         s.anomaliesEnded);
  metric("trainscope_detect_anomalies_folded_total", "counter",
         "Anomalies not raised: another one explains them.", d.folded);
  metric("trainscope_detect_anomalies_flapped_total", "counter",
         "Anomalies not raised: resolved while held for confirmation (--detect-confirm-steps).",
         d.flapped);
  metric("trainscope_detect_anomalies_below_floor_total", "counter",
         "Anomalies not raised: estimated gain under --detect-min-gain.", d.belowFloor);
  metric("trainscope_detect_op_steps_cpu_bound_total", "counter",
         "Rank steps whose operators were not judged: the rank waited for a CPU longer than "
         "--detect-op-max-cpu-wait of the step.",
         d.opCpuBound);
  metric("trainscope_detect_host_weather_total", "counter",
         "Stragglers and step-time shifts not raised: on hosts whose ranks already waited for a "
         "CPU, their extra wait for one explained them.",
         d.hostWeather);
  metric("trainscope_detect_store_failures_total", "counter",
         "Anomaly writes the store refused (kept for a retry).", s.writeFailures);
  metric("trainscope_detect_jobs", "gauge", "Jobs the detectors track now.", d.jobs);
  metric("trainscope_detect_jobs_released_total", "counter",
         "Jobs dropped from detection because another collector stores their data now.",
         s.jobsReleased);
  return m.text();
}

DetectPipeline::DetectPipeline(PipelineOptions options, storage::Store& store, const Clock& clock)
    : options_(std::move(options)), store_(store), clock_(clock), detectors_(options_.detect) {}

void DetectPipeline::onCommitted(const storage::WriteBatch& batch) {
  committed(batch);
}

void DetectPipeline::takeCommitted(storage::WriteBatch& batch) {
  committed(batch);
}

template <class Batch>
void DetectPipeline::committed(Batch& batch) {
  MutexLock lock(&mu_);
  const int64_t now = batch.receivedNs != 0 ? batch.receivedNs : clock_.nowNs();
  if (jobs_.size() > options_.detect.maxJobs) jobs_.clear();  // rebuilt from the store

  for (const auto& info : batch.ranks) {
    auto& job = jobs_[info.job()];
    if (info.world_size() != 0) job.worldSize = info.world_size();
    if (!info.node().empty()) job.nodes[info.rank()] = info.node();
    if (!info.gpu_uuid().empty()) {
      detectors_.rankGpu(info.job(), info.rank(), info.gpu_uuid(), info.node());
    }
    gone_.erase({info.job(), info.rank()});  // a re-registered rank is alive again
  }
  for (const auto& node : batch.nodes) {
    if (node.hasClock) offsets_[node.node] = node.offsetNs;
  }
  // Declared groups: the detectors compare a rank with the ranks that do the same work.
  // Derived once per job and batch, whatever number of ranks declared in it.
  std::set<std::string> declared;
  for (const auto& g : batch.groups) {
    auto& job = jobs_[g.job];
    auto& held = job.groups[g.groups.rank];
    if (g.groups.declaredNs >= held.declaredNs) held = g.groups;
    declared.insert(g.job);
  }
  for (const auto& name : declared) topologyLocked(name, jobs_[name]);
  // An agent's host samples (every second) say its data arrives: the clock its ranks'
  // silence is measured on (a lagging agent or spool delays their reports, not a hang).
  for (const auto& host : batch.hosts) {
    if (!host.node().empty()) detectors_.nodeDelivered(host.node(), now);
  }
  // GPU health (gpu_fault), before the steps: a straggler judged in this batch sees the
  // throttling its GPU reported in it.
  for (const auto& host : batch.hosts) detectors_.hostSample(host, now);

  for (auto& report : batch.steps) {
    auto& job = jobs_[report.job()];
    auto it = job.nodes.find(report.rank());
    if (it == job.nodes.end() || job.worldSize == 0) {
      lookupJobLocked(report.job(), job, now);
      it = job.nodes.find(report.rank());
    }
    detect::RankContext ctx;
    ctx.node = it != job.nodes.end() ? it->second : std::string();
    ctx.worldSize = job.worldSize;
    ctx.clockOffsetNs = ctx.node.empty() ? 0 : offsetLocked(ctx.node, now);
    ctx.receivedNs = batch.receivedNs;
    Status s;
    if constexpr (std::is_const_v<Batch>) {
      s = detectors_.observe(report, ctx);
    } else {
      s = detectors_.observe(std::move(report), ctx);
    }
    if (!s) {
      noteRejectLocked(s, now);
    } else {
      ++stats_.reportsFed;
    }
  }

  feedProgressLocked();
  for (const auto& bye : batch.goodbyes) {
    detectors_.rankEnded(bye.job(), bye.rank(), now);
    ++stats_.goodbyes;
  }
  for (const auto& host : batch.hosts) {
    for (const auto& proc : host.procs()) {
      if (proc.alive() || proc.job().empty()) continue;
      if (gone_.size() >= kMaxGoneEntries) gone_.clear();
      if (!gone_.insert({proc.job(), proc.rank()}).second) continue;
      detectors_.rankGone(proc.job(), proc.rank(), now);
      ++stats_.gone;
    }
  }
  flushLocked();
}

void DetectPipeline::tick() {
  const int64_t now = clock_.nowNs();
  // The job-end check reads the store's jobs outside the lock: the writer thread keeps feeding
  // meanwhile.
  std::optional<std::vector<storage::JobRow>> jobs;
  if (now >= nextEndCheckNs_) {
    nextEndCheckNs_ = now + options_.jobEndCheckIntervalNs;
    auto rows = store_.jobs();
    if (rows) {
      jobs = std::move(*rows);
    } else {
      logWarn(kComponent, "reading jobs for the job-end check: " + rows.message());
    }
  }
  MutexLock lock(&mu_);
  feedProgressLocked();
  detectors_.tick(now);
  flushLocked();
  if (jobs) {
    if (!openJobsLoaded_) {
      // After a restart: the jobs with open anomalies are only in the store (some may have
      // ended while the collector was down).
      auto open = store_.anomaliesSince(0);
      if (open) {
        for (const auto& row : *open) {
          if (row.state == storage::AnomalyState::kOpen) openJobs_.insert(row.job);
        }
        openJobsLoaded_ = true;
      } else {
        logWarn(kComponent, "reading open anomalies: " + open.message());
      }
    }
    if (openJobsLoaded_) endJobsLocked(*jobs, now);
  }
  captureLocked(now);
}

size_t DetectPipeline::releaseJobsOwnedElsewhere(const std::string& self) {
  auto rows = store_.jobs();  // outside the lock: the writer thread keeps feeding meanwhile
  if (!rows) return 0;
  MutexLock lock(&mu_);
  size_t released = 0;
  for (const auto& row : *rows) {
    if (row.collector.empty() || row.collector == self) continue;
    auto it = jobs_.find(row.job);
    if (it == jobs_.end()) continue;
    detectors_.forgetJob(row.job);
    jobs_.erase(it);
    ++released;
  }
  stats_.jobsReleased += released;
  return released;
}

void DetectPipeline::onRankProgress(const ingest::RankProgressUpdate& update) {
  MutexLock lock(&progressMu_);
  auto key = std::make_pair(update.job, update.rank);
  auto it = progressInbox_.find(key);
  if (it != progressInbox_.end()) {
    it->second = update;
  } else if (progressInbox_.size() < kMaxProgressInbox) {
    progressInbox_.emplace(std::move(key), update);
  }
}

void DetectPipeline::feedProgressLocked() {
  std::map<std::pair<std::string, uint32_t>, ingest::RankProgressUpdate> inbox;
  {
    MutexLock lock(&progressMu_);
    inbox.swap(progressInbox_);
  }
  for (const auto& [key, u] : inbox) {
    auto& job = jobs_[u.job];
    if (!u.node.empty()) job.nodes[u.rank] = u.node;
    detect::RankContext ctx;
    ctx.node = u.node;
    ctx.worldSize = job.worldSize;
    ctx.clockOffsetNs = u.clockOffsetNs != 0 || u.node.empty() ? u.clockOffsetNs
                                                               : offsetLocked(u.node, u.receivedNs);
    ctx.receivedNs =
        u.sentNs != 0 ? std::min(u.sentNs + ctx.clockOffsetNs, u.receivedNs) : u.receivedNs;
    if (Status s = detectors_.rankProgress(u.job, u.rank, u.progress, ctx); !s) {
      logOnce(LogLevel::kWarn, kComponent, "progress-reject",
              "detectors refused a rank progress (further ones not logged): " + s.message());
    } else {
      ++stats_.progressFed;
    }
  }
}

void DetectPipeline::lookupJobLocked(const std::string& name, JobContext& job, int64_t nowNs) {
  if (job.lastLookupNs != 0 && nowNs - job.lastLookupNs < options_.lookupIntervalNs) return;
  job.lastLookupNs = nowNs;
  ++stats_.storeLookups;
  auto ranks = store_.ranks(name);
  if (!ranks) {
    logWarn(kComponent, "reading ranks of job " + name + ": " + ranks.message());
    return;
  }
  for (const auto& r : *ranks) {
    if (r.worldSize != 0 && job.worldSize == 0) job.worldSize = r.worldSize;
    if (!r.node.empty()) job.nodes.emplace(r.rank, r.node);
    if (!r.gpuUuid.empty()) detectors_.rankGpu(name, r.rank, r.gpuUuid, r.node);
  }
  // After a collector restart the declarations are only in the store.
  if (!job.groups.empty()) return;
  auto groups = store_.groups(name);
  if (!groups) {
    logWarn(kComponent, "reading groups of job " + name + ": " + groups.message());
    return;
  }
  for (auto& g : *groups) job.groups[g.rank] = std::move(g);
  if (!job.groups.empty()) topologyLocked(name, job);
}

void DetectPipeline::topologyLocked(const std::string& name, const JobContext& job) {
  std::vector<topology::RankGroups> ranks;
  ranks.reserve(job.groups.size());
  for (const auto& [rank, g] : job.groups) ranks.push_back(g);
  detectors_.setTopology(name, topology::derive(ranks));
}

int64_t DetectPipeline::offsetLocked(const std::string& node, int64_t nowNs) {
  if (auto it = offsets_.find(node); it != offsets_.end()) return it->second;
  if (lastNodeLookupNs_ == 0 || nowNs - lastNodeLookupNs_ >= options_.lookupIntervalNs) {
    lastNodeLookupNs_ = nowNs;
    ++stats_.storeLookups;
    auto nodes = store_.nodes();
    if (!nodes) {
      logWarn(kComponent, "reading nodes: " + nodes.message());
    } else {
      for (const auto& n : *nodes) offsets_.emplace(n.node, n.offsetNs);
    }
    if (auto it = offsets_.find(node); it != offsets_.end()) return it->second;
  }
  return 0;  // no heartbeat yet: the node's clock is taken as ours
}

void DetectPipeline::noteRejectLocked(const Status& status, int64_t nowNs) {
  ++stats_.rejected;
  ++rejectsUnlogged_;
  if (lastRejectLogNs_ != 0 && nowNs - lastRejectLogNs_ < options_.rejectLogIntervalNs) return;
  logWarn(kComponent, "detectors refused " + std::to_string(rejectsUnlogged_) +
                          " step report(s) since the last message (" +
                          std::to_string(stats_.rejected) +
                          " in all); latest: " + status.message());
  lastRejectLogNs_ = nowNs;
  rejectsUnlogged_ = 0;
}

void DetectPipeline::flushLocked() {
  auto events = detectors_.takeEvents();
  if (events.empty() && pending_.empty()) return;
  std::vector<storage::AnomalyRow> rows = std::move(pending_);
  pending_.clear();
  const size_t fresh = rows.size();
  for (const auto& event : events) rows.push_back(toAnomalyRow(event, clock_.nowNs()));
  // New anomalies and resolutions, counted and logged once stored (a refresh is stored over
  // its open row: nothing new); a row retried from pending_ is not counted.
  std::vector<storage::AnomalyRow> news;
  for (size_t i = fresh; i < rows.size(); ++i) {
    if (!events[i - fresh].refresh) news.push_back(rows[i]);
  }
  if (!storeLocked(std::move(rows))) return;
  for (const auto& row : news) {
    if (row.state == storage::AnomalyState::kOpen) {
      ++stats_.anomaliesOpened;
      logInfo(kComponent, "anomaly " + row.id + ": " + row.summary);
    } else {
      ++stats_.anomaliesResolved;
      logInfo(kComponent,
              "anomaly resolved " + row.id + " at step " + std::to_string(row.resolvedStep));
    }
  }
}

bool DetectPipeline::storeLocked(std::vector<storage::AnomalyRow> rows) {
  if (rows.empty()) return true;
  if (Status s = store_.writeAnomalies(rows); !s) {
    ++stats_.writeFailures;
    logError(kComponent, "storing " + std::to_string(rows.size()) +
                             " anomaly update(s) failed (kept for a retry): " + s.message());
    for (auto& row : rows) pending_.push_back(std::move(row));
    if (pending_.size() > options_.maxPendingRows) {
      pending_.erase(pending_.begin(),
                     pending_.begin() +
                         static_cast<std::ptrdiff_t>(pending_.size() - options_.maxPendingRows));
    }
    return false;
  }
  for (const auto& row : rows) {
    if (row.state == storage::AnomalyState::kOpen) openJobs_.insert(row.job);
    if (options_.onStored) options_.onStored(row);
  }
  return true;
}

void DetectPipeline::captureLocked(int64_t nowNs) {
  if (!options_.pickCaptures) return;
  std::vector<storage::AnomalyRow> captured = options_.pickCaptures(nowNs);
  if (captured.empty()) return;
  stats_.capturesStarted += captured.size();
  for (auto& row : captured) {
    // A later update than the open row: readers that follow updated_ns (the live feed) may
    // have taken the open row already, and would skip an update at the same time.
    row.updatedNs = std::max(row.updatedNs + 1, clock_.nowNs());
  }
  // The capture id goes onto the stored anomaly; a refused write is retried with the rest.
  storeLocked(std::move(captured));
}

void DetectPipeline::endJobsLocked(const std::vector<storage::JobRow>& jobs, int64_t nowNs) {
  std::vector<storage::AnomalyRow> ended;
  for (const auto& job : jobs) {
    auto open = openJobs_.find(job.job);
    if (open == openJobs_.end()) continue;
    const bool saidGoodbye = job.worldSize > 0 && job.ranksEnded >= job.worldSize;
    const bool silent =
        options_.jobEndIdleNs > 0 && nowNs - job.lastSeenNs >= options_.jobEndIdleNs;
    if (!saidGoodbye && !silent) continue;
    auto rows = store_.anomalies(job.job);
    if (!rows) {
      logWarn(kComponent, "reading the anomalies of ended job " + job.job + ": " + rows.message());
      continue;
    }
    openJobs_.erase(open);
    for (auto& row : *rows) {
      if (row.state != storage::AnomalyState::kOpen) continue;
      row.state = storage::AnomalyState::kEnded;
      row.resolvedStep = job.latestStep;
      row.resolvedNs = nowNs;
      row.updatedNs = std::max(row.updatedNs + 1, nowNs);
      logInfo(
          kComponent,
          "anomaly " + row.id + " ended with its job at step " + std::to_string(job.latestStep) +
              (saidGoodbye ? " (every rank said goodbye)"
                           : " (nothing of the job for " +
                                 std::to_string(options_.jobEndIdleNs / 1'000'000'000) + " s)"));
      ended.push_back(std::move(row));
    }
  }
  const size_t n = ended.size();
  if (storeLocked(std::move(ended))) stats_.anomaliesEnded += n;
}

PipelineStats DetectPipeline::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

detect::DetectStats DetectPipeline::detectStats() const {
  MutexLock lock(&mu_);
  return detectors_.stats();
}

}  // namespace trainscope::collector
