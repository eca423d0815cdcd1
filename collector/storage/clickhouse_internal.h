// Private to the ClickHouse store's source files (clickhouse_store.cpp, clickhouse_queries.cpp,
// clickhouse_records.cpp): the column lists every insert and select of a table shares, and the
// RowBinary codecs of the job, rank and node rows. No state; any thread.
#pragma once

#include <string>
#include <vector>

#include "collector/storage/clickhouse_http.h"
#include "collector/storage/clickhouse_store.h"

namespace trainscope::storage::clickhouse {

constexpr int kSchemaVersion = 2;

constexpr const char* kStepColumns =
    "job, rank, step, start_ns, end_ns, duration_ns, compute_ns, comm_ns, exposed_comm_ns,"
    " data_ns, records, dropped, received_ns, detail";
constexpr const char* kHostColumns = "node, time_ns, received_ns, sample";
constexpr const char* kJobColumns =
    "job, world_size, first_seen_ns, last_seen_ns, latest_step, step_rows";
// What writeJob writes: the job, the collector whose row it is, then the rest.
constexpr const char* kJobColumnsCollector =
    "job, collector, world_size, first_seen_ns, last_seen_ns, latest_step, step_rows";
constexpr const char* kRankColumns =
    "job, rank, world_size, local_rank, host, node, pid, probe_version, first_seen_ns,"
    " last_seen_ns, latest_step, ended, ended_step, groups_declared_ns, groups, gpu_uuid";
constexpr const char* kNodeColumns =
    "name, host, agent_version, pid, first_seen_ns, last_seen_ns, offset_ns, rtt_ns,"
    " spool_bytes, spool_dropped, ranks, latest_host_ns, latest_host";
constexpr const char* kNodeColumnsCollector =
    "name, collector, host, agent_version, pid, first_seen_ns, last_seen_ns, offset_ns, rtt_ns,"
    " spool_bytes, spool_dropped, ranks, latest_host_ns, latest_host";
constexpr const char* kAnomalyColumns =
    "id, job, kind, ranks, nodes, onset_step, detected_step, detected_ns, magnitude, confidence,"
    " evidence, labels, state, resolved_step, resolved_ns, summary, capture_id, updated_ns";
constexpr const char* kCaptureColumns =
    "id, job, kind, state, reason, anomaly_id, ranks, start_step, steps, history, max_bytes,"
    " created_ns, updated_ns, finished_ns, deadline_ns, trace_bytes, summary, rank_status";

// "INSERT INTO table (columns, version) FORMAT RowBinary" for the state tables, or without the
// version for steps and host samples.
inline std::string insertSql(const char* table, const char* columns, bool versioned) {
  return std::string("INSERT INTO ") + table + " (" + columns + (versioned ? ", version" : "") +
         ") FORMAT RowBinary";
}

// ClickHouse parses at most max_query_size (256 KiB by default) of a query's text and refuses
// the rest, so a lookup that named every job of a commit in one list failed the whole commit
// once the names passed it (thousands of jobs, or fewer long names), with every other agent's
// items in it. Lists of terms go out in pieces of at most this many bytes, each its own query.
constexpr size_t kMaxListBytes = size_t{64} << 10;

// `terms` joined by `separator` into lists of at most kMaxListBytes each (a single longer term
// gets a list of its own), in order; none when `terms` is empty.
std::vector<std::string> chunkTerms(const std::vector<std::string>& terms,
                                    std::string_view separator);

void writeJob(RowWriter& w, const std::string& job, const std::string& collector,
              const ClickHouseStore::JobState& s);
std::pair<std::string, ClickHouseStore::JobState> readJob(RowReader& r);
void writeRank(RowWriter& w, const ClickHouseStore::RankState& s);
ClickHouseStore::RankState readRank(RowReader& r);
void writeNode(RowWriter& w, const std::string& collector, const ClickHouseStore::NodeState& s);
ClickHouseStore::NodeState readNode(RowReader& r);

}  // namespace trainscope::storage::clickhouse
