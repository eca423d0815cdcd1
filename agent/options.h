// AgentOptions: everything trainscope-agent can be told at start-up. Filled once by the flags
// in agent/main.cpp (or by a test), then read-only; any thread may read it.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/agent_endpoint.h"
#include "common/log.h"
#include "common/status.h"

namespace trainscope::agent {

// Where probes write capture files: $TRAINSCOPE_CAPTURE_DIR, else /tmp/trainscope-captures
// (the probe's own default, docs/CAPTURE.md).
inline std::string defaultCaptureDir() {
  const char* env = std::getenv("TRAINSCOPE_CAPTURE_DIR");
  return env != nullptr && env[0] != '\0' ? env : "/tmp/trainscope-captures";
}

struct AgentOptions {
  // Where the collector's ingest ROUTER listens. Only tcp:// and ipc:// are accepted. Several:
  // each job's data goes to the one its name hashes to among those up (agent/routing.h); every
  // agent must list the same endpoints, spelled the same (the spelling is what is hashed), and
  // the collectors should share one store (ClickHouse) so any of them serves every job.
  std::vector<std::string> collectors = {"tcp://127.0.0.1:7601"};
  // With several collectors: one not heard from (acks, heartbeat replies) for this long is taken
  // as gone and its jobs move to the others. Shorter moves jobs sooner after a crash; too short
  // moves them at a collector's brief stall (each move restarts the job's detection elsewhere).
  // Keep it a few heartbeat intervals.
  int collectorTimeoutMs = 5000;
  // Where probes connect (ROUTER bound here). ipc:// keeps traffic local to the node; a
  // stale socket file from a dead agent is removed, a live agent there makes us refuse. The
  // default (common/agent_endpoint.h) lies in a directory of our own, mode 0700, which the
  // agent creates; probes find it without configuration when they run as the same user.
  std::string endpoint = defaultAgentEndpoint();
  // Mode of an ipc:// endpoint's socket file, set after bind (the umask would leave 0755, and
  // connecting needs write permission). The default lets the directory decide who reaches the
  // socket: the default endpoint's is 0700, and an --endpoint in a directory other users can
  // enter serves their probes, as a root agent for every user's jobs needs. 0660 with
  // endpointGroup narrows it to that group's users.
  uint32_t endpointMode = 0666;
  // Group given to an ipc:// endpoint's socket file after bind (a name or a number). Empty:
  // the agent's own group. With endpointMode 0660 only this group's users (and root) connect;
  // others get "permission denied" from their probes.
  std::string endpointGroup;
  // This node's name in RankInfo.node, HostSample.node and heartbeats. Empty: hostname.
  std::string node;
  // Spool directory. Empty: /var/tmp/trainscope/spool-<node>. Survives restarts; one agent
  // per directory (a lock file enforces it).
  std::string spoolDir;
  // Disk the spool may use. Past it the oldest segment is dropped (data loss, counted);
  // larger rides out longer collector outages.
  uint64_t spoolMaxBytes = 1ull << 30;
  // Size of one spool segment file. Smaller trims acked data sooner and drops less at once
  // when full; larger means fewer files. Clamped to at most a quarter of spoolMaxBytes.
  uint64_t spoolSegmentBytes = 4ull << 20;
  // Host metric sampling period. Shorter gives finer host graphs for more spool traffic.
  int sampleIntervalMs = 1000;
  // Heartbeat period (clock-offset samples, liveness). Shorter converges the offset faster.
  int heartbeatIntervalMs = 1000;
  // AgentHello period; the collector learns of a restarted agent within this time.
  int helloIntervalMs = 10000;
  // How long spooled items may wait to fill an upstream batch. Longer means fewer, larger
  // batches (less CPU) for more delivery latency.
  int batchLingerMs = 100;
  // Least time between two reads of the probe socket. Longer wakes the agent less often
  // (less CPU with many ranks) for later acks; probes resend only after 1 s without one.
  int probeCoalesceMs = 50;
  // Upstream batches in flight before waiting for an ack. More hides latency, resends more.
  int windowBatches = 4;
  // Resend from the oldest unacked batch after this long without an ack.
  int resendTimeoutMs = 2000;
  // A rank with no RankHello for this long is forgotten (probes say hello every 2 s).
  int rankExpiryMs = 30000;
  // How often the acked position is persisted and segments are fsync'ed. Shorter replays
  // fewer duplicates after a crash for more disk writes.
  int syncIntervalMs = 1000;
  // Capture files named in probes' "uploading" statuses are shipped (and deleted) only when
  // their real path lies under this directory's real path, and only regular files with one
  // link owned by the uid of the probe that named them (agent/uploads.h); anything else is
  // refused, since any local process can talk to the probe endpoint. Must match the probes'
  // directory.
  std::string captureDir = defaultCaptureDir();
  // Largest capture file shipped; a larger one is refused (failed status). The probes' own
  // bound is the capture's max_bytes (64 MiB by default), so this only stops files no probe
  // would write.
  uint64_t maxFileBytes = 1ull << 30;
  // Spool bytes that capture-file chunks may hold unacked. File chunks never evict anything
  // from the spool: past this share, or when the spool is full, an upload waits for the
  // collector's acks. The rest of the spool stays for telemetry. 0: a quarter of
  // spoolMaxBytes. Larger ships big files faster over a slow link; at most half the spool.
  uint64_t spoolFileBytes = 0;
  // CurveZMQ to a collector started with --curve-keys (common/curve_keys.h): the collector's
  // public key file (its server.pub) and this agent's key file (NAME.key, mode 0600, from
  // `trainscope keygen --name NODE`; the collector must hold NAME.pub in its agents/, and
  // NAME must be this node). Both or neither; neither = plain text.
  std::string collectorKeyFile;
  std::string agentKeyFile;
  // Root of the proc filesystem; tests point it at a fixture tree.
  std::string procRoot = "/proc";
  // Lines below this level are not logged.
  LogLevel logLevel = LogLevel::kInfo;
};

// The gid of --endpoint-group `group` (a name, or a number); an error naming the flag when no
// such group exists.
Result<uint32_t> groupId(const std::string& group);

// Fills derived defaults (node from the hostname, spool dir from the node) and checks every
// field, naming the flag in the message when one is wrong.
Status finalizeOptions(AgentOptions& opts);

}  // namespace trainscope::agent
