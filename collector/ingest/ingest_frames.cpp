// From a frame an agent sent to the pending commit (ingest_impl.h): the fast path for batches
// (wire::splitBatch, each step report decoded once and its bytes kept as the stored detail),
// the Envelope path for the rest, each item validated and counted when refused, heartbeats
// answered and hellos recorded. Socket thread only.
#include <algorithm>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "collector/ingest/ingest_impl.h"
#include "common/clock.h"

namespace trainscope::ingest {
namespace {

constexpr const char* kComponent = "ingest";

}  // namespace

namespace internal {

std::string describe(const Peer& p) {
  std::string out = p.node.empty() ? std::string("unknown node") : "node " + p.node;
  if (!p.address.empty()) out += " at " + p.address;
  return out;
}

}  // namespace internal

void IngestServer::Impl::countReject(const std::string& reason, uint64_t n) {
  MutexLock lock(&rejectMu);
  rejects[reason] += n;
}

internal::Peer& IngestServer::Impl::peerOf(const std::string& id) {
  auto [it, added] = peers.try_emplace(id);
  if (added) {
    it->second.id = id;
    peerCount = peers.size();
  }
  return it->second;
}

void IngestServer::Impl::rejectFrame(const std::string& id, const std::string& reason,
                                     const std::string& detail) {
  countReject(reason);
  sendError(id, reason, detail);
  rejectLog.log(LogLevel::kWarn, kComponent,
                "rejected frame from " + describe(peerOf(id)) + ": " + detail);
}

void IngestServer::Impl::markPending() {
  if (pendingSinceNs == 0) {
    pendingSinceNs = monotonicNowNs();
    pending.batch.receivedNs = wallNowNs();
  }
}

void IngestServer::Impl::noteJob(const std::string& job) {
  auto [it, added] = jobSeenNs.try_emplace(job, frameNowNs);
  it->second = frameNowNs;
  if (!added) return;
  jobCount = jobSeenNs.size();
  // First sight since start, or since the job was forgotten: its stored ranks say its world
  // size, so a late or foreign hello still meets the first claim.
  auto ranks = store.ranks(job);
  if (!ranks) {
    rejectLog.log(LogLevel::kWarn, kComponent,
                  "cannot read the ranks of job " + job + ": " + ranks.message());
    return;
  }
  for (const auto& r : *ranks) {
    if (r.worldSize > 0) {
      worldSizes.try_emplace(job, r.worldSize);
      break;
    }
  }
}

void IngestServer::Impl::forgetIdleJobs(int64_t nowNs) {
  const int64_t idleNs = std::chrono::nanoseconds(options.jobIdleTimeout).count();
  if (nowNs - lastJobSweepNs < std::min<int64_t>(idleNs, 10'000'000'000)) return;
  lastJobSweepNs = nowNs;
  for (auto it = jobSeenNs.begin(); it != jobSeenNs.end();) {
    if (nowNs - it->second <= idleNs) {
      ++it;
      continue;
    }
    worldSizes.erase(it->first);
    rankNodes.erase(it->first);
    it = jobSeenNs.erase(it);
  }
  jobCount = jobSeenNs.size();
}

std::optional<uint32_t> IngestServer::Impl::worldSizeOf(const std::string& job) {
  noteJob(job);
  auto it = worldSizes.find(job);
  if (it == worldSizes.end()) return std::nullopt;
  return it->second;
}

void IngestServer::Impl::progressOf(const wire::RankHello& hello, const Peer& peer,
                                    int64_t receivedNs) {
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

bool IngestServer::Impl::nodeAllowed(const Peer& peer, const std::string& node) const {
  return !options.curve || node == peer.keyNode;
}

std::string IngestServer::Impl::nodeMismatch(const Peer& peer, const std::string& node) {
  return "node_mismatch: the key of node '" + peer.keyNode + "' may not speak for node '" + node +
         "'";
}

uint32_t IngestServer::Impl::nodeSlot(const std::string& node) {
  auto [it, added] = nodeIds.try_emplace(node, static_cast<uint32_t>(nodeNames.size()));
  if (added) nodeNames.push_back(node);
  return it->second + 1;
}

std::vector<uint32_t>& IngestServer::Impl::rankNodesOf(const std::string& job) {
  noteJob(job);  // so that the entry made here leaves with the job
  auto [it, added] = rankNodes.try_emplace(job);
  if (!added) return it->second;
  // Each accepted hello stored its rank's node, so after a restart the store knows where every
  // rank lives; read once per job, on the first item that names it. Ranks seen only through
  // their steps have no node there and stay unbound.
  auto ranks = store.ranks(job);
  if (!ranks) {
    // Unbound ranks are refused until a hello binds them; the next hello does.
    rejectLog.log(LogLevel::kWarn, kComponent,
                  "cannot read the ranks of job " + job + ": " + ranks.message());
    return it->second;
  }
  for (const auto& r : *ranks) {
    if (r.node.empty() || r.rank >= wire::kMaxWorldSize) continue;
    if (it->second.size() <= r.rank) it->second.resize(r.rank + 1, 0);
    it->second[r.rank] = nodeSlot(r.node) | (r.ended ? kRankEnded : 0);
  }
  return it->second;
}

std::optional<Rejection> IngestServer::Impl::rankNodeCheck(const Peer& peer, const std::string& job,
                                                           uint32_t rank) {
  if (!options.curve) return std::nullopt;
  const auto& nodes = rankNodesOf(job);
  const uint32_t slot = rank < nodes.size() ? nodes[rank] & ~kRankEnded : 0;
  const auto at = [&] { return " (job " + job + " rank " + std::to_string(rank) + ")"; };
  if (slot == 0) {
    return Rejection{"node_mismatch",
                     "the rank has no accepted RankHello, so its node is not known; node '" +
                         peer.keyNode + "' may not speak for it" + at()};
  }
  const std::string& home = nodeNames[slot - 1];
  if (home == peer.keyNode) return std::nullopt;
  return Rejection{"node_mismatch", "the rank lives on node '" + home + "'; the key of node '" +
                                        peer.keyNode + "' may not speak for it" + at()};
}

std::optional<Rejection> IngestServer::Impl::claimRank(const Peer& peer, const std::string& job,
                                                       uint32_t rank) {
  if (!options.curve) return std::nullopt;
  auto& nodes = rankNodesOf(job);
  const uint32_t mine = nodeSlot(peer.keyNode);
  const uint32_t held = rank < nodes.size() ? nodes[rank] : 0;
  const uint32_t home = held & ~kRankEnded;
  if (home != 0 && home != mine) {
    const std::string& homeName = nodeNames[home - 1];
    bool homeConnected = false;
    {
      MutexLock lock(&cmdMu);
      homeConnected = nodeRoutes.count(homeName) != 0;
    }
    // A move: the rank ended on its node (its agent said goodbye for it), or its node's agent
    // is gone (a rank restarted elsewhere after its node failed). A live node's rank stays put.
    if ((held & kRankEnded) == 0 && homeConnected) {
      return Rejection{"node_mismatch", "rank " + std::to_string(rank) + " of job " + job +
                                            " lives on node '" + homeName +
                                            "', which is connected and has not ended it; node '" +
                                            peer.keyNode + "' may not take it over"};
    }
    logInfo(kComponent, "rank " + std::to_string(rank) + " of job " + job + " moved from node " +
                            homeName + " to node " + peer.keyNode);
  }
  if (nodes.size() <= rank) nodes.resize(rank + 1, 0);
  nodes[rank] = mine;  // a hello from its node also means it runs (again): not ended
  return std::nullopt;
}

void IngestServer::Impl::groupsOf(const wire::RankHello& hello, const Peer& peer) {
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

void IngestServer::Impl::rejectItem(ItemRejects& r, Rejection rejection) {
  countReject(rejection.reason);
  ++r.count;
  if (!r.first) r.first = std::move(rejection);
}

std::optional<Rejection> IngestServer::Impl::itemVersion(uint32_t version) {
  if (version == 0 || version == wire::kSchemaVersion) return std::nullopt;
  return Rejection{"version", "item schema version " + std::to_string(version)};
}

void IngestServer::Impl::handleItem(Peer& peer, wire::Envelope& item, int64_t receivedNs,
                                    ItemRejects& rejects) {
  if (auto r = itemVersion(item.schema_version())) {
    rejectItem(rejects, std::move(*r));
    return;
  }
  if (auto r = newJobRefused(peer, item)) {
    rejectItem(rejects, std::move(*r));
    return;
  }
  switch (item.body_case()) {
    case wire::Envelope::kStep: {
      auto r = validateStep(item.step(), worldSizeOf(item.step().job()), options.limits);
      if (!r) r = rankNodeCheck(peer, item.step().job(), item.step().rank());
      if (r) {
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
      if (auto known = worldSizeOf(info->job()); known && *known != info->world_size()) {
        rejectItem(rejects, {"world_size_conflict",
                             "job " + info->job() + " has world_size " + std::to_string(*known) +
                                 "; the hello of rank " + std::to_string(info->rank()) +
                                 " claims " + std::to_string(info->world_size())});
        break;
      }
      if (auto r = claimRank(peer, info->job(), info->rank())) {
        rejectItem(rejects, std::move(*r));
        break;
      }
      worldSizes.try_emplace(info->job(), info->world_size());
      progressOf(item.rank_hello(), peer, receivedNs);
      groupsOf(item.rank_hello(), peer);
      pending.batch.ranks.push_back(std::move(*info));
      ++pending.items;
      break;
    }
    case wire::Envelope::kRankGoodbye: {
      const auto& bye = item.rank_goodbye();
      auto r = validateGoodbye(bye, worldSizeOf(bye.job()), options.limits);
      if (!r) r = rankNodeCheck(peer, bye.job(), bye.rank());
      if (r) {
        rejectItem(rejects, std::move(*r));
        break;
      }
      // Its node let it go: a hello from another node may take it over (claimRank).
      if (options.curve) {
        auto& nodes = rankNodesOf(bye.job());
        if (bye.rank() < nodes.size()) nodes[bye.rank()] |= kRankEnded;
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
    case wire::Envelope::kFileChunk: {
      // A status or a file of a rank comes from the node the rank lives on, so no other node
      // can fail its capture or ship its trace.
      const bool isStatus = item.has_command_status();
      const std::string& job = isStatus ? item.command_status().job() : item.file_chunk().job();
      const uint32_t rank = isStatus ? item.command_status().rank() : item.file_chunk().rank();
      if (auto r = rankNodeCheck(peer, job, rank)) {
        rejectItem(rejects, std::move(*r));
        break;
      }
      if (options.onCommandItem) {
        options.onCommandItem(peer.node, item);
      } else {
        rejectItem(rejects,
                   {"unsupported_item", "command results are not handled by this collector"});
      }
      break;
    }
    default:
      rejectItem(rejects, {"invalid_item_type",
                           "item type " + std::to_string(static_cast<int>(item.body_case())) +
                               " is not allowed in a batch"});
      break;
  }
}

void IngestServer::Impl::finishBatch(const std::string& id, const Peer& peer, uint64_t seq,
                                     size_t itemCount, const ItemRejects& rejected) {
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

void IngestServer::Impl::handleBatch(const std::string& id, wire::Envelope& env,
                                     int64_t receivedNs) {
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

void IngestServer::Impl::handleBatchFrame(const std::string& id, const wire::BatchFrame& frame,
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
    if (!r) r = newJobRefused(peer, steps[i].job());
    if (!r) r = validateStep(steps[i], worldSizeOf(steps[i].job()), options.limits);
    if (!r) r = rankNodeCheck(peer, steps[i].job(), steps[i].rank());
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
  if (kept > first) {
    const char* before = static_cast<const char*>(payload.data());
    const auto& held =
        pending.frames.emplace_back(std::make_unique<zmq::message_t>(std::move(payload)));
    // A small message (up to ZMQ_MAX_VSM_SIZE bytes) keeps its bytes inside the message_t, so
    // the move above moved them too: the views follow them (ASan found them pointing into the
    // freed original).
    const char* after = static_cast<const char*>(held->data());
    if (after != before) {
      for (size_t i = first; i < kept; ++i) {
        details[i] = std::string_view(after + (details[i].data() - before), details[i].size());
      }
    }
  }
  finishBatch(id, peer, frame.seq, frame.items.size(), rejected);
}

void IngestServer::Impl::handleFrame(const std::string& id, zmq::message_t& payload) {
  const int64_t receivedNs = wallNowNs();
  frameNowNs = monotonicNowNs();
  ++frames;
  int fd = -1;
  {
    Peer& peer = peerOf(id);
    peer.seenNs = monotonicNowNs();
    if (peer.address.empty()) {
      if (const char* addr = zmq_msg_gets(payload.handle(), "Peer-Address")) {
        peer.address = addr;
      }
    }
    fd = zmq_msg_get(payload.handle(), ZMQ_SRCFD);
    if (fd >= 0) bindFd(fd, peer);
    if (options.curve) {
      // The ZAP handler's user id, on every message of a connection that passed it. Read each
      // time rather than once: a routing id is the peer's to choose, the key is not.
      const char* user = zmq_msg_gets(payload.handle(), "User-Id");
      peer.keyNode = user != nullptr ? user : "";
    }
  }
  dispatchFrame(id, payload, receivedNs);
  // libzmq names no descriptor for a peer speaking ZMTP 1.0 (raw bytes on the port read as that
  // old framing; never one of our agents), so its close cannot be matched: forget it now,
  // unless it holds a node's route (then it goes when it falls silent).
  if (fd < 0) {
    if (auto p = peers.find(id); p != peers.end() && p->second.node.empty()) dropPeer(id);
  }
}

void IngestServer::Impl::dispatchFrame(const std::string& id, zmq::message_t& payload,
                                       int64_t receivedNs) {
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
                                std::to_string(hello.pid()) + ", version " + hello.agent_version() +
                                ") connected" +
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

bool IngestServer::Impl::readOne() {
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

}  // namespace trainscope::ingest
