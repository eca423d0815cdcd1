// The plugin finds a probe that a Python process loaded privately: libtrainscope_probe.so
// dlopen'ed by path with RTLD_LOCAL (what ctypes does), its symbols invisible to the rest of
// the process. This program links no probe; it loads both libraries as a training process
// under `trainscope run` does, without TRAINSCOPE_PROBE_LIB, so the plugin must find the probe
// by its soname.
#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include <nccl/profiler.h>
#include <catch2/catch.hpp>

#include "agent/probe/trainscope_probe.h"

namespace {

template <class F>
F sym(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}

}  // namespace

TEST_CASE(
    "plugin / finds a probe loaded privately (as ctypes loads it) by its soname, records "
    "into it; without one its communicators ask NCCL for nothing") {
  unsetenv("TRAINSCOPE_PROBE_LIB");
  const char* pluginPath = std::getenv("TRAINSCOPE_NCCL_PLUGIN");
  const char* probePath = std::getenv("TRAINSCOPE_TEST_PROBE_LIB");
  REQUIRE(pluginPath != nullptr);
  REQUIRE(probePath != nullptr);
  void* plugin = dlopen(pluginPath, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(plugin != nullptr);
  auto* api = static_cast<ncclProfiler_v6_t*>(dlsym(plugin, "ncclProfiler_v6"));
  auto stats = sym<int (*)(int64_t*, int)>(plugin, "ts_nccl_profiler_stats");
  REQUIRE(api != nullptr);
  REQUIRE(stats != nullptr);

  // No probe in the process yet: no events asked for, counted.
  void* ctx = nullptr;
  int mask = -1;
  REQUIRE(api->init(&ctx, 1, &mask, "", 1, 1, 0, nullptr) == ncclSuccess);
  CHECK(ctx == nullptr);
  CHECK(mask == 0);
  int64_t s[16] = {};
  stats(s, 16);
  CHECK(s[1] == 1);

  void* probeLib = dlopen(probePath, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(probeLib != nullptr);
  REQUIRE(dlsym(RTLD_DEFAULT, "ts_init") == nullptr);  // private, as under ctypes
  auto configInit = sym<void (*)(ts_probe_config*)>(probeLib, "ts_config_init");
  auto init = sym<int32_t (*)(const ts_probe_config*)>(probeLib, "ts_init");
  auto getDefault = sym<ts_probe* (*)()>(probeLib, "ts_default");
  auto stepBegin = sym<void (*)(ts_probe*, int64_t, int64_t)>(probeLib, "ts_step_begin");
  auto stepEnd = sym<void (*)(ts_probe*, int64_t, int64_t)>(probeLib, "ts_step_end");
  auto flush = sym<int32_t (*)(ts_probe*, int32_t)>(probeLib, "ts_probe_flush");
  auto getStats = sym<void (*)(ts_probe*, ts_probe_stats*)>(probeLib, "ts_probe_get_stats");
  auto shutdown = sym<void (*)(int32_t)>(probeLib, "ts_shutdown");
  ts_probe_config c;
  configInit(&c);
  c.job = "find-probe-test";
  c.rank = 0;
  c.world_size = 1;
  c.connect_agent = 1;
  REQUIRE(init(&c) == 0);
  ts_probe* probe = getDefault();

  REQUIRE(api->init(&ctx, 2, &mask, "", 1, 1, 0, nullptr) == ncclSuccess);
  REQUIRE(ctx != nullptr);
  CHECK(mask == (ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh));
  stepBegin(probe, 1, 0);
  ncclProfilerEventDescr_v6_t coll{};
  coll.type = ncclProfileColl;
  coll.coll.func = "AllReduce";
  coll.coll.count = 4;
  coll.coll.datatype = "ncclFloat32";
  coll.coll.nChannels = 1;
  void* h = nullptr;
  REQUIRE(api->startEvent(ctx, &h, &coll) == ncclSuccess);
  REQUIRE(h != nullptr);
  REQUIRE(api->stopEvent(h) == ncclSuccess);
  ncclProfilerEventDescr_v6_t ch{};
  ch.type = ncclProfileKernelCh;
  ch.parentObj = h;
  ch.kernelCh.pTimer = 1'000'000;
  void* k = nullptr;
  REQUIRE(api->startEvent(ctx, &k, &ch) == ncclSuccess);
  ncclProfilerEventStateArgs_v6_t a{};
  a.kernelCh.pTimer = 2'000'000;
  REQUIRE(api->recordEventState(k, ncclProfilerKernelChStop, &a) == ncclSuccess);
  REQUIRE(api->stopEvent(k) == ncclSuccess);
  stepEnd(probe, 1, 0);
  flush(probe, 5000);
  stats(s, 16);
  CHECK(s[3] == 1);  // recorded into the probe
  ts_probe_stats ps{};
  getStats(probe, &ps);
  CHECK(ps.records >= 3);  // the step's two marks and the device record
  CHECK(ps.steps_folded == 1);
  shutdown(1000);
}
