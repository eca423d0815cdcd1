#include "agent/options.h"

#include <grp.h>
#include <unistd.h>

#include <vector>

namespace trainscope::agent {
namespace {

bool hasScheme(const std::string& ep) {
  return (ep.rfind("tcp://", 0) == 0 && ep.size() > 6) ||
         (ep.rfind("ipc://", 0) == 0 && ep.size() > 6);
}

}  // namespace

Result<uint32_t> groupId(const std::string& group) {
  if (!group.empty() && group.size() <= 10 &&
      group.find_first_not_of("0123456789") == std::string::npos) {
    const uint64_t v = std::stoull(group);
    if (v < UINT32_MAX) return static_cast<uint32_t>(v);
  }
  std::vector<char> buf(16384);
  struct group gr {};
  struct group* found = nullptr;
  const int err = ::getgrnam_r(group.c_str(), &gr, buf.data(), buf.size(), &found);
  if (err != 0 || found == nullptr) {
    return Result<uint32_t>::error("--endpoint-group: no group '" + group +
                                   "' on this node (a group name or a number)");
  }
  return static_cast<uint32_t>(found->gr_gid);
}

Status finalizeOptions(AgentOptions& opts) {
  if (opts.collectors.empty()) {
    return Status::error("--collector: at least one is needed (e.g. tcp://collector:7601)");
  }
  for (size_t i = 0; i < opts.collectors.size(); ++i) {
    const std::string& c = opts.collectors[i];
    if (!hasScheme(c)) {
      return Status::error("--collector: '" + c +
                           "' must start with tcp:// or ipc:// (e.g. tcp://collector:7601)");
    }
    for (size_t j = 0; j < i; ++j) {
      if (opts.collectors[j] == c) {
        return Status::error("--collector: '" + c + "' is listed twice");
      }
    }
  }
  if (!hasScheme(opts.endpoint)) {
    return Status::error("--endpoint: '" + opts.endpoint +
                         "' must start with ipc:// or tcp:// (e.g. " + defaultAgentEndpoint() +
                         ")");
  }
  if (opts.node.empty()) {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') {
      return Status::error("--node: not given and the hostname cannot be read");
    }
    opts.node = buf;
  }
  if (opts.node.find('/') != std::string::npos) {
    return Status::error("--node: '" + opts.node + "' must not contain '/'");
  }
  if (opts.spoolDir.empty()) opts.spoolDir = "/var/tmp/trainscope/spool-" + opts.node;
  if (opts.spoolMaxBytes < (64u << 10)) {
    return Status::error("--spool-max-bytes: " + std::to_string(opts.spoolMaxBytes) +
                         " is below the minimum of 65536");
  }
  struct Positive {
    const char* flag;
    int value;
  };
  for (const Positive& p :
       {Positive{"--sample-interval-ms", opts.sampleIntervalMs},
        Positive{"--heartbeat-interval-ms", opts.heartbeatIntervalMs},
        Positive{"--hello-interval-ms", opts.helloIntervalMs},
        Positive{"--resend-timeout-ms", opts.resendTimeoutMs},
        Positive{"--window", opts.windowBatches}, Positive{"--rank-expiry-ms", opts.rankExpiryMs},
        Positive{"--sync-interval-ms", opts.syncIntervalMs},
        Positive{"--collector-timeout-ms", opts.collectorTimeoutMs}}) {
    if (p.value <= 0) {
      return Status::error(std::string(p.flag) + ": must be positive, got " +
                           std::to_string(p.value));
    }
  }
  if (opts.probeCoalesceMs < 0 || opts.probeCoalesceMs > 500) {
    return Status::error("--probe-coalesce-ms: must be within 0..500, got " +
                         std::to_string(opts.probeCoalesceMs));
  }
  if (opts.batchLingerMs < 0) {
    return Status::error("--batch-linger-ms: must not be negative, got " +
                         std::to_string(opts.batchLingerMs));
  }
  if (opts.spoolFileBytes == 0) opts.spoolFileBytes = opts.spoolMaxBytes / 4;
  if (opts.spoolFileBytes > opts.spoolMaxBytes / 2) {
    return Status::error("--spool-file-bytes: " + std::to_string(opts.spoolFileBytes) +
                         " is more than half of --spool-max-bytes (" +
                         std::to_string(opts.spoolMaxBytes) + "); telemetry keeps the rest");
  }
  if (opts.collectorKeyFile.empty() != opts.agentKeyFile.empty()) {
    return Status::error(
        std::string(opts.agentKeyFile.empty() ? "--agent-key" : "--collector-key") +
        ": CurveZMQ needs both --collector-key and --agent-key");
  }
  if (opts.endpointMode > 0777) {
    return Status::error("--endpoint-mode: must be an octal mode within 0..0777, got " +
                         std::to_string(opts.endpointMode) + " (decimal)");
  }
  if (!opts.endpointGroup.empty()) {
    if (auto gid = groupId(opts.endpointGroup); !gid) return gid.status();
  }
  if (opts.maxFileBytes == 0) return Status::error("--max-file-bytes: must be positive");
  if (opts.procRoot.empty()) return Status::error("--proc-root: must not be empty");
  if (opts.captureDir.empty() || opts.captureDir[0] != '/') {
    return Status::error("--capture-dir: must be an absolute path, got '" + opts.captureDir + "'");
  }
  return Status::ok();
}

}  // namespace trainscope::agent
