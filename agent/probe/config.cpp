#include "agent/probe/config.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string_view>

#include "common/clock.h"

namespace trainscope::probe {
namespace {

const char* envOrNull(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

// Parses a non-negative decimal integer from the environment variable `name`.
Status intFromEnv(const char* name, int64_t* out, bool* found) {
  *found = false;
  const char* v = envOrNull(name);
  if (v == nullptr) return Status::ok();
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n < 0 || n > INT32_MAX) {
    return Status::error(std::string("environment variable ") + name + "='" + v +
                         "' is not a non-negative integer");
  }
  *out = n;
  *found = true;
  return Status::ok();
}

}  // namespace

Result<ProbeConfig> resolveConfig(const ts_probe_config* config) {
  ts_probe_config defaults;
  ts_config_init(&defaults);
  const ts_probe_config& c = config != nullptr ? *config : defaults;
  ProbeConfig out;

  if (c.agent_endpoint != nullptr) {
    out.endpoint = c.agent_endpoint;
  } else if (const char* v = envOrNull("TRAINSCOPE_AGENT")) {
    out.endpoint = v;
  }
  if (out.endpoint.empty()) return Result<ProbeConfig>::error("agent_endpoint is empty");
  const std::string_view ep(out.endpoint);
  if (ep.substr(0, 6) != "ipc://" && ep.substr(0, 6) != "tcp://" &&
      ep.substr(0, 9) != "inproc://") {
    return Result<ProbeConfig>::error("agent_endpoint '" + out.endpoint +
                                      "' must start with ipc://, tcp:// or inproc://");
  }

  if (c.job != nullptr && *c.job != '\0') {
    out.job = c.job;
  } else if (const char* v = envOrNull("TRAINSCOPE_JOB")) {
    out.job = v;
  } else if (const char* v = envOrNull("SLURM_JOB_ID")) {
    out.job = v;
  } else if (const char* v = envOrNull("TORCHELASTIC_RUN_ID")) {
    out.job = v;
  }

  if (c.host != nullptr && *c.host != '\0') {
    out.host = c.host;
  } else {
    char buf[256] = {};
    if (gethostname(buf, sizeof(buf) - 1) == 0) out.host = buf;
    if (out.host.empty()) out.host = "unknown-host";
  }
  out.pid = c.pid != 0 ? c.pid : static_cast<uint32_t>(getpid());
  if (out.job.empty()) {
    out.job = out.host + "-" + std::to_string(out.pid) + "-" +
              std::to_string(wallNowNs() / 1'000'000'000);
  }

  int64_t n = 0;
  bool found = false;
  if (c.rank >= 0) {
    out.rank = static_cast<uint32_t>(c.rank);
  } else {
    if (Status s = intFromEnv("RANK", &n, &found); !s) return s;
    out.rank = found ? static_cast<uint32_t>(n) : 0;
  }
  if (c.world_size > 0) {
    out.worldSize = static_cast<uint32_t>(c.world_size);
  } else {
    if (Status s = intFromEnv("WORLD_SIZE", &n, &found); !s) return s;
    out.worldSize = found ? static_cast<uint32_t>(n) : 1;
    if (found && n == 0) return Result<ProbeConfig>::error("WORLD_SIZE must be at least 1");
  }
  if (c.local_rank >= 0) {
    out.localRank = static_cast<uint32_t>(c.local_rank);
  } else {
    if (Status s = intFromEnv("LOCAL_RANK", &n, &found); !s) return s;
    out.localRank = found ? static_cast<uint32_t>(n) : out.rank;
  }
  if (out.rank >= out.worldSize) {
    return Result<ProbeConfig>::error("rank " + std::to_string(out.rank) +
                                      " must be less than world_size " +
                                      std::to_string(out.worldSize));
  }
  if (out.localRank >= out.worldSize) {
    return Result<ProbeConfig>::error("local_rank " + std::to_string(out.localRank) +
                                      " must be less than world_size " +
                                      std::to_string(out.worldSize));
  }

  if (c.flight_steps != 0) out.flightSteps = c.flight_steps;
  if (c.flight_max_bytes != 0) out.flightMaxBytes = c.flight_max_bytes;
  if (c.ring_records != 0) {
    if ((c.ring_records & (c.ring_records - 1)) != 0 || c.ring_records < 64 ||
        c.ring_records > (1u << 24)) {
      return Result<ProbeConfig>::error("ring_records " + std::to_string(c.ring_records) +
                                        " must be a power of two between 64 and 16777216");
    }
    out.ringRecords = c.ring_records;
  }
  if (c.backlog_reports != 0) out.backlogReports = c.backlog_reports;
  if (c.top_ops != 0) out.topOps = c.top_ops;
  if (c.connect_agent > 1) {
    return Result<ProbeConfig>::error("connect_agent must be 0 (connect) or 1 (fold only)");
  }
  out.connectAgent = c.connect_agent == 0;
  if (const char* v = envOrNull("TRAINSCOPE_CAPTURE_DIR")) out.captureDir = v;
  if (Status s = intFromEnv("TRAINSCOPE_BATCH_MS", &n, &found); !s) return s;
  if (found) {
    if (n > 10000) {
      return Result<ProbeConfig>::error("environment variable TRAINSCOPE_BATCH_MS=" +
                                        std::to_string(n) + " must be within 0..10000");
    }
    out.batchLatencyMs = n;
  }
  if (Status s = intFromEnv("TRAINSCOPE_BATCH_STEPS", &n, &found); !s) return s;
  if (found) {
    if (n < 1 || n > 256) {
      return Result<ProbeConfig>::error("environment variable TRAINSCOPE_BATCH_STEPS=" +
                                        std::to_string(n) + " must be within 1..256");
    }
    out.batchSteps = static_cast<uint32_t>(n);
  }
  if (const char* v = envOrNull("TRAINSCOPE_DEVICE")) {
    const std::string device = v;
    const bool ok = device.size() <= 16 && std::all_of(device.begin(), device.end(), [](char c) {
                      return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
                    });
    if (!ok) {
      return Result<ProbeConfig>::error(
          "environment variable TRAINSCOPE_DEVICE='" + device +
          "' must be a device name of at most 16 lowercase letters, digits or '_' (e.g. cuda)");
    }
    out.device = device;
  }
  if (const char* v = envOrNull("TRAINSCOPE_GPU_UUID")) {
    const std::string uuid = v;
    const bool ok = uuid.size() <= 96 && std::all_of(uuid.begin(), uuid.end(), [](char c) {
                      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                             (c >= '0' && c <= '9') || c == '-';
                    });
    if (!ok) {
      return Result<ProbeConfig>::error("environment variable TRAINSCOPE_GPU_UUID='" + uuid +
                                        "' must be a GPU UUID as NVML spells it (GPU-...), at "
                                        "most 96 letters, digits or '-'");
    }
    out.gpuUuid = uuid;
  }
  return out;
}

}  // namespace trainscope::probe
