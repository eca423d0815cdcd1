// The inside of IngestServer (ingest.h), shared by the files that implement it along the data
// flow: ingest.cpp (the sockets, the two threads and the commit hand-off between them),
// ingest_frames.cpp (a frame from an agent -> validated items in the pending commit) and
// ingest_peers.cpp (who is connected: CURVE key checks and disconnects). Every field says which
// lock or thread owns it. Internal to collector/ingest.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "collector/ingest/ingest.h"
#include "collector/ingest/validate.h"
#include "common/log.h"
#include "common/thread_annotations.h"

namespace trainscope::ingest {
namespace internal {

struct AckTo {
  std::string peer;  // ROUTER routing id
  uint64_t seq = 0;
};

// One storage transaction's worth of accepted items and the acks that wait for it.
struct Commit {
  storage::WriteBatch batch;
  std::vector<AckTo> acks;
  uint64_t items = 0;
  // What batch.stepDetailViews point into: the frames received (the fast path keeps each report's
  // own bytes; behind a pointer because a small message keeps its bytes inside the message_t) and
  // the details the Envelope path encoded (a deque: its strings never move).
  std::vector<std::unique_ptr<zmq::message_t>> frames;
  std::deque<std::string> encodedDetails;
  bool empty() const { return batch.empty() && acks.empty(); }
};

// Where a connection came from, for log lines: the agent's node name once it said hello, and
// the peer address libzmq reports.
struct Peer {
  std::string id;
  std::string node;
  std::string address;
  std::string keyNode;  // with CURVE: the node its key may speak for (the ZAP user id)
  int fd = -1;          // the descriptor its last message came on
  int64_t seenNs = 0;   // monotonic time of its last message
};

// "node N at ADDRESS", for log lines.
std::string describe(const Peer& p);

}  // namespace internal

struct IngestServer::Impl {
  using AckTo = internal::AckTo;
  using Commit = internal::Commit;
  using Peer = internal::Peer;

  Impl(IngestOptions o, storage::Store& s) : options(std::move(o)), store(s) {}

  IngestOptions options;
  storage::Store& store;
  zmq::context_t ctx{1};
  std::string boundEndpoint;
  bool started = false;
  std::atomic<bool> stopping{false};
  std::thread socketThread;
  std::thread writerThread;

  // Sockets. router, wakeRecv and monitor belong to the socket thread; wakeSend to the writer.
  zmq::socket_t router;
  zmq::socket_t wakeRecv;
  zmq::socket_t wakeSend;
  zmq::socket_t monitor;
  zmq::socket_t zap;  // socket thread; with CURVE, answers libzmq's key checks (ZAP)

  // Hand-off between the socket thread and the writer.
  Mutex mu;
  CondVar cv;
  std::deque<Commit> queue GUARDED_BY(mu);
  bool writerBusy GUARDED_BY(mu) = false;
  bool writerExit GUARDED_BY(mu) = false;
  // Committed, acks not yet sent. The whole Commit comes back so its batch is freed on the
  // socket thread that allocated it: a free from another thread measured about twice as
  // costly, and on the writer, the stage every commit waits for.
  std::deque<Commit> done GUARDED_BY(mu);

  // Commands for agents (sendCommand, any thread) wait here for the socket thread, which
  // cmdWakeSend wakes. Node routes are written by the socket thread, read by sendCommand.
  mutable Mutex cmdMu;
  std::deque<std::pair<std::string, std::string>> commands GUARDED_BY(cmdMu);  // (id, frame)
  zmq::socket_t cmdWakeSend GUARDED_BY(cmdMu);
  zmq::socket_t cmdWakeRecv;                                        // socket thread
  std::map<std::string, std::string> nodeRoutes GUARDED_BY(cmdMu);  // node -> routing id
  std::atomic<uint64_t> commandsSent{0};

  // Counters.
  std::atomic<uint64_t> frames{0}, batches{0}, itemsStored{0}, stepsStored{0}, heartbeats{0},
      hellos{0}, acksSent{0}, commits{0}, commitFailures{0}, disconnects{0};
  std::atomic<int64_t> lastCommitNs{0};
  mutable Mutex rejectMu;
  std::map<std::string, uint64_t> rejects GUARDED_BY(rejectMu);

  // Socket-thread state.
  Commit pending;
  wire::BatchFrame batchFrame;                   // the frame being handled, split (reused)
  wire::Batch otherItems;                        // its items other than step reports (reused)
  std::vector<uint32_t> stepVersions;            // its step items' schema versions (reused)
  int64_t pendingSinceNs = 0;                    // monotonic
  int64_t lastHandOffNs = 0;                     // monotonic; 0 = none yet
  std::unordered_map<std::string, Peer> peers;   // routing id -> peer
  std::unordered_map<int, std::string> fdPeers;  // socket fd -> routing id
  std::atomic<uint64_t> peerCount{0};            // peers.size(), for stats()
  // Job -> its world size: the first claim wins (a RankHello, or the store's at start), and a
  // hello claiming another is refused ("world_size_conflict"), so a late or foreign hello
  // cannot make the job's real ranks invalid.
  std::unordered_map<std::string, uint32_t> worldSizes;
  // Job -> when an item last named it (monotonic). A job enters on its first item since start
  // or since it was forgotten, its world size read from the store then (noteJob); jobs silent
  // for options.jobIdleTimeout leave it, worldSizes and rankNodes (forgetIdleJobs).
  std::unordered_map<std::string, int64_t> jobSeenNs;
  std::atomic<uint64_t> jobCount{0};  // jobSeenNs.size(), for stats()
  int64_t lastJobSweepNs = 0;         // monotonic
  int64_t frameNowNs = 0;             // monotonic, read once a frame for the items in it
  // With CURVE: job -> the node each rank lives on (ingest.h, "Ranks and nodes"), by rank:
  // 1 + an index into nodeNames, 0 for none yet, kRankEnded set once that node said goodbye
  // for it. A job's entry is made when one of its ranks is first named, from the store's
  // ranks of the job, so bindings survive a restart. At most 4 bytes per rank of the world
  // size (kMaxWorldSize), node names once each.
  static constexpr uint32_t kRankEnded = 1U << 31;
  std::unordered_map<std::string, std::vector<uint32_t>> rankNodes;
  std::vector<std::string> nodeNames;
  std::unordered_map<std::string, uint32_t> nodeIds;     // name -> index into nodeNames
  std::unordered_map<std::string, int64_t> nodeOffsets;  // node -> latest heartbeat offset_ns
  RateLimitedLog rejectLog{std::chrono::seconds(5)};
  RateLimitedLog commitLog{std::chrono::seconds(5)};
  RateLimitedLog peerLog{std::chrono::seconds(5)};
  // One each for refused keys and failed CURVE handshakes, so a refused agent that keeps
  // reconnecting hides neither the other kind nor ordinary rejects.
  RateLimitedLog keyLog{std::chrono::seconds(5)};
  RateLimitedLog handshakeLog{std::chrono::seconds(5)};

  void countReject(const std::string& reason, uint64_t n = 1);

  void sendTo(const std::string& id, const std::string& frame);

  void sendError(const std::string& id, const std::string& reason, const std::string& detail);

  // The latest connection that named itself `node` receives that node's commands.
  void routeNode(const Peer& p);

  void unrouteNode(const Peer& p);

  // Forgets a connection: its peer entry and its node's command route.
  void dropPeer(const std::string& id);

  // Records that `peer` reads on descriptor `fd`; a different peer that held it is gone.
  void bindFd(int fd, Peer& peer);

  // Forgets the peers silent longer than options.peerIdleTimeout, at most once a second, and
  // none while ingest has not been reading the socket for that long (a slow disk holds it back:
  // the peers spoke, ingest did not listen).
  void forgetIdlePeers(int64_t nowNs, bool reading);
  void noteJob(const std::string& job);
  void forgetIdleJobs(int64_t nowNs);
  int64_t lastIdleSweepNs = 0;  // monotonic
  int64_t lastPausedNs = 0;     // monotonic: when ingest last left the socket unread

  void sendQueuedCommands();

  Peer& peerOf(const std::string& id);

  void rejectFrame(const std::string& id, const std::string& reason, const std::string& detail);

  void handOff();
  // Nanoseconds until options.minCommitGap has passed since the last hand-off (0: now).
  int64_t gapLeftNs(int64_t nowNs) const;

  void markPending();

  void sendCompletedAcks();

  std::optional<uint32_t> worldSizeOf(const std::string& job);

  // Hands a valid hello's progress to onRankProgress with the node's clock offset.
  void progressOf(const wire::RankHello& hello, const Peer& peer, int64_t receivedNs);

  // With CURVE, the rank table of `job`: read from the store on its first use.
  std::vector<uint32_t>& rankNodesOf(const std::string& job);
  uint32_t nodeSlot(const std::string& node);  // 1 + index into nodeNames, added if new
  // With CURVE, whether the node of `peer`'s key is the node (job, rank) lives on, for every
  // item about a rank but its hello: a rank with no accepted hello has no node yet, and is
  // refused too. Nothing without CURVE (a sender then names its own node).
  std::optional<Rejection> rankNodeCheck(const Peer& peer, const std::string& job, uint32_t rank);
  // With CURVE, a hello's claim of (job, rank) for its node: the first claim binds it; another
  // node may take it over only once the rank ended (its node's goodbye) or no agent of its node
  // is connected. Binds when it returns nothing. Nothing without CURVE.
  std::optional<Rejection> claimRank(const Peer& peer, const std::string& job, uint32_t rank);

  // With CURVE, a connection may name only the node its key was issued for.
  bool nodeAllowed(const Peer& peer, const std::string& node) const;
  static std::string nodeMismatch(const Peer& peer, const std::string& node);

  // Answers libzmq's ZAP requests (one per CURVE handshake): a key on the allow-list passes
  // with its node as the user id; any other is refused and counted.
  void serveZap();

  // Queues a valid hello's declared groups for storage; most hellos carry none
  // (groups_declared_ns 0: no news). Invalid ones are counted and dropped, the hello kept.
  void groupsOf(const wire::RankHello& hello, const Peer& peer);

  // The items of one batch that were refused, and the first reason, for the batch's ErrorReply.
  struct ItemRejects {
    size_t count = 0;
    std::optional<Rejection> first;
  };
  void rejectItem(ItemRejects& r, Rejection rejection);

  static std::optional<Rejection> itemVersion(uint32_t version);

  // Refuses ("too_many_new_jobs") an item of a job the collector has not seen lately once its
  // sender started more jobs than options.newJobs allows (ingest_jobs.cpp). Items without a
  // job pass.
  std::optional<Rejection> newJobRefused(const Peer& peer, const wire::Envelope& item);
  std::optional<Rejection> newJobRefused(const Peer& peer, const std::string& job);
  NewJobLimiter newJobs{options.newJobs};  // socket thread

  // One decoded batch item: validated and, when accepted, added to the pending commit.
  void handleItem(Peer& peer, wire::Envelope& item, int64_t receivedNs, ItemRejects& rejects);

  // Acks a handled batch (even when items were rejected: sending it again would not help, as
  // no reject depends on what may still arrive; ingest.h) and tells the agent about the rejects.
  void finishBatch(const std::string& id, const Peer& peer, uint64_t seq, size_t itemCount,
                   const ItemRejects& rejected);

  void handleBatch(const std::string& id, wire::Envelope& env, int64_t receivedNs);

  // The fast path for what agents send (wire::splitBatch): each step report is decoded once,
  // straight into the pending commit, and its own bytes become the stored detail (no second
  // encoding); other items take the Envelope path. As with decode(), a frame with any item that
  // does not decode is rejected whole ("malformed") and nothing of it is kept. Registrations and
  // other items are handled before the batch's step reports, so a hello in the same batch sets the
  // world size its ranks' reports are checked against.
  void handleBatchFrame(const std::string& id, const wire::BatchFrame& frame,
                        zmq::message_t& payload, int64_t receivedNs);

  // One message: who sent it (peers), then what it says (dispatchFrame).
  void handleFrame(const std::string& id, zmq::message_t& payload);
  void dispatchFrame(const std::string& id, zmq::message_t& payload, int64_t receivedNs);

  // Reads one whole multi-part message. Returns false when none is waiting.
  bool readOne();

  void readMonitor();

  void socketLoop();

  void writerLoop();
};

}  // namespace trainscope::ingest
