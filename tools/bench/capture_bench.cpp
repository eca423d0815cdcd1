// capture_bench: what captures cost the probe. (1) The flight recorder's memory against its
// bound when a real fold-only probe records a realistic step (--ops operators, --ranges
// ranges and --colls collectives per step); (2) the runtime thread's per-step cost of offering
// folded steps to an active capture (the CaptureWorker copies each step for its writer
// thread) against no capture, and the writer thread's own cost (gzip Chrome-trace JSON per
// record, the history written when a command arrives). Prints figures; no assertions.
#include <unistd.h>

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
  flightFigure(o);
  offerFigure(o, dir);
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
