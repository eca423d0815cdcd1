#include "collector/detect/gpu_fault.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "schema/wire.h"

namespace trainscope::detect {
namespace {

// Throttle-time samples kept per GPU: a sample a second covers explainWindowNs (120 s) twice.
constexpr size_t kThrottleHistory = 256;

bool has(const wire::GpuSample& g, wire::GpuField f) {
  return (g.present() & static_cast<uint64_t>(f)) != 0;
}

std::string seconds(double ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", ns / 1e9);
  return buf;
}

}  // namespace

GpuFaults::GpuFaults(GpuFaultOptions options) : options_(options) {}

void GpuFaults::rankGpu(const std::string& job, uint32_t rank, const std::string& uuid,
                        const std::string& node) {
  (void)node;  // the GPU's node comes with its samples
  if (uuid.empty()) {
    rankGpu_.erase({job, rank});
    return;
  }
  rankGpu_[{job, rank}] = uuid;
}

void GpuFaults::rankStep(const std::string& job, uint32_t rank, int64_t step) {
  // Only ranks with a GPU matter here; the others would grow the table for nothing.
  if (rankGpu_.count({job, rank}) == 0) return;
  int64_t& s = rankStep_[{job, rank}];
  s = std::max(s, step);
}

void GpuFaults::forgetJob(const std::string& job) {
  for (auto* table : {&rankStep_}) {
    for (auto it = table->lower_bound({job, 0}); it != table->end() && it->first.job == job;) {
      it = table->erase(it);
    }
  }
  for (auto it = rankGpu_.lower_bound({job, 0}); it != rankGpu_.end() && it->first.job == job;) {
    it = rankGpu_.erase(it);
  }
}

std::map<std::string, std::vector<uint32_t>> GpuFaults::users(const std::string& uuid) const {
  std::map<std::string, std::vector<uint32_t>> out;
  for (const auto& [key, u] : rankGpu_) {
    if (u == uuid) out[key.job].push_back(key.rank);
  }
  return out;
}

void GpuFaults::fault(const std::string& uuid, Gpu& g, const std::string& cause,
                      const std::string& what, std::map<std::string, double> evidence,
                      int64_t nowNs) {
  if (cause != "throttle") {
    g.lastFaultNs = nowNs;
    g.lastFault = cause;
  }
  evidence["gpu_index"] = g.index;
  for (auto& [job, ranks] : users(uuid)) {
    std::string key = job;
    key += '/';
    key += cause;
    if (g.open.count(key) != 0) continue;
    int64_t step = -1;
    for (uint32_t r : ranks) {
      auto it = rankStep_.find({job, r});
      if (it != rankStep_.end()) step = std::max(step, it->second);
    }
    Anomaly a;
    a.job = job;
    a.kind = AnomalyKind::kGpuFault;
    a.ranks = ranks;
    a.nodes = {g.node};
    a.onsetStep = step;
    a.detectedStep = step;
    a.detectedNs = nowNs;
    a.magnitude = 1.0;
    a.confidence = 1.0;
    a.evidence = evidence;
    a.labels = {{"cause", cause}, {"gpu_uuid", uuid}, {"node", g.node}};
    a.summary.append("GPU ")
        .append(std::to_string(g.index))
        .append(" of ")
        .append(g.node)
        .append(" (")
        .append(uuid)
        .append("), used by ")
        .append(rankList(ranks))
        .append(": ")
        .append(what);
    std::string subject = rankSubject(ranks);
    subject += '-';
    subject += cause;
    g.open[key] = log_.open(std::move(a), subject);
  }
}

void GpuFaults::resolve(Gpu& g, const std::string& cause, int64_t nowNs) {
  for (auto it = g.open.begin(); it != g.open.end();) {
    if (it->second.labels.at("cause") != cause) {
      ++it;
      continue;
    }
    int64_t step = it->second.detectedStep;
    for (uint32_t r : it->second.ranks) {
      auto s = rankStep_.find({it->second.job, r});
      if (s != rankStep_.end()) step = std::max(step, s->second);
    }
    log_.resolve(it->second, step, nowNs);
    it = g.open.erase(it);
  }
}

void GpuFaults::hostSample(const std::string& node, const wire::HostSample& host, int64_t nowNs) {
  if (gpus_.size() > options_.maxGpus) gpus_.clear();
  for (const auto& e : host.gpu_events()) {
    if (e.uuid().empty()) continue;
    Gpu& g = gpus_[e.uuid()];
    g.node = node;
    g.index = e.index();
    if (e.kind() == wire::GPU_EVENT_XID) {
      g.lastXid = e.code();
      fault(e.uuid(), g, "xid", "Xid " + std::to_string(e.code()) + " (a driver-reported error)",
            {{"xid", static_cast<double>(e.code())}}, nowNs);
    } else if (e.kind() == wire::GPU_EVENT_ECC_DOUBLE) {
      fault(e.uuid(), g, "ecc", "a double-bit (uncorrectable) ECC error", {}, nowNs);
    }
  }
  for (const auto& s : host.gpus()) {
    if (s.uuid().empty()) continue;
    Gpu& g = gpus_[s.uuid()];
    g.node = node;
    g.index = s.index();
    if (s.lost()) {
      fault(s.uuid(), g, "lost", "the GPU is lost (NVML: GPU_IS_LOST, off the bus)", {}, nowNs);
      continue;
    }
    if (has(s, wire::GPU_ECC)) {
      if (g.seen && s.ecc_uncorrected() > g.eccUncorrected) {
        fault(
            s.uuid(), g, "ecc",
            std::to_string(s.ecc_uncorrected() - g.eccUncorrected) +
                " new uncorrected ECC error(s)",
            {{"ecc_uncorrected", static_cast<double>(s.ecc_uncorrected())},
             {"ecc_uncorrected_new", static_cast<double>(s.ecc_uncorrected() - g.eccUncorrected)}},
            nowNs);
      }
      g.eccUncorrected = s.ecc_uncorrected();
    }
    if (has(s, wire::GPU_REMAPPED_ROWS) && s.remap_failed()) {
      fault(s.uuid(), g, "row_remap", "a memory row remap failed", {}, nowNs);
    }
    if (has(s, wire::GPU_NVLINK)) {
      if (g.seen && s.nvlink_errors() >= g.nvlinkErrors + options_.nvlinkErrors) {
        fault(s.uuid(), g, "nvlink",
              std::to_string(s.nvlink_errors() - g.nvlinkErrors) + " new NVLink errors",
              {{"nvlink_errors", static_cast<double>(s.nvlink_errors())},
               {"nvlink_errors_new", static_cast<double>(s.nvlink_errors() - g.nvlinkErrors)}},
              nowNs);
      }
      g.nvlinkErrors = s.nvlink_errors();
    }
    if (has(s, wire::GPU_CLOCKS)) g.smClockMhz = s.sm_clock_mhz();
    if (has(s, wire::GPU_TEMPERATURE)) g.temperatureC = s.temperature_c();
    if (has(s, wire::GPU_THROTTLE_TIME)) {
      g.throttleNs = s.throttle_ns();
      g.throttleHistory.emplace_back(nowNs, s.throttle_ns());
      if (g.throttleHistory.size() > kThrottleHistory) {
        g.throttleHistory.erase(g.throttleHistory.begin());
      }
    }
    if (has(s, wire::GPU_CLOCK_EVENTS)) {
      const uint64_t reasons = s.clock_event_reasons() & wire::kGpuThrottleReasons;
      if (reasons != 0) {
        g.lastThrottleNs = nowNs;
        if (g.throttleSinceNs == 0) g.throttleSinceNs = nowNs;
        g.quietSinceNs = 0;
        if (nowNs - g.throttleSinceNs >= options_.throttleNs) {
          std::string names;
          for (const auto& n : wire::gpuClockEventNames(reasons)) {
            names += (names.empty() ? "" : ", ") + n;
          }
          fault(s.uuid(), g, "throttle",
                "throttled (" + names + ") for " +
                    seconds(static_cast<double>(nowNs - g.throttleSinceNs)) + ", SM clock " +
                    std::to_string(s.sm_clock_mhz()) + " MHz, " +
                    std::to_string(s.temperature_c()) + " C",
                {{"throttled_s", static_cast<double>(nowNs - g.throttleSinceNs) / 1e9},
                 {"sm_clock_mhz", s.sm_clock_mhz()},
                 {"temperature_c", s.temperature_c()},
                 {"clock_event_reasons", static_cast<double>(reasons)}},
                nowNs);
        }
      } else {
        g.throttleSinceNs = 0;
        if (g.quietSinceNs == 0) g.quietSinceNs = nowNs;
        if (nowNs - g.quietSinceNs >= options_.throttleNs) resolve(g, "throttle", nowNs);
      }
    }
    g.seen = true;
  }
}

void GpuFaults::explain(Anomaly& a, int64_t nowNs) const {
  if (a.kind != AnomalyKind::kStraggler || a.ranks.size() != 1) return;
  auto r = rankGpu_.find({a.job, a.ranks.front()});
  if (r == rankGpu_.end()) return;
  auto it = gpus_.find(r->second);
  if (it == gpus_.end()) return;
  const Gpu& g = it->second;
  const int64_t since = nowNs - options_.explainWindowNs;
  const bool faulted = g.lastFaultNs != 0 && g.lastFaultNs >= since;
  const bool throttled = g.lastThrottleNs != 0 && g.lastThrottleNs >= since;
  if (!faulted && !throttled) return;
  // Throttle time in the window, from the cumulative NVML figure.
  double throttledS = 0;
  for (const auto& [t, ns] : g.throttleHistory) {
    if (t >= since) {
      throttledS = static_cast<double>(g.throttleNs - ns) / 1e9;
      break;
    }
  }
  a.labels["gpu_uuid"] = r->second;
  a.evidence["gpu_sm_clock_mhz"] = g.smClockMhz;
  a.evidence["gpu_temperature_c"] = g.temperatureC;
  a.evidence["gpu_throttle_s"] = throttledS;
  if (g.lastXid != 0) a.evidence["gpu_xid"] = static_cast<double>(g.lastXid);
  const std::string cause = faulted ? "gpu_fault" : "gpu_throttle";
  if (a.labels.count("cause") == 0) a.labels["cause"] = cause;
  a.summary += faulted ? "; its GPU (" + r->second + ") reported a fault (" + g.lastFault + ")"
                       : "; its GPU (" + r->second + ") was throttled (SM clock " +
                             std::to_string(g.smClockMhz) + " MHz, " +
                             std::to_string(g.temperatureC) + " C)";
}

}  // namespace trainscope::detect
