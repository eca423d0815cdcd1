// A fake libnvidia-ml for tests: the NVML functions the agent uses (agent/nvml_abi.h), answering
// from a fixture file named by $TRAINSCOPE_FAKE_NVML (fixture format below). The agent loads it
// through TRAINSCOPE_NVML_LIB as it would load the real library. Built twice: as
// libfake_nvml.so with every function, and with FAKE_NVML_OLD as libfake_nvml_old.so, an old
// driver's library that lacks the energy, remapped-row, event and clock-event functions (only
// the older nvmlDeviceGetCurrentClocksThrottleReasons name).
//
// Time in the fixture is seconds since nvmlInit, or, once a test called
// fake_nvml_set_seconds(), the seconds it set (so a unit test scripts an episode without
// sleeping). Fixture lines, `#` starts a comment:
//   init_error CODE                      nvmlInit answers CODE (9: DRIVER_NOT_LOADED)
//   gpu uuid=GPU-x name=N util=U mem_used=B mem_total=B power_mw=P energy_mj=E temp=C
//       sm_mhz=M mem_mhz=M nvlinks=L       one GPU, index in order of the lines
//   unsupported gpu=I what=power,energy,temperature,clocks,utilization,memory,clock_events,
//       throttle,ecc,remap,nvlink,events   those readings answer NOT_SUPPORTED on GPU I
//   lost gpu=I from=S                    GPU I answers GPU_IS_LOST from second S on
//   throttle gpu=I from=S to=S reasons=0x40 sm_mhz=M temp=C
//                                        a throttling episode: clock-event reasons, a lower
//                                        SM clock, a higher temperature; the thermal violation
//                                        time grows by the seconds inside it
//   xid gpu=I at=S code=X                an Xid event delivered once second S has passed
//   ecc gpu=I from=S uncorrected=N corrected=N
//   nvlink_errors gpu=I from=S count=N   replay errors on link 0 from second S on
// NOLINTBEGIN: NVML's C names, and a fake kept short.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/nvml_abi.h"

namespace {

struct Window {
  double from = 0;
  double to = 1e30;
};

struct FakeGpu {
  std::string uuid = "GPU-00000000-0000-0000-0000-000000000000";
  std::string name = "Fake GPU";
  unsigned int util = 0;
  unsigned long long memUsed = 0;
  unsigned long long memTotal = 0;
  unsigned int powerMw = 0;
  unsigned long long energyMj = 0;
  unsigned int temp = 0;
  unsigned int smMhz = 0;
  unsigned int memMhz = 0;
  unsigned int nvlinks = 0;
  std::set<std::string> unsupported;
  double lostFrom = 1e30;
  std::vector<std::pair<Window, std::map<std::string, unsigned long long>>> throttles;
  double eccFrom = 1e30;
  unsigned long long eccUncorrected = 0;
  unsigned long long eccCorrected = 0;
  double nvlinkFrom = 1e30;
  unsigned long long nvlinkCount = 0;
};

struct Xid {
  unsigned int gpu = 0;
  double at = 0;
  unsigned long long code = 0;
  bool delivered = false;
};

struct State {
  std::mutex mu;
  bool loaded = false;
  int initError = 0;
  std::vector<FakeGpu> gpus;
  std::vector<Xid> xids;
  std::chrono::steady_clock::time_point initAt;
  bool manualTime = false;
  double manualSeconds = 0;
  int inits = 0;
};

State& state() {
  static State s;
  return s;
}

double seconds(State& s) {
  if (s.manualTime) return s.manualSeconds;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - s.initAt).count();
}

std::map<std::string, std::string> keyValues(std::istringstream& in) {
  std::map<std::string, std::string> kv;
  std::string tok;
  while (in >> tok) {
    auto eq = tok.find('=');
    if (eq != std::string::npos) kv[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  return kv;
}

unsigned long long num(const std::map<std::string, std::string>& kv, const std::string& k,
                       unsigned long long def = 0) {
  auto it = kv.find(k);
  return it == kv.end() ? def : std::strtoull(it->second.c_str(), nullptr, 0);
}
double real(const std::map<std::string, std::string>& kv, const std::string& k, double def) {
  auto it = kv.find(k);
  return it == kv.end() ? def : std::strtod(it->second.c_str(), nullptr);
}

void load(State& s) {
  if (s.loaded) return;
  s.loaded = true;
  const char* path = std::getenv("TRAINSCOPE_FAKE_NVML");
  if (path == nullptr) return;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream in(line);
    std::string word;
    if (!(in >> word)) continue;
    if (word == "init_error") {
      in >> s.initError;
      continue;
    }
    auto kv = keyValues(in);
    if (word == "gpu") {
      FakeGpu g;
      if (kv.count("uuid")) g.uuid = kv["uuid"];
      if (kv.count("name")) g.name = kv["name"];
      g.util = static_cast<unsigned int>(num(kv, "util"));
      g.memUsed = num(kv, "mem_used");
      g.memTotal = num(kv, "mem_total");
      g.powerMw = static_cast<unsigned int>(num(kv, "power_mw"));
      g.energyMj = num(kv, "energy_mj");
      g.temp = static_cast<unsigned int>(num(kv, "temp"));
      g.smMhz = static_cast<unsigned int>(num(kv, "sm_mhz"));
      g.memMhz = static_cast<unsigned int>(num(kv, "mem_mhz"));
      g.nvlinks = static_cast<unsigned int>(num(kv, "nvlinks"));
      s.gpus.push_back(g);
      continue;
    }
    size_t i = num(kv, "gpu");
    if (word == "xid") {
      s.xids.push_back({static_cast<unsigned int>(i), real(kv, "at", 0), num(kv, "code"), false});
      continue;
    }
    if (i >= s.gpus.size()) continue;
    FakeGpu& g = s.gpus[i];
    if (word == "unsupported") {
      std::stringstream what(kv["what"]);
      std::string w;
      while (std::getline(what, w, ',')) g.unsupported.insert(w);
    } else if (word == "lost") {
      g.lostFrom = real(kv, "from", 0);
    } else if (word == "throttle") {
      std::map<std::string, unsigned long long> values;
      for (const char* k : {"reasons", "sm_mhz", "temp"}) {
        if (kv.count(k)) values[k] = num(kv, k);
      }
      g.throttles.push_back({{real(kv, "from", 0), real(kv, "to", 1e30)}, values});
    } else if (word == "ecc") {
      g.eccFrom = real(kv, "from", 0);
      g.eccUncorrected = num(kv, "uncorrected");
      g.eccCorrected = num(kv, "corrected");
    } else if (word == "nvlink_errors") {
      g.nvlinkFrom = real(kv, "from", 0);
      g.nvlinkCount = num(kv, "count");
    }
  }
}

// The GPU behind a handle (index + 1, so no handle is null), with the common answers.
nvmlReturn_t gpuFor(nvmlDevice_t d, const char* what, FakeGpu** out, double* now) {
  State& s = state();
  auto i = reinterpret_cast<uintptr_t>(d);
  if (i == 0 || i > s.gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
  FakeGpu& g = s.gpus[i - 1];
  *now = seconds(s);
  if (*now >= g.lostFrom) return NVML_ERROR_GPU_IS_LOST;
  if (what != nullptr && g.unsupported.count(what)) return NVML_ERROR_NOT_SUPPORTED;
  *out = &g;
  return NVML_SUCCESS;
}

// The throttle episode's value for `key` at `now`, else `normal`.
unsigned long long during(const FakeGpu& g, double now, const char* key,
                          unsigned long long normal) {
  for (const auto& [w, values] : g.throttles) {
    auto it = values.find(key);
    if (now >= w.from && now < w.to && it != values.end()) return it->second;
  }
  return normal;
}

#define GPU_OR_RETURN(what)                     \
  std::lock_guard<std::mutex> lock(state().mu); \
  FakeGpu* g = nullptr;                         \
  double now = 0;                               \
  if (nvmlReturn_t rc = gpuFor(device, what, &g, &now); rc != 0) return rc

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void fake_nvml_set_seconds(double s) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().manualTime = true;
  state().manualSeconds = s;
}

__attribute__((visibility("default"))) int fake_nvml_init_count() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().inits;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlInit_v2() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  load(s);
  if (s.initError != 0) return s.initError;
  if (s.inits++ == 0) s.initAt = std::chrono::steady_clock::now();
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlShutdown() {
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) const char* nvmlErrorString(nvmlReturn_t rc) {
  switch (rc) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
      return "Timeout";
    default:
      return "Unknown Error";
  }
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* n) {
  std::lock_guard<std::mutex> lock(state().mu);
  *n = static_cast<unsigned int>(state().gpus.size());
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i,
                                                                                  nvmlDevice_t* d) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (i >= state().gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
  *d = reinterpret_cast<nvmlDevice_t>(static_cast<uintptr_t>(i) + 1);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device,
                                                                      char* buf, unsigned int n) {
  GPU_OR_RETURN(nullptr);
  if (g->uuid.size() + 1 > n) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(buf, g->uuid.c_str(), g->uuid.size() + 1);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device,
                                                                      char* buf, unsigned int n) {
  GPU_OR_RETURN(nullptr);
  if (g->name.size() + 1 > n) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(buf, g->name.c_str(), g->name.size() + 1);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetUtilizationRates(
    nvmlDevice_t device, nvmlUtilization_t* u) {
  GPU_OR_RETURN("utilization");
  u->gpu = g->util;
  u->memory = g->util / 2;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device,
                                                                            nvmlMemory_t* m) {
  GPU_OR_RETURN("memory");
  m->total = g->memTotal;
  m->used = g->memUsed;
  m->free = g->memTotal - std::min(g->memTotal, g->memUsed);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device,
                                                                            unsigned int* mw) {
  GPU_OR_RETURN("power");
  *mw = g->powerMw;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device,
                                                                             unsigned int sensor,
                                                                             unsigned int* c) {
  GPU_OR_RETURN("temperature");
  if (sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  *c = static_cast<unsigned int>(during(*g, now, "temp", g->temp));
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device,
                                                                           unsigned int type,
                                                                           unsigned int* mhz) {
  GPU_OR_RETURN("clocks");
  if (type == NVML_CLOCK_SM || type == NVML_CLOCK_GRAPHICS) {
    *mhz = static_cast<unsigned int>(during(*g, now, "sm_mhz", g->smMhz));
  } else if (type == NVML_CLOCK_MEM) {
    *mhz = g->memMhz;
  } else {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  return NVML_SUCCESS;
}

static nvmlReturn_t clockReasons(nvmlDevice_t device, unsigned long long* reasons) {
  GPU_OR_RETURN("clock_events");
  *reasons = during(*g, now, "reasons", g->util == 0 ? nvmlClocksEventReasonGpuIdle : 0);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(
    nvmlDevice_t device, unsigned long long* reasons) {
  return clockReasons(device, reasons);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetViolationStatus(
    nvmlDevice_t device, unsigned int policy, nvmlViolationTime_t* v) {
  GPU_OR_RETURN("throttle");
  v->referenceTime = static_cast<unsigned long long>(now * 1e6);
  v->violationTime = 0;
  if (policy != NVML_PERF_POLICY_THERMAL) return NVML_SUCCESS;
  double inside = 0;
  for (const auto& [w, values] : g->throttles) {
    if (now > w.from) inside += std::min(now, w.to) - w.from;
  }
  v->violationTime = static_cast<unsigned long long>(inside * 1e9);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetTotalEccErrors(
    nvmlDevice_t device, unsigned int type, unsigned int counter, unsigned long long* n) {
  GPU_OR_RETURN("ecc");
  if (counter != NVML_VOLATILE_ECC) return NVML_ERROR_INVALID_ARGUMENT;
  *n = 0;
  if (now >= g->eccFrom) {
    *n = type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED ? g->eccUncorrected : g->eccCorrected;
  }
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device,
                                                                             unsigned int link,
                                                                             unsigned int* st) {
  GPU_OR_RETURN("nvlink");
  if (link >= g->nvlinks) return NVML_ERROR_INVALID_ARGUMENT;
  *st = NVML_FEATURE_ENABLED;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(
    nvmlDevice_t device, unsigned int link, unsigned int counter, unsigned long long* v) {
  GPU_OR_RETURN("nvlink");
  if (link >= g->nvlinks) return NVML_ERROR_INVALID_ARGUMENT;
  *v = link == 0 && counter == NVML_NVLINK_ERROR_DL_REPLAY && now >= g->nvlinkFrom ? g->nvlinkCount
                                                                                   : 0;
  return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OLD
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(
    nvmlDevice_t device, unsigned long long* reasons) {
  return clockReasons(device, reasons);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(
    nvmlDevice_t device, unsigned long long* mj) {
  GPU_OR_RETURN("energy");
  *mj = g->energyMj + static_cast<unsigned long long>(now * g->powerMw);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetRemappedRows(
    nvmlDevice_t device, unsigned int* corr, unsigned int* unc, unsigned int* pending,
    unsigned int* failed) {
  GPU_OR_RETURN("remap");
  const bool bad = now >= g->eccFrom && g->eccUncorrected > 0;
  *corr = 0;
  *unc = bad ? 1 : 0;
  *pending = bad ? 1 : 0;
  *failed = 0;
  return NVML_SUCCESS;
}

struct nvmlEventSet_st {
  std::set<uintptr_t> gpus;
};

__attribute__((visibility("default"))) nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  *set = new nvmlEventSet_st;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetSupportedEventTypes(
    nvmlDevice_t device, unsigned long long* types) {
  GPU_OR_RETURN("events");
  *types = nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError |
           nvmlEventTypeDoubleBitEccError;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceRegisterEvents(
    nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set) {
  GPU_OR_RETURN("events");
  if (types == 0) return NVML_ERROR_INVALID_ARGUMENT;
  set->gpus.insert(reinterpret_cast<uintptr_t>(device));
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set,
                                                                        nvmlEventData_t* data,
                                                                        unsigned int timeoutMs) {
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    const double now = seconds(s);
    for (Xid& x : s.xids) {
      if (x.delivered || now < x.at || !set->gpus.count(x.gpu + 1)) continue;
      x.delivered = true;
      *data = {};
      data->device = reinterpret_cast<nvmlDevice_t>(static_cast<uintptr_t>(x.gpu) + 1);
      data->eventType = nvmlEventTypeXidCriticalError;
      data->eventData = x.code;
      return NVML_SUCCESS;
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeoutMs, 20u)));
  return NVML_ERROR_TIMEOUT;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  delete set;
  return NVML_SUCCESS;
}
#endif  // FAKE_NVML_OLD

}  // extern "C"
// NOLINTEND
