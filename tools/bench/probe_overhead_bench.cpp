// probe_overhead_bench: how much slower a training step gets with the probe recording. A
// synthetic step does a fixed amount of busy work (~10 ms) cut into --records chunks and
// records one operator per chunk; the same loop runs without the probe. A and B alternate in
// blocks within one run so clock-frequency drift and noisy neighbours hit both alike. Prints
// medians and the overhead in %; no assertions.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <vector>

#include <CLI/CLI.hpp>

#include "agent/probe/probe.h"
#include "common/clock.h"
#include "common/guarded_main.h"

namespace {

struct BenchOptions {
  double stepMs = 10.0;  // busy work per step; longer steps dilute the probe's cost
  int records = 2000;    // operator records per step
  int blocks = 20;       // A/B block pairs; more pairs, tighter estimate, longer run
  int stepsPerBlock = 10;
  bool clockRead = false;  // true: ts_op(t=0) reads the clock per record (as a caller
                           // without its own timestamps would)
};

volatile double gSink = 0;

// Fixed work: `iters` dependent multiply-adds (no memory traffic, no syscalls).
double spin(int64_t iters, double x) {
  for (int64_t i = 0; i < iters; ++i) x = x * 1.0000001 + 1e-9;
  return x;
}

int64_t cpuNowNs(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

struct Sample {
  double wall;     // step wall time
  double thread;   // CPU time of the training thread (immune to being preempted)
  double process;  // CPU time of the whole process (adds the probe's runtime thread)
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int benchMain(int argc, char** argv) {
  BenchOptions o;
  CLI::App app{"probe_overhead_bench: step-time overhead of the probe, A/B interleaved"};
  app.add_option("--step-ms", o.stepMs, "busy work per step, in ms")->capture_default_str();
  app.add_option("--records", o.records, "operator records per step")->capture_default_str();
  app.add_option("--blocks", o.blocks, "A/B block pairs")->capture_default_str();
  app.add_option("--steps-per-block", o.stepsPerBlock, "steps in each block")
      ->capture_default_str();
  app.add_flag("--clock-read", o.clockRead,
               "record with t=0 so each record reads the clock (default: the caller's "
               "timestamps)");
  CLI11_PARSE(app, argc, argv);
  if (o.stepMs <= 0 || o.records < 1 || o.blocks < 1 || o.stepsPerBlock < 1) {
    std::fprintf(stderr,
                 "--step-ms must be > 0; --records, --blocks and --steps-per-block "
                 ">= 1\n");
    return 2;
  }

  // Calibrate the spin so one step of work takes about --step-ms of this thread's CPU time
  // (wall time would shrink the work whenever the machine is busy).
  int64_t perChunk = 1000;
  for (int round = 0; round < 5; ++round) {
    const int64_t t0 = cpuNowNs(CLOCK_THREAD_CPUTIME_ID);
    double x = 1.0;
    for (int c = 0; c < o.records; ++c) x = spin(perChunk, x);
    gSink = x;
    const double ms = static_cast<double>(cpuNowNs(CLOCK_THREAD_CPUTIME_ID) - t0) / 1e6;
    perChunk =
        std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(perChunk) * o.stepMs / ms));
  }

  ts_probe_config c;
  ts_config_init(&c);
  c.job = "probe-overhead-bench";
  c.rank = 0;
  c.world_size = 1;
  c.connect_agent = 1;
  trainscope::probe::Probe probe(c);
  if (!probe.ok()) {
    std::fprintf(stderr, "cannot create the probe: %s\n", probe.error().c_str());
    return 1;
  }
  ts_probe* p = probe.handle();
  const ts_name name = ts_intern("synthetic_kernel");

  int64_t step = 0;
  auto runStep = [&](bool withProbe) {
    const int64_t t0 = trainscope::monotonicNowNs();
    const int64_t c0 = cpuNowNs(CLOCK_THREAD_CPUTIME_ID);
    const int64_t p0 = cpuNowNs(CLOCK_PROCESS_CPUTIME_ID);
    double x = 1.0;
    if (withProbe) {
      ts_step_begin(p, step, 0);
      int64_t t = trainscope::wallNowNs();  // the caller's own timestamps, advanced per chunk
      for (int k = 0; k < o.records; ++k) {
        x = spin(perChunk, x);
        if (o.clockRead) {
          ts_op(p, name, 0, 5000);
        } else {
          ts_op(p, name, t, 5000);
          t += 5000;
        }
      }
      ts_step_end(p, step, 0);
      ++step;
    } else {
      for (int k = 0; k < o.records; ++k) x = spin(perChunk, x);
    }
    gSink = x;
    return Sample{static_cast<double>(trainscope::monotonicNowNs() - t0),
                  static_cast<double>(cpuNowNs(CLOCK_THREAD_CPUTIME_ID) - c0),
                  static_cast<double>(cpuNowNs(CLOCK_PROCESS_CPUTIME_ID) - p0)};
  };

  for (int i = 0; i < 5; ++i) {  // warm-up, both ways
    runStep(false);
    runStep(true);
  }
  // Per side: wall, thread CPU, process CPU samples; per block pair: relative differences.
  std::vector<double> off[3];
  std::vector<double> on[3];
  std::vector<double> pairDiffs[3];
  for (int b = 0; b < o.blocks; ++b) {
    // Alternate which side goes first so a trend within a pair cancels too.
    const bool probeFirst = (b % 2) == 1;
    std::vector<double> blockOff[3];
    std::vector<double> blockOn[3];
    for (int half = 0; half < 2; ++half) {
      const bool withProbe = (half == 0) == probeFirst;
      for (int s = 0; s < o.stepsPerBlock; ++s) {
        const Sample x = runStep(withProbe);
        const double v[3] = {x.wall, x.thread, x.process};
        for (int m = 0; m < 3; ++m) (withProbe ? blockOn : blockOff)[m].push_back(v[m]);
      }
    }
    for (int m = 0; m < 3; ++m) {
      off[m].insert(off[m].end(), blockOff[m].begin(), blockOff[m].end());
      on[m].insert(on[m].end(), blockOn[m].begin(), blockOn[m].end());
      pairDiffs[m].push_back((median(blockOn[m]) - median(blockOff[m])) / median(blockOff[m]));
    }
  }
  probe.flush(2000);
  const ts_probe_stats st = probe.stats();
  std::printf(
      "probe_overhead_bench: %d records/step, %.2f ms CPU work/step, %d x %d steps per "
      "side, timestamps: %s\n",
      o.records, median(off[1]) / 1e6, o.blocks, o.stepsPerBlock,
      o.clockRead ? "t=0 (clock read per record)" : "caller's");
  std::printf("%-26s %12s %12s %10s %16s %12s\n", "measure", "off_us", "on_us", "overhead",
              "pairs_median", "per_record");
  const char* names[3] = {"step wall time", "training-thread CPU", "process CPU (+runtime)"};
  for (int m = 0; m < 3; ++m) {
    const double mOff = median(off[m]);
    const double mOn = median(on[m]);
    std::printf("%-26s %12.1f %12.1f %+9.3f%% %+15.3f%% %+9.1f ns\n", names[m], mOff / 1e3,
                mOn / 1e3, 100.0 * (mOn - mOff) / mOff, 100.0 * median(pairDiffs[m]),
                (mOn - mOff) / o.records);
  }
  std::printf(
      "training-thread CPU is the step cost on a machine with a core to spare for the\n"
      "runtime thread; step wall time also counts preemption by other processes.\n");
  std::printf("records=%llu dropped=%llu steps_folded=%llu\n",
              static_cast<unsigned long long>(st.records),
              static_cast<unsigned long long>(st.dropped),
              static_cast<unsigned long long>(st.steps_folded));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return trainscope::guardedMain("probe_overhead_bench", [&] { return benchMain(argc, argv); });
}
