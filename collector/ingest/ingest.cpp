#include "collector/ingest/ingest.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "common/clock.h"
#include "common/log.h"
#include "common/thread_annotations.h"

namespace trainscope::ingest {
namespace {

constexpr const char* kComponent = "ingest";
// Messages read from the socket per wake-up before the other sockets get a look.
constexpr int kReadBurst = 256;

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
};

std::string describe(const Peer& p) {
  std::string out = p.node.empty() ? std::string("unknown node") : "node " + p.node;
  if (!p.address.empty()) out += " at " + p.address;
  return out;
}

}  // namespace

struct IngestServer::Impl {
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
  std::unordered_map<std::string, Peer> peers;   // routing id -> peer
  std::unordered_map<int, std::string> fdPeers;  // socket fd -> routing id
  std::unordered_map<std::string, uint32_t> worldSizes;
  std::unordered_map<std::string, int64_t> nodeOffsets;  // node -> latest heartbeat offset_ns
  RateLimitedLog rejectLog{std::chrono::seconds(5)};
  RateLimitedLog commitLog{std::chrono::seconds(5)};
  RateLimitedLog peerLog{std::chrono::seconds(5)};
  // One each for refused keys and failed CURVE handshakes, so a refused agent that keeps
  // reconnecting hides neither the other kind nor ordinary rejects.
  RateLimitedLog keyLog{std::chrono::seconds(5)};
  RateLimitedLog handshakeLog{std::chrono::seconds(5)};

  void countReject(const std::string& reason, uint64_t n = 1) {
    MutexLock lock(&rejectMu);
    rejects[reason] += n;
  }

  void sendTo(const std::string& id, const std::string& frame) {
    try {
      // Never block the loop on one slow peer: an ack that cannot go out now is sent again
      // when the agent resends the batch.
      if (!router.send(zmq::buffer(id), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        return;
      }
      (void)router.send(zmq::buffer(frame), zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      peerLog.log(LogLevel::kWarn, kComponent, std::string("send failed: ") + e.what());
    }
  }

  void sendError(const std::string& id, const std::string& reason, const std::string& detail) {
    if (id.empty()) return;
    auto env = wire::errorReply(reason, detail);
    sendTo(id, wire::encode(env));
  }

  // The latest connection that named itself `node` receives that node's commands.
  void routeNode(const Peer& p) {
    if (p.node.empty()) return;
    MutexLock lock(&cmdMu);
    nodeRoutes[p.node] = p.id;
  }

  void unrouteNode(const Peer& p) {
    MutexLock lock(&cmdMu);
    auto it = nodeRoutes.find(p.node);
    if (it != nodeRoutes.end() && it->second == p.id) nodeRoutes.erase(it);
  }

  void sendQueuedCommands() {
    std::deque<std::pair<std::string, std::string>> ready;
    {
      MutexLock lock(&cmdMu);
      ready.swap(commands);
    }
    for (const auto& [id, frame] : ready) {
      sendTo(id, frame);
      ++commandsSent;
    }
  }

  Peer& peerOf(const std::string& id) {
    auto& p = peers[id];
    p.id = id;
    return p;
  }

  void rejectFrame(const std::string& id, const std::string& reason, const std::string& detail) {
    countReject(reason);
    sendError(id, reason, detail);
    rejectLog.log(LogLevel::kWarn, kComponent,
                  "rejected frame from " + describe(peerOf(id)) + ": " + detail);
  }

  void handOff() {
    if (pending.empty()) return;
    {
      MutexLock lock(&mu);
      queue.push_back(std::move(pending));
    }
    cv.notifyOne();
    pending = Commit{};
    pendingSinceNs = 0;
  }

  void markPending() {
    if (pendingSinceNs == 0) {
      pendingSinceNs = monotonicNowNs();
      pending.batch.receivedNs = wallNowNs();
    }
  }

  void sendCompletedAcks() {
    std::deque<Commit> ready;
    {
      MutexLock lock(&mu);
      ready.swap(done);
    }
    for (const auto& commit : ready) {
      for (const auto& a : commit.acks) {
        wire::Envelope env;
        env.mutable_ack()->set_seq(a.seq);
        // Counted before the send, so a reader who has the ack never sees a stale count.
        ++acksSent;
        sendTo(a.peer, wire::encode(env));
      }
    }
  }

  std::optional<uint32_t> worldSizeOf(const std::string& job) {
    auto it = worldSizes.find(job);
    if (it == worldSizes.end()) return std::nullopt;
    return it->second;
  }

  // Hands a valid hello's progress to onRankProgress with the node's clock offset.
  void progressOf(const wire::RankHello& hello, const Peer& peer, int64_t receivedNs) {
    if (!hello.has_progress() || !options.onRankProgress) return;
    const wire::RankInfo& info = hello.rank();
    if (auto r = validateProgress(hello)) {
      countReject(r->reason);
      rejectLog.log(LogLevel::kWarn, kComponent,
                    "dropped the progress of a hello from " + describe(peer) + ": " + r->detail);
      return;
    }
    RankProgressUpdate u;
    u.job = info.job();
    u.rank = info.rank();
    u.node = info.node();
    u.progress = hello.progress();
    u.sentNs = hello.sent_ns();
    auto off = nodeOffsets.find(u.node);
    u.clockOffsetNs = off == nodeOffsets.end() ? 0 : off->second;
    u.receivedNs = receivedNs;
    try {
      options.onRankProgress(u);
    } catch (const std::exception& e) {
      peerLog.log(LogLevel::kWarn, kComponent,
                  std::string("onRankProgress hook failed: ") + e.what());
    }
  }

  // With CURVE, a connection may name only the node its key was issued for.
  bool nodeAllowed(const Peer& peer, const std::string& node) const {
    return !options.curve || node == peer.keyNode;
  }
  static std::string nodeMismatch(const Peer& peer, const std::string& node) {
    return "node_mismatch: the key of node '" + peer.keyNode + "' may not speak for node '" + node +
           "'";
  }

  // Answers libzmq's ZAP requests (one per CURVE handshake): a key on the allow-list passes
  // with its node as the user id; any other is refused and counted.
  void serveZap() {
    for (int i = 0; i < 64; ++i) {
      std::vector<zmq::message_t> req;
      zmq::message_t part;
      if (!zap.recv(part, zmq::recv_flags::dontwait)) return;
      bool more = part.more();
      req.push_back(std::move(part));
      while (more) {
        zmq::message_t next;
        (void)zap.recv(next, zmq::recv_flags::none);
        more = next.more();
        req.push_back(std::move(next));
      }
      // ZAP 1.0: version, request id, domain, address, routing id, mechanism, credentials.
      std::string requestId = req.size() > 1 ? req[1].to_string() : "";
      std::string status = "400";
      std::string text = "unknown key";
      std::string user;
      if (req.size() >= 7 && req[0].to_string() == "1.0" && req[5].to_string() == "CURVE") {
        const std::string key = curveKeyText(req[6].to_string());
        auto it = options.curve->agents.find(key);
        if (it != options.curve->agents.end()) {
          status = "200";
          text = "OK";
          user = it->second;
        } else {
          countReject("unknown_key");
          keyLog.log(LogLevel::kWarn, kComponent,
                     "refused an agent at " + req[3].to_string() + ": its key " + key +
                         " is not in --curve-keys' agents/");
        }
      } else {
        countReject("unknown_key");
        keyLog.log(LogLevel::kWarn, kComponent, "refused a malformed key check (ZAP)");
      }
      const std::string frames[] = {"1.0", requestId, status, text, user, ""};
      for (size_t f = 0; f < 6; ++f) {
        (void)zap.send(zmq::buffer(frames[f]),
                       f + 1 < 6 ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
    }
  }

  // Queues a valid hello's declared groups for storage; most hellos carry none
  // (groups_declared_ns 0: no news). Invalid ones are counted and dropped, the hello kept.
  void groupsOf(const wire::RankHello& hello, const Peer& peer) {
    if (hello.groups_declared_ns() == 0 && hello.groups_size() == 0) return;
    if (auto r = validateGroups(hello, options.limits)) {
      countReject(r->reason);
      rejectLog.log(
          LogLevel::kWarn, kComponent,
          "dropped the process groups of a hello from " + describe(peer) + ": " + r->detail);
      return;
    }
    storage::GroupsUpdate u;
    u.job = hello.rank().job();
    u.groups.rank = hello.rank().rank();
    // A set without a time (our probes always stamp one) is kept as time 1: it is stored when
    // the rank has none, and never replaces a stamped set.
    u.groups.declaredNs = std::max<int64_t>(1, hello.groups_declared_ns());
    u.groups.groups.assign(hello.groups().begin(), hello.groups().end());
    pending.batch.groups.push_back(std::move(u));
  }

  // The items of one batch that were refused, and the first reason, for the batch's ErrorReply.
  struct ItemRejects {
    size_t count = 0;
    std::optional<Rejection> first;
  };
  void rejectItem(ItemRejects& r, Rejection rejection) {
    countReject(rejection.reason);
    ++r.count;
    if (!r.first) r.first = std::move(rejection);
  }

  static std::optional<Rejection> itemVersion(uint32_t version) {
    if (version == 0 || version == wire::kSchemaVersion) return std::nullopt;
    return Rejection{"version", "item schema version " + std::to_string(version)};
  }

  // One decoded batch item: validated and, when accepted, added to the pending commit.
  void handleItem(Peer& peer, wire::Envelope& item, int64_t receivedNs, ItemRejects& rejects) {
    if (auto r = itemVersion(item.schema_version())) {
      rejectItem(rejects, std::move(*r));
      return;
    }
    switch (item.body_case()) {
      case wire::Envelope::kStep: {
        if (auto r = validateStep(item.step(), worldSizeOf(item.step().job()), options.limits)) {
          rejectItem(rejects, std::move(*r));
          break;
        }
        // Encoding the stored detail here keeps it off the writer, the slower stage.
        pending.encodedDetails.emplace_back();
        item.step().SerializeToString(&pending.encodedDetails.back());
        pending.batch.stepDetailViews.emplace_back(pending.encodedDetails.back());
        pending.batch.steps.push_back(std::move(*item.mutable_step()));
        ++pending.items;
        break;
      }
      case wire::Envelope::kRankHello: {
        auto* info = item.mutable_rank_hello()->mutable_rank();
        if (info->node().empty()) info->set_node(peer.node);
        if (!nodeAllowed(peer, info->node())) {
          rejectItem(rejects, {"node_mismatch", nodeMismatch(peer, info->node())});
          break;
        }
        if (auto r = validateRankInfo(*info, options.limits)) {
          rejectItem(rejects, std::move(*r));
          break;
        }
        worldSizes[info->job()] = info->world_size();
        progressOf(item.rank_hello(), peer, receivedNs);
        groupsOf(item.rank_hello(), peer);
        pending.batch.ranks.push_back(std::move(*info));
        ++pending.items;
        break;
      }
      case wire::Envelope::kRankGoodbye: {
        const auto& bye = item.rank_goodbye();
        if (auto r = validateGoodbye(bye, worldSizeOf(bye.job()), options.limits)) {
          rejectItem(rejects, std::move(*r));
          break;
        }
        pending.batch.goodbyes.push_back(std::move(*item.mutable_rank_goodbye()));
        ++pending.items;
        break;
      }
      case wire::Envelope::kHost: {
        auto* host = item.mutable_host();
        if (host->node().empty()) host->set_node(peer.node);
        if (!nodeAllowed(peer, host->node())) {
          rejectItem(rejects, {"node_mismatch", nodeMismatch(peer, host->node())});
          break;
        }
        if (auto r = validateHost(*host)) {
          rejectItem(rejects, std::move(*r));
          break;
        }
        pending.batch.hosts.push_back(std::move(*host));
        ++pending.items;
        break;
      }
      case wire::Envelope::kCommandStatus:
      case wire::Envelope::kFileChunk:
        if (options.onCommandItem) {
          options.onCommandItem(peer.node, item);
        } else {
          rejectItem(rejects,
                     {"unsupported_item", "command results are not handled by this collector"});
        }
        break;
      default:
        rejectItem(rejects, {"invalid_item_type",
                             "item type " + std::to_string(static_cast<int>(item.body_case())) +
                                 " is not allowed in a batch"});
        break;
    }
  }

  // Acks a handled batch (even when items were rejected: sending it again would not help) and
  // tells the agent about the rejects.
  void finishBatch(const std::string& id, const Peer& peer, uint64_t seq, size_t itemCount,
                   const ItemRejects& rejected) {
    pending.acks.push_back({id, seq});
    if (rejected.count > 0) {
      std::string detail = rejected.first->detail + " (" + std::to_string(rejected.count) + " of " +
                           std::to_string(itemCount) + " items rejected in batch seq " +
                           std::to_string(seq) + ")";
      sendError(id, rejected.first->reason, detail);
      rejectLog.log(
          LogLevel::kWarn, kComponent,
          "rejected items from " + describe(peer) + ": " + rejected.first->reason + ": " + detail);
    }
  }

  void handleBatch(const std::string& id, wire::Envelope& env, int64_t receivedNs) {
    auto* batch = env.mutable_batch();
    ++batches;
    Peer& peer = peerOf(id);
    markPending();
    ItemRejects rejected;
    for (auto& item : *batch->mutable_items()) {
      handleItem(peer, item, receivedNs, rejected);
    }
    finishBatch(id, peer, batch->seq(), static_cast<size_t>(batch->items_size()), rejected);
  }

  // The fast path for what agents send (wire::splitBatch): each step report is decoded once,
  // straight into the pending commit, and its own bytes become the stored detail (no second
  // encoding); other items take the Envelope path. As with decode(), a frame with any item that
  // does not decode is rejected whole ("malformed") and nothing of it is kept. Registrations and
  // other items are handled before the batch's step reports, so a hello in the same batch sets the
  // world size its ranks' reports are checked against.
  void handleBatchFrame(const std::string& id, const wire::BatchFrame& frame,
                        zmq::message_t& payload, int64_t receivedNs) {
    auto& steps = pending.batch.steps;
    auto& details = pending.batch.stepDetailViews;
    const size_t first = steps.size();
    otherItems.Clear();
    stepVersions.clear();
    bool malformed = false;
    for (std::string_view item : frame.items) {
      uint32_t version = 0;
      std::string_view bytes;
      if (wire::stepItem(item, &version, &bytes)) {
        stepVersions.push_back(version);
        steps.emplace_back();
        details.emplace_back(bytes);
        malformed = !steps.back().ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
      } else {
        malformed =
            !otherItems.add_items()->ParseFromArray(item.data(), static_cast<int>(item.size()));
      }
      if (malformed) break;
    }
    if (malformed) {
      steps.erase(steps.begin() + static_cast<std::ptrdiff_t>(first), steps.end());
      details.erase(details.begin() + static_cast<std::ptrdiff_t>(first), details.end());
      rejectFrame(
          id, "malformed",
          "malformed: not a trainscope Envelope (" + std::to_string(payload.size()) + " bytes)");
      return;
    }
    ++batches;
    Peer& peer = peerOf(id);
    markPending();
    ItemRejects rejected;
    for (auto& item : *otherItems.mutable_items()) {
      handleItem(peer, item, receivedNs, rejected);
    }
    // The step reports are checked where they lie; accepted ones close up, in order.
    size_t kept = first;
    for (size_t i = first; i < steps.size(); ++i) {
      auto r = itemVersion(stepVersions[i - first]);
      if (!r) r = validateStep(steps[i], worldSizeOf(steps[i].job()), options.limits);
      if (r) {
        rejectItem(rejected, std::move(*r));
        continue;
      }
      if (kept != i) {
        steps[kept].Swap(&steps[i]);
        details[kept].swap(details[i]);
      }
      ++kept;
      ++pending.items;
    }
    steps.erase(steps.begin() + static_cast<std::ptrdiff_t>(kept), steps.end());
    details.erase(details.begin() + static_cast<std::ptrdiff_t>(kept), details.end());
    // The kept reports' details point into the frame: it lives as long as their commit.
    if (kept > first)
      pending.frames.push_back(std::make_unique<zmq::message_t>(std::move(payload)));
    finishBatch(id, peer, frame.seq, frame.items.size(), rejected);
  }

  void handleFrame(const std::string& id, zmq::message_t& payload) {
    const int64_t receivedNs = wallNowNs();
    ++frames;
    {
      Peer& peer = peerOf(id);
      if (peer.address.empty()) {
        if (const char* addr = zmq_msg_gets(payload.handle(), "Peer-Address")) {
          peer.address = addr;
        }
      }
      int fd = zmq_msg_get(payload.handle(), ZMQ_SRCFD);
      if (fd >= 0) fdPeers[fd] = id;
      if (options.curve) {
        // The ZAP handler's user id, on every message of a connection that passed it. Read each
        // time rather than once: a routing id is the peer's to choose, the key is not.
        const char* user = zmq_msg_gets(payload.handle(), "User-Id");
        peer.keyNode = user != nullptr ? user : "";
      }
    }
    if (wire::splitBatch(payload.data(), payload.size(), &batchFrame)) {
      handleBatchFrame(id, batchFrame, payload, receivedNs);
      return;
    }
    auto env = wire::decode(payload.data(), payload.size());
    if (!env) {
      rejectFrame(id, wire::rejectReason(env.status()), env.message());
      return;
    }
    switch (env->body_case()) {
      case wire::Envelope::kBatch:
        handleBatch(id, *env, receivedNs);
        break;
      case wire::Envelope::kHeartbeat: {
        const auto& hb = env->heartbeat();
        wire::Envelope reply;
        auto* r = reply.mutable_heartbeat_reply();
        r->set_t1_ns(hb.t1_ns());
        r->set_t2_ns(receivedNs);
        r->set_t3_ns(wallNowNs());
        sendTo(id, wire::encode(reply));
        ++heartbeats;
        Peer& peer = peerOf(id);
        std::string node = hb.node().empty() ? peer.node : hb.node();
        if (node.empty()) {
          countReject("invalid_heartbeat");
          rejectLog.log(LogLevel::kWarn, kComponent,
                        "heartbeat without a node name from " + describe(peer));
          break;
        }
        if (!nodeAllowed(peer, node)) {
          rejectFrame(id, "node_mismatch", nodeMismatch(peer, node));
          break;
        }
        if (peer.node.empty()) {
          peer.node = node;
          routeNode(peer);
        }
        if (auto bad = validateHeartbeat(hb)) {
          countReject(bad->reason);
          rejectLog.log(LogLevel::kWarn, kComponent,
                        "heartbeat of " + node + " ignored: " + bad->detail);
          break;
        }
        storage::NodeUpdate u;
        u.node = node;
        u.seenNs = receivedNs;
        u.offsetNs = hb.offset_ns();
        nodeOffsets[node] = hb.offset_ns();
        u.rttNs = hb.rtt_ns();
        u.spoolBytes = hb.spool_bytes();
        u.spoolDropped = hb.spool_dropped();
        u.ranks = hb.ranks();
        u.hasClock = true;
        markPending();
        pending.batch.nodes.push_back(std::move(u));
        break;
      }
      case wire::Envelope::kAgentHello: {
        const auto& hello = env->agent_hello();
        Peer& peer = peerOf(id);
        if (hello.node().empty()) {
          rejectFrame(id, "invalid_hello", "invalid_hello: AgentHello.node is empty");
          break;
        }
        if (!nodeAllowed(peer, hello.node())) {
          rejectFrame(id, "node_mismatch", nodeMismatch(peer, hello.node()));
          break;
        }
        ++hellos;
        if (peer.node != hello.node()) {
          logInfo(kComponent, "agent " + hello.node() + " (" + hello.host() + ", pid " +
                                  std::to_string(hello.pid()) + ", version " +
                                  hello.agent_version() + ") connected" +
                                  (peer.address.empty() ? "" : " from " + peer.address));
        }
        if (peer.node != hello.node()) unrouteNode(peer);
        peer.node = hello.node();
        routeNode(peer);
        storage::NodeUpdate u;
        u.node = hello.node();
        u.host = hello.host();
        u.agentVersion = hello.agent_version();
        u.pid = hello.pid();
        u.seenNs = receivedNs;
        markPending();
        pending.batch.nodes.push_back(std::move(u));
        break;
      }
      default:
        rejectFrame(id, "unexpected_message",
                    "unexpected_message: envelope type " +
                        std::to_string(static_cast<int>(env->body_case())) +
                        " is not accepted by the collector");
        break;
    }
  }

  // Reads one whole multi-part message. Returns false when none is waiting.
  bool readOne() {
    zmq::message_t idMsg;
    if (!router.recv(idMsg, zmq::recv_flags::dontwait)) return false;
    std::string id(static_cast<const char*>(idMsg.data()), idMsg.size());
    std::vector<zmq::message_t> parts;
    bool more = idMsg.more();
    while (more) {
      zmq::message_t part;
      (void)router.recv(part, zmq::recv_flags::none);  // the rest of a message is already here
      more = part.more();
      parts.push_back(std::move(part));
    }
    if (parts.size() != 1) {
      ++frames;
      rejectFrame(id, "multipart",
                  "multipart: expected one frame per message, got " + std::to_string(parts.size()));
      return true;
    }
    handleFrame(id, parts[0]);
    return true;
  }

  void readMonitor() {
    for (;;) {
      zmq::message_t event;
      if (!monitor.recv(event, zmq::recv_flags::dontwait)) return;
      zmq::message_t address;
      if (event.more()) (void)monitor.recv(address, zmq::recv_flags::none);
      if (event.size() < 6) continue;
      uint16_t id = 0;
      uint32_t value = 0;
      std::memcpy(&id, event.data(), sizeof id);
      std::memcpy(&value, static_cast<const char*>(event.data()) + 2, sizeof value);
      if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || id == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
        // With CURVE: a plain-text agent, or one holding another collector's public key.
        countReject("handshake_failed");
        handshakeLog.log(LogLevel::kWarn, kComponent,
                         "refused a connection from " + address.to_string() +
                             " that failed the CURVE handshake (a plain-text agent, or one without "
                             "this collector's public key)");
        continue;
      }
      if (id != ZMQ_EVENT_DISCONNECTED) continue;
      ++disconnects;
      const int fd = static_cast<int>(value);
      std::string who = "a peer that sent nothing";
      if (auto it = fdPeers.find(fd); it != fdPeers.end()) {
        if (auto p = peers.find(it->second); p != peers.end()) {
          who = describe(p->second);
          unrouteNode(p->second);
          peers.erase(p);
        }
        fdPeers.erase(it);
      }
      // libzmq closes a connection without telling us why; a message over maxMessageBytes is
      // one cause, a peer going away the common one.
      peerLog.log(LogLevel::kInfo, kComponent,
                  "connection from " + who + " closed (peer left, or it sent a message over " +
                      std::to_string(options.maxMessageBytes) + " bytes)");
    }
  }

  void socketLoop() {
    for (;;) {
      sendCompletedAcks();
      const bool stop = stopping.load();
      size_t queued = 0;
      {
        MutexLock lock(&mu);
        queued = queue.size() + (writerBusy ? 1 : 0);
        if (stop && pending.empty() && queued == 0 && done.empty()) break;
      }
      if (stop) handOff();
      const bool readRouter = !stop && queued < options.maxQueuedCommits;
      long timeoutMs = 100;
      if (!pending.empty()) {
        int64_t waitedNs = monotonicNowNs() - pendingSinceNs;
        int64_t leftNs = std::chrono::nanoseconds(options.commitInterval).count() - waitedNs;
        timeoutMs = std::max<long>(0, static_cast<long>(leftNs / 1'000'000));
      }
      zmq::pollitem_t items[] = {
          {router.handle(), 0, static_cast<short>(readRouter ? ZMQ_POLLIN : 0), 0},
          {wakeRecv.handle(), 0, ZMQ_POLLIN, 0},
          {monitor.handle(), 0, ZMQ_POLLIN, 0},
          {cmdWakeRecv.handle(), 0, ZMQ_POLLIN, 0},
          {zap.handle(), 0, static_cast<short>(zap ? ZMQ_POLLIN : 0), 0},
      };
      try {
        zmq::poll(items, zap ? 5 : 4, std::chrono::milliseconds(timeoutMs));
        if ((items[4].revents & ZMQ_POLLIN) != 0) serveZap();
        if ((items[3].revents & ZMQ_POLLIN) != 0) {
          zmq::message_t m;
          while (cmdWakeRecv.recv(m, zmq::recv_flags::dontwait)) {
          }
        }
        sendQueuedCommands();
        if ((items[1].revents & ZMQ_POLLIN) != 0) {
          zmq::message_t m;
          while (wakeRecv.recv(m, zmq::recv_flags::dontwait)) {
          }
        }
        if ((items[2].revents & ZMQ_POLLIN) != 0) readMonitor();
        if ((items[0].revents & ZMQ_POLLIN) != 0) {
          for (int i = 0; i < kReadBurst; ++i) {
            if (!readOne()) break;
            if (pending.items >= options.commitItems) {
              handOff();
              MutexLock lock(&mu);
              if (queue.size() + (writerBusy ? 1 : 0) >= options.maxQueuedCommits) break;
            }
          }
        }
      } catch (const std::exception& e) {
        // One bad message must not end ingest: log and carry on with the next.
        rejectLog.log(LogLevel::kError, kComponent, std::string("socket loop: ") + e.what());
      }
      if (!pending.empty()) {
        bool writerIdle = false;
        {
          MutexLock lock(&mu);
          writerIdle = queue.empty() && !writerBusy;
        }
        // Group commit: an idle writer takes what is here now (low ack latency when load is
        // light); a busy one lets items gather up to the interval or the item bound.
        if (writerIdle || pending.items >= options.commitItems ||
            monotonicNowNs() - pendingSinceNs >=
                std::chrono::nanoseconds(options.commitInterval).count()) {
          handOff();
        }
      }
    }
  }

  void writerLoop() {
    for (;;) {
      Commit c;
      {
        UniqueLock lock(&mu);
        while (queue.empty() && !writerExit) cv.wait(lock);
        if (queue.empty()) break;
        c = std::move(queue.front());
        queue.pop_front();
        writerBusy = true;
      }
      const int64_t t0 = monotonicNowNs();
      Status s = store.write(c.batch);
      lastCommitNs = monotonicNowNs() - t0;
      if (s) {
        ++commits;
        itemsStored += c.items;
        stepsStored += c.batch.steps.size();
        if (options.onCommitted) {
          try {
            options.onCommitted(c.batch);
          } catch (const std::exception& e) {
            commitLog.log(LogLevel::kError, kComponent,
                          std::string("onCommitted hook failed: ") + e.what());
          }
        }
      } else {
        // Not acked: the agents send these batches again, so nothing is lost.
        ++commitFailures;
        commitLog.log(
            LogLevel::kError, kComponent,
            "commit of " + std::to_string(c.items) + " items failed, not acked: " + s.message());
      }
      {
        MutexLock lock(&mu);
        if (s) done.push_back(std::move(c));
        writerBusy = false;
      }
      try {
        (void)wakeSend.send(zmq::str_buffer("w"), zmq::send_flags::dontwait);
      } catch (const zmq::error_t&) {
        // The socket thread polls on a timeout as well; a lost wake-up only delays acks.
      }
    }
  }
};

IngestServer::IngestServer(IngestOptions options, storage::Store& store)
    : impl_(std::make_unique<Impl>(std::move(options), store)) {}

IngestServer::~IngestServer() {
  stop();
}

Status IngestServer::start() {
  auto& m = *impl_;
  if (m.started) return Status::error("ingest: already started");
  std::string endpoint = m.options.endpoint;
  try {
    m.router = zmq::socket_t(m.ctx, zmq::socket_type::router);
    m.router.set(zmq::sockopt::maxmsgsize, m.options.maxMessageBytes);
    // Acks queued at shutdown get this long to leave.
    m.router.set(zmq::sockopt::linger, 1000);
    // Per peer: messages queued before libzmq stops reading that connection. With frames up to
    // maxMessageBytes this bounds what one agent can make us hold; agents keep only a few
    // batches in flight.
    m.router.set(zmq::sockopt::rcvhwm, 64);
    m.router.set(zmq::sockopt::sndhwm, 100000);
    int events = ZMQ_EVENT_DISCONNECTED;
    if (m.options.curve) {
      if (Status st = curveAvailable("--curve-keys"); !st)
        return Status::error("ingest: " + st.message());
      // The key checks are answered by the socket thread; bound before the router, so libzmq
      // always finds them (without a handler it would let every CURVE client in).
      m.zap = zmq::socket_t(m.ctx, zmq::socket_type::rep);
      m.zap.set(zmq::sockopt::linger, 0);
      m.zap.bind("inproc://zeromq.zap.01");
      m.router.set(zmq::sockopt::curve_server, 1);
      m.router.set(zmq::sockopt::curve_secretkey, m.options.curve->server.secretKey);
      m.router.set(zmq::sockopt::zap_domain, "trainscope-ingest");
      events |= ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    }
    const std::string tag = std::to_string(reinterpret_cast<uintptr_t>(this));
    const std::string monitorEndpoint = "inproc://trainscope-ingest-monitor-" + tag;
    if (zmq_socket_monitor(m.router.handle(), monitorEndpoint.c_str(), events) != 0) {
      return Status::error("ingest: cannot monitor the socket: " +
                           std::string(zmq_strerror(zmq_errno())));
    }
    m.monitor = zmq::socket_t(m.ctx, zmq::socket_type::pair);
    m.monitor.set(zmq::sockopt::linger, 0);
    m.monitor.connect(monitorEndpoint);
    m.router.bind(endpoint);
    m.boundEndpoint = m.router.get(zmq::sockopt::last_endpoint);
    // A connected inproc PAIR: `send` wakes the socket thread polling `recv`.
    auto wakePair = [&](const std::string& name, zmq::socket_t& recv, zmq::socket_t& send) {
      const std::string wakeEndpoint = "inproc://trainscope-ingest-" + name + "-" + tag;
      recv = zmq::socket_t(m.ctx, zmq::socket_type::pair);
      recv.set(zmq::sockopt::linger, 0);
      recv.bind(wakeEndpoint);
      send = zmq::socket_t(m.ctx, zmq::socket_type::pair);
      send.set(zmq::sockopt::linger, 0);
      send.connect(wakeEndpoint);
    };
    wakePair("wake", m.wakeRecv, m.wakeSend);
    MutexLock lock(&m.cmdMu);  // nobody else runs yet; the lock is for the analysis
    wakePair("commands", m.cmdWakeRecv, m.cmdWakeSend);
  } catch (const zmq::error_t& e) {
    return Status::error("ingest: cannot bind " + endpoint + ": " + e.what());
  }
  // Seed the world sizes from jobs stored earlier, so rank checks work across restarts.
  if (auto jobs = m.store.jobs(); jobs) {
    for (const auto& j : *jobs) {
      if (j.worldSize > 0) m.worldSizes[j.job] = j.worldSize;
    }
  }
  m.started = true;
  m.writerThread = std::thread([&m] {
    pthread_setname_np(pthread_self(), "ts-ingest-write");
    m.writerLoop();
  });
  m.socketThread = std::thread([&m] {
    pthread_setname_np(pthread_self(), "ts-ingest-sock");
    m.socketLoop();
  });
  return Status::ok();
}

void IngestServer::stop() {
  auto& m = *impl_;
  if (!m.started) return;
  m.started = false;
  m.stopping = true;
  m.socketThread.join();
  {
    MutexLock lock(&m.mu);
    m.writerExit = true;
  }
  m.cv.notifyAll();
  m.writerThread.join();
  {
    MutexLock lock(&m.cmdMu);
    m.nodeRoutes.clear();
    m.commands.clear();
    m.cmdWakeSend.close();
  }
  m.cmdWakeRecv.close();
  m.wakeSend.close();
  m.wakeRecv.close();
  m.router.close();
  m.monitor.close();
  m.zap.close();
}

std::string IngestServer::endpoint() const {
  return impl_->boundEndpoint;
}

IngestStats IngestServer::stats() const {
  const auto& m = *impl_;
  IngestStats s;
  s.frames = m.frames.load();
  s.batches = m.batches.load();
  s.itemsStored = m.itemsStored.load();
  s.stepsStored = m.stepsStored.load();
  s.heartbeats = m.heartbeats.load();
  s.hellos = m.hellos.load();
  s.acksSent = m.acksSent.load();
  s.commits = m.commits.load();
  s.commitFailures = m.commitFailures.load();
  s.disconnects = m.disconnects.load();
  s.lastCommitNs = m.lastCommitNs.load();
  {
    MutexLock lock(&m.rejectMu);
    s.rejects = m.rejects;
  }
  return s;
}

}  // namespace trainscope::ingest

namespace trainscope::ingest {

Status IngestServer::sendCommand(const std::string& node, const wire::Command& command) {
  auto& m = *impl_;
  wire::Envelope env;
  *env.mutable_command() = command;
  std::string frame = wire::encode(env);
  MutexLock lock(&m.cmdMu);
  auto it = m.nodeRoutes.find(node);
  if (it == m.nodeRoutes.end()) {
    return Status::error("node " + node + " has no connected agent");
  }
  m.commands.emplace_back(it->second, std::move(frame));
  try {
    (void)m.cmdWakeSend.send(zmq::str_buffer("c"), zmq::send_flags::dontwait);
  } catch (const zmq::error_t&) {
    // The socket thread polls on a timeout as well; a lost wake-up only delays the command.
  }
  return Status::ok();
}

std::vector<std::string> IngestServer::connectedNodes() const {
  const auto& m = *impl_;
  MutexLock lock(&m.cmdMu);
  std::vector<std::string> out;
  out.reserve(m.nodeRoutes.size());
  for (const auto& [node, id] : m.nodeRoutes) out.push_back(node);
  return out;
}

}  // namespace trainscope::ingest
