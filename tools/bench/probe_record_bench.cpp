// probe_record_bench: what one probe record call costs on the training thread, with the
// probe's runtime thread draining and folding concurrently. Prints median and p99 ns per call
// for each kind of call; no assertions.
//
// Method: calls are timed in batches of --batch (the clock read per batch is amortized), so a
// sample is the mean cost of one call within one batch; median and p99 are over batches.
// Records are made in bursts inside steps, with a pause between bursts so the runtime thread
// keeps up and no ring overflows (a drop would be cheaper than a store and flatter the figure).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "agent/probe/probe.h"
#include "common/clock.h"
#include "common/guarded_main.h"

namespace {

struct BenchOptions {
  int bursts = 800;          // bursts per kind of call; more samples, longer run
  int batchesPerBurst = 16;  // timed batches per burst; bigger bursts risk ring overflow
  int batch = 64;            // calls per timed batch; smaller shows more clock overhead
  int pauseUs = 3000;        // pause after a burst so the runtime drains (it runs every ~2 ms)
};

struct Figures {
  double median;
  double p99;
  double min;
};

Figures summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto at = [&](double q) {
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
  };
  return Figures{at(0.5), at(0.99), v.front()};
}

// `call(i)` makes `perCall` probe calls for index i.
Figures run(trainscope::probe::Probe& probe, const BenchOptions& o, int callsPerIteration,
            const std::function<void(int64_t)>& call) {
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(o.bursts) * o.batchesPerBurst);
  int64_t step = 0;
  int64_t i = 0;
  for (int b = 0; b < o.bursts; ++b) {
    probe.stepBegin(step);
    for (int k = 0; k < o.batchesPerBurst; ++k) {
      const int64_t t0 = trainscope::monotonicNowNs();
      for (int j = 0; j < o.batch; ++j) call(i++);
      const int64_t t1 = trainscope::monotonicNowNs();
      samples.push_back(static_cast<double>(t1 - t0) /
                        static_cast<double>(o.batch * callsPerIteration));
    }
    probe.stepEnd(step++);
    std::this_thread::sleep_for(std::chrono::microseconds(o.pauseUs));
  }
  return summarize(std::move(samples));
}

int benchMain(int argc, char** argv) {
  BenchOptions o;
  CLI::App app{
      "probe_record_bench: median and p99 ns per probe record call on the training "
      "thread while the runtime thread drains (fold-only probe, no agent)"};
  app.add_option("--bursts", o.bursts, "bursts per kind of call (each its own step)")
      ->capture_default_str();
  app.add_option("--batches-per-burst", o.batchesPerBurst, "timed batches per burst")
      ->capture_default_str();
  app.add_option("--batch", o.batch, "calls per timed batch")->capture_default_str();
  app.add_option("--pause-us", o.pauseUs, "pause after each burst, in microseconds")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (o.bursts < 1 || o.batchesPerBurst < 1 || o.batch < 1 || o.pauseUs < 0) {
    std::fprintf(stderr,
                 "--bursts, --batches-per-burst and --batch must be >= 1, "
                 "--pause-us >= 0\n");
    return 2;
  }

  ts_probe_config c;
  ts_config_init(&c);
  c.job = "probe-record-bench";
  c.rank = 0;
  c.world_size = 1;
  c.connect_agent = 1;
  // A burst is batchesPerBurst*batch calls (x2 for push/pop): the ring must hold one.
  uint32_t ring = 1024;
  while (ring < static_cast<uint32_t>(o.batchesPerBurst * o.batch * 2 + 16)) ring <<= 1;
  c.ring_records = ring;
  trainscope::probe::Probe probe(c);
  if (!probe.ok()) {
    std::fprintf(stderr, "cannot create the probe: %s\n", probe.error().c_str());
    return 1;
  }
  ts_probe* p = probe.handle();
  const ts_name name = ts_intern("bench_op");
  const ts_name group = ts_intern("world");
  const int64_t base = trainscope::wallNowNs();

  // Warm up: registers this thread's ring and faults its pages in.
  run(probe, o, 1, [&](int64_t i) { ts_op(p, name, base + i, 10); });

  struct Row {
    const char* what;
    Figures f;
  };
  std::vector<Row> rows;
  rows.push_back({"clock_gettime(CLOCK_REALTIME) alone", run(probe, o, 1, [&](int64_t) {
                    volatile int64_t t = trainscope::wallNowNs();
                    (void)t;
                  })});
  rows.push_back({"ts_op, explicit timestamps",
                  run(probe, o, 1, [&](int64_t i) { ts_op(p, name, base + i, 10); })});
  rows.push_back(
      {"ts_op, t=0 (clock read)", run(probe, o, 1, [&](int64_t) { ts_op(p, name, 0, 10); })});
  rows.push_back({"ts_collective, explicit timestamps", run(probe, o, 1, [&](int64_t i) {
                    ts_collective(p, TS_COLL_ALL_REDUCE, group, 4096, base + i, base + i + 5);
                  })});
  rows.push_back({"ts_range_push + ts_range_pop, t=0 (per call)", run(probe, o, 2, [&](int64_t) {
                    ts_range_push(p, name, TS_RANGE_COMPUTE, 0);
                    ts_range_pop(p, 0);
                  })});
  rows.push_back(
      {"ts_range_push + ts_range_pop, explicit (per call)", run(probe, o, 2, [&](int64_t i) {
         ts_range_push(p, name, TS_RANGE_COMPUTE, base + i);
         ts_range_pop(p, base + i + 1);
       })});
  probe.flush(2000);
  const ts_probe_stats st = probe.stats();

  std::printf("probe_record_bench: %d samples per row, %d calls per sample\n",
              o.bursts * o.batchesPerBurst, o.batch);
  std::printf("%-52s %9s %9s %9s\n", "call", "median_ns", "p99_ns", "min_ns");
  for (const Row& r : rows) {
    std::printf("%-52s %9.1f %9.1f %9.1f\n", r.what, r.f.median, r.f.p99, r.f.min);
  }
  std::printf("records=%llu dropped=%llu steps_folded=%llu\n",
              static_cast<unsigned long long>(st.records),
              static_cast<unsigned long long>(st.dropped),
              static_cast<unsigned long long>(st.steps_folded));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return trainscope::guardedMain("probe_record_bench", [&] { return benchMain(argc, argv); });
}
