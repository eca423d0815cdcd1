#include "collector/http/metrics.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "collector/http/parallel_metrics.h"
#include "schema/wire.h"

namespace trainscope::http {
namespace {

constexpr double kNsPerS = 1e9;

double seconds(int64_t ns) {
  return static_cast<double>(ns) / kNsPerS;
}

}  // namespace

const std::vector<double>& stepSecondsBuckets() {
  static const std::vector<double> kBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                               0.5,   1,      2.5,   5,    10,    30,   60};
  return kBuckets;
}

namespace {

// Keeps the rows heard from within ageOutNs, the most recent `cap` of them; counts the rest.
template <typename Row>
std::vector<Row> recentRows(std::vector<Row> rows, int64_t nowNs, int64_t ageOutNs, size_t cap,
                            size_t* agedOut, size_t* overCap) {
  const size_t all = rows.size();
  rows.erase(std::remove_if(rows.begin(), rows.end(),
                            [&](const Row& r) { return nowNs - r.lastSeenNs > ageOutNs; }),
             rows.end());
  *agedOut = all - rows.size();
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.lastSeenNs > b.lastSeenNs; });
  *overCap = rows.size() > cap ? rows.size() - cap : 0;
  if (rows.size() > cap) rows.resize(cap);
  return rows;
}

}  // namespace

namespace {

// One job's ranks: each one's latest step row and its step times over the window.
struct RankLatest {
  storage::StepRow row;
  std::vector<double> durations;  // seconds, over the window
};
using RanksByJob = std::map<std::string, std::map<uint32_t, RankLatest>>;
// (job, op) -> {bytes moved, seconds spent} over each rank's latest step.
using Bandwidth = std::map<std::pair<std::string, std::string>, std::pair<double, double>>;

// One steps query per job over its recent window; rows come ordered by (step, rank), so the
// last row seen for a rank is its latest step. The parallel figures (bubble, overlap, MFU/HFU,
// all-to-all) come from the same detail rows. Store errors are added to `errors`.
void readRecentSteps(storage::Store& store, const std::vector<storage::JobRow>& jobRows,
                     int64_t windowSteps, RanksByJob* perJob, Bandwidth* bandwidth,
                     ParallelMetrics* parallel, std::string* errors) {
  for (const auto& job : jobRows) {
    if (job.latestStep < 0) continue;
    storage::StepQuery q;
    q.job = job.job;
    q.fromStep = std::max<int64_t>(0, job.latestStep - std::max<int64_t>(1, windowSteps) + 1);
    q.limit = static_cast<size_t>(std::max<int64_t>(1, windowSteps)) *
                  std::max<uint32_t>(1, std::max(job.worldSize, job.ranksSeen)) +
              1024;
    auto rows = store.steps(q);
    if (!rows) {
      *errors += "# store error (steps of " + escapeHelpText(job.job) +
                 "): " + escapeHelpText(rows.message()) + "\n";
      continue;
    }
    auto& ranks = (*perJob)[job.job];
    for (auto& row : *rows) {
      auto& r = ranks[row.rank];
      r.durations.push_back(seconds(row.durationNs));
      r.row = std::move(row);
    }
    // Collective detail only for the newest two steps (the newest may still be arriving).
    storage::StepQuery dq = q;
    dq.fromStep = std::max<int64_t>(0, job.latestStep - 1);
    dq.detail = true;
    auto detail = store.steps(dq);
    if (!detail) continue;
    std::map<uint32_t, const storage::StepRow*> latest;
    for (const auto& row : *detail) latest[row.rank] = &row;
    for (const auto& [rank, row] : latest) {
      for (const auto& c : row->collectives) {
        auto& bw = (*bandwidth)[{job.job, wire::collectiveOpName(c.op())}];
        bw.first += static_cast<double>(c.bytes()) * static_cast<double>(c.count());
        bw.second += seconds(c.total_ns());
      }
    }
    *errors += parallel->add(store, job.job, latest);
  }
}

void writeJobs(MetricsText& m, const std::vector<storage::JobRow>& jobRows, int64_t nowNs) {
  m.family("trainscope_job_world_size", "gauge", "Ranks the job was started with.");
  for (const auto& j : jobRows) m.sample({{"training_job", j.job}}, j.worldSize);
  m.family("trainscope_job_ranks_reporting", "gauge", "Ranks of the job that have reported.");
  for (const auto& j : jobRows) m.sample({{"training_job", j.job}}, j.ranksSeen);
  m.family("trainscope_job_ranks_ended", "gauge", "Ranks of the job that said goodbye.");
  for (const auto& j : jobRows) m.sample({{"training_job", j.job}}, j.ranksEnded);
  m.family("trainscope_job_latest_step", "gauge", "Highest step any rank of the job reported.");
  for (const auto& j : jobRows)
    m.sample({{"training_job", j.job}}, static_cast<double>(j.latestStep));
  m.family("trainscope_job_last_report_age_seconds", "gauge",
           "Seconds since any rank of the job last reported (collector clock).");
  for (const auto& j : jobRows) {
    m.sample({{"training_job", j.job}}, std::max(0.0, seconds(nowNs - j.lastSeenNs)));
  }
}

void writeRanks(MetricsText& m, const RanksByJob& perJob, int64_t windowSteps) {
  auto perRank = [&](const std::string& name, const std::string& help, auto value) {
    m.family(name, "gauge", help);
    for (const auto& [job, ranks] : perJob) {
      for (const auto& [rank, r] : ranks) {
        m.sample({{"training_job", job}, {"rank", std::to_string(rank)}}, value(r.row));
      }
    }
  };
  perRank("trainscope_rank_latest_step", "Latest step the rank reported.",
          [](const storage::StepRow& r) { return static_cast<double>(r.step); });
  perRank("trainscope_step_last_duration_seconds", "Duration of the rank's latest step.",
          [](const storage::StepRow& r) { return seconds(r.durationNs); });
  perRank("trainscope_step_last_compute_seconds", "Compute time in the rank's latest step.",
          [](const storage::StepRow& r) { return seconds(r.computeNs); });
  perRank("trainscope_step_last_exposed_comm_seconds",
          "Communication time not overlapped by compute in the rank's latest step.",
          [](const storage::StepRow& r) { return seconds(r.exposedCommNs); });
  perRank("trainscope_step_last_data_wait_seconds", "Data-loading wait in the rank's latest step.",
          [](const storage::StepRow& r) { return seconds(r.dataNs); });

  m.family("trainscope_step_duration_seconds", "histogram",
           "Step time per rank over the job's latest " + std::to_string(windowSteps) +
               " steps (a sliding window: counts can go down as steps leave it).");
  for (const auto& [job, ranks] : perJob) {
    for (const auto& [rank, r] : ranks) {
      m.histogram({{"training_job", job}, {"rank", std::to_string(rank)}}, stepSecondsBuckets(),
                  r.durations);
    }
  }
}

void writeBandwidth(MetricsText& m, const Bandwidth& bandwidth) {
  m.family("trainscope_collective_bandwidth_bytes_per_second", "gauge",
           "Algorithm bandwidth per collective op over each rank's latest step: bytes moved / "
           "time in the collective, summed over ranks.");
  for (const auto& [key, bw] : bandwidth) {
    if (bw.second > 0)
      m.sample({{"training_job", key.first}, {"op", key.second}}, bw.first / bw.second);
  }
}

void writeOpenAnomalies(MetricsText& m, storage::Store& store,
                        const std::vector<storage::JobRow>& jobRows) {
  // Open anomalies by kind; a store without anomaly support refuses and the family stays empty.
  m.family("trainscope_anomalies_open", "gauge", "Anomalies currently open, by job and kind.");
  for (const auto& j : jobRows) {
    auto anomalies = store.anomalies(j.job);
    if (!anomalies) continue;
    std::map<std::string, int> open;
    for (const auto& a : *anomalies) {
      if (a.state == storage::AnomalyState::kOpen) ++open[a.kind];
    }
    for (const auto& [kind, n] : open) m.sample({{"training_job", j.job}, {"kind", kind}}, n);
  }
}

void writeNodes(MetricsText& m, const std::vector<storage::NodeRow>& nodeRows, int64_t nowNs) {
  m.family("trainscope_agent_last_seen_age_seconds", "gauge",
           "Seconds since the node's agent was last heard from (collector clock).");
  for (const auto& n : nodeRows) {
    m.sample({{"node", n.node}, {"host", n.host}}, std::max(0.0, seconds(nowNs - n.lastSeenNs)));
  }
  m.family("trainscope_agent_spool_bytes", "gauge", "Bytes in the agent's on-disk spool.");
  for (const auto& n : nodeRows) m.sample({{"node", n.node}}, static_cast<double>(n.spoolBytes));
  m.family("trainscope_agent_spool_dropped_total", "counter",
           "Records the agent's spool dropped because it was full.");
  for (const auto& n : nodeRows) {
    m.sample({{"node", n.node}}, static_cast<double>(n.spoolDropped));
  }
  m.family("trainscope_agent_clock_offset_seconds", "gauge",
           "Collector clock minus the agent's clock, as the agent measured it.");
  for (const auto& n : nodeRows) m.sample({{"node", n.node}}, seconds(n.offsetNs));
  m.family("trainscope_node_cpu_ratio", "gauge", "Host CPU use over all cores, 0..1.");
  for (const auto& n : nodeRows) {
    if (n.latestHost) m.sample({{"node", n.node}}, n.latestHost->cpu_percent() / 100.0);
  }
  m.family("trainscope_node_memory_available_bytes", "gauge", "Host memory available.");
  for (const auto& n : nodeRows) {
    if (n.latestHost) {
      m.sample({{"node", n.node}}, static_cast<double>(n.latestHost->mem_available_bytes()));
    }
  }
  m.family("trainscope_node_load1", "gauge", "Host one-minute load average.");
  for (const auto& n : nodeRows) {
    if (n.latestHost) m.sample({{"node", n.node}}, n.latestHost->load1());
  }
}

// Each GPU of each node's latest host sample (NVML through the agent), labelled node, gpu
// (NVML's index) and uuid; a reading NVML did not give (GpuSample.present) is left out.
void writeGpus(MetricsText& m, const std::vector<storage::NodeRow>& nodeRows) {
  struct Family {
    const char* name;
    const char* type;
    const char* help;
    wire::GpuField field;
    double (*value)(const wire::GpuSample&);
  };
  static constexpr Family kFamilies[] = {
      {"trainscope_gpu_utilization_ratio", "gauge",
       "Share of NVML's last sample period a kernel ran on the GPU, 0..1.", wire::GPU_UTILIZATION,
       [](const wire::GpuSample& g) { return g.utilization_pct() / 100.0; }},
      {"trainscope_gpu_memory_used_bytes", "gauge", "GPU memory in use.", wire::GPU_MEMORY,
       [](const wire::GpuSample& g) { return static_cast<double>(g.memory_used_bytes()); }},
      {"trainscope_gpu_memory_total_bytes", "gauge", "GPU memory in all.", wire::GPU_MEMORY,
       [](const wire::GpuSample& g) { return static_cast<double>(g.memory_total_bytes()); }},
      {"trainscope_gpu_power_watts", "gauge", "GPU power draw.", wire::GPU_POWER,
       [](const wire::GpuSample& g) { return g.power_mw() / 1000.0; }},
      {"trainscope_gpu_energy_joules_total", "counter", "GPU energy since the driver loaded.",
       wire::GPU_ENERGY,
       [](const wire::GpuSample& g) { return static_cast<double>(g.energy_mj()) / 1000.0; }},
      {"trainscope_gpu_temperature_celsius", "gauge", "GPU core temperature.",
       wire::GPU_TEMPERATURE,
       [](const wire::GpuSample& g) { return static_cast<double>(g.temperature_c()); }},
      {"trainscope_gpu_sm_clock_hertz", "gauge", "GPU SM clock.", wire::GPU_CLOCKS,
       [](const wire::GpuSample& g) { return g.sm_clock_mhz() * 1e6; }},
      {"trainscope_gpu_memory_clock_hertz", "gauge", "GPU memory clock.", wire::GPU_CLOCKS,
       [](const wire::GpuSample& g) { return g.mem_clock_mhz() * 1e6; }},
      {"trainscope_gpu_throttled", "gauge",
       "1 while power or heat holds the GPU's clocks down (NVML clock-event reasons), else 0.",
       wire::GPU_CLOCK_EVENTS,
       [](const wire::GpuSample& g) {
         return (g.clock_event_reasons() & wire::kGpuThrottleReasons) != 0 ? 1.0 : 0.0;
       }},
      {"trainscope_gpu_throttle_seconds_total", "counter",
       "Time power and thermal policies held the GPU's clocks down (NVML violation time).",
       wire::GPU_THROTTLE_TIME,
       [](const wire::GpuSample& g) { return static_cast<double>(g.throttle_ns()) / 1e9; }},
      {"trainscope_gpu_ecc_uncorrected_errors_total", "counter",
       "Uncorrected ECC errors since the driver loaded.", wire::GPU_ECC,
       [](const wire::GpuSample& g) { return static_cast<double>(g.ecc_uncorrected()); }},
      {"trainscope_gpu_ecc_corrected_errors_total", "counter",
       "Corrected ECC errors since the driver loaded.", wire::GPU_ECC,
       [](const wire::GpuSample& g) { return static_cast<double>(g.ecc_corrected()); }},
      {"trainscope_gpu_remapped_rows", "gauge", "Memory rows remapped after uncorrected errors.",
       wire::GPU_REMAPPED_ROWS,
       [](const wire::GpuSample& g) { return static_cast<double>(g.remapped_rows_uncorrected()); }},
      {"trainscope_gpu_nvlink_errors_total", "counter",
       "NVLink replay, recovery and CRC errors over the GPU's links.", wire::GPU_NVLINK,
       [](const wire::GpuSample& g) { return static_cast<double>(g.nvlink_errors()); }},
  };
  auto labels = [](const storage::NodeRow& n, const wire::GpuSample& g) {
    return std::vector<std::pair<std::string, std::string>>{
        {"node", n.node}, {"gpu", std::to_string(g.index())}, {"uuid", g.uuid()}};
  };
  for (const Family& f : kFamilies) {
    m.family(f.name, f.type, f.help);
    for (const auto& n : nodeRows) {
      if (!n.latestHost) continue;
      for (const auto& g : n.latestHost->gpus()) {
        if (g.lost() || (g.present() & static_cast<uint64_t>(f.field)) == 0) continue;
        m.sample(labels(n, g), f.value(g));
      }
    }
  }
  m.family("trainscope_gpu_lost", "gauge",
           "1 when NVML answered GPU_IS_LOST for the GPU (fallen off the bus), else 0.");
  for (const auto& n : nodeRows) {
    if (!n.latestHost) continue;
    for (const auto& g : n.latestHost->gpus()) m.sample(labels(n, g), g.lost() ? 1.0 : 0.0);
  }
}

void writeStorage(MetricsText& m, const storage::StoreStats& st) {
  m.family("trainscope_storage_size_bytes", "gauge", "Database and WAL size on disk.");
  m.sample({}, static_cast<double>(st.bytesOnDisk));
  m.family("trainscope_storage_step_rows", "gauge", "Step rows stored.");
  m.sample({}, static_cast<double>(st.stepRows));
  m.family("trainscope_storage_duplicate_steps_total", "counter",
           "Step reports ignored because their (job, rank, step) was stored already.");
  m.sample({}, static_cast<double>(st.duplicateSteps));
  m.family("trainscope_storage_transactions_total", "counter", "Storage transactions committed.");
  m.sample({}, static_cast<double>(st.transactions));
  if (st.memoryBytes > 0) {
    m.family("trainscope_storage_memory_bytes", "gauge",
             "Memory the storage engine holds in the collector (SQLite: page caches, statements).");
    m.sample({}, static_cast<double>(st.memoryBytes));
  }
  m.family("trainscope_storage_cached_step_rollups", "gauge",
           "Step summaries the store keeps in memory for reads (all jobs).");
  m.sample({}, static_cast<double>(st.cachedSummarySteps));
}

// Rows left out of the page by the age-out time and the cap (recentRows).
struct Omitted {
  size_t agedOut = 0;
  size_t overCap = 0;
};

void writeOmitted(MetricsText& m, const Omitted& jobs, const Omitted& nodes) {
  m.family("trainscope_metrics_omitted", "gauge",
           "Jobs and nodes left out of this page: not heard from within the age-out time "
           "(reason aged_out) or past the cap on how many are shown (reason cap).");
  m.sample({{"kind", "job"}, {"reason", "aged_out"}}, static_cast<double>(jobs.agedOut));
  m.sample({{"kind", "job"}, {"reason", "cap"}}, static_cast<double>(jobs.overCap));
  m.sample({{"kind", "node"}, {"reason", "aged_out"}}, static_cast<double>(nodes.agedOut));
  m.sample({{"kind", "node"}, {"reason", "cap"}}, static_cast<double>(nodes.overCap));
}

}  // namespace

std::string renderStoreMetrics(storage::Store& store, int64_t nowNs, const MetricsLimits& limits) {
  MetricsText m;
  std::string errors;
  auto jobs = store.jobs();
  if (!jobs) errors += "# store error (jobs): " + escapeHelpText(jobs.message()) + "\n";
  Omitted jobsOmitted;
  const std::vector<storage::JobRow> jobRows =
      recentRows(jobs ? std::move(*jobs) : std::vector<storage::JobRow>{}, nowNs, limits.ageOutNs,
                 limits.maxJobs, &jobsOmitted.agedOut, &jobsOmitted.overCap);
  RanksByJob perJob;
  Bandwidth bandwidth;
  ParallelMetrics parallel;
  readRecentSteps(store, jobRows, limits.windowSteps, &perJob, &bandwidth, &parallel, &errors);

  writeJobs(m, jobRows, nowNs);
  writeRanks(m, perJob, limits.windowSteps);
  writeBandwidth(m, bandwidth);
  parallel.write(m);
  writeOpenAnomalies(m, store, jobRows);

  auto nodes = store.nodes();
  if (!nodes) errors += "# store error (nodes): " + escapeHelpText(nodes.message()) + "\n";
  Omitted nodesOmitted;
  const std::vector<storage::NodeRow> nodeRows =
      recentRows(nodes ? std::move(*nodes) : std::vector<storage::NodeRow>{}, nowNs,
                 limits.ageOutNs, limits.maxNodes, &nodesOmitted.agedOut, &nodesOmitted.overCap);
  writeNodes(m, nodeRows, nowNs);
  writeGpus(m, nodeRows);
  writeStorage(m, store.stats());
  writeOmitted(m, jobsOmitted, nodesOmitted);
  m.raw(errors);
  return m.text();
}

std::string httpMetricsText(const HttpStats& s) {
  MetricsText m;
  m.family("trainscope_http_handler_errors_total", "counter",
           "HTTP requests whose handler failed unexpectedly (answered 500).");
  m.sample({}, static_cast<double>(s.handlerErrors));
  m.family("trainscope_http_live_slow_disconnects_total", "counter",
           "Live (WebSocket) clients disconnected because they did not read their updates.");
  m.sample({}, static_cast<double>(s.liveSlowDisconnects));
  m.family("trainscope_http_live_clients", "gauge", "Live (WebSocket) clients connected.");
  m.sample({}, static_cast<double>(s.liveClients));
  m.family("trainscope_http_origin_refused_total", "counter",
           "Changes and live connections refused for a foreign Origin or an unknown Host (403).");
  m.sample({}, static_cast<double>(s.originRefused));
  return m.text();
}

std::string ingestMetricsText(const ingest::IngestStats& s) {
  MetricsText m;
  auto counter = [&](const std::string& name, const std::string& help, uint64_t v) {
    m.family(name, "counter", help);
    m.sample({}, static_cast<double>(v));
  };
  counter("trainscope_ingest_frames_total", "Messages received on the ingest socket.", s.frames);
  counter("trainscope_ingest_batches_total", "Batches accepted from agents.", s.batches);
  counter("trainscope_ingest_items_stored_total", "Items committed to storage.", s.itemsStored);
  counter("trainscope_ingest_steps_stored_total", "Step reports committed (duplicates included).",
          s.stepsStored);
  counter("trainscope_ingest_heartbeats_total", "Agent heartbeats answered.", s.heartbeats);
  counter("trainscope_ingest_hellos_total", "Agent hellos received.", s.hellos);
  counter("trainscope_ingest_acks_sent_total", "Batch acks sent.", s.acksSent);
  counter("trainscope_ingest_commits_total", "Storage transactions of ingest.", s.commits);
  counter("trainscope_ingest_commit_failures_total", "Failed storage transactions.",
          s.commitFailures);
  counter("trainscope_ingest_disconnects_total", "Agent connections closed.", s.disconnects);
  m.family("trainscope_ingest_peers", "gauge", "Open ingest connections that have sent a message.");
  m.sample({}, static_cast<double>(s.peers));
  m.family("trainscope_ingest_last_commit_seconds", "gauge", "Duration of the last commit.");
  m.sample({}, seconds(s.lastCommitNs));
  m.family("trainscope_ingest_rejected_frames_total", "counter",
           "Frames and items rejected by ingest, by reason.");
  for (const auto& [reason, n] : s.rejects) m.sample({{"reason", reason}}, static_cast<double>(n));
  return m.text();
}

}  // namespace trainscope::http
