// GpuFaults: the gpu_fault detector, and what a straggler's GPU did. Fed the GPU each rank said
// it uses (RankInfo.gpu_uuid), the ranks' latest steps, and each node's host samples with their
// GPU readings and events (NVML through the agent); emits gpu_fault anomalies naming the ranks
// whose GPU it is. Pure: no I/O, time comes in with the samples. Not thread-safe: its
// DetectorSet's caller serializes every call.
//
// Why these causes: an Xid is the driver saying the GPU failed something (79: fell off the bus,
// 48: double-bit ECC, 63/64: row remapping, 31/13: a kernel's fault); an uncorrected ECC error
// or a failed row remap corrupts or loses memory; NVLink replay/CRC errors slow or fail the
// collectives that cross the link; a lost GPU is gone. A job on such a GPU is wrong or about to
// stop, so each opens at once. Throttling (power or thermal clock-event reasons, wire.h
// kGpuThrottleReasons) is only a fault when it lasts: boost clocks dip for a moment on any busy
// GPU, while a GPU held down for throttleSeconds computes slower for as long as the cause (a
// failed fan, a power cap) stays, and its peers wait for it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "collector/detect/anomaly.h"
#include "collector/detect/events.h"
#include "collector/detect/options.h"
#include "schema/trainscope.pb.h"

namespace trainscope::detect {

class GpuFaults {
 public:
  explicit GpuFaults(GpuFaultOptions options = {});

  // The GPU a rank uses, from its hello; an empty uuid forgets the rank's GPU.
  void rankGpu(const std::string& job, uint32_t rank, const std::string& uuid,
               const std::string& node);
  // The latest step a rank reported: where an anomaly opens.
  void rankStep(const std::string& job, uint32_t rank, int64_t step);
  // One host sample of `node`, received at `nowNs` (collector clock).
  void hostSample(const std::string& node, const wire::HostSample& host, int64_t nowNs);
  // Forgets a job's ranks (its open gpu_faults stay as they are).
  void forgetJob(const std::string& job);

  // What the GPU of a straggler did: when `a` is a straggler and its rank's GPU throttled or
  // faulted within explainWindowNs before `nowNs`, sets labels cause "gpu_fault" or
  // "gpu_throttle" (unless a cause is set), gpu_uuid, and evidence (throttle seconds in the
  // window, SM clock, temperature, xid), and says so in the summary.
  void explain(Anomaly& a, int64_t nowNs) const;

  std::vector<Anomaly> takeEvents() { return log_.take(); }

 private:
  struct Gpu {
    std::string node;
    uint32_t index = 0;
    bool seen = false;  // a sample came: the counters below are a baseline
    uint64_t eccUncorrected = 0;
    uint64_t nvlinkErrors = 0;
    int64_t throttleNs = 0;       // the latest cumulative NVML throttle time
    int64_t throttleSinceNs = 0;  // collector clock the current throttling began; 0: none
    int64_t quietSinceNs = 0;     // collector clock throttling last stopped
    int64_t lastThrottleNs = 0;   // collector clock of the latest throttled sample
    int64_t lastFaultNs = 0;      // collector clock of the latest fault
    std::string lastFault;        // its cause: "xid", "ecc", "nvlink", "lost", "row_remap"
    uint64_t lastXid = 0;
    uint32_t smClockMhz = 0;
    uint32_t temperatureC = 0;
    // Throttle time NVML reported, by sample: (collector clock, cumulative ns), the window.
    std::vector<std::pair<int64_t, int64_t>> throttleHistory;
    std::map<std::string, Anomaly> open;  // by "job/cause"
  };
  struct RankKey {
    std::string job;
    uint32_t rank = 0;
    bool operator<(const RankKey& o) const { return job != o.job ? job < o.job : rank < o.rank; }
  };

  // Opens a gpu_fault of `cause` on every job whose ranks use `uuid`, once per job and cause
  // while open.
  void fault(const std::string& uuid, Gpu& g, const std::string& cause, const std::string& what,
             std::map<std::string, double> evidence, int64_t nowNs);
  void resolve(Gpu& g, const std::string& cause, int64_t nowNs);
  // The ranks of each job that use `uuid`.
  std::map<std::string, std::vector<uint32_t>> users(const std::string& uuid) const;

  GpuFaultOptions options_;
  EventLog log_;
  std::map<std::string, Gpu> gpus_;         // by uuid
  std::map<RankKey, std::string> rankGpu_;  // (job, rank) -> uuid
  std::map<RankKey, int64_t> rankStep_;     // (job, rank) -> latest step
};

}  // namespace trainscope::detect
