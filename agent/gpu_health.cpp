#include "agent/gpu_health.h"

#include <cstdlib>
#include <deque>
#include <utility>

#include <dlfcn.h>

#include "agent/nvml_abi.h"
#include "common/clock.h"
#include "common/log.h"

namespace trainscope::agent {
namespace {

constexpr std::string_view kLog = "gpu";

// The functions the sampler uses; each null when the library lacks it.
struct Nvml {
  void* handle = nullptr;
  nvmlInit_v2_fn init = nullptr;
  nvmlShutdown_fn shutdown = nullptr;
  nvmlErrorString_fn errorString = nullptr;
  nvmlDeviceGetCount_v2_fn count = nullptr;
  nvmlDeviceGetHandleByIndex_v2_fn handleByIndex = nullptr;
  nvmlDeviceGetUUID_fn uuid = nullptr;
  nvmlDeviceGetName_fn name = nullptr;
  nvmlDeviceGetUtilizationRates_fn utilization = nullptr;
  nvmlDeviceGetMemoryInfo_fn memory = nullptr;
  nvmlDeviceGetPowerUsage_fn power = nullptr;
  nvmlDeviceGetTotalEnergyConsumption_fn energy = nullptr;
  nvmlDeviceGetTemperature_fn temperature = nullptr;
  nvmlDeviceGetClockInfo_fn clock = nullptr;
  nvmlDeviceGetCurrentClocksEventReasons_fn clockEvents = nullptr;
  nvmlDeviceGetViolationStatus_fn violation = nullptr;
  nvmlDeviceGetTotalEccErrors_fn ecc = nullptr;
  nvmlDeviceGetRemappedRows_fn remapped = nullptr;
  nvmlDeviceGetNvLinkState_fn nvlinkState = nullptr;
  nvmlDeviceGetNvLinkErrorCounter_fn nvlinkErrors = nullptr;
  nvmlEventSetCreate_fn eventSetCreate = nullptr;
  nvmlDeviceGetSupportedEventTypes_fn supportedEvents = nullptr;
  nvmlDeviceRegisterEvents_fn registerEvents = nullptr;
  nvmlEventSetWait_v2_fn eventWait = nullptr;
  nvmlEventSetFree_fn eventSetFree = nullptr;
};

// The first of `names` the library has (newer names first: nvmlInit_v2 before nvmlInit).
template <typename Fn>
Fn lookup(void* handle, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (void* p = dlsym(handle, n)) return reinterpret_cast<Fn>(p);
  }
  return nullptr;
}

struct Gpu {
  unsigned int index = 0;
  nvmlDevice_t device = nullptr;
  std::string uuid;
  std::string name;
  bool lost = false;
};

}  // namespace

std::string defaultNvmlLibrary() {
  const char* env = std::getenv("TRAINSCOPE_NVML_LIB");
  return env != nullptr && env[0] != '\0' ? env : "libnvidia-ml.so.1";
}

struct GpuSampler::Impl {
  Nvml nvml;
  bool initialised = false;
  std::string absentReason;
  std::vector<Gpu> gpus;           // the loop thread after the constructor; the event thread
                                   // reads index/uuid/device only, which never change
  std::set<std::string> absences;  // the loop thread

  nvmlEventSet_t eventSet = nullptr;
  std::atomic<bool> stopEvents{false};
  std::thread eventThread;
  mutable Mutex eventsMu;
  std::deque<wire::GpuEvent> events GUARDED_BY(eventsMu);
  uint64_t dropped GUARDED_BY(eventsMu) = 0;

  std::string errorText(nvmlReturn_t rc) const {
    std::string s = nvml.errorString != nullptr ? nvml.errorString(rc) : "";
    return s.empty() ? "NVML error " + std::to_string(rc) : s + " (" + std::to_string(rc) + ")";
  }

  // Says once that `what` is absent, why.
  void absent(const std::string& what, const std::string& why) {
    if (absences.insert(what).second) logInfo(kLog, what + ": " + why + "; not reported");
  }

  void load(const std::string& library);
  void startEvents();
  void eventLoop();
  // Reads one GPU into `out`; false when the GPU is lost.
  void read(Gpu& g, wire::GpuSample& out);
  // Whether `rc` from reading `field` of `g` gave a value; marks lost GPUs and logs the rest.
  bool ok(Gpu& g, nvmlReturn_t rc, const char* field);
};

void GpuSampler::Impl::load(const std::string& library) {
  nvml.handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (nvml.handle == nullptr) {
    const char* err = dlerror();
    absentReason = "cannot load " + library + (err != nullptr ? std::string(": ") + err : "");
    return;
  }
  void* h = nvml.handle;
  nvml.init = lookup<nvmlInit_v2_fn>(h, {"nvmlInit_v2", "nvmlInit"});
  nvml.shutdown = lookup<nvmlShutdown_fn>(h, {"nvmlShutdown"});
  nvml.errorString = lookup<nvmlErrorString_fn>(h, {"nvmlErrorString"});
  nvml.count = lookup<nvmlDeviceGetCount_v2_fn>(h, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  nvml.handleByIndex = lookup<nvmlDeviceGetHandleByIndex_v2_fn>(
      h, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  nvml.uuid = lookup<nvmlDeviceGetUUID_fn>(h, {"nvmlDeviceGetUUID"});
  nvml.name = lookup<nvmlDeviceGetName_fn>(h, {"nvmlDeviceGetName"});
  nvml.utilization = lookup<nvmlDeviceGetUtilizationRates_fn>(h, {"nvmlDeviceGetUtilizationRates"});
  nvml.memory = lookup<nvmlDeviceGetMemoryInfo_fn>(h, {"nvmlDeviceGetMemoryInfo"});
  nvml.power = lookup<nvmlDeviceGetPowerUsage_fn>(h, {"nvmlDeviceGetPowerUsage"});
  nvml.energy =
      lookup<nvmlDeviceGetTotalEnergyConsumption_fn>(h, {"nvmlDeviceGetTotalEnergyConsumption"});
  nvml.temperature = lookup<nvmlDeviceGetTemperature_fn>(h, {"nvmlDeviceGetTemperature"});
  nvml.clock = lookup<nvmlDeviceGetClockInfo_fn>(h, {"nvmlDeviceGetClockInfo"});
  // Renamed in CUDA 12.2's NVML; the throttle name stays exported with the same ABI.
  nvml.clockEvents = lookup<nvmlDeviceGetCurrentClocksEventReasons_fn>(
      h, {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
  nvml.violation = lookup<nvmlDeviceGetViolationStatus_fn>(h, {"nvmlDeviceGetViolationStatus"});
  nvml.ecc = lookup<nvmlDeviceGetTotalEccErrors_fn>(h, {"nvmlDeviceGetTotalEccErrors"});
  nvml.remapped = lookup<nvmlDeviceGetRemappedRows_fn>(h, {"nvmlDeviceGetRemappedRows"});
  nvml.nvlinkState = lookup<nvmlDeviceGetNvLinkState_fn>(h, {"nvmlDeviceGetNvLinkState"});
  nvml.nvlinkErrors =
      lookup<nvmlDeviceGetNvLinkErrorCounter_fn>(h, {"nvmlDeviceGetNvLinkErrorCounter"});
  nvml.eventSetCreate = lookup<nvmlEventSetCreate_fn>(h, {"nvmlEventSetCreate"});
  nvml.supportedEvents =
      lookup<nvmlDeviceGetSupportedEventTypes_fn>(h, {"nvmlDeviceGetSupportedEventTypes"});
  nvml.registerEvents = lookup<nvmlDeviceRegisterEvents_fn>(h, {"nvmlDeviceRegisterEvents"});
  // nvmlEventSetWait's older nvmlEventData_t is a prefix of the newer one: the larger buffer
  // serves both.
  nvml.eventWait = lookup<nvmlEventSetWait_v2_fn>(h, {"nvmlEventSetWait_v2", "nvmlEventSetWait"});
  nvml.eventSetFree = lookup<nvmlEventSetFree_fn>(h, {"nvmlEventSetFree"});

  if (nvml.init == nullptr || nvml.count == nullptr || nvml.handleByIndex == nullptr) {
    absentReason = library + " lacks nvmlInit, nvmlDeviceGetCount or nvmlDeviceGetHandleByIndex";
    return;
  }
  if (nvmlReturn_t rc = nvml.init(); rc != NVML_SUCCESS) {
    absentReason = "nvmlInit: " + errorText(rc);
    return;
  }
  initialised = true;
  unsigned int n = 0;
  if (nvmlReturn_t rc = nvml.count(&n); rc != NVML_SUCCESS) {
    absentReason = "nvmlDeviceGetCount: " + errorText(rc);
    return;
  }
  for (unsigned int i = 0; i < n; ++i) {
    Gpu g;
    g.index = i;
    if (nvmlReturn_t rc = nvml.handleByIndex(i, &g.device); rc != NVML_SUCCESS) {
      // A GPU lost before we started is still one to report: index only.
      logWarn(kLog, "gpu " + std::to_string(i) + ": nvmlDeviceGetHandleByIndex: " + errorText(rc));
      g.lost = rc == NVML_ERROR_GPU_IS_LOST;
      g.device = nullptr;
      gpus.push_back(std::move(g));
      continue;
    }
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if (nvml.uuid != nullptr && nvml.uuid(g.device, buf, sizeof buf) == NVML_SUCCESS) g.uuid = buf;
    char nameBuf[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    if (nvml.name != nullptr && nvml.name(g.device, nameBuf, sizeof nameBuf) == NVML_SUCCESS) {
      g.name = nameBuf;
    }
    gpus.push_back(std::move(g));
  }
  if (gpus.empty()) absentReason = "NVML sees no GPU";
}

bool GpuSampler::Impl::ok(Gpu& g, nvmlReturn_t rc, const char* field) {
  if (rc == NVML_SUCCESS) return true;
  if (rc == NVML_ERROR_GPU_IS_LOST) {
    if (!g.lost) logError(kLog, "gpu " + std::to_string(g.index) + " (" + g.uuid + ") is lost");
    g.lost = true;
    return false;
  }
  absent("gpu " + std::to_string(g.index) + " " + field, errorText(rc));
  return false;
}

void GpuSampler::Impl::read(Gpu& g, wire::GpuSample& s) {
  s.set_index(g.index);
  s.set_uuid(g.uuid);
  s.set_name(g.name);
  if (g.device == nullptr || g.lost) {
    s.set_lost(g.lost);
    return;
  }
  uint64_t present = 0;
  nvmlDevice_t d = g.device;
  // Each reading: skipped when its symbol is absent, and none after the GPU is found lost.
  auto have = [&](const void* fn, const char* symbol) {
    if (g.lost) return false;
    if (fn == nullptr) absent(symbol, "absent from the NVML library");
    return fn != nullptr;
  };
  if (have(reinterpret_cast<const void*>(nvml.utilization), "nvmlDeviceGetUtilizationRates")) {
    nvmlUtilization_t u{};
    if (ok(g, nvml.utilization(d, &u), "utilization")) {
      s.set_utilization_pct(u.gpu);
      s.set_memory_utilization_pct(u.memory);
      present |= wire::GPU_UTILIZATION;
    }
  }
  if (have(reinterpret_cast<const void*>(nvml.memory), "nvmlDeviceGetMemoryInfo")) {
    nvmlMemory_t m{};
    if (ok(g, nvml.memory(d, &m), "memory")) {
      s.set_memory_used_bytes(m.used);
      s.set_memory_total_bytes(m.total);
      present |= wire::GPU_MEMORY;
    }
  }
  if (have(reinterpret_cast<const void*>(nvml.power), "nvmlDeviceGetPowerUsage")) {
    unsigned int mw = 0;
    if (ok(g, nvml.power(d, &mw), "power")) {
      s.set_power_mw(mw);
      present |= wire::GPU_POWER;
    }
  }
  if (have(reinterpret_cast<const void*>(nvml.energy), "nvmlDeviceGetTotalEnergyConsumption")) {
    unsigned long long mj = 0;
    if (ok(g, nvml.energy(d, &mj), "energy")) {
      s.set_energy_mj(mj);
      present |= wire::GPU_ENERGY;
    }
  }
  if (have(reinterpret_cast<const void*>(nvml.temperature), "nvmlDeviceGetTemperature")) {
    unsigned int c = 0;
    if (ok(g, nvml.temperature(d, NVML_TEMPERATURE_GPU, &c), "temperature")) {
      s.set_temperature_c(c);
      present |= wire::GPU_TEMPERATURE;
    }
  }
  if (have(reinterpret_cast<const void*>(nvml.clock), "nvmlDeviceGetClockInfo")) {
    unsigned int sm = 0;
    unsigned int mem = 0;
    if (ok(g, nvml.clock(d, NVML_CLOCK_SM, &sm), "clocks") &&
        ok(g, nvml.clock(d, NVML_CLOCK_MEM, &mem), "clocks")) {
      s.set_sm_clock_mhz(sm);
      s.set_mem_clock_mhz(mem);
      present |= wire::GPU_CLOCKS;
    }
  }
  if (have(reinterpret_cast<const void*>(nvml.clockEvents),
           "nvmlDeviceGetCurrentClocksEventReasons")) {
    unsigned long long reasons = 0;
    if (ok(g, nvml.clockEvents(d, &reasons), "clock events")) {
      s.set_clock_event_reasons(reasons);
      present |= wire::GPU_CLOCK_EVENTS;
    }
  }
  if (have(reinterpret_cast<const void*>(nvml.violation), "nvmlDeviceGetViolationStatus")) {
    // The time power and thermal policies held the clocks below what was asked: the GPU's
    // cumulative throttle time. The two can overlap; their sum is an upper bound.
    nvmlViolationTime_t power{};
    nvmlViolationTime_t thermal{};
    if (ok(g, nvml.violation(d, NVML_PERF_POLICY_POWER, &power), "throttle time") &&
        ok(g, nvml.violation(d, NVML_PERF_POLICY_THERMAL, &thermal), "throttle time")) {
      s.set_throttle_ns(static_cast<int64_t>(power.violationTime + thermal.violationTime));
      present |= wire::GPU_THROTTLE_TIME;
    }
  }
  if (have(reinterpret_cast<const void*>(nvml.ecc), "nvmlDeviceGetTotalEccErrors")) {
    unsigned long long corrected = 0;
    unsigned long long uncorrected = 0;
    if (ok(g, nvml.ecc(d, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &corrected),
           "ecc") &&
        ok(g, nvml.ecc(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &uncorrected),
           "ecc")) {
      s.set_ecc_corrected(corrected);
      s.set_ecc_uncorrected(uncorrected);
      present |= wire::GPU_ECC;
    }
  }
  if (have(reinterpret_cast<const void*>(nvml.remapped), "nvmlDeviceGetRemappedRows")) {
    unsigned int corr = 0;
    unsigned int unc = 0;
    unsigned int pending = 0;
    unsigned int failed = 0;
    if (ok(g, nvml.remapped(d, &corr, &unc, &pending, &failed), "remapped rows")) {
      s.set_remapped_rows_corrected(corr);
      s.set_remapped_rows_uncorrected(unc);
      s.set_remap_pending(pending != 0);
      s.set_remap_failed(failed != 0);
      present |= wire::GPU_REMAPPED_ROWS;
    }
  }
  if (have(reinterpret_cast<const void*>(nvml.nvlinkState), "nvmlDeviceGetNvLinkState") &&
      have(reinterpret_cast<const void*>(nvml.nvlinkErrors), "nvmlDeviceGetNvLinkErrorCounter")) {
    uint64_t sum = 0;
    bool any = false;
    for (unsigned int link = 0; link < NVML_NVLINK_MAX_LINKS && !g.lost; ++link) {
      unsigned int state = 0;
      nvmlReturn_t rc = nvml.nvlinkState(d, link, &state);
      if (rc == NVML_ERROR_GPU_IS_LOST) (void)ok(g, rc, "nvlink");
      // Past the GPU's last link NVML answers INVALID_ARGUMENT or NOT_SUPPORTED.
      if (rc != NVML_SUCCESS || state != NVML_FEATURE_ENABLED) continue;
      any = true;
      for (unsigned int counter : {NVML_NVLINK_ERROR_DL_REPLAY, NVML_NVLINK_ERROR_DL_RECOVERY,
                                   NVML_NVLINK_ERROR_DL_CRC_FLIT, NVML_NVLINK_ERROR_DL_CRC_DATA}) {
        unsigned long long v = 0;
        if (nvml.nvlinkErrors(d, link, counter, &v) == NVML_SUCCESS) sum += v;
      }
    }
    if (any && !g.lost) {
      s.set_nvlink_errors(sum);
      present |= wire::GPU_NVLINK;
    } else if (!g.lost) {
      absent("gpu " + std::to_string(g.index) + " nvlink", "no active NVLink");
    }
  }
  if (g.lost) {
    // Half-read values from before the GPU fell off would read as a healthy GPU's.
    const uint32_t index = s.index();
    s.Clear();
    s.set_index(index);
    s.set_uuid(g.uuid);
    s.set_name(g.name);
    s.set_lost(true);
    return;
  }
  s.set_present(present);
}

void GpuSampler::Impl::startEvents() {
  if (nvml.eventSetCreate == nullptr || nvml.registerEvents == nullptr ||
      nvml.eventWait == nullptr) {
    absent("Xid and ECC events",
           "nvmlEventSetCreate, nvmlDeviceRegisterEvents or nvmlEventSetWait absent from the "
           "NVML library");
    return;
  }
  if (nvmlReturn_t rc = nvml.eventSetCreate(&eventSet); rc != NVML_SUCCESS) {
    absent("Xid and ECC events", "nvmlEventSetCreate: " + errorText(rc));
    return;
  }
  constexpr unsigned long long kWanted = nvmlEventTypeXidCriticalError |
                                         nvmlEventTypeSingleBitEccError |
                                         nvmlEventTypeDoubleBitEccError;
  bool any = false;
  for (Gpu& g : gpus) {
    if (g.device == nullptr || g.lost) continue;
    unsigned long long types = kWanted;
    unsigned long long supported = 0;
    if (nvml.supportedEvents != nullptr &&
        nvml.supportedEvents(g.device, &supported) == NVML_SUCCESS) {
      types &= supported;
    }
    if (types == 0) {
      absent("gpu " + std::to_string(g.index) + " events", "no Xid or ECC events supported");
      continue;
    }
    if (nvmlReturn_t rc = nvml.registerEvents(g.device, types, eventSet); rc != NVML_SUCCESS) {
      absent("gpu " + std::to_string(g.index) + " events", errorText(rc));
      continue;
    }
    any = true;
  }
  if (!any) return;
  eventThread = std::thread([this] { eventLoop(); });
}

void GpuSampler::Impl::eventLoop() {
  // Waits in short slices so the destructor's stop is seen within 200 ms.
  int failures = 0;
  while (!stopEvents.load()) {
    nvmlEventData_t data{};
    nvmlReturn_t rc = nvml.eventWait(eventSet, &data, 200);
    if (rc == NVML_ERROR_TIMEOUT) continue;
    if (rc != NVML_SUCCESS) {
      // GPU_IS_LOST and the like: the sampler reports the GPU; do not spin on the error.
      if (++failures == 1) logWarn(kLog, "nvmlEventSetWait: " + errorText(rc));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    wire::GpuEvent ev;
    ev.set_time_ns(wallNowNs());
    for (const Gpu& g : gpus) {
      if (g.device == data.device) {
        ev.set_index(g.index);
        ev.set_uuid(g.uuid);
      }
    }
    if ((data.eventType & nvmlEventTypeXidCriticalError) != 0) {
      ev.set_kind(wire::GPU_EVENT_XID);
      ev.set_code(data.eventData);
      logWarn(kLog, "gpu " + std::to_string(ev.index()) + " (" + ev.uuid() + "): Xid " +
                        std::to_string(data.eventData));
    } else if ((data.eventType & nvmlEventTypeDoubleBitEccError) != 0) {
      ev.set_kind(wire::GPU_EVENT_ECC_DOUBLE);
    } else if ((data.eventType & nvmlEventTypeSingleBitEccError) != 0) {
      ev.set_kind(wire::GPU_EVENT_ECC_SINGLE);
    } else {
      continue;
    }
    MutexLock lock(&eventsMu);
    if (events.size() >= kMaxQueuedEvents) {
      ++dropped;
      continue;
    }
    events.push_back(std::move(ev));
  }
}

GpuSampler::GpuSampler(const std::string& library, bool watchEvents)
    : impl_(std::make_unique<Impl>()) {
  impl_->load(library);
  if (!impl_->absentReason.empty()) {
    logInfo(kLog, "no GPU samples: " + impl_->absentReason);
    return;
  }
  std::string names;
  for (const Gpu& g : impl_->gpus) {
    names += (names.empty() ? "" : ", ") + std::to_string(g.index) + " " + g.name + " " + g.uuid;
  }
  logInfo(kLog, "NVML: " + std::to_string(impl_->gpus.size()) + " GPU(s): " + names);
  if (watchEvents) impl_->startEvents();
}

GpuSampler::~GpuSampler() {
  impl_->stopEvents.store(true);
  if (impl_->eventThread.joinable()) impl_->eventThread.join();
  if (impl_->eventSet != nullptr && impl_->nvml.eventSetFree != nullptr) {
    impl_->nvml.eventSetFree(impl_->eventSet);
  }
  if (impl_->initialised && impl_->nvml.shutdown != nullptr) impl_->nvml.shutdown();
  // The library stays loaded: NVML's own threads may outlive nvmlShutdown by a moment.
}

bool GpuSampler::available() const {
  return impl_->absentReason.empty();
}
const std::string& GpuSampler::absentReason() const {
  return impl_->absentReason;
}
size_t GpuSampler::gpuCount() const {
  return impl_->gpus.size();
}
const std::set<std::string>& GpuSampler::absences() const {
  return impl_->absences;
}

std::vector<wire::GpuSample> GpuSampler::sample() {
  std::vector<wire::GpuSample> out;
  if (!available()) return out;
  out.reserve(impl_->gpus.size());
  for (Gpu& g : impl_->gpus) impl_->read(g, out.emplace_back());
  return out;
}

std::vector<wire::GpuEvent> GpuSampler::takeEvents() {
  MutexLock lock(&impl_->eventsMu);
  std::vector<wire::GpuEvent> out(std::make_move_iterator(impl_->events.begin()),
                                  std::make_move_iterator(impl_->events.end()));
  impl_->events.clear();
  return out;
}

uint64_t GpuSampler::droppedEvents() const {
  MutexLock lock(&impl_->eventsMu);
  return impl_->dropped;
}

}  // namespace trainscope::agent
