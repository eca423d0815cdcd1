#include "agent/gpu_health.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include <dlfcn.h>

#include <catch2/catch.hpp>

#include "tests/common/support.h"

using trainscope::agent::GpuSampler;
using trainscope::tests::TempDir;
namespace wire = trainscope::wire;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  REQUIRE(v != nullptr);
  return v;
}

// A private copy of the fake library, so each test's dlopen gets a fresh fake (its fixture and
// clock), with `fixture` (a file in tests/agent/fake_nvml/) as its fixture.
struct Fake {
  TempDir dir;
  std::string lib;
  explicit Fake(const std::string& fixture, const char* libEnv = "FAKE_NVML_LIB") {
    static int n = 0;
    lib = dir.sub("libnvidia-ml-" + std::to_string(n++) + ".so");
    std::filesystem::copy_file(env(libEnv), lib);
    ::setenv("TRAINSCOPE_FAKE_NVML", (env("FAKE_NVML_FIXTURES") + "/" + fixture).c_str(), 1);
  }
  // Sets the fake's clock (seconds since nvmlInit); the sampler must have loaded it.
  void at(double seconds) const {
    void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_NOLOAD);
    REQUIRE(h != nullptr);
    auto set = reinterpret_cast<void (*)(double)>(dlsym(h, "fake_nvml_set_seconds"));
    REQUIRE(set != nullptr);
    set(seconds);
    dlclose(h);
  }
};

bool has(const wire::GpuSample& s, wire::GpuField f) {
  return (s.present() & static_cast<uint64_t>(f)) != 0;
}

}  // namespace

TEST_CASE("gpu health: no NVML library leaves the sampler absent, saying why, with no samples") {
  GpuSampler sampler("/nonexistent/libnvidia-ml.so.1");
  CHECK_FALSE(sampler.available());
  CHECK(sampler.absentReason().find("cannot load /nonexistent/libnvidia-ml.so.1") == 0);
  CHECK(sampler.sample().empty());
  CHECK(sampler.takeEvents().empty());
}

TEST_CASE("gpu health: nvmlInit failing (no driver) leaves the sampler absent with NVML's reason") {
  Fake fake("no_driver.txt");
  GpuSampler sampler(fake.lib);
  CHECK_FALSE(sampler.available());
  CHECK(sampler.absentReason() == "nvmlInit: Driver Not Loaded (9)");
  CHECK(sampler.sample().empty());
}

TEST_CASE("gpu health: every reading of a healthy GPU, and NOT_SUPPORTED readings left out once") {
  Fake fake("health.txt");
  GpuSampler sampler(fake.lib, /*watchEvents=*/false);
  REQUIRE(sampler.available());
  REQUIRE(sampler.gpuCount() == 2);
  fake.at(1);
  auto s = sampler.sample();
  REQUIRE(s.size() == 2);
  const wire::GpuSample& g0 = s[0];
  CHECK(g0.index() == 0);
  CHECK(g0.uuid() == "GPU-11111111-2222-3333-4444-555555555555");
  CHECK(g0.name() == "FakeH200");
  CHECK_FALSE(g0.lost());
  for (auto f :
       {wire::GPU_UTILIZATION, wire::GPU_MEMORY, wire::GPU_POWER, wire::GPU_ENERGY,
        wire::GPU_TEMPERATURE, wire::GPU_CLOCKS, wire::GPU_CLOCK_EVENTS, wire::GPU_THROTTLE_TIME,
        wire::GPU_ECC, wire::GPU_REMAPPED_ROWS, wire::GPU_NVLINK}) {
    CHECK(has(g0, f));
  }
  CHECK(g0.utilization_pct() == 90);
  CHECK(g0.memory_used_bytes() == 60'000'000'000ULL);
  CHECK(g0.memory_total_bytes() == 150'000'000'000ULL);
  CHECK(g0.power_mw() == 450'000);
  CHECK(g0.energy_mj() == 1'000'000 + 450'000);
  CHECK(g0.temperature_c() == 55);
  CHECK(g0.sm_clock_mhz() == 1980);
  CHECK(g0.mem_clock_mhz() == 3201);
  CHECK(g0.clock_event_reasons() == 0);
  CHECK(g0.throttle_ns() == 0);
  CHECK(g0.ecc_uncorrected() == 0);
  CHECK(g0.nvlink_errors() == 0);

  const wire::GpuSample& g1 = s[1];
  CHECK(g1.uuid() == "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa");
  CHECK_FALSE(has(g1, wire::GPU_POWER));
  CHECK_FALSE(has(g1, wire::GPU_ENERGY));
  CHECK_FALSE(has(g1, wire::GPU_ECC));
  CHECK_FALSE(has(g1, wire::GPU_REMAPPED_ROWS));
  CHECK_FALSE(has(g1, wire::GPU_NVLINK));
  CHECK(has(g1, wire::GPU_TEMPERATURE));
  CHECK(g1.clock_event_reasons() == 0x1);  // idle
  CHECK(sampler.absences().count("gpu 1 power") == 1);
  CHECK(sampler.absences().count("gpu 1 nvlink") == 1);
  CHECK(sampler.absences().count("gpu 0 power") == 0);
  const size_t said = sampler.absences().size();
  (void)sampler.sample();
  CHECK(sampler.absences().size() == said);  // said once, not per sample
}

TEST_CASE(
    "gpu health: a throttling episode shows as clock-event reasons, a lower SM clock and "
    "growing throttle time; errors show as ECC, remapped-row and NVLink counts") {
  Fake fake("health.txt");
  GpuSampler sampler(fake.lib, /*watchEvents=*/false);
  REQUIRE(sampler.available());
  fake.at(3);
  auto s = sampler.sample();
  CHECK(s[0].clock_event_reasons() == 0x40);  // nvmlClocksThrottleReasonHwThermalSlowdown
  CHECK(s[0].sm_clock_mhz() == 1100);
  CHECK(s[0].temperature_c() == 92);
  CHECK(s[0].throttle_ns() == 1'000'000'000);
  fake.at(7);
  s = sampler.sample();
  CHECK(s[0].clock_event_reasons() == 0);
  CHECK(s[0].sm_clock_mhz() == 1980);
  CHECK(s[0].throttle_ns() == 4'000'000'000);
  CHECK(s[0].ecc_uncorrected() == 2);
  CHECK(s[0].ecc_corrected() == 5);
  CHECK(s[0].remapped_rows_uncorrected() == 1);
  CHECK(s[0].remap_pending());
  CHECK(s[0].nvlink_errors() == 7);
}

TEST_CASE("gpu health: a GPU that falls off the bus is reported lost, by index and UUID only") {
  Fake fake("health.txt");
  GpuSampler sampler(fake.lib, /*watchEvents=*/false);
  REQUIRE(sampler.available());
  fake.at(9);
  auto s = sampler.sample();
  REQUIRE(s.size() == 2);
  CHECK_FALSE(s[0].lost());
  CHECK(s[0].utilization_pct() == 90);
  CHECK(s[1].lost());
  CHECK(s[1].index() == 1);
  CHECK(s[1].uuid() == "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa");
  CHECK(s[1].present() == 0);
  CHECK(s[1].temperature_c() == 0);
  s = sampler.sample();
  CHECK(s[1].lost());  // and stays so
}

TEST_CASE("gpu health: a scripted Xid arrives through the event thread, once, naming its GPU") {
  Fake fake("health.txt");
  GpuSampler sampler(fake.lib);
  REQUIRE(sampler.available());
  fake.at(3.5);
  std::vector<wire::GpuEvent> events;
  for (int i = 0; i < 200 && events.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    events = sampler.takeEvents();
  }
  REQUIRE(events.size() == 1);
  CHECK(events[0].kind() == wire::GPU_EVENT_XID);
  CHECK(events[0].code() == 79);
  CHECK(events[0].index() == 0);
  CHECK(events[0].uuid() == "GPU-11111111-2222-3333-4444-555555555555");
  CHECK(events[0].time_ns() > 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(sampler.takeEvents().empty());
}

TEST_CASE(
    "gpu health: an old driver's library without the newer functions still gives the rest, "
    "and says once what it lacks") {
  Fake fake("health.txt", "FAKE_NVML_OLD_LIB");
  GpuSampler sampler(fake.lib);
  REQUIRE(sampler.available());
  fake.at(3);
  auto s = sampler.sample();
  REQUIRE(s.size() == 2);
  CHECK_FALSE(has(s[0], wire::GPU_ENERGY));
  CHECK_FALSE(has(s[0], wire::GPU_REMAPPED_ROWS));
  // nvmlDeviceGetCurrentClocksThrottleReasons, the name before CUDA 12.2, stands in.
  CHECK(has(s[0], wire::GPU_CLOCK_EVENTS));
  CHECK(s[0].clock_event_reasons() == 0x40);
  CHECK(has(s[0], wire::GPU_POWER));
  const auto& said = sampler.absences();
  CHECK(said.count("nvmlDeviceGetTotalEnergyConsumption") == 1);
  CHECK(said.count("nvmlDeviceGetRemappedRows") == 1);
  CHECK(said.count("Xid and ECC events") == 1);
  CHECK(sampler.takeEvents().empty());
}
