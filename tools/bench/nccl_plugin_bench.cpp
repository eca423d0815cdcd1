// nccl_plugin_bench: what each call NCCL makes into libnccl-profiler-trainscope.so costs, with
// the probe (linked here, found by the plugin through this program's exported symbols) folding
// concurrently. Prints median and p99 ns per callback and per whole operation; no assertions.
//
// One operation is the sequence NCCL makes for a collective on one channel, split by the
// thread that makes it: startEvent(Coll) and stopEvent(Coll) on the enqueuing thread, then
// startEvent(KernelCh), recordEventState(KernelChStop) and stopEvent(KernelCh) on the proxy
// thread; the last one completes the operation and records it into the probe. Operations are
// timed in batches (the clock read is amortized) and run in bursts inside steps, with a pause
// so the probe's runtime thread drains its ring (a dropped record would flatter the figure).
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <nccl/profiler.h>
#include <CLI/CLI.hpp>

#include "agent/probe/trainscope_probe.h"
#include "common/clock.h"
#include "common/guarded_main.h"

namespace {

struct BenchOptions {
  std::string plugin = TRAINSCOPE_NCCL_PLUGIN_PATH;  // the .so under test
  int bursts = 400;                                  // bursts per figure; more samples, longer run
  int batchesPerBurst = 8;                           // timed batches per burst
  int batch = 32;                                    // operations per timed batch
  int pauseUs = 3000;  // pause after a burst so the probe's runtime thread drains
  int channels = 1;    // kernel channels per operation
};

struct Figures {
  double median;
  double p99;
};

Figures summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto at = [&](double q) {
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
  };
  return Figures{at(0.5), at(0.99)};
}

uint64_t gpuNow() {
  return static_cast<uint64_t>(trainscope::wallNowNs() - 1'000'000'000);
}

int run(const BenchOptions& o) {
  void* lib = dlopen(o.plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "nccl_plugin_bench: cannot load %s: %s\n", o.plugin.c_str(), dlerror());
    return 1;
  }
  auto* api = static_cast<ncclProfiler_v6_t*>(dlsym(lib, "ncclProfiler_v6"));
  auto* stats = reinterpret_cast<int (*)(int64_t*, int)>(dlsym(lib, "ts_nccl_profiler_stats"));
  if (api == nullptr || stats == nullptr) {
    std::fprintf(stderr, "nccl_plugin_bench: %s lacks ncclProfiler_v6\n", o.plugin.c_str());
    return 1;
  }
  ts_probe_config c;
  ts_config_init(&c);
  c.job = "nccl-plugin-bench";
  c.rank = 0;
  c.world_size = 8;
  c.connect_agent = 1;
  if (ts_init(&c) != 0) return 1;
  ts_probe* probe = ts_default();
  void* ctx = nullptr;
  int mask = 0;
  api->init(&ctx, 0x1234, &mask, "bench", 1, 8, 0, nullptr);
  if (ctx == nullptr || mask == 0) {
    std::fprintf(stderr, "nccl_plugin_bench: the plugin did not find the probe\n");
    return 1;
  }

  ncclProfilerEventDescr_v6_t coll{};
  coll.type = ncclProfileColl;
  coll.coll.func = "AllReduce";
  coll.coll.count = 1 << 20;
  coll.coll.datatype = "ncclBfloat16";
  coll.coll.nChannels = static_cast<uint8_t>(o.channels);
  coll.coll.algo = "RING";
  coll.coll.proto = "SIMPLE";
  ncclProfilerEventDescr_v6_t ch{};
  ch.type = ncclProfileKernelCh;
  ncclProfilerEventStateArgs_v6_t stopArgs{};

  std::vector<double> host;   // startEvent(Coll) + stopEvent(Coll), per operation
  std::vector<double> proxy;  // the channels' start, state and stop, per operation
  std::vector<void*> handles(static_cast<size_t>(o.batch));
  std::vector<void*> chans(static_cast<size_t>(o.batch) * static_cast<size_t>(o.channels));
  int64_t step = 0;
  uint64_t seq = 0;
  for (int b = 0; b < o.bursts; ++b) {
    ts_step_begin(probe, step, 0);
    for (int k = 0; k < o.batchesPerBurst; ++k) {
      const uint64_t g = gpuNow();
      int64_t t0 = trainscope::monotonicNowNs();
      for (int i = 0; i < o.batch; ++i) {
        coll.coll.seqNumber = seq++;
        api->startEvent(ctx, &handles[static_cast<size_t>(i)], &coll);
        api->stopEvent(handles[static_cast<size_t>(i)]);
      }
      int64_t t1 = trainscope::monotonicNowNs();
      host.push_back(static_cast<double>(t1 - t0) / o.batch);
      t0 = trainscope::monotonicNowNs();
      for (int i = 0; i < o.batch; ++i) {
        for (int j = 0; j < o.channels; ++j) {
          ch.parentObj = handles[static_cast<size_t>(i)];
          ch.kernelCh.channelId = static_cast<uint8_t>(j);
          ch.kernelCh.pTimer = g;
          api->startEvent(ctx, &chans[static_cast<size_t>(i) * o.channels + j], &ch);
        }
        for (int j = 0; j < o.channels; ++j) {
          void* h = chans[static_cast<size_t>(i) * o.channels + j];
          stopArgs.kernelCh.pTimer = g + 1000;
          api->recordEventState(h, ncclProfilerKernelChStop, &stopArgs);
          api->stopEvent(h);
        }
      }
      t1 = trainscope::monotonicNowNs();
      proxy.push_back(static_cast<double>(t1 - t0) / o.batch);
    }
    ts_step_end(probe, step++, 0);
    std::this_thread::sleep_for(std::chrono::microseconds(o.pauseUs));
  }
  ts_probe_flush(probe, 5000);
  int64_t s[16] = {};
  stats(s, 16);
  ts_probe_stats ps{};
  ts_probe_get_stats(probe, &ps);
  const Figures h = summarize(host);
  const Figures p = summarize(proxy);
  const int proxyCalls = 3 * o.channels;
  std::printf(
      "nccl plugin, %d channel(s) per operation, %zu operations (%lld recorded, %lld "
      "dropped: pool %lld, no probe %lld; probe ring drops %llu)\n",
      o.channels, host.size() * static_cast<size_t>(o.batch), static_cast<long long>(s[3]),
      static_cast<long long>(s[4]) + s[5] + s[6], static_cast<long long>(s[4]),
      static_cast<long long>(s[5]), static_cast<unsigned long long>(ps.dropped));
  std::printf(
      "  enqueuing thread: start+stop Coll  median %6.1f ns  p99 %6.1f ns  "
      "(%.1f ns per callback)\n",
      h.median, h.p99, h.median / 2);
  std::printf(
      "  proxy thread: %d callbacks         median %6.1f ns  p99 %6.1f ns  "
      "(%.1f ns per callback, the operation's record into the probe included)\n",
      proxyCalls, p.median, p.p99, p.median / proxyCalls);
  std::printf("  per callback over the operation    median %6.1f ns\n",
              (h.median + p.median) / (2 + proxyCalls));
  ts_shutdown(1000);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return trainscope::guardedMain("nccl_plugin_bench", [&]() -> int {
    BenchOptions o;
    CLI::App app{"ns per NCCL profiler plugin callback, as NCCL calls it"};
    app.add_option("--plugin", o.plugin, "the plugin to load");
    app.add_option("--bursts", o.bursts, "bursts (steps) to time");
    app.add_option("--batch", o.batch, "operations per timed batch");
    app.add_option("--channels", o.channels, "kernel channels per operation (1..64)")
        ->check(CLI::Range(1, 64));
    CLI11_PARSE(app, argc, argv);
    return run(o);
  });
}
