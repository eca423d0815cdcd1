// Resolves a ts_probe_config (NULL/0 fields mean "from the environment or default") into a
// complete, validated probe configuration. Pure apart from reading the environment; any thread.
#pragma once

#include <cstdint>
#include <string>

#include "agent/probe/trainscope_probe.h"
#include "common/agent_endpoint.h"
#include "common/status.h"

namespace trainscope::probe {

inline constexpr const char* kDefaultCaptureDir = "/tmp/trainscope-captures";

struct ProbeConfig {
  // Agent ROUTER endpoint: the node agent's when it is there, else this user's own agent's.
  std::string endpoint = defaultProbeEndpoint();
  std::string job;  // job id shared by every rank
  uint32_t rank = 0;
  uint32_t worldSize = 1;
  uint32_t localRank = 0;
  std::string host;
  uint32_t pid = 0;
  // Steps of full records kept for a capture's history; more costs memory, up to the byte
  // bound. 256 reaches an anomaly's onset from an automatic capture (detection, the decision
  // window and the lead put its start 1-3 s after the onset: some 150 steps at 17 ms a step;
  // 8 steps, before, never did). At 2,000 records a step that is 32 MiB.
  uint32_t flightSteps = 256;
  uint64_t flightMaxBytes = 64u << 20;  // hard bound on the flight recorder
  uint32_t ringRecords = 16384;         // per thread and instance, 64 B each; bigger rides out
                                        // longer runtime stalls without drops
  uint32_t backlogReports = 4096;       // unacked reports kept while the agent is away
  uint32_t topOps = 32;                 // operators per report; more costs bytes per report
  // Step reports of fast steps share a message to the agent (TransportOptions::batchLatencyNs):
  // at most this long a report waits for later steps ($TRAINSCOPE_BATCH_MS, 0..10000; 0: one
  // message per report as before). Longer costs the agent less CPU and delays the collector's
  // view of the job (detection, a capture's start step) by up to as much.
  int64_t batchLatencyMs = 200;
  uint32_t batchSteps = 16;  // reports that fill a message sooner ($TRAINSCOPE_BATCH_STEPS, 1..256)
  bool connectAgent = true;  // false: fold only (benchmarks, tests)
  std::string device;        // where the operators run ($TRAINSCOPE_DEVICE: "" = the host;
                             // else a name such as "cuda"), carried in each step report
  std::string gpuUuid;       // the GPU this rank uses, as NVML names it ($TRAINSCOPE_GPU_UUID,
                             // "GPU-..."; the Python package sets it from torch), in RankInfo
  std::string captureDir = kDefaultCaptureDir;  // capture files for the agent to ship
                                                // ($TRAINSCOPE_CAPTURE_DIR); needs room for
                                                // max_bytes per running capture
};

// NULL `config` means all defaults. The error names the offending field or variable.
Result<ProbeConfig> resolveConfig(const ts_probe_config* config);

}  // namespace trainscope::probe
