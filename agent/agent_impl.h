// Private to the agent: Agent::Impl, the state the event loop owns, and the constants its
// source files share (agent.cpp: start-up and the loop; agent_probes.cpp: the probe ROUTER;
// agent_upstream.cpp: the collector DEALER). Only the loop thread touches Impl, except
// stopRequested, stopFd and the stats lock (see agent.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include <zmq.hpp>

#include "agent/agent.h"
#include "agent/clock_offset.h"
#include "agent/host_metrics.h"
#include "agent/spool.h"
#include "common/log.h"
#include "schema/wire.h"

namespace trainscope::agent {
namespace internal {

constexpr std::string_view kLog = "agent";
constexpr int64_t kMs = 1'000'000;
// After a send finds no connected collector, wait this long before trying again.
constexpr int64_t kRetryNs = 100 * kMs;
// Messages handled per socket per loop turn, so one busy side cannot starve timers.
constexpr int kDrainLimit = 1024;
// Items larger than this could not fit a batch frame upstream.
constexpr size_t kMaxItemBytes = wire::kMaxFrameBytes - 4096;
// Capture-file bytes read and spooled per loop turn: a 64 MiB file takes 16 turns of a few
// milliseconds each instead of one long stall of heartbeats and probe acks.
constexpr uint64_t kUploadBytesPerTurn = 4u << 20;
// Uploads remembered after they finish, so a probe's resent "uploading" status (its ack was
// lost) is not answered with "cannot open" for a file already shipped and deleted.
constexpr size_t kFinishedUploadsKept = 256;
// A chunk the spool refuses is tried again after this long, and the file given up (failed
// status) after kUploadTries refusals in a row.
constexpr int64_t kUploadRetryNs = 1000 * kMs;
constexpr int kUploadTries = 5;

inline std::string hostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace internal

struct Agent::Impl {
  struct RankEntry {
    wire::RankInfo info;
    std::string routingId;
    int64_t lastSeenMono = 0;
  };
  // A capture file being shipped in FileChunks (docs/CAPTURE.md step 4).
  struct Upload {
    wire::CommandStatus status;  // the probe's "uploading" status: command, job, rank, file
    std::string resolved;        // realpath of status.file_path, under the capture dir
    int fd = -1;
    uint64_t size = 0;    // at open; the file is complete when the probe reports it
    uint64_t offset = 0;  // next byte to ship
    std::string journal;  // <spool>/uploads/<name>: resumes the upload after a restart
  };
  struct InFlight {
    uint64_t seq = 0;  // spool index after the batch's last record
    int64_t sentMono = 0;
  };

  explicit Impl(AgentOptions o) : opts(std::move(o)), sampler(opts.procRoot) {}

  AgentOptions opts;
  zmq::context_t ctx{1};
  zmq::socket_t probes{ctx, zmq::socket_type::router};
  zmq::socket_t upstream{ctx, zmq::socket_type::dealer};
  zmq::socket_t monitor{ctx, zmq::socket_type::pair};
  int stopFd = -1;
  std::atomic<bool> stopRequested{false};
  std::string bound;
  std::string ipcPath;  // removed on exit

  std::unique_ptr<Spool> spool;
  HostSampler sampler;
  ClockOffsetEstimator offsets;
  std::map<std::pair<std::string, uint32_t>, RankEntry> ranks;

  // Upstream sending state.
  uint64_t sendCursor = 0;        // next spool index to send
  uint64_t highestSent = 0;       // highest batch seq ever sent (acks above it are bogus)
  std::string heldFrame;          // a built batch the socket refused, sent again as is
  uint64_t heldSeq = 0;           // its seq; 0 when none is held
  std::deque<InFlight> inflight;  // oldest first
  int64_t unsentSinceMono = 0;    // when the oldest unsent record was appended; 0: none
  int64_t retryAtMono = 0;        // no send attempts before this
  bool connected = false;

  // Timers (monotonic ns).
  int64_t nextSample = 0, nextHeartbeat = 0, nextHello = 0, nextSync = 0;
  int64_t nextProbeDrain = 0;  // the probe socket is not polled before this

  // What one drain of the probe socket collected: written with one append, then acked.
  std::vector<std::string> inRecords;
  std::vector<std::pair<std::string, uint64_t>> inAcks;  // routing id, batch seq
  uint64_t inBatchItems = 0;

  // Capture files (agent_files.cpp).
  std::string spoolDir;                        // resolved at start; holds the upload journal
  std::deque<Upload> uploads;                  // shipped in order, a few MiB per loop turn
  std::vector<wire::CommandStatus> inUploads;  // "uploading" statuses of this drain
  std::deque<std::string> finishedUploads;     // keys of recently finished uploads
  int64_t uploadRetryAtMono = 0;               // no chunk is read before this
  int uploadFailures = 0;                      // spool refusals in a row

  RateLimitedLog rejectLog{std::chrono::seconds(5)};
  RateLimitedLog upstreamLog{std::chrono::seconds(5)};
  RateLimitedLog spoolLog{std::chrono::seconds(5)};

  AgentStats counters;  // loop thread only
  mutable std::mutex statsMu;
  AgentStats published;  // guarded by statsMu

  Status start();
  Status run();
  void drainProbes(int64_t now);
  void flushProbeInput(int64_t now);
  void handleProbeFrame(const std::string& rid, const zmq::message_t& frame, int64_t now);
  void registerRank(const std::string& rid, const wire::RankInfo& info, int64_t now, bool* changed);
  void reject(const std::string& rid, const std::string& reason, const std::string& detail);
  void sendToProbe(const std::string& rid, wire::Envelope& env);
  void drainUpstream(int64_t now);
  void handleAck(uint64_t seq);
  void forwardCommand(const wire::Command& cmd);
  void drainMonitor(int64_t now);
  bool spoolItems(const std::vector<std::string>& records, int64_t now);
  void sendHello();
  void sendHeartbeat();
  void takeSample(int64_t now);
  void pumpUpstream(int64_t now);
  void resumeUploads();
  void queueUpload(const wire::CommandStatus& status, bool resumed);
  void pumpUploads(int64_t now);
  void finishUpload(Upload& up, const std::string& failure);
  void spoolCommandStatus(const std::string& commandId, const std::string& job, uint32_t rank,
                          const std::string& state, const std::string& detail);
  void restartFromAcked(const std::string& why);
  int64_t nextDeadline(int64_t now) const;
  void publish();
};

}  // namespace trainscope::agent
