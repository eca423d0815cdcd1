// Prometheus text exposition (format 0.0.4) for GET /metrics: per job and rank step time,
// compute / exposed communication / data wait, collective bandwidth per op, agents, storage,
// and the collector's ingest counters. Pure functions over a Store; any thread may call them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collector/ingest/ingest.h"
#include "collector/storage/store.h"
#include "common/prometheus_text.h"
#include "common/status.h"

namespace trainscope::http {

// The exposition writer lives in common/ (shared with the ingest, detector and capture parts).
using Labels = MetricLabels;
using trainscope::escapeLabelValue;
using trainscope::MetricsText;

// Step-time histogram bucket bounds in seconds (1 ms .. 60 s).
const std::vector<double>& stepSecondsBuckets();

// What /metrics covers: a collector that has seen 20,000 jobs took 12-18 s and 163 MB per
// scrape when every job and rank was written out.
struct MetricsLimits {
  // Latest steps of each job that feed its step-time histograms.
  int64_t windowSteps = 20;
  // A job or node not heard from for longer than this leaves /metrics (ended and crashed jobs,
  // departed agents age out; the API still has them). Longer keeps them on dashboards longer.
  int64_t ageOutNs = 3600LL * 1'000'000'000;
  // At most this many jobs and nodes (the most recently heard from); the rest are counted in
  // trainscope_metrics_omitted{kind,reason}. Each job costs two store queries per scrape.
  size_t maxJobs = 500;
  size_t maxNodes = 1000;
};

// The whole /metrics body from the store. Jobs are labelled `training_job` (Prometheus sets
// `job` itself, to the scrape job's name, and would rename ours to exported_job): the latest
// `limits.windowSteps` steps of each job feed the histograms; everything else comes from each
// rank's latest step. Only jobs and nodes within `limits` are written. Store errors become a
// comment line and the metrics that did not need that query are still served.
std::string renderStoreMetrics(storage::Store& store, int64_t nowNs, const MetricsLimits& limits);

// The HTTP server's own counters since it started. Any thread may read a copy.
struct HttpStats {
  uint64_t handlerErrors = 0;        // requests whose handler threw; answered 500
  uint64_t liveSlowDisconnects = 0;  // live clients dropped for not reading
  uint64_t liveClients = 0;          // live clients connected now
  uint64_t originRefused = 0;        // requests refused by the Origin/Host check (403)
};

// trainscope_http_* counters in exposition format (appended to /metrics by the server).
std::string httpMetricsText(const HttpStats& stats);

// The ingest counters in exposition format, for HttpOptions::extraMetrics.
std::string ingestMetricsText(const ingest::IngestStats& stats);

}  // namespace trainscope::http
