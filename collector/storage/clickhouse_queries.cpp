// The read side of ClickHouseStore: jobs, ranks, groups, steps, summaries, nodes, stats, and
// retention by dropping whole partitions.
#include "collector/storage/clickhouse_store.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "collector/storage/clickhouse_internal.h"
#include "collector/storage/store_rows.h"

namespace trainscope::storage {
namespace {

using namespace clickhouse;  // NOLINT(google-build-using-namespace): this engine's own helpers

Status malformed(const std::string& what) {
  return Status::error(StatusCode::kMalformed,
                       "storage: " + what + " from ClickHouse do not decode");
}

// Floor division: the last partition wholly before a horizon, also for a horizon below zero
// (a store whose retention is longer than the clock's age, in tests).
int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

}  // namespace

Result<std::vector<JobRow>> ClickHouseStore::jobs() {
  using R = Result<std::vector<JobRow>>;
  // One row per job and collector: summed and combined here (a collector that got no
  // registration of the job knows no world size), the owner is the collector that stored the
  // job's data last. (Aliases differ from the columns: in ClickHouse an alias named
  // like a column would replace it inside the other aggregates.)
  auto jobs = read(
      "SELECT job, argMaxIf(world_size, last_seen_ns, world_size > 0) AS ws, minIf(first_seen_ns,"
      " first_seen_ns > 0) AS fs, max(last_seen_ns) AS ls, max(latest_step) AS lst,"
      " sum(step_rows) AS sr, argMax(collector, last_seen_ns) AS owner FROM jobs FINAL"
      " GROUP BY job ORDER BY ls DESC, job FORMAT RowBinary");
  if (!jobs) return jobs.status();
  auto counts = read(
      "SELECT job, toUInt64(count()), toUInt64(sum(ended)) FROM ranks FINAL GROUP BY job"
      " FORMAT RowBinary");
  if (!counts) return counts.status();
  std::map<std::string, std::pair<uint64_t, uint64_t>, std::less<>> perJob;
  for (RowReader r(*counts); !r.atEnd();) {
    std::string name(r.str());
    uint64_t seen = r.u64();
    uint64_t ended = r.u64();
    if (r.failed()) return R(malformed("rank counts"));
    perJob[name] = {seen, ended};
  }
  std::vector<JobRow> out;
  for (RowReader r(*jobs); !r.atEnd();) {
    auto [name, state] = readJob(r);
    std::string owner(r.str());
    if (r.failed()) return R(malformed("jobs"));
    JobRow row;
    row.job = name;
    row.collector = std::move(owner);
    row.worldSize = state.worldSize;
    row.firstSeenNs = state.firstSeenNs;
    row.lastSeenNs = state.lastSeenNs;
    row.latestStep = state.latestStep;
    row.stepRows = state.stepRows;
    if (auto it = perJob.find(name); it != perJob.end()) {
      row.ranksSeen = static_cast<uint32_t>(it->second.first);
      row.ranksEnded = static_cast<uint32_t>(it->second.second);
    }
    out.push_back(std::move(row));
  }
  return out;
}

Result<bool> ClickHouseStore::jobExists(const std::string& job) {
  auto n = read("SELECT count() FROM jobs WHERE job = " + quote(job) + " FORMAT TabSeparated");
  if (!n) return n.status();
  return !n->empty() && n->front() != '0';
}

Result<std::vector<RankRow>> ClickHouseStore::ranks(const std::string& job) {
  using R = Result<std::vector<RankRow>>;
  auto rows =
      read(std::string("SELECT ") + kRankColumns + " FROM ranks FINAL WHERE job = " + quote(job) +
           " ORDER BY rank FORMAT RowBinary");
  if (!rows) return rows.status();
  std::vector<RankRow> out;
  for (RowReader r(*rows); !r.atEnd();) {
    auto state = readRank(r);
    if (r.failed()) return R(malformed("ranks"));
    out.push_back(std::move(state.row));
  }
  return out;
}

Result<std::vector<topology::RankGroups>> ClickHouseStore::groups(const std::string& job) {
  using R = Result<std::vector<topology::RankGroups>>;
  auto rows = read(
      "SELECT rank, groups_declared_ns, groups FROM (SELECT rank,"
      " groups_declared_ns, groups FROM ranks FINAL WHERE job = " +
      quote(job) + ") WHERE groups_declared_ns > 0 ORDER BY rank FORMAT RowBinary");
  if (!rows) return rows.status();
  std::vector<topology::RankGroups> out;
  for (RowReader r(*rows); !r.atEnd();) {
    topology::RankGroups row;
    row.rank = r.u32();
    row.declaredNs = r.i64();
    std::string_view blob = r.str();
    if (r.failed()) return R(malformed("process groups"));
    wire::RankHello holder;
    if (!holder.ParseFromArray(blob.data(), static_cast<int>(blob.size()))) {
      return R::error("storage: the process groups of rank " + std::to_string(row.rank) +
                      " of job " + job + " do not decode");
    }
    row.groups.assign(holder.groups().begin(), holder.groups().end());
    out.push_back(std::move(row));
  }
  return out;
}

namespace {

// WHERE clause of a job's step rows: job, optional rank and step range (all key columns, so
// exact under FINAL).
std::string stepFilter(const std::string& job, std::optional<uint32_t> rank,
                       std::optional<int64_t> fromStep, std::optional<int64_t> toStep) {
  std::string where = " WHERE job = " + quote(job);
  if (rank) where += " AND rank = " + std::to_string(*rank);
  if (fromStep) where += " AND step >= " + std::to_string(*fromStep);
  if (toStep) where += " AND step <= " + std::to_string(*toStep);
  return where;
}

}  // namespace

Result<std::vector<StepRow>> ClickHouseStore::steps(const StepQuery& query) {
  using R = Result<std::vector<StepRow>>;
  std::string sql =
      "SELECT rank, step, start_ns, end_ns, duration_ns, compute_ns, comm_ns, exposed_comm_ns,"
      " data_ns, records, dropped";
  // Without detail the column is not read at all (it is most of a row's bytes).
  sql += query.detail ? ", detail" : ", ''";
  sql += " FROM steps FINAL" + stepFilter(query.job, query.rank, query.fromStep, query.toStep);
  sql += " ORDER BY step, rank LIMIT " + std::to_string(query.limit) + " FORMAT RowBinary";
  auto rows = read(sql);
  if (!rows) return rows.status();
  std::vector<StepRow> out;
  for (RowReader r(*rows); !r.atEnd();) {
    StepRow row;
    row.job = query.job;
    row.rank = r.u32();
    row.step = r.i64();
    row.startNs = r.i64();
    row.endNs = r.i64();
    row.durationNs = r.i64();
    row.computeNs = r.i64();
    row.commNs = r.i64();
    row.exposedCommNs = r.i64();
    row.dataNs = r.i64();
    row.records = r.u64();
    row.dropped = r.u64();
    std::string_view blob = r.str();
    if (r.failed()) return R(malformed("steps"));
    if (query.detail) {
      if (auto st = fillStepDetail(blob, &row); !st) return st;
    }
    out.push_back(std::move(row));
  }
  return out;
}

Result<std::vector<StepSummaryRow>> ClickHouseStore::summary(const SummaryQuery& query) {
  using R = Result<std::vector<StepSummaryRow>>;
  // The page ends at its limit-th step: found first from the key columns alone (no FINAL,
  // every copy of a row has the same key), so the FINAL query below merges and groups only
  // the page's rows, not the whole job's, when the range is open or wider than the page.
  std::optional<int64_t> toStep = query.toStep;
  if (query.limit > 0) {
    auto last = read("SELECT step FROM steps" +
                     stepFilter(query.job, std::nullopt, query.fromStep, query.toStep) +
                     " GROUP BY step ORDER BY step LIMIT 1 OFFSET " +
                     std::to_string(query.limit - 1) + " FORMAT TabSeparated");
    if (!last) return last.status();
    if (!last->empty()) toStep = std::stoll(*last);
  }
  // One row per step, its ranks and durations gathered by the server; the numbers come from
  // the same summarizeStep() SQLite's answers do.
  auto rows = read("SELECT step, groupArray(rank), groupArray(duration_ns) FROM steps FINAL" +
                   stepFilter(query.job, std::nullopt, query.fromStep, toStep) +
                   " GROUP BY step ORDER BY step LIMIT " + std::to_string(query.limit) +
                   " FORMAT RowBinary");
  if (!rows) return rows.status();
  std::vector<StepSummaryRow> out;
  std::vector<uint32_t> ranks;
  std::vector<std::pair<int64_t, uint32_t>> durations;
  for (RowReader r(*rows); !r.atEnd();) {
    int64_t step = r.i64();
    const uint64_t count = r.arrayLength();
    if (count > rows->size()) return R(malformed("step summaries"));
    ranks.resize(count);
    for (auto& rank : ranks) rank = r.u32();
    const uint64_t n = r.arrayLength();
    if (r.failed() || n != ranks.size() || n == 0) return R(malformed("step summaries"));
    durations.clear();
    for (uint32_t rank : ranks) durations.emplace_back(r.i64(), rank);
    if (r.failed()) return R(malformed("step summaries"));
    out.push_back(summarizeStep(step, durations));
  }
  return out;
}

Result<std::vector<NodeRow>> ClickHouseStore::nodes() {
  using R = Result<std::vector<NodeRow>>;
  // One row per node and collector (each hears the node's hellos, heartbeats and host
  // samples): the latest heard wins (the hello's fields from the latest that had a hello), the
  // latest sample from whichever has it.
  auto rows = read(
      "SELECT name, argMaxIf(host, last_seen_ns, host != ''),"
      " argMaxIf(agent_version, last_seen_ns, agent_version != ''),"
      " argMaxIf(pid, last_seen_ns, pid != 0), min(first_seen_ns) AS fs, max(last_seen_ns) AS ls,"
      " argMax(offset_ns, last_seen_ns), argMax(rtt_ns, last_seen_ns),"
      " argMax(spool_bytes, last_seen_ns), argMax(spool_dropped, last_seen_ns),"
      " argMax(ranks, last_seen_ns), max(latest_host_ns) AS lh,"
      " argMax(latest_host, latest_host_ns) FROM nodes FINAL GROUP BY name ORDER BY name"
      " FORMAT RowBinary");
  if (!rows) return rows.status();
  std::vector<NodeRow> out;
  for (RowReader r(*rows); !r.atEnd();) {
    auto state = readNode(r);
    if (r.failed()) return R(malformed("nodes"));
    if (state.latestHost) {
      wire::HostSample host;
      if (host.ParseFromString(*state.latestHost)) state.row.latestHost = std::move(host);
    }
    out.push_back(std::move(state.row));
  }
  return out;
}

Result<std::vector<wire::HostSample>> ClickHouseStore::hostSamples(const HostSampleQuery& query) {
  using R = Result<std::vector<wire::HostSample>>;
  // The newest `limit` of the range, turned oldest first; FINAL folds a replayed sample.
  auto rows = read("SELECT sample FROM host_samples FINAL WHERE node = " + quote(query.node) +
                   " AND time_ns >= " + std::to_string(query.fromNs) + " AND time_ns <= " +
                   std::to_string(query.toNs) + " ORDER BY time_ns DESC LIMIT " +
                   std::to_string(query.limit) + " FORMAT RowBinary");
  if (!rows) return rows.status();
  std::vector<wire::HostSample> out;
  for (RowReader r(*rows); !r.atEnd();) {
    std::string_view bytes = r.str();
    if (r.failed()) return R(malformed("host_samples"));
    wire::HostSample host;
    if (host.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
      out.push_back(std::move(host));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

Result<uint64_t> ClickHouseStore::applyRetention(int64_t nowNs) {
  using R = Result<uint64_t>;
  if (options_.retentionNs == 0) return uint64_t{0};
  // A partition goes when all of it lies before the horizon: p covers receive times
  // [p * P, (p + 1) * P).
  const int64_t lastExpired = floorDiv(nowNs - options_.retentionNs, partitionNs_) - 1;
  uint64_t deleted = 0;
  MutexLock lock(&writeMu_);
  for (const char* table : {"steps", "host_samples"}) {
    const bool isSteps = std::string_view(table) == "steps";
    // On a cluster the partitions lie in each shard's local table.
    const std::string local = std::string(table) + (cluster_.empty() ? "" : "_local");
    std::set<int64_t> expiredSet;
    for (auto& server : servers_) {
      auto parts = server->query("SELECT DISTINCT partition FROM system.parts WHERE database = " +
                                 quote(endpoint_.database) + " AND table = " + quote(local) +
                                 " AND active FORMAT TabSeparated");
      if (!parts) return R::error(parts.code(), "storage: retention: " + parts.message());
      for (size_t at = 0; at < parts->size();) {
        size_t nl = parts->find('\n', at);
        if (nl == std::string::npos) nl = parts->size();
        std::string value = parts->substr(at, nl - at);
        at = nl + 1;
        if (value.empty()) continue;
        int64_t p = std::stoll(value);
        if (p <= lastExpired) expiredSet.insert(p);
      }
    }
    const std::vector<int64_t> expired(expiredSet.begin(), expiredSet.end());
    for (int64_t p : expired) {
      const std::string inPartition =
          "intDiv(received_ns, " + std::to_string(partitionNs_) + ") = " + std::to_string(p);
      uint64_t rows = 0;
      if (isSteps) {
        // The jobs' row counts go down by what the partition held of each: in this collector's
        // own rows, whoever stored them. Its count of a job may wrap below zero; the sum over
        // the collectors' rows (jobs(), modulo 2^64 like the column) is the true count.
        auto counts = writer_->query("SELECT job, toUInt64(count()) FROM steps FINAL WHERE " +
                                     inPartition + " GROUP BY job FORMAT RowBinary");
        if (!counts) return R::error(counts.code(), "storage: retention: " + counts.message());
        // Jobs idle long enough to be forgotten are read back before their counts go down.
        std::vector<std::string> names;
        for (RowReader r(*counts); !r.atEnd();) {
          names.emplace_back(r.str());
          (void)r.u64();
        }
        if (auto st = restoreJobsLocked(names); !st) return st;
        for (RowReader r(*counts); !r.atEnd();) {
          std::string name(r.str());
          uint64_t n = r.u64();
          if (r.failed()) return R(malformed("retention counts"));
          rows += n;
          jobs_[name].stepRows -= n;
          dirtyJobs_.insert(name);
        }
      } else {
        auto count = writer_->query("SELECT count() FROM host_samples FINAL WHERE " + inPartition +
                                    " FORMAT TabSeparated");
        if (!count) return R::error(count.code(), "storage: retention: " + count.message());
        rows = std::stoull(*count);
      }
      for (auto& server : servers_) {
        auto dropped =
            server->query("ALTER TABLE " + local + " DROP PARTITION " + std::to_string(p));
        if (!dropped) return R::error(dropped.code(), "storage: retention: " + dropped.message());
      }
      ++transactions_;
      deleted += rows;
      if (isSteps) stepRows_ -= std::min<uint64_t>(rows, stepRows_.load());
    }
  }
  if (auto s = flushStateLocked(); !s) return s;
  return deleted;
}

StoreStats ClickHouseStore::stats() {
  StoreStats out;
  out.stepRows = stepRows_.load();
  out.duplicateSteps = duplicates_.load();
  out.transactions = transactions_.load();
  const std::string sql =
      "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = " + quote(endpoint_.database) +
      " AND active FORMAT TabSeparated";
  // Every shard's parts; a client of its own for each, not the writer's (a scrape never waits
  // for a write).
  for (const Endpoint& server : serverEndpoints_) {
    HttpClient client(server, std::chrono::milliseconds(options_.timeoutMs));
    auto bytes = client.query(sql);
    if (bytes && !bytes->empty()) out.bytesOnDisk += std::stoull(*bytes);
  }
  return out;
}

}  // namespace trainscope::storage
