// ProbeSide: the agent's side of the probe -> agent hop (schema/PROTOCOL.md). It owns the
// ROUTER on the local endpoint, the registry of ranks (routing id, pid, last hello), the
// intake of probe batches (written to the spool with one append per drain, and acked only
// after that write), the rejects, and the commands handed down to probes.
// Memory taken from probes is bounded in bytes, since any local process can send: a message
// larger than wire::kMaxFrameBytes is refused by ZeroMQ (ZMQ_MAXMSGSIZE: the connection is
// dropped before the message is read into memory), at most kProbeRcvHwm messages wait per
// connection (ZMQ_RCVHWM; past that ZeroMQ stops reading the connection), and one drain stops
// taking messages once kDrainByteLimit bytes are held (the rest wait in ZeroMQ for the next
// drain, counted in drainsCut). A flood of 8 MB frames from one probe so holds about
// 16 x 8 MB queued plus 32 MiB in a drain, not gigabytes (tools/bench/agent_flood_bench).
// A (job, rank) belongs to the uid that registered it first (SO_PEERCRED of its ipc
// connection): a hello or goodbye for it from another uid is refused as rank_claimed, so one
// local user cannot take over another's rank and its commands. The same uid may register it
// again from another process or connection, as a restarted rank does.
// Owned by the agent's loop thread; nothing in it is touched from another thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "agent/agent.h"
#include "agent/host_metrics.h"
#include "agent/options.h"
#include "agent/spool_writer.h"
#include "common/log.h"
#include "common/status.h"
#include "schema/wire.h"

namespace trainscope::agent {

// The uid of a probe whose connection carries none (tcp://).
inline constexpr uint32_t kUnknownUid = UINT32_MAX;
// Bytes of probe messages one drain takes before it spools and acks them; the rest wait for
// the next drain. Far above what probes send in one coalescing period (a report is a few KiB).
inline constexpr size_t kDrainByteLimit = 32u << 20;
// Messages queued per probe connection inside ZeroMQ before it stops reading that connection.
// A probe keeps at most backlogReports / batchMaxItems (16) batches unacked; more only waits.
inline constexpr int kProbeRcvHwm = 16;

class ProbeSide {
 public:
  ProbeSide(zmq::context_t& ctx, const AgentOptions& opts, SpoolWriter& spool);
  ~ProbeSide();  // closes the socket and removes the ipc socket file it bound
  ProbeSide(const ProbeSide&) = delete;
  ProbeSide& operator=(const ProbeSide&) = delete;

  // Claims opts.endpoint's ipc:// path; called before anything else is set up: the default
  // endpoint's directory is made (ensureNodeSocketDir for root's, which every user's probes
  // reach; ensurePrivateDir for another user's), a stale socket file is removed, a live agent
  // there makes this fail.
  static Status claimEndpoint(const AgentOptions& opts);
  // Binds the ROUTER on the claimed endpoint.
  Status bind();
  void* handle() { return socket_.handle(); }
  // The endpoint actually bound (tcp://...:* resolved to its port); empty before bind().
  const std::string& boundEndpoint() const { return bound_; }

  // Reads what the probes sent (at most kDrainLimit messages and about kDrainByteLimit bytes),
  // spools it with one write and acks the batches that write held.
  void drain(int64_t nowMono);
  // Hands a collector's command to the matching probes; every named rank without a probe
  // here gets a "failed" status at once (docs/CAPTURE.md step 2).
  void forwardCommand(const wire::Command& cmd);
  // Forgets ranks that sent no hello for rankExpiryMs (they crashed without a goodbye).
  void expireRanks(int64_t nowMono);
  // The processes of the registered ranks, for host sampling.
  std::vector<WatchedProc> watchedProcs() const;
  uint32_t rankCount() const { return static_cast<uint32_t>(ranks_.size()); }
  // Copies this part's counters into `s`.
  void fill(AgentStats& s) const;

  // Called for each "uploading" status naming a file, once its batch is spooled, with the uid
  // of the process that sent it (SO_PEERCRED of its ipc connection; kUnknownUid over tcp).
  std::function<void(const wire::CommandStatus&, uint32_t uid)> onUploading;

 private:
  struct RankEntry {
    wire::RankInfo info;
    std::string routingId;
    int64_t lastSeenMono = 0;
    uint32_t uid = kUnknownUid;  // of the probe that registered it first; only it may change it
  };
  // A rank that said goodbye: a hello its probe queued before the goodbye and delivered after
  // it (a resend, a late batch) must not register the ended rank again, or the /proc watch
  // would report its exited process as gone without a goodbye.
  struct EndedRank {
    std::string job;
    uint32_t rank = 0;
    uint32_t pid = 0;       // 0: the rank was not registered when it said goodbye
    std::string routingId;  // its probe's connection
  };

  // The uid of the process that sent `frame` (kUnknownUid when the transport has none).
  uint32_t peerUid(const zmq::message_t& frame) const;
  // Whether a process of `uid` may speak for (job, rank): the rank is not registered, or was
  // registered by the same uid. Refuses (rank_claimed) and counts otherwise.
  bool mayClaim(const std::string& rid, const std::string& job, uint32_t rank, uint32_t uid,
                const char* what);
  void handleFrame(const std::string& rid, const zmq::message_t& frame, int64_t now);
  // The fast path for a Batch frame as probes send it (wire::splitBatch): false, having taken
  // nothing, when the frame does not split or one of its non-step items does not parse.
  bool takeSplitBatch(const std::string& rid, const zmq::message_t& frame, int64_t now);
  // One decoded batch item: registers hellos and goodbyes, queues uploads, then its record
  // (`raw`: the item's bytes as the probe sent them, empty when unknown).
  void takeItem(const std::string& rid, const zmq::message_t& frame, uint64_t seq,
                wire::Envelope& item, std::string_view raw, int64_t now);
  // Queues one record of batch `seq` for the spool, or rejects it when too large.
  void takeRecord(std::string rec, uint64_t seq);
  // Registers or refreshes a rank; false (nothing changed) when another uid owns it.
  bool registerRank(const std::string& rid, const wire::RankInfo& info, uint32_t uid, int64_t now,
                    bool* changed);
  // A goodbye: forgets the rank and remembers that it ended; false when another uid owns it.
  bool endRank(const std::string& rid, const std::string& job, uint32_t rank, uint32_t uid);
  // Whether a hello is from a rank that already said goodbye (same process); counts it. A hello
  // from a new process of that rank (a restart) forgets the goodbye instead.
  bool helloAfterGoodbye(const std::string& rid, const wire::RankInfo& info);
  void reject(const std::string& rid, const std::string& reason, const std::string& detail);
  void send(const std::string& rid, wire::Envelope& env);
  void flush(int64_t now);

  const AgentOptions& opts_;
  SpoolWriter& spool_;
  zmq::socket_t socket_;
  std::string bound_;
  std::string ipcPath_;  // removed at destruction when we bound it
  std::map<std::pair<std::string, uint32_t>, RankEntry> ranks_;
  std::deque<EndedRank> endedRanks_;  // oldest first, at most kEndedRanksKept

  // What one drain collected: written with one append, then acked.
  std::vector<std::string> inRecords_;
  std::vector<std::pair<std::string, uint64_t>> inAcks_;  // routing id, batch seq
  uint64_t inBatchItems_ = 0;
  size_t inBytes_ = 0;      // bytes of the messages this drain took (kDrainByteLimit)
  wire::BatchFrame split_;  // reused by each frame's split
  // A split batch's non-step items, decoded, with their positions in it (ascending).
  std::vector<std::pair<size_t, wire::Envelope>> splitOthers_;
  // "uploading" statuses of this drain, with the uid of their sender.
  std::vector<std::pair<wire::CommandStatus, uint32_t>> inUploads_;

  uint64_t probeFrames_ = 0;
  uint64_t probeBatches_ = 0;
  uint64_t probeItems_ = 0;
  std::map<std::string, uint64_t> rejects_;
  uint64_t commandsForwarded_ = 0;
  uint64_t commandsUnmatched_ = 0;
  uint64_t hellosAfterGoodbye_ = 0;
  uint64_t drainsCut_ = 0;  // drains stopped at kDrainByteLimit
  RateLimitedLog rejectLog_{std::chrono::seconds(5)};
};

}  // namespace trainscope::agent
