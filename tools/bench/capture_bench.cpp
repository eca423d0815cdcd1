// capture_bench: what captures cost the probe. (1) The flight recorder's memory against its
// bound when a real fold-only probe records a realistic step (--ops operators, --ranges
// ranges and --colls collectives per step); (2) the runtime thread's per-step cost of offering
// folded steps to an active capture (the CaptureWorker copies each step for its writer
// thread) against no capture, and the writer thread's own cost (gzip Chrome-trace JSON per
// record, the history written when a command arrives); (3) what captures cost the collector:
// the time ingest's socket thread spends in CaptureManager::onCommandItem per rank status and
// per file chunk of a capture of --collector-ranks ranks (16,384 by default) over a SQLite
// store on disk, and the main loop's cost of storing the changed capture (flush, once a tick).
// Prints figures; no assertions.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "agent/probe/capture.h"
#include "agent/probe/capture_worker.h"
#include "agent/probe/flight_recorder.h"
#include "agent/probe/intern.h"
#include "agent/probe/probe.h"
#include "collector/capture/manager.h"
#include "collector/capture/request.h"
#include "collector/storage/store.h"
#include "common/clock.h"
#include "common/guarded_main.h"
#include "schema/capture_state.h"

using namespace trainscope::probe;
namespace wire = trainscope::wire;

namespace {

struct BenchOptions {
  int ops = 2000;            // operator records per step (a mid-size model's kernels)
  int ranges = 40;           // range records per step
  int colls = 20;            // collective records per step
  int steps = 50;            // steps recorded for the flight-recorder figure and offered
  uint32_t flightSteps = 8;  // flight recorder step bound (probe default)
  uint64_t flightMaxBytes = 64ull << 20;  // flight recorder byte bound (probe default)
  std::string dir;                        // capture files go here (default: a fresh temp dir)
  uint32_t collectorRanks = 16384;        // ranks of the collector-side capture
  uint32_t statuses = 300;                // statuses (and as many chunks) timed on the collector
  std::string part = "all";               // probe, collector or all
};

double nowSec() {
  return static_cast<double>(trainscope::monotonicNowNs()) * 1e-9;
}

// One step's folded records, as the folder hands them to the flight recorder.
std::vector<Record> stepRecords(const BenchOptions& o, int64_t step, int64_t start) {
  static const uint32_t kOps[4] = {internName("aten::mm"), internName("aten::add"),
                                   internName("aten::relu"), internName("aten::layer_norm")};
  static const uint32_t kRange = internName("forward");
  static const uint32_t kGroup = internName("world");
  std::vector<Record> v;
  v.reserve(static_cast<size_t>(o.ops) + o.ranges + o.colls);
  int64_t t = start + 1000;
  for (int i = 0; i < o.ops; ++i, t += 2000) {
    Record r{};
    r.type = RecordType::kOp;
    r.name = kOps[i % 4];
    r.step = step;
    r.t0 = t;
    r.t1 = t + 1500;
    r.ring = 1;
    v.push_back(r);
  }
  for (int i = 0; i < o.ranges; ++i) {
    Record r{};
    r.type = RecordType::kRange;
    r.name = kRange;
    r.kind = TS_RANGE_COMPUTE;
    r.step = step;
    r.t0 = start + 500 + int64_t{i} * 1000;
    r.t1 = r.t0 + 800;
    v.push_back(r);
  }
  for (int i = 0; i < o.colls; ++i, t += 5000) {
    Record r{};
    r.type = RecordType::kCollective;
    r.kind = TS_COLL_ALL_REDUCE;
    r.group = kGroup;
    r.bytes = 25u << 20;
    r.step = step;
    r.t0 = t;
    r.t1 = t + 4000;
    r.ring = 2;
    v.push_back(r);
  }
  return v;
}

int64_t stepSpanNs(const BenchOptions& o) {
  return 1000 + static_cast<int64_t>(o.ops) * 2000 + static_cast<int64_t>(o.colls) * 5000 + 1000;
}

void flightFigure(const BenchOptions& o) {
  ts_probe_config c;
  ts_config_init(&c);
  c.job = "capture-bench";
  c.rank = 0;
  c.world_size = 1;
  c.connect_agent = 1;
  c.flight_steps = o.flightSteps;
  c.flight_max_bytes = o.flightMaxBytes;
  c.ring_records = 1u << 16;  // 4 MiB; the loop below pauses so it never fills
  Probe p(c);
  if (!p.ok()) {
    std::fprintf(stderr, "capture_bench: cannot create a probe: %s\n", p.error().c_str());
    std::exit(1);
  }
  const Name op("aten::mm");
  const Name range("forward");
  const Name group("world");
  const int64_t span = stepSpanNs(o);
  int64_t t = trainscope::wallNowNs();
  uint64_t maxBytes = 0;
  for (int64_t s = 0; s < o.steps; ++s) {
    p.stepBegin(s, t);
    int64_t x = t + 1000;
    for (int i = 0; i < o.ranges; ++i)
      p.range(range, TS_RANGE_COMPUTE, t + 500 + int64_t{i} * 1000, t + 1300 + int64_t{i} * 1000);
    for (int i = 0; i < o.ops; ++i, x += 2000) {
      p.op(op, x, 1500);
      // A real step spreads its records over its duration; let the runtime drain.
      if (i % 16384 == 16383) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (int i = 0; i < o.colls; ++i, x += 5000)
      p.collective(TS_COLL_ALL_REDUCE, group, 25u << 20, x, x + 4000);
    p.stepEnd(s, t + span);
    t += span + 1000;
    if (p.flush(5000) != 0) std::fprintf(stderr, "capture_bench: flush timed out\n");
    maxBytes = std::max<uint64_t>(maxBytes, p.stats().flight_bytes);
  }
  const ts_probe_stats st = p.stats();
  const int perStep = o.ops + o.ranges + o.colls;
  std::printf("flight recorder: %d records/step (64 B each), bound %u steps / %.1f MiB\n", perStep,
              o.flightSteps, static_cast<double>(o.flightMaxBytes) / (1 << 20));
  std::printf(
      "  holds %llu steps, %.2f MiB now, %.2f MiB at most (%.1f%% of the byte bound); "
      "dropped %llu records\n",
      static_cast<unsigned long long>(st.flight_steps),
      static_cast<double>(st.flight_bytes) / (1 << 20), static_cast<double>(maxBytes) / (1 << 20),
      100.0 * static_cast<double>(maxBytes) / static_cast<double>(o.flightMaxBytes),
      static_cast<unsigned long long>(st.dropped));
}

void offerFigure(const BenchOptions& o, const std::string& dir) {
  const int64_t span = stepSpanNs(o);
  const int64_t base = trainscope::wallNowNs();
  std::vector<std::vector<Record>> steps;
  for (int64_t s = 0; s < o.steps + 8; ++s)
    steps.push_back(stepRecords(o, s, base + s * (span + 1000)));
  const size_t perStep = steps[0].size();

  CaptureIdentity id;
  id.job = "capture-bench";
  id.host = "bench";
  id.pid = static_cast<uint32_t>(getpid());
  CaptureOptions co;
  co.dir = dir;

  // The runtime thread's side: CaptureWorker::offer per folded step, no capture vs active.
  std::atomic<int> posted{0};
  FlightRecorder workerFlight(8, uint64_t{1} << 30);
  CaptureWorker worker(
      id, co, &workerFlight, [&](const trainscope::wire::CommandStatus&) { posted.fetch_add(1); },
      uint64_t{1} << 34);
  const int kIdleRounds = 1000;
  double t0 = nowSec();
  for (int r = 0; r < kIdleRounds; ++r) {
    for (int64_t s = 0; s < o.steps; ++s) {
      if (worker.offer(s, 0, 0, steps[static_cast<size_t>(s)])) std::abort();
    }
  }
  const double idleNs = (nowSec() - t0) * 1e9 / (kIdleRounds * o.steps);
  {
    trainscope::wire::Command wc;
    wc.set_id("cap-bench-worker");
    wc.mutable_capture()->set_capture_id("cap-bench-worker");
    wc.mutable_capture()->set_start_step(0);
    wc.mutable_capture()->set_steps(static_cast<uint32_t>(o.steps));
    wc.mutable_capture()->set_max_bytes(uint64_t{1} << 34);
    worker.command(wc, -1);
  }
  std::vector<double> copyPer;
  const double w0 = nowSec();
  for (int64_t s = 0; s < o.steps; ++s) {
    const int64_t start = base + s * (span + 1000);
    std::vector<Record> v = steps[static_cast<size_t>(s)];  // the folder's vector, not timed
    const double a = nowSec();
    if (!worker.offer(s, start, start + span, v))
      std::fprintf(stderr, "step %lld refused\n", static_cast<long long>(s));
    copyPer.push_back(nowSec() - a);
  }
  worker.close(o.steps);
  const double writerDrain = nowSec() - w0;
  std::sort(copyPer.begin(), copyPer.end());

  // History: 8 held steps written when the command arrives (one stall of the runtime thread).
  FlightRecorder fr(8, 1ull << 30);
  for (int64_t s = 0; s < 8; ++s) {
    fr.add(s, steps[static_cast<size_t>(s)], base + s * (span + 1000),
           base + s * (span + 1000) + span);
  }
  CaptureRecorder cap(id, co);
  trainscope::wire::Command cmd;
  cmd.set_id("cap-bench");
  cmd.mutable_capture()->set_capture_id("cap-bench");
  cmd.mutable_capture()->set_start_step(8);
  cmd.mutable_capture()->set_steps(static_cast<uint32_t>(o.steps));
  cmd.mutable_capture()->set_history(8);
  cmd.mutable_capture()->set_max_bytes(1ull << 34);
  t0 = nowSec();
  const auto started = cap.start(cmd, 7, fr);
  const double historySec = nowSec() - t0;
  if (started.empty() || wire::commandState(started[0]) != wire::RankState::kRecording) {
    std::fprintf(stderr, "capture_bench: capture refused: %s\n",
                 started.empty() ? "?" : started[0].detail().c_str());
    std::exit(1);
  }

  // Live steps offered to the running capture.
  std::vector<double> per;
  std::optional<trainscope::wire::CommandStatus> done;
  for (int64_t s = 8; s < 8 + o.steps; ++s) {
    const int64_t start = base + s * (span + 1000);
    const double a = nowSec();
    done = cap.offer(s, start, start + span, steps[static_cast<size_t>(s)]);
    per.push_back(nowSec() - a);
  }
  std::sort(per.begin(), per.end());
  double total = 0;
  for (double x : per) total += x;
  const double mean = total / static_cast<double>(per.size());
  std::printf("runtime thread, per folded step (%zu records/step):\n", perStep);
  std::printf("  no capture:     %.1f ns/step\n", idleNs);
  std::printf(
      "  active capture: %.1f us/step median, %.1f us max (handing the step to the writer; "
      "%d statuses posted)\n",
      copyPer[copyPer.size() / 2] * 1e6, copyPer.back() * 1e6, posted.load());
  std::printf("writer thread (zlib level %d):\n", co.zlibLevel);
  std::printf(
      "  %.2f ms/step mean, %.2f ms median, %.2f ms max (%.0f ns/record); "
      "%d steps written %.1f ms after the first offer\n",
      mean * 1e3, per[per.size() / 2] * 1e3, per.back() * 1e3,
      mean * 1e9 / static_cast<double>(perStep), o.steps, writerDrain * 1e3);
  std::printf("  history at command time: %.2f ms for 8 held steps\n", historySec * 1e3);
  if (done && wire::commandState(*done) == wire::RankState::kUploading) {
    const double records = static_cast<double>(perStep) * (o.steps + 8);
    std::printf("  file: %.2f MiB for %d steps (%.1f B/record compressed), %s\n",
                static_cast<double>(done->file_bytes()) / (1 << 20), o.steps + 8,
                static_cast<double>(done->file_bytes()) / records, done->file_path().c_str());
  } else {
    std::printf("  capture did not finish: %s\n", done ? done->detail().c_str() : "no status");
  }
}

// A seeded SQLite store (a file under `dir`, WAL, as the collector runs it) holding job
// "bench" of `ranks` ranks, 8 per node, each at step 10.
std::unique_ptr<trainscope::storage::Store> seededStore(const std::string& dir, uint32_t ranks) {
  namespace storage = trainscope::storage;
  storage::SqliteOptions so;
  so.path = dir + "/bench.db";
  auto opened = storage::openSqliteStore(so);
  if (!opened) {
    std::fprintf(stderr, "capture_bench: %s\n", opened.message().c_str());
    std::exit(1);
  }
  auto store = std::move(opened.value());
  storage::WriteBatch b;
  b.receivedNs = trainscope::wallNowNs();
  for (uint32_t r = 0; r < ranks; ++r) {
    wire::RankInfo info;
    info.set_job("bench");
    info.set_rank(r);
    info.set_world_size(ranks);
    info.set_node("node" + std::to_string(r / 8));
    info.set_host(info.node());
    info.set_pid(1000 + r);
    b.ranks.push_back(info);
    wire::StepReport rep;
    rep.set_job("bench");
    rep.set_rank(r);
    rep.set_step(10);
    rep.set_start_ns(1'000'000'000);
    rep.set_end_ns(1'100'000'000);
    rep.set_duration_ns(100'000'000);
    b.steps.push_back(rep);
  }
  if (auto st = store->write(b); !st) {
    std::fprintf(stderr, "capture_bench: seeding the store: %s\n", st.message().c_str());
    std::exit(1);
  }
  return store;
}

struct Timings {
  std::vector<double> sec;
  void print(const char* what) {
    std::sort(sec.begin(), sec.end());
    double total = 0;
    for (double x : sec) total += x;
    std::printf("  %-28s %8.1f us mean, %8.1f us median, %8.1f us p99, %8.1f us max (%zu)\n", what,
                total / static_cast<double>(sec.size()) * 1e6, sec[sec.size() / 2] * 1e6,
                sec[sec.size() * 99 / 100] * 1e6, sec.back() * 1e6, sec.size());
  }
};

// The collector's side: one capture of every rank, then statuses and single-chunk files from
// the first --statuses ranks, each handed to onCommandItem as ingest's socket thread does.
void collectorFigure(const BenchOptions& o, const std::string& dir) {
  namespace capture = trainscope::capture;
  const double s0 = nowSec();
  auto store = seededStore(dir, o.collectorRanks);
  const double seeded = nowSec() - s0;
  trainscope::SystemClock clock;
  capture::CaptureManagerOptions co;
  co.dir = dir + "/captures";
  co.deadlineSlackNs = int64_t{3600} * 1'000'000'000;  // no rank times out while timing
  capture::CaptureManager manager(co, *store, clock, [](const std::string&, const wire::Command&) {
    return trainscope::Status::ok();
  });
  auto req = capture::parseCaptureRequest(R"({"ranks":"all","steps":5})");
  if (!req) std::abort();
  const double c0 = nowSec();
  auto row = manager.start("bench", *req);
  const double started = nowSec() - c0;
  if (!row) {
    std::fprintf(stderr, "capture_bench: capture refused: %s\n", row.message().c_str());
    std::exit(1);
  }
  const uint32_t n = std::min(o.statuses, o.collectorRanks);
  auto status = [&](uint32_t rank, const char* state) {
    wire::Envelope env;
    auto* st = env.mutable_command_status();
    st->set_command_id(row->id);
    st->set_job("bench");
    st->set_rank(rank);
    st->set_state(state);
    st->set_detail("steps 16..20");
    return env;
  };
  Timings recording;
  Timings uploading;
  Timings chunk;
  const std::string data(4096, 'x');  // not gzip: the merge is not timed here
  const auto crc = static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
  auto timed = [&](Timings& t, const wire::Envelope& env) {
    const double a = nowSec();
    manager.onCommandItem("node0", env);
    t.sec.push_back(nowSec() - a);
  };
  // The main loop's tick stores what changed, once per changed capture: timed apart.
  Timings flush;
  auto flushed = [&] {
    const double a = nowSec();
    manager.flush();
    flush.sec.push_back(nowSec() - a);
  };
  for (uint32_t r = 0; r < n; ++r) timed(recording, status(r, "recording"));
  flushed();
  for (uint32_t r = 0; r < n; ++r) {
    if (r % 50 == 0) flushed();
    timed(uploading, status(r, "uploading"));
    wire::Envelope env;
    auto* c = env.mutable_file_chunk();
    c->set_command_id(row->id);
    c->set_job("bench");
    c->set_rank(r);
    c->set_offset(0);
    c->set_data(data);
    c->set_crc32(crc);
    c->set_last(true);
    c->set_total_bytes(data.size());
    timed(chunk, env);
  }
  // A tick in a quiet moment: one rank changed since the last flush, the common case once a
  // large capture's ranks trickle in. Its cost should follow the ranks that changed, not all.
  Timings flushOne;
  // The last ranks: the statuses timed below take theirs from after the first --statuses.
  for (uint32_t i = 0; i < 20 && n + i < o.collectorRanks; ++i) {
    const uint32_t r = o.collectorRanks - 1 - i;
    manager.onCommandItem("node0", status(r, "recording"));
    const double a = nowSec();
    manager.flush();
    flushOne.sec.push_back(nowSec() - a);
  }
  // Statuses while the main loop flushes: the socket thread waits only for the flush's copy of
  // the capture under the manager's lock, never for the store.
  Timings during;
  {
    std::atomic<bool> stop{false};
    std::thread flusher([&] {
      while (!stop.load()) {
        manager.flush();
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
    for (uint32_t i = 0; i < 20 * n; ++i) {
      const uint32_t r = n + i % std::max<uint32_t>(1, o.collectorRanks - n);
      timed(during, status(r, i % 2 == 0 ? "recording" : "uploading"));
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    stop = true;
    flusher.join();
  }
  std::printf(
      "collector, one capture of %u ranks on a SQLite file store (seeded in %.1f s, "
      "started in %.1f ms):\n",
      o.collectorRanks, seeded, started * 1e3);
  std::printf("ingest socket thread, per item (CaptureManager::onCommandItem):\n");
  recording.print("status recording:");
  uploading.print("status uploading:");
  chunk.print("last chunk (rank done):");
  during.print("status, flushes beside:");
  std::printf("collector main loop (tick), storing the changed capture:\n");
  flush.print("flush:");
  if (!flushOne.sec.empty()) flushOne.print("flush, one rank changed:");
}

int benchMain(int argc, char** argv) {
  BenchOptions o;
  CLI::App app{
      "capture_bench: flight recorder memory vs its bound, and the per-step cost of "
      "an active capture vs none"};
  app.add_option("--ops", o.ops, "operator records per step")->capture_default_str();
  app.add_option("--ranges", o.ranges, "range records per step")->capture_default_str();
  app.add_option("--colls", o.colls, "collective records per step")->capture_default_str();
  app.add_option("--steps", o.steps, "steps recorded and offered")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--flight-steps", o.flightSteps, "flight recorder step bound")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1000u));
  app.add_option("--flight-max-bytes", o.flightMaxBytes, "flight recorder byte bound")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{4096}, uint64_t{1} << 36));
  app.add_option("--dir", o.dir,
                 "directory for the capture file (default: a fresh directory under /tmp, "
                 "removed afterwards)");
  app.add_option("--collector-ranks", o.collectorRanks, "ranks of the collector-side capture")
      ->capture_default_str()
      ->check(CLI::Range(1u, 65536u));
  app.add_option("--statuses", o.statuses,
                 "rank statuses (and as many chunks) timed on the collector side")
      ->capture_default_str()
      ->check(CLI::Range(1u, 65536u));
  app.add_option("--part", o.part, "which figures: probe, collector or all")
      ->capture_default_str()
      ->check(CLI::IsMember({"probe", "collector", "all"}));
  CLI11_PARSE(app, argc, argv);
  if (o.ops < 0 || o.ranges < 0 || o.colls < 0) {
    std::fprintf(stderr, "capture_bench: --ops, --ranges and --colls must be >= 0\n");
    return 2;
  }
  std::string dir = o.dir;
  bool temp = false;
  if (dir.empty()) {
    char tmpl[] = "/tmp/capture-bench-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::perror("capture_bench: mkdtemp");
      return 1;
    }
    dir = tmpl;
    temp = true;
  }
  if (o.part != "collector") {
    flightFigure(o);
    offerFigure(o, dir);
  }
  if (o.part != "probe") collectorFigure(o, dir);
  if (temp) {
    const std::string cmd = "rm -rf '" + dir + "'";
    if (std::system(cmd.c_str()) != 0)
      std::fprintf(stderr, "capture_bench: cannot remove %s\n", dir.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return trainscope::guardedMain("capture_bench", [&] { return benchMain(argc, argv); });
}
