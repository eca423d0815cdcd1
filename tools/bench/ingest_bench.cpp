// ingest_bench: how many step reports per second (32 operators and 8 collectives each) one
// collector takes, and what bounds it. `--mode stages` times each stage of the path alone, on
// one thread, over the same reports: the protobuf decode of the Batch frames, validation, the
// detail encoding ingest used to do, the SQLite insert (Store::write into a real file in a temp
// dir: prepared statements, one transaction per batch, details already encoded) and detection
// (the collector's DetectPipeline). `--mode socket` runs the whole path: several DEALER clients
// send Batch envelopes (schema/PROTOCOL.md) to a real IngestServer that commits into SQLite with
// detection on, timed from the first send to the last ack. Prints numbers; asserts nothing.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
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
#include "collector/ingest/validate.h"
#include "collector/pipeline.h"
#include "collector/storage/store.h"
#include "common/clock.h"
#include "common/guarded_main.h"
#include "common/log.h"
#include "schema/wire.h"
#include "tests/common/support.h"

using namespace trainscope;

namespace {

constexpr const char* kJob = "bench";
constexpr int64_t kStepNs = 120'000'000;

// What the run sends: `reports` reports of `ranks` ranks, report i being rank i % ranks of
// step i / ranks, the steps ending by now (so nothing looks years old to the detectors).
struct Workload {
  size_t reports = 200000;
  uint32_t ranks = 64;
  int64_t baseNs = 0;
  uint32_t rankOf(size_t i) const { return static_cast<uint32_t>(i % ranks); }
  int64_t stepOf(size_t i) const { return static_cast<int64_t>(i / ranks); }
};

wire::StepReport makeReport(const Workload& w, uint32_t rank, int64_t step) {
  wire::StepReport r;
  r.set_job(kJob);
  r.set_rank(rank);
  r.set_step(step);
  const int64_t dur = 100'000'000 + (step % 7) * 1'000'000 + int64_t{rank} * 1000;
  r.set_start_ns(w.baseNs + step * kStepNs);
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
    op->set_total_ns(dur / 64 + int64_t{i} * 1000);
    op->set_max_ns(dur / 640 + int64_t{i} * 100);
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
    c->set_first_arrival_ns(r.start_ns() + int64_t{i} * 1000);
    c->set_last_completion_ns(r.end_ns() - int64_t{i} * 1000);
  }
  return r;
}

// The registrations of every rank, as the hellos of an agent carry them.
wire::Envelope helloBatch(const Workload& w, uint64_t seq) {
  wire::Envelope env;
  auto* batch = env.mutable_batch();
  batch->set_seq(seq);
  for (uint32_t r = 0; r < w.ranks; ++r) {
    auto* item = batch->add_items();
    item->set_schema_version(wire::kSchemaVersion);
    auto* info = item->mutable_rank_hello()->mutable_rank();
    info->set_job(kJob);
    info->set_rank(r);
    info->set_world_size(w.ranks);
    info->set_node("node" + std::to_string(r / 8));
    info->set_host("host" + std::to_string(r / 8));
    info->set_pid(1000 + r);
  }
  return env;
}

// Batch frames of `itemsPerBatch` reports each, for one sender of `senders` (ranks are split
// over senders as over agents: sender c sends the ranks with rank % senders == c, in step order).
std::vector<std::string> encodeFrames(const Workload& w, size_t sender, size_t senders,
                                      size_t itemsPerBatch, uint64_t firstSeq) {
  std::vector<std::string> frames;
  wire::Envelope env;
  uint64_t seq = firstSeq;
  auto cut = [&] {
    if (env.batch().items_size() == 0) return;
    env.mutable_batch()->set_seq(seq++);
    frames.push_back(wire::encode(env));
    env.Clear();
  };
  for (size_t i = 0; i < w.reports; ++i) {
    if (w.rankOf(i) % senders != sender) continue;
    auto* item = env.mutable_batch()->add_items();
    item->set_schema_version(wire::kSchemaVersion);
    *item->mutable_step() = makeReport(w, w.rankOf(i), w.stepOf(i));
    if (static_cast<size_t>(env.batch().items_size()) == itemsPerBatch) cut();
  }
  cut();
  return frames;
}

using trainscope::tests::TempDir;

// CPU seconds used so far by each thread of this process whose name starts with "ts-" or
// "ZMQ", and per report, to show which stage is the bottleneck.
std::string threadCpu(size_t reports) {
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
    char buf[128];
    const double cpu = (utime + stime) / tick;
    std::snprintf(buf, sizeof buf, " %s=%.2fs (%.1f us/report)", comm.c_str(), cpu,
                  cpu * 1e6 / static_cast<double>(reports));
    out += buf;
  }
  return out;
}

// CPU time of the calling thread: the stages run on one thread, so this is their cost even
// when other processes take turns on the core.
double threadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

double seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Thread CPU time spent in one stage, summed over the commits of a run.
struct StageClock {
  const char* name;
  double cpu = 0;
  double started = 0;
  void start() { started = threadCpuSeconds(); }
  void stop() { cpu += threadCpuSeconds() - started; }
  // Microseconds per report, printed with the rate this stage alone would allow.
  double print(size_t reports) const {
    const double us = cpu * 1e6 / static_cast<double>(reports);
    std::printf("  %-38s %7.2f us/report  %9.0f reports/s\n", name, us, 1e6 / us);
    return us;
  }
};

Result<std::unique_ptr<storage::Store>> openStore(const TempDir& dir) {
  storage::SqliteOptions options;
  options.path = dir.path() + "/bench.db";
  return storage::openSqliteStore(options);
}

// Each stage alone, on this thread, commit by commit as ingest's two threads run them: the
// frames of one commit decoded, validated and their details encoded (the socket thread), then
// written and fed to the detectors (the writer), then freed. Times are thread CPU, so other
// processes on the core do not count; memory is reused as in a long-running collector.
int stagesBench(const Workload& w, size_t itemsPerBatch, size_t commitSize) {
  const auto frames = encodeFrames(w, 0, 1, itemsPerBatch, 1);
  size_t frameBytes = 0;
  for (const auto& f : frames) frameBytes += f.size();
  std::printf(
      "stages alone, one thread: %zu reports of %u ranks, %zu per Batch frame (%.0f bytes per "
      "report), commits of %zu:\n",
      w.reports, w.ranks, itemsPerBatch,
      static_cast<double>(frameBytes) / static_cast<double>(w.reports), commitSize);
  TempDir dir;
  auto store = openStore(dir);
  if (!store) {
    std::fprintf(stderr, "open: %s\n", store.message().c_str());
    return 1;
  }
  storage::WriteBatch ranks;
  const wire::Envelope hellos = helloBatch(w, 0);
  for (const auto& item : hellos.batch().items()) ranks.ranks.push_back(item.rank_hello().rank());
  ranks.receivedNs = wallNowNs();
  if (auto s = (*store)->write(ranks); !s) {
    std::fprintf(stderr, "write: %s\n", s.message().c_str());
    return 1;
  }
  SystemClock clock;
  collector::DetectPipeline pipeline({}, **store, clock);
  pipeline.onCommitted(ranks);

  // For reference: decoding whole frames into Envelopes (every other hop does this), then
  // encoding each report again for its stored detail, as ingest did before its fast path.
  StageClock wholeDecode{"  ref: whole-frame decode (wire::decode)"};
  StageClock reencode{"  ref: detail encode (SerializeToString)"};
  for (const auto& f : frames) {
    wholeDecode.start();
    auto env = wire::decode(f.data(), f.size());
    wholeDecode.stop();
    if (!env) {
      std::fprintf(stderr, "decode: %s\n", env.message().c_str());
      return 1;
    }
    reencode.start();
    std::string detail;
    for (const auto& item : env->batch().items()) {
      detail.clear();
      item.step().SerializeToString(&detail);
    }
    reencode.stop();
  }

  // Ingest's path (IngestServer: wire::splitBatch, then each report parsed once into the
  // commit, its own bytes kept as the detail).
  StageClock decode{"protobuf decode (ingest's path)"};
  StageClock validate{"validation (validateStep)"};
  StageClock release{"freeing the commit"};
  char insertName[64];
  std::snprintf(insertName, sizeof insertName, "SQLite insert (Store::write, %zu/txn)", commitSize);
  StageClock insert{insertName};
  StageClock detect{"detection (DetectPipeline::takeCommitted)"};
  ingest::ValidationLimits limits;
  size_t rejected = 0;
  size_t next = 0;
  wire::BatchFrame split;
  while (next < frames.size()) {
    storage::WriteBatch batch;
    decode.start();
    while (next < frames.size() && batch.steps.size() < commitSize) {
      const auto& f = frames[next++];
      if (!wire::splitBatch(f.data(), f.size(), &split)) {
        std::fprintf(stderr, "a frame did not split\n");
        return 1;
      }
      for (std::string_view item : split.items) {
        uint32_t version = 0;
        std::string_view bytes;
        if (!wire::stepItem(item, &version, &bytes)) {
          std::fprintf(stderr, "an item is not a step report\n");
          return 1;
        }
        batch.steps.emplace_back();
        batch.stepDetailViews.emplace_back(bytes);
        if (!batch.steps.back().ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
          std::fprintf(stderr, "a report did not parse\n");
          return 1;
        }
      }
    }
    decode.stop();
    validate.start();
    for (const auto& step : batch.steps) {
      if (ingest::validateStep(step, w.ranks, limits)) ++rejected;
    }
    validate.stop();
    batch.receivedNs = wallNowNs();
    insert.start();
    if (auto s = (*store)->write(batch); !s) {
      std::fprintf(stderr, "write: %s\n", s.message().c_str());
      return 1;
    }
    insert.stop();
    detect.start();
    pipeline.takeCommitted(batch);
    detect.stop();
    release.start();
    batch = {};
    release.stop();
  }
  if (rejected != 0) std::fprintf(stderr, "validation rejected %zu reports\n", rejected);
  wholeDecode.print(w.reports);
  reencode.print(w.reports);
  // Ingest hands each commit back to its socket thread to be freed there.
  const double socketUs =
      decode.print(w.reports) + validate.print(w.reports) + release.print(w.reports);
  const double writerUs = insert.print(w.reports) + detect.print(w.reports);
  auto st = (*store)->stats();
  auto ps = pipeline.stats();
  std::printf(
      "  socket-thread stages %.2f us + writer stages %.2f us per report: %.0f reports/s on one "
      "core, %.0f with a core each\n",
      socketUs, writerUs, 1e6 / (socketUs + writerUs), 1e6 / std::max(socketUs, writerUs));
  std::printf("  (%.1f MiB on disk, %llu rows; %llu reports fed to detection, %llu anomalies)\n",
              static_cast<double>(st.bytesOnDisk) / (1 << 20),
              static_cast<unsigned long long>(st.stepRows),
              static_cast<unsigned long long>(ps.reportsFed),
              static_cast<unsigned long long>(ps.anomaliesOpened));
  return 0;
}

int socketBench(const Workload& w, size_t clients, size_t itemsPerBatch, size_t window,
                bool detect) {
  TempDir dir;
  auto store = openStore(dir);
  if (!store) {
    std::fprintf(stderr, "open: %s\n", store.message().c_str());
    return 1;
  }
  SystemClock clock;
  std::unique_ptr<collector::DetectPipeline> pipeline;
  ingest::IngestOptions io;
  io.endpoint = "tcp://127.0.0.1:*";
  if (detect) {
    // As the collector hooks it (collector.cpp): detection on the writer after each commit.
    pipeline =
        std::make_unique<collector::DetectPipeline>(collector::PipelineOptions{}, **store, clock);
    io.onCommitted = [p = pipeline.get()](storage::WriteBatch& b) { p->takeCommitted(b); };
  }
  ingest::IngestServer server(io, **store);
  if (auto s = server.start(); !s) {
    std::fprintf(stderr, "ingest: %s\n", s.message().c_str());
    return 1;
  }
  const std::string endpoint = server.endpoint();

  // Each client pre-encodes its batches, so the measured time is the collector's. Client 0's
  // first batch registers the ranks; it is acked before the clock starts.
  std::vector<std::vector<std::string>> frames(clients);
  for (size_t c = 0; c < clients; ++c) frames[c] = encodeFrames(w, c, clients, itemsPerBatch, 2);
  const size_t sentReports = w.reports;

  zmq::context_t ctx(1);
  {
    zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.connect(endpoint);
    auto hello = helloBatch(w, 1);
    dealer.send(zmq::buffer(wire::encode(hello)), zmq::send_flags::none);
    zmq::message_t reply;
    zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(10000)) == 0) {
      std::fprintf(stderr, "socket bench: the registrations were not acked\n");
      return 1;
    }
    (void)dealer.recv(reply, zmq::recv_flags::none);
  }
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
      size_t acked = 0;  // frames acked; frame k has seq k + 2
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
        if (env && env->has_ack() && env->ack().seq() >= 2) {
          acked = std::max<size_t>(acked, env->ack().seq() - 1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  auto t1 = std::chrono::steady_clock::now();
  const std::string cpu = threadCpu(w.reports);
  server.stop();
  if (failed) {
    std::fprintf(stderr, "socket bench: a client timed out waiting for acks\n");
    return 1;
  }
  auto stats = server.stats();
  std::printf(
      "end-to-end via ingest socket%s: %zu reports from %zu clients in %.3f s = %.0f "
      "reports/s (%zu items/batch, window %zu, %llu stored, %llu commits, last %.1f ms)\n",
      detect ? " into SQLite, detection on" : " into SQLite, detection off", sentReports, clients,
      seconds(t0, t1), static_cast<double>(sentReports) / seconds(t0, t1), itemsPerBatch, window,
      static_cast<unsigned long long>(stats.stepsStored),
      static_cast<unsigned long long>(stats.commits),
      static_cast<double>(stats.lastCommitNs) / 1e6);
  std::printf("  CPU by thread:%s\n", cpu.c_str());
  if (pipeline) {
    auto ps = pipeline->stats();
    std::printf("  detection: %llu reports fed, %llu refused\n",
                static_cast<unsigned long long>(ps.reportsFed),
                static_cast<unsigned long long>(ps.rejected));
  }
  if (!stats.rejects.empty()) {
    for (const auto& [reason, n] : stats.rejects) {
      std::printf("  rejected %s: %llu\n", reason.c_str(), static_cast<unsigned long long>(n));
    }
  }
  return 0;
}

int benchMain(int argc, char** argv) {
  CLI::App app{
      "Measures how many step reports per second (32 operators + 8 collectives each) the "
      "trainscope collector ingests into SQLite (temp dir), stage by stage and end to end."};
  Workload w;
  size_t commitSize = 4096;
  size_t clients = 3;
  size_t itemsPerBatch = 256;
  size_t window = 4;
  bool noDetect = false;
  std::string mode = "all";
  app.add_option("--reports", w.reports, "step reports per run")->capture_default_str();
  app.add_option("--batch", commitSize,
                 "reports per Store::write in the stages run (ingest commits up to 4096)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--clients", clients, "DEALER clients (agents) in the socket run, 1-16")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  app.add_option("--items-per-batch", itemsPerBatch, "step reports per Batch envelope")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--window", window, "batches in flight per client")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--ranks", w.ranks, "ranks the reports are spread over")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  app.add_flag("--no-detect", noDetect, "socket run without the detection pipeline");
  app.add_option("--mode", mode,
                 "stages (each stage alone), socket (end to end) or all; the older names raw "
                 "and both mean stages and all")
      ->capture_default_str()
      ->check(CLI::IsMember({"stages", "socket", "all", "raw", "both"}));
  CLI11_PARSE(app, argc, argv);
  setLogLevel(LogLevel::kWarn);
  w.baseNs = wallNowNs() - static_cast<int64_t>(w.reports / w.ranks + 1) * kStepNs;
  int rc = 0;
  if (mode != "socket") rc |= stagesBench(w, itemsPerBatch, commitSize);
  if (mode != "stages" && mode != "raw") {
    rc |= socketBench(w, clients, itemsPerBatch, window, !noDetect);
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  return trainscope::guardedMain("ingest_bench", [&] { return benchMain(argc, argv); });
}
