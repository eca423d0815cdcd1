// ingest_bench: sustained step reports per second into a real SQLite file (temp dir), each
// report with 32 operators and 8 collectives. Measures (1) the raw Store::write rate and (2)
// the end-to-end rate through the ingest ROUTER socket from several DEALER clients sending
// Batch envelopes per schema/PROTOCOL.md (first send to last ack). Prints numbers; asserts
// nothing.
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <zmq.hpp>

#include "collector/ingest/ingest.h"
#include "collector/storage/store.h"
#include "common/clock.h"
#include "common/log.h"
#include "schema/wire.h"

using namespace trainscope;

namespace {

wire::StepReport makeReport(const std::string& job, uint32_t rank, int64_t step) {
  wire::StepReport r;
  r.set_job(job);
  r.set_rank(rank);
  r.set_step(step);
  const int64_t dur = 100'000'000 + (step % 7) * 1'000'000 + rank * 1000;
  r.set_start_ns(1'700'000'000'000'000'000 + step * 120'000'000);
  r.set_end_ns(r.start_ns() + dur);
  r.set_duration_ns(dur);
  r.set_compute_ns(dur * 6 / 10);
  r.set_comm_ns(dur * 3 / 10);
  r.set_exposed_comm_ns(dur / 10);
  r.set_data_ns(dur / 20);
  r.set_records(400);
  static const char* kOps[] = {"aten::mm",         "aten::addmm", "aten::bmm", "aten::softmax",
                               "aten::layer_norm", "aten::gelu",  "aten::add", "aten::mul"};
  for (int i = 0; i < 32; ++i) {
    auto* op = r.add_ops();
    op->set_name(std::string(kOps[i % 8]) + "_" + std::to_string(i));
    op->set_count(10 + static_cast<uint64_t>(i));
    op->set_total_ns(dur / 64 + i * 1000);
    op->set_max_ns(dur / 640 + i * 100);
  }
  for (int i = 0; i < 8; ++i) {
    auto* c = r.add_collectives();
    c->set_op(i % 2 == 0 ? wire::ALL_REDUCE : wire::ALL_GATHER);
    c->set_group("dp");
    c->set_bytes(uint64_t{1} << (20 + i));
    c->set_count(4);
    c->set_total_ns(dur / 40);
    c->set_max_ns(dur / 100);
    c->set_bandwidth_bps(1e10);
    c->set_first_arrival_ns(r.start_ns() + i * 1000);
    c->set_last_completion_ns(r.end_ns() - i * 1000);
  }
  return r;
}

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/trainscope-bench-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
};

// CPU seconds used so far by each thread of this process whose name starts with "ts-" or
// "ZMQ", to show which stage is the bottleneck.
std::string threadCpu() {
  std::string out;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream commFile(entry.path() / "comm");
    std::string comm;
    std::getline(commFile, comm);
    if (comm.rfind("ts-", 0) != 0 && comm.rfind("ZMQ", 0) != 0) continue;
    std::ifstream statFile(entry.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(statFile)), std::istreambuf_iterator<char>());
    auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 2));
    std::string f;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && fields >> f; ++i) {
      if (i == 14) utime = std::stod(f);
      if (i == 15) stime = std::stod(f);
    }
    char buf[96];
    std::snprintf(buf, sizeof buf, " %s=%.2fs", comm.c_str(), (utime + stime) / tick);
    out += buf;
  }
  return out;
}

double seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int rawBench(size_t reports, size_t batchSize, uint32_t ranks) {
  TempDir dir;
  storage::SqliteOptions options;
  options.path = dir.path + "/bench.db";
  auto store = storage::openSqliteStore(options);
  if (!store) {
    std::fprintf(stderr, "open: %s\n", store.message().c_str());
    return 1;
  }
  // Reports are built up front so the timing is the store's alone.
  std::vector<storage::WriteBatch> batches;
  storage::WriteBatch current;
  for (size_t i = 0; i < reports; ++i) {
    current.steps.push_back(
        makeReport("bench", static_cast<uint32_t>(i % ranks), static_cast<int64_t>(i / ranks)));
    if (current.steps.size() == batchSize) batches.push_back(std::move(current)), current = {};
  }
  if (!current.empty()) batches.push_back(std::move(current));
  auto t0 = std::chrono::steady_clock::now();
  for (auto& b : batches) {
    b.receivedNs = wallNowNs();
    if (auto s = (*store)->write(b); !s) {
      std::fprintf(stderr, "write: %s\n", s.message().c_str());
      return 1;
    }
  }
  auto t1 = std::chrono::steady_clock::now();
  auto st = (*store)->stats();
  std::printf(
      "raw Store::write: %zu reports in %.3f s = %.0f reports/s (batch %zu, %.1f MiB on "
      "disk, %llu rows)\n",
      reports, seconds(t0, t1), static_cast<double>(reports) / seconds(t0, t1), batchSize,
      static_cast<double>(st.bytesOnDisk) / (1 << 20),
      static_cast<unsigned long long>(st.stepRows));
  return 0;
}

int socketBench(size_t reports, size_t clients, size_t itemsPerBatch, size_t window,
                uint32_t ranks) {
  TempDir dir;
  storage::SqliteOptions options;
  options.path = dir.path + "/bench.db";
  auto store = storage::openSqliteStore(options);
  if (!store) {
    std::fprintf(stderr, "open: %s\n", store.message().c_str());
    return 1;
  }
  ingest::IngestOptions io;
  io.endpoint = "tcp://127.0.0.1:*";
  ingest::IngestServer server(io, **store);
  if (auto s = server.start(); !s) {
    std::fprintf(stderr, "ingest: %s\n", s.message().c_str());
    return 1;
  }
  const std::string endpoint = server.endpoint();

  // Each client pre-encodes its batches, so the measured time is the collector's.
  const size_t perClient = reports / clients;
  std::vector<std::vector<std::string>> frames(clients);
  for (size_t c = 0; c < clients; ++c) {
    size_t made = 0;
    uint64_t seq = 1;
    while (made < perClient) {
      wire::Envelope env;
      auto* batch = env.mutable_batch();
      batch->set_seq(seq++);
      for (size_t k = 0; k < itemsPerBatch && made < perClient; ++k, ++made) {
        size_t i = c * perClient + made;
        auto* item = batch->add_items();
        item->set_schema_version(wire::kSchemaVersion);
        *item->mutable_step() =
            makeReport("bench", static_cast<uint32_t>(i % ranks), static_cast<int64_t>(i / ranks));
      }
      frames[c].push_back(wire::encode(env));
    }
  }

  zmq::context_t ctx(1);
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  auto t0 = std::chrono::steady_clock::now();
  for (size_t c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
      dealer.set(zmq::sockopt::linger, 0);
      dealer.connect(endpoint);
      const auto& mine = frames[c];
      size_t sent = 0;
      size_t acked = 0;
      // A window of batches in flight, as an agent keeps.
      while (acked < mine.size()) {
        while (sent < mine.size() && sent - acked < window) {
          dealer.send(zmq::buffer(mine[sent]), zmq::send_flags::none);
          ++sent;
        }
        zmq::message_t reply;
        zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
        if (zmq::poll(&item, 1, std::chrono::milliseconds(10000)) == 0) {
          failed = true;
          return;
        }
        (void)dealer.recv(reply, zmq::recv_flags::none);
        auto env = wire::decode(reply.data(), reply.size());
        if (env && env->has_ack()) acked = std::max<size_t>(acked, env->ack().seq());
      }
    });
  }
  for (auto& t : threads) t.join();
  auto t1 = std::chrono::steady_clock::now();
  const std::string cpu = threadCpu();
  server.stop();
  if (failed) {
    std::fprintf(stderr, "socket bench: a client timed out waiting for acks\n");
    return 1;
  }
  auto stats = server.stats();
  std::printf(
      "end-to-end via ingest socket: %zu reports from %zu clients in %.3f s = %.0f "
      "reports/s (%zu items/batch, window %zu, %llu stored, last commit %.1f ms)\n",
      perClient * clients, clients, seconds(t0, t1),
      static_cast<double>(perClient * clients) / seconds(t0, t1), itemsPerBatch, window,
      static_cast<unsigned long long>(stats.itemsStored),
      static_cast<double>(stats.lastCommitNs) / 1e6);
  std::printf("  CPU by thread:%s\n", cpu.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Measures trainscope collector ingest throughput into SQLite (temp dir)."};
  size_t reports = 200000;
  size_t batchSize = 2000;
  size_t clients = 3;
  size_t itemsPerBatch = 256;
  size_t window = 4;
  uint32_t ranks = 64;
  std::string mode = "both";
  app.add_option("--reports", reports, "step reports per run (default 200000)");
  app.add_option("--batch", batchSize, "reports per Store::write in the raw run (default 2000)");
  app.add_option("--clients", clients, "DEALER clients in the socket run, 1-16 (default 3)")
      ->check(CLI::Range(1, 16));
  app.add_option("--items-per-batch", itemsPerBatch,
                 "step reports per Batch envelope in the socket run (default 256)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--window", window, "batches in flight per client (default 4)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--ranks", ranks, "ranks the reports are spread over (default 64)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--mode", mode, "raw, socket or both (default both)")
      ->check(CLI::IsMember({"raw", "socket", "both"}));
  CLI11_PARSE(app, argc, argv);
  setLogLevel(LogLevel::kWarn);
  if (batchSize == 0) batchSize = 1;
  int rc = 0;
  if (mode != "socket") rc |= rawBench(reports, batchSize, ranks);
  if (mode != "raw") rc |= socketBench(reports, clients, itemsPerBatch, window, ranks);
  return rc;
}
