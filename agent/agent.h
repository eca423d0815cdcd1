// Agent: the per-node daemon. Takes probe batches on a local ROUTER, spools them to disk,
// samples host metrics, and streams everything to the collector over a DEALER with acks,
// resends, heartbeats and clock-offset estimation (schema/PROTOCOL.md); with several
// collectors, each job's data to the one its name hashes to (agent/routing.h).
// One thread runs the event loop (start() then run()); stop() and stats() may be called from
// any thread, and stop() also from a signal handler.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agent/options.h"
#include "common/status.h"

namespace trainscope::agent {

inline constexpr const char* kAgentVersion = "0.1.0";
// Upstream batches are cut at whichever comes first; both stay far below wire::kMaxFrameBytes.
inline constexpr size_t kMaxBatchItems = 512;
inline constexpr size_t kMaxBatchBytes = 1u << 20;

// One collector link's state (one per --collector).
struct CollectorLinkStats {
  std::string endpoint;
  bool connected = false;  // handshake done, not disconnected since
  bool up = false;         // in the hashing: heard from within --collector-timeout-ms
  uint64_t acked = 0;      // spool index below which this link's records are acked
  uint64_t batches = 0;    // batches sent to it (resends included)
  uint64_t resends = 0;
};

// A snapshot of the agent's counters, for tests and logs. Upstream counters are summed over
// the collectors; the clock offset is the first collector's that has one.
struct AgentStats {
  uint64_t probeFrames = 0;                 // frames received from probes
  uint64_t probeBatches = 0;                // probe batches spooled and acked
  uint64_t probeItems = 0;                  // items spooled from probe batches
  std::map<std::string, uint64_t> rejects;  // probe frames/items rejected, by reason
  uint32_t ranks = 0;                       // ranks registered now
  uint64_t hellosAfterGoodbye = 0;          // hellos of ended ranks, ignored
  uint64_t probeDrainsCut = 0;              // drains stopped at their byte bound (rest later)
  uint64_t hostSamples = 0;                 // HostSamples spooled
  uint64_t upstreamBatches = 0;             // batches sent upstream (resends included)
  uint64_t upstreamResends = 0;             // times sending restarted from the oldest unacked batch
  uint64_t upstreamAcked = 0;               // spool index acked by the collector
  uint64_t upstreamErrors = 0;              // ErrorReply messages from the collector
  uint64_t heartbeatsSent = 0;
  uint64_t heartbeatReplies = 0;
  bool haveOffset = false;  // at least one valid heartbeat round trip
  int64_t offsetNs = 0;     // collector clock minus agent clock (lowest-rtt sample)
  int64_t rttNs = 0;
  bool collectorConnected = false;             // to at least one collector
  std::vector<CollectorLinkStats> collectors;  // in --collector order
  uint64_t reroutes = 0;           // times the set of collectors up changed and jobs moved
  uint64_t commandsForwarded = 0;  // Command envelopes handed to probes
  uint64_t commandsUnmatched = 0;  // Commands with no registered rank on this node
  uint64_t filesShipped = 0;       // capture files spooled in full as FileChunks and deleted
  uint64_t filesFailed = 0;        // capture files refused or unreadable (failed status sent)
  uint64_t fileBytesShipped = 0;   // bytes of capture files spooled
  uint32_t uploadsActive = 0;      // capture files queued or being read now
  uint64_t fileBytesHeld = 0;      // capture-file chunk bytes in the spool, not yet acked
  bool uploadWaiting = false;      // the front upload waits for room in the spool (or acks)
  uint64_t spoolBytes = 0;
  uint64_t spoolPending = 0;  // records not yet acked by the collector
  uint64_t spoolDropped = 0;  // records lost to the spool bound
};

class Agent {
 public:
  explicit Agent(AgentOptions opts);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Opens the spool, binds the probe endpoint and connects upstream. Fails with a clear
  // message when the endpoint is held by a live agent or the spool cannot be used.
  Status start();
  // Runs the event loop until stop(); then syncs the spool. Call from the thread that
  // called start().
  Status run();
  // Any thread, async-signal-safe.
  void stop();
  // Any thread.
  AgentStats stats() const;
  // The probe endpoint actually bound (resolves tcp://...:* to its port). After start().
  std::string boundEndpoint() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// start() + run() with SIGINT/SIGTERM wired to stop(); what trainscope-agent's main calls.
// Returns the process exit code: 0 after a clean stop, 1 when start-up failed.
int run(const AgentOptions& opts);

}  // namespace trainscope::agent
