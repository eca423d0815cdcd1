// Shared by api_bench and dashboard_load_bench: fills a Store with a synthetic job straight
// through Store::write in large transactions, and times GET requests against an HTTP server
// on 127.0.0.1 with a blocking keep-alive client. One thread per client object.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "collector/storage/store.h"
#include "common/clock.h"
#include "common/status.h"
#include "schema/wire.h"

namespace trainscope::bench {

struct FillOptions {
  std::string job = "bench";
  uint32_t ranks = 64;
  int64_t steps = 10000;
  // Operators and collectives per step report (kept in each row's detail blob): more is closer
  // to a real model, fewer fills faster and smaller.
  int ops = 12;
  int collectives = 2;
  // Rows per transaction: larger is faster to fill, and holds the writer longer per commit.
  size_t rowsPerTxn = 50000;
  // Rank whose compute is 1.5x from step 100 on, so the heatmap has a bright row.
  uint32_t straggler = 3;
  bool progress = true;  // print a line every ~10% of the fill
};

// One step report of the synthetic job; durations vary with step and rank.
inline wire::StepReport syntheticReport(const FillOptions& o, uint32_t rank, int64_t step,
                                        int64_t startNs) {
  wire::StepReport r;
  r.set_job(o.job);
  r.set_rank(rank);
  r.set_step(step);
  int64_t compute = 60'000'000 + (step * 7919 + int64_t{rank} * 104729) % 3'000'000;
  if (rank == o.straggler && step >= 100) compute = compute * 3 / 2;
  const int64_t exposed = 8'000'000 + (step % 5) * 200'000;
  const int64_t data = 2'000'000;
  const int64_t dur = compute + exposed + data;
  r.set_start_ns(startNs);
  r.set_end_ns(startNs + dur);
  r.set_duration_ns(dur);
  r.set_compute_ns(compute);
  r.set_comm_ns(exposed * 3);
  r.set_exposed_comm_ns(exposed);
  r.set_data_ns(data);
  r.set_records(static_cast<uint64_t>(o.ops) * 8);
  for (int i = 0; i < o.ops; ++i) {
    auto* op = r.add_ops();
    op->set_name("aten::op" + std::to_string(i));
    op->set_count(4 + static_cast<uint64_t>(i % 5));
    op->set_total_ns(compute / (i + 2));
    op->set_max_ns(compute / (int64_t{4} * (i + 2)));
  }
  for (int i = 0; i < o.collectives; ++i) {
    auto* c = r.add_collectives();
    c->set_op(i % 2 == 0 ? wire::ALL_REDUCE : wire::ALL_GATHER);
    c->set_group("world");
    c->set_bytes(uint64_t{1} << (22 + i));
    c->set_count(2);
    c->set_total_ns(exposed * 2);
    c->set_max_ns(exposed);
    c->set_bandwidth_bps(5e9 + 1e8 * i);
  }
  return r;
}

// Writes ranks x steps rows (steps in order, every rank per step, as a job reports them) and
// registers the ranks on one node. Returns the seconds the fill took.
inline Result<double> fillStore(storage::Store& store, const FillOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t now = SystemClock().nowNs();
  const int64_t stepNs = 75'000'000;
  const int64_t firstStart = now - o.steps * stepNs;
  storage::WriteBatch batch;
  for (uint32_t rank = 0; rank < o.ranks; ++rank) {
    wire::RankInfo info;
    info.set_job(o.job);
    info.set_rank(rank);
    info.set_world_size(o.ranks);
    info.set_local_rank(rank % 8);
    info.set_host("bench-host-" + std::to_string(rank / 8));
    info.set_pid(1000 + rank);
    info.set_probe_version("bench");
    info.set_node("bench-node-" + std::to_string(rank / 8));
    batch.ranks.push_back(std::move(info));
  }
  const uint64_t total = static_cast<uint64_t>(o.ranks) * static_cast<uint64_t>(o.steps);
  uint64_t written = 0;
  uint64_t nextReport = total / 10;
  for (int64_t step = 0; step < o.steps; ++step) {
    for (uint32_t rank = 0; rank < o.ranks; ++rank) {
      auto report = syntheticReport(o, rank, step, firstStart + step * stepNs);
      batch.stepDetails.push_back(report.SerializeAsString());
      batch.steps.push_back(std::move(report));
    }
    if (batch.steps.size() >= o.rowsPerTxn || step + 1 == o.steps) {
      batch.receivedNs = SystemClock().nowNs();
      if (auto s = store.write(batch); !s) {
        return Result<double>::error("filling the store at step " + std::to_string(step) + ": " +
                                     s.message());
      }
      written += batch.steps.size();
      batch = storage::WriteBatch{};
      if (o.progress && written >= nextReport) {
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("  filled %llu of %llu rows (%.0f rows/s)\n",
                    static_cast<unsigned long long>(written),
                    static_cast<unsigned long long>(total), static_cast<double>(written) / secs);
        std::fflush(stdout);
        nextReport += total / 10;
      }
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The benchmarks' store: DIR/trainscope.db, filled with `fill` when new. Owner thread only.
class BenchStore {
 public:
  BenchStore() = default;
  BenchStore(const BenchStore&) = delete;
  BenchStore& operator=(const BenchStore&) = delete;
  ~BenchStore() {
    store_.reset();
    if (temp_) std::filesystem::remove_all(dir_);
  }

  // dataDir "" = a temp dir removed by the destructor. A database already there is used as it
  // is with `reuse` and refused without. Prints the fill's rows, time and rate. `storeUrl`
  // clickhouse://HOST:PORT/DB puts the job in that ClickHouse database instead of SQLite in
  // dataDir (the caller links storage_clickhouse_dep).
  Status open(const std::string& dataDir, bool reuse, const FillOptions& fill,
              const std::string& storeUrl = "") {
    dir_ = dataDir;
    temp_ = dir_.empty();
    if (temp_) {
      char tmpl[] = "/tmp/trainscope-bench-XXXXXX";
      if (mkdtemp(tmpl) == nullptr) return Status::error("cannot create a temp dir in /tmp");
      dir_ = tmpl;
    }
    std::filesystem::create_directories(dir_);
    storage::SqliteOptions so;
    so.path = (std::filesystem::path(dir_) / "trainscope.db").string();
    so.retentionNs = 0;  // the synthetic job is older than the default retention allows
    bool exists = false;
    if (storeUrl.empty()) {
      exists = std::filesystem::exists(so.path);
      if (exists && !reuse) {
        return Status::error("--data-dir: " + so.path +
                             " already holds a database (pass --reuse to use it)");
      }
      auto opened = storage::openSqliteStore(so);
      if (!opened) return Status::error(opened.message());
      store_ = std::move(*opened);
    } else {
      storage::ClickHouseOptions co;
      co.url = storeUrl;
      co.retentionNs = 0;
      auto opened = storage::openClickHouseStore(co);
      if (!opened) return Status::error("--store: " + opened.message());
      store_ = std::move(*opened);
      auto has = store_->jobExists(fill.job);
      if (!has) return Status::error(has.message());
      exists = *has;
      if (exists && !reuse) {
        return Status::error("--store: " + storeUrl + " already holds job " + fill.job +
                             " (pass --reuse to use it)");
      }
      so.path = storeUrl;
    }
    if (!exists) {
      const auto rows =
          static_cast<unsigned long long>(fill.ranks) * static_cast<unsigned long long>(fill.steps);
      std::printf(
          "filling %u ranks x %lld steps = %llu rows (%d ops, %d collectives each) into "
          "%s\n",
          fill.ranks, static_cast<long long>(fill.steps), rows, fill.ops, fill.collectives,
          so.path.c_str());
      std::fflush(stdout);
      auto took = fillStore(*store_, fill);
      if (!took) return Status::error(took.message());
      std::printf("fill: %llu rows in %.1f s (%.0f rows/s), %.2f GB on disk\n", rows, *took,
                  static_cast<double>(rows) / *took,
                  static_cast<double>(store_->stats().bytesOnDisk) / 1e9);
    }
    auto jobs = store_->jobs();
    if (!jobs) return Status::error(jobs.message());
    for (const auto& j : *jobs) {
      if (j.job == fill.job) {
        latestStep_ = j.latestStep;
        stepRows_ = j.stepRows;
      }
    }
    if (latestStep_ < 0) return Status::error("job '" + fill.job + "' is not in the store");
    return Status::ok();
  }

  storage::Store& store() { return *store_; }
  int64_t latestStep() const { return latestStep_; }
  uint64_t stepRows() const { return stepRows_; }

 private:
  std::string dir_;
  bool temp_ = false;
  std::unique_ptr<storage::Store> store_;
  int64_t latestStep_ = -1;
  uint64_t stepRows_ = 0;
};

struct Timed {
  double ms = 0;
  size_t bytes = 0;
  unsigned status = 0;
};

// A keep-alive HTTP/1.1 client to 127.0.0.1:port. Not thread-safe: one per thread.
class HttpClient {
 public:
  explicit HttpClient(uint16_t port) : port_(port), stream_(ioc_) { connect(); }

  Timed get(const std::string& target) {
    namespace http = boost::beast::http;
    Timed out;
    const auto t0 = std::chrono::steady_clock::now();
    for (int attempt = 0; attempt < 2; ++attempt) {
      boost::beast::error_code ec;
      http::request<http::empty_body> req(http::verb::get, target, 11);
      req.set(http::field::host, "127.0.0.1");
      req.set(http::field::accept_encoding, "gzip");
      http::write(stream_, req, ec);
      http::response_parser<http::string_body> parser;
      parser.body_limit(1ull << 31);
      if (!ec) http::read(stream_, buffer_, parser, ec);
      if (ec) {  // the server closed an idle keep-alive connection: once more on a new one
        stream_.close();
        connect();
        continue;
      }
      out.status = parser.get().result_int();
      out.bytes = parser.get().body().size();
      break;
    }
    out.ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return out;
  }

 private:
  void connect() {
    stream_.connect(
        boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port_));
  }
  uint16_t port_;
  boost::asio::io_context ioc_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
};

// The p-th percentile (0..100) of `v` (nearest rank); 0 for an empty list.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(std::min<double>(static_cast<double>(v.size()) - 1,
                                                  p / 100.0 * static_cast<double>(v.size())));
  return v[i];
}

}  // namespace trainscope::bench
