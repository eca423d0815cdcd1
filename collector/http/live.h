// The live feed's content (GET /api/v1/live, WebSocket): a snapshot for a client that just
// connected, then deltas computed by comparing the store with what the previous poll saw.
// Reads the Store only; used by the HTTP server on its I/O thread (one thread at a time).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "collector/storage/store.h"
#include "common/clock.h"
#include "common/status.h"

namespace trainscope::http {

// Step-summary rows a delta carries per job at most (a client that fell further behind
// reloads the range over the REST API).
inline constexpr size_t kLiveMaxSummaryRows = 5000;
// Anomalies a snapshot carries at most (the newest); the REST API has them all.
inline constexpr size_t kLiveMaxAnomalies = 2000;
// Captures a snapshot carries at most (the most recently updated).
inline constexpr size_t kLiveMaxCaptures = 500;
// Jobs the feed follows at most: the most recently seen (the store lists jobs newest first).
// Any ingest sender can make thousands of jobs a second, and stored jobs stay until retention:
// unbounded, the snapshot grew to 20 MB at 100k jobs and every poll summarized each of them.
// A job past the bound leaves the feed (and the feed's memory) and comes back as a change when
// it reports again; GET /api/v1/jobs pages through all of them.
inline constexpr size_t kLiveMaxJobs = 2000;

class LiveFeed {
 public:
  // `store` and `clock` must outlive the feed.
  LiveFeed(storage::Store& store, const Clock& clock);

  // {"type":"snapshot","time_ns":T,"jobs":[job...],"nodes":[node...],"anomalies":[...],
  // "captures":[...]} in the API's shapes (jobs: the kLiveMaxJobs most recently seen,
  // anomalies: the newest kLiveMaxAnomalies, captures: the kLiveMaxCaptures most recently
  // updated; [] when the store keeps none).
  Result<std::string> snapshot();

  // The messages for what changed since the previous poll(), in order: {"type":"delta",
  // "time_ns":T,"jobs":[changed jobs],"summary":{job:[summary rows of new steps]},"nodes":[nodes
  // heard from since],"anomalies":[opened/updated since]} when any of those changed (jobs among
  // the kLiveMaxJobs newest; one summary read per changed job), then one
  // {"type":"capture","capture":{capture JSON}} per capture written since (docs/CAPTURE.md).
  // Empty when nothing changed. The first poll() after construction (or reset()) compares with
  // an empty store.
  Result<std::vector<std::string>> poll();

  // Forgets what the previous poll saw (the next poll compares with an empty store).
  void reset();

  // Jobs and nodes the feed remembers from the previous poll (bounded: kLiveMaxJobs jobs, the
  // nodes the store lists).
  size_t followedJobs() const { return jobs_.size(); }
  size_t followedNodes() const { return nodesSeenNs_.size(); }

 private:
  struct JobSeen {
    int64_t latestStep = -1;
    uint64_t stepRows = 0;
    uint32_t ranksSeen = 0;
    uint32_t ranksEnded = 0;
    uint32_t worldSize = 0;
    std::string state;
  };
  storage::Store& store_;
  const Clock& clock_;
  // What the previous poll saw of each job it follows and each node the store lists; entries
  // of jobs and nodes that left the listing (or the kLiveMaxJobs newest) are dropped.
  std::map<std::string, JobSeen> jobs_;
  std::map<std::string, int64_t> nodesSeenNs_;
  // Largest updated_ns among anomalies sent; the next poll asks for those written since.
  int64_t anomaliesSeenNs_ = 0;
  // (id, updated_ns) sent at exactly anomaliesSeenNs_, so the ">=" query does not resend them.
  std::map<std::string, int64_t> anomaliesAtEdge_;
  // The same for captures.
  int64_t capturesSeenNs_ = 0;
  std::map<std::string, int64_t> capturesAtEdge_;
};

}  // namespace trainscope::http
