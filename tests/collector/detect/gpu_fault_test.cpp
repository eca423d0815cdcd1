#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "collector/detect/detector_set.h"
#include "collector/detect/gpu_fault.h"
#include "tests/collector/detect/synth.h"

using namespace trainscope;
using namespace trainscope::detect;
using namespace trainscope::detect::test;

namespace {

constexpr int64_t kT0 = 1'700'000'000'000'000'000;
constexpr int64_t kSec = 1'000'000'000;
const std::string kGpu0 = "GPU-00000000-0000-0000-0000-000000000000";
const std::string kGpu1 = "GPU-11111111-1111-1111-1111-111111111111";

wire::GpuSample gpu(uint32_t index, const std::string& uuid) {
  wire::GpuSample g;
  g.set_index(index);
  g.set_uuid(uuid);
  g.set_present(wire::GPU_CLOCKS | wire::GPU_TEMPERATURE | wire::GPU_CLOCK_EVENTS |
                wire::GPU_THROTTLE_TIME | wire::GPU_ECC | wire::GPU_NVLINK);
  g.set_sm_clock_mhz(1980);
  g.set_temperature_c(60);
  return g;
}

wire::HostSample host(std::vector<wire::GpuSample> gpus, int64_t t) {
  wire::HostSample h;
  h.set_node("node-1");
  h.set_time_ns(t);
  for (auto& g : gpus) *h.add_gpus() = std::move(g);
  return h;
}

// Two ranks of job "j", rank 0 on GPU 0 and rank 1 on GPU 1, at step 40.
GpuFaults twoRanks() {
  GpuFaults f;
  f.rankGpu("j", 0, kGpu0, "node-1");
  f.rankGpu("j", 1, kGpu1, "node-1");
  f.rankStep("j", 0, 40);
  f.rankStep("j", 1, 40);
  f.hostSample("node-1", host({gpu(0, kGpu0), gpu(1, kGpu1)}, kT0), kT0);
  return f;
}

}  // namespace

TEST_CASE("gpu_fault: an Xid on a GPU opens one anomaly naming the rank that uses it") {
  GpuFaults f = twoRanks();
  CHECK(f.takeEvents().empty());  // healthy GPUs: nothing
  wire::HostSample h = host({gpu(0, kGpu0), gpu(1, kGpu1)}, kT0 + kSec);
  auto* e = h.add_gpu_events();
  e->set_index(1);
  e->set_uuid(kGpu1);
  e->set_kind(wire::GPU_EVENT_XID);
  e->set_code(79);
  f.hostSample("node-1", h, kT0 + kSec);
  auto events = f.takeEvents();
  REQUIRE(events.size() == 1);
  const Anomaly& a = events[0];
  CHECK(a.kind == AnomalyKind::kGpuFault);
  CHECK(a.job == "j");
  CHECK(a.ranks == std::vector<uint32_t>{1});
  CHECK(a.nodes == std::vector<std::string>{"node-1"});
  CHECK(a.onsetStep == 40);
  CHECK(a.labels.at("cause") == "xid");
  CHECK(a.labels.at("gpu_uuid") == kGpu1);
  CHECK(a.evidence.at("xid") == 79);
  CHECK(a.id == "j/gpu_fault/40/r1-xid");
  CHECK(a.summary.find("Xid 79") != std::string::npos);
  // The same Xid again while it is open: no second anomaly.
  f.hostSample("node-1", h, kT0 + 2 * kSec);
  CHECK(f.takeEvents().empty());
}

TEST_CASE("gpu_fault: new uncorrected ECC errors, NVLink errors past the threshold, a lost GPU") {
  GpuFaults f = twoRanks();
  auto g0 = gpu(0, kGpu0);
  auto g1 = gpu(1, kGpu1);
  g0.set_ecc_uncorrected(2);
  g1.set_nvlink_errors(3);  // under the threshold (5 a sample)
  f.hostSample("node-1", host({g0, g1}, kT0 + kSec), kT0 + kSec);
  auto events = f.takeEvents();
  REQUIRE(events.size() == 1);
  CHECK(events[0].labels.at("cause") == "ecc");
  CHECK(events[0].ranks == std::vector<uint32_t>{0});
  CHECK(events[0].evidence.at("ecc_uncorrected_new") == 2);

  g1.set_nvlink_errors(20);
  f.hostSample("node-1", host({g0, g1}, kT0 + 2 * kSec), kT0 + 2 * kSec);
  events = f.takeEvents();
  REQUIRE(events.size() == 1);
  CHECK(events[0].labels.at("cause") == "nvlink");
  CHECK(events[0].ranks == std::vector<uint32_t>{1});

  wire::GpuSample lost;
  lost.set_index(1);
  lost.set_uuid(kGpu1);
  lost.set_lost(true);
  f.hostSample("node-1", host({g0, lost}, kT0 + 3 * kSec), kT0 + 3 * kSec);
  events = f.takeEvents();
  REQUIRE(events.size() == 1);
  CHECK(events[0].labels.at("cause") == "lost");
}

TEST_CASE(
    "gpu_fault: throttling opens once it lasts throttleNs, brief dips do not, and it "
    "resolves after as long without") {
  GpuFaults f = twoRanks();
  auto sample = [&](int64_t s, bool throttled) {
    auto g0 = gpu(0, kGpu0);
    if (throttled) {
      g0.set_clock_event_reasons(0x40 | 0x1);  // hw thermal slowdown (idle is no throttle)
      g0.set_sm_clock_mhz(1100);
      g0.set_temperature_c(92);
    } else {
      g0.set_clock_event_reasons(0x1);  // idle only
    }
    f.hostSample("node-1", host({g0, gpu(1, kGpu1)}, kT0 + s * kSec), kT0 + s * kSec);
    return f.takeEvents();
  };
  // A 3-second dip: nothing.
  for (int s = 1; s <= 3; ++s) CHECK(sample(s, true).empty());
  CHECK(sample(4, false).empty());
  // 5 seconds and more: one anomaly, naming rank 0 only.
  std::vector<Anomaly> opened;
  for (int s = 10; s <= 20; ++s) {
    for (auto& a : sample(s, true)) opened.push_back(a);
  }
  REQUIRE(opened.size() == 1);
  CHECK(opened[0].labels.at("cause") == "throttle");
  CHECK(opened[0].ranks == std::vector<uint32_t>{0});
  CHECK(opened[0].evidence.at("sm_clock_mhz") == 1100);
  CHECK(opened[0].evidence.at("temperature_c") == 92);
  CHECK(opened[0].evidence.at("throttled_s") == Approx(5.0));
  std::vector<Anomaly> resolved;
  for (int s = 21; s <= 30; ++s) {
    for (auto& a : sample(s, false)) resolved.push_back(a);
  }
  REQUIRE(resolved.size() == 1);
  CHECK(resolved[0].id == opened[0].id);
  CHECK(resolved[0].state == AnomalyState::kResolved);
}

TEST_CASE("gpu_fault: a GPU no rank uses raises nothing; a forgotten job's ranks neither") {
  GpuFaults f;
  f.rankGpu("j", 0, kGpu0, "node-1");
  wire::HostSample h = host({gpu(1, kGpu1)}, kT0);
  auto* e = h.add_gpu_events();
  e->set_uuid(kGpu1);
  e->set_kind(wire::GPU_EVENT_XID);
  e->set_code(13);
  f.hostSample("node-1", h, kT0);
  CHECK(f.takeEvents().empty());
  f.forgetJob("j");
  e->set_uuid(kGpu0);
  f.hostSample("node-1", h, kT0 + kSec);
  CHECK(f.takeEvents().empty());
}

TEST_CASE("gpu_fault: a straggler whose GPU throttled says so (cause gpu_throttle, evidence)") {
  SynthJob job;
  job.seed = 31;
  job.rng.seed(31);
  job.computeFactor = [](int64_t s, uint32_t r) { return r == 5 && s >= 500 ? 1.25 : 1.0; };
  DetectorSet set;
  // Rank 5 (node-1) computes on GPU 1 of node-1; its GPU runs hot from step 490 on.
  set.rankGpu(job.job, 5, kGpu1, "node-1");
  std::vector<Anomaly> events;
  for (int64_t s = 0; s < 900; ++s) {
    for (auto& r : job.step(s)) REQUIRE(set.observe(r, job.ctx(r.rank())).isOk());
    auto g1 = gpu(1, kGpu1);
    if (s >= 490) {
      g1.set_clock_event_reasons(0x20);  // sw thermal slowdown
      g1.set_sm_clock_mhz(1200);
      g1.set_temperature_c(88);
      g1.set_throttle_ns((s - 490) * 100'000'000);
    }
    set.hostSample(host({g1}, job.now()), job.now());
    set.tick(job.now());
    for (auto& e : set.takeEvents()) events.push_back(std::move(e));
  }
  INFO(describe(events));
  auto stragglers = ofKind(events, AnomalyKind::kStraggler);
  REQUIRE(stragglers.size() == 1);
  const Anomaly& a = stragglers[0];
  CHECK(a.ranks == std::vector<uint32_t>{5});
  CHECK(a.labels.at("cause") == "gpu_throttle");
  CHECK(a.labels.at("gpu_uuid") == kGpu1);
  CHECK(a.evidence.at("gpu_sm_clock_mhz") == 1200);
  CHECK(a.evidence.at("gpu_temperature_c") == 88);
  CHECK(a.evidence.at("gpu_throttle_s") > 0);
  CHECK(a.summary.find("throttled") != std::string::npos);
  auto faults = ofKind(events, AnomalyKind::kGpuFault);
  REQUIRE(faults.size() == 1);
  CHECK(faults[0].ranks == std::vector<uint32_t>{5});
  CHECK(faults[0].labels.at("cause") == "throttle");
}

TEST_CASE("gpu_fault: a straggler on a healthy GPU gets no GPU cause") {
  SynthJob job;
  job.seed = 32;
  job.rng.seed(32);
  job.computeFactor = [](int64_t s, uint32_t r) { return r == 5 && s >= 500 ? 1.25 : 1.0; };
  DetectorSet set;
  set.rankGpu(job.job, 5, kGpu1, "node-1");
  std::vector<Anomaly> events;
  for (int64_t s = 0; s < 900; ++s) {
    for (auto& r : job.step(s)) REQUIRE(set.observe(r, job.ctx(r.rank())).isOk());
    set.hostSample(host({gpu(1, kGpu1)}, job.now()), job.now());
    set.tick(job.now());
    for (auto& e : set.takeEvents()) events.push_back(std::move(e));
  }
  auto stragglers = ofKind(events, AnomalyKind::kStraggler);
  REQUIRE(stragglers.size() == 1);
  CHECK(stragglers[0].labels.count("cause") == 0);
  CHECK(ofKind(events, AnomalyKind::kGpuFault).empty());
}
