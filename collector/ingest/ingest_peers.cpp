// Who is connected to ingest (ingest_impl.h): with CURVE, the answers to libzmq's key checks
// (ZAP), a key on the allow-list passing as its node; the socket monitor's disconnects, which
// drop a peer and its command route, backed by dropping peers that fell silent (a close can be
// read before the connection's last messages, or after the next connection's on its descriptor);
// and the node -> connection routes commands follow.
// Socket thread, except where a route is read under cmdMu.
#include <cstring>
#include <string>
#include <vector>

#include "collector/ingest/ingest_impl.h"

namespace trainscope::ingest {
namespace {

constexpr const char* kComponent = "ingest";

}  // namespace

void IngestServer::Impl::routeNode(const Peer& p) {
  if (p.node.empty()) return;
  MutexLock lock(&cmdMu);
  nodeRoutes[p.node] = p.id;
}

void IngestServer::Impl::unrouteNode(const Peer& p) {
  MutexLock lock(&cmdMu);
  auto it = nodeRoutes.find(p.node);
  if (it != nodeRoutes.end() && it->second == p.id) nodeRoutes.erase(it);
}

void IngestServer::Impl::dropPeer(const std::string& id) {
  auto p = peers.find(id);
  if (p == peers.end()) return;
  if (auto f = fdPeers.find(p->second.fd); f != fdPeers.end() && f->second == id) {
    fdPeers.erase(f);
  }
  unrouteNode(p->second);
  peers.erase(p);
  peerCount = peers.size();
}

void IngestServer::Impl::bindFd(int fd, Peer& peer) {
  if (peer.fd != fd) {
    // Its routing id reconnected on another descriptor: the old one's close is not its own.
    if (auto f = fdPeers.find(peer.fd); f != fdPeers.end() && f->second == peer.id) {
      fdPeers.erase(f);
    }
    peer.fd = fd;
  }
  auto [it, added] = fdPeers.try_emplace(fd, peer.id);
  if (added || it->second == peer.id) return;
  // Two open connections never share a descriptor: the one that held it is closed, and its
  // close, still queued on the monitor, will name the new connection's descriptor (which then
  // loses its route until its next heartbeat).
  const std::string old = it->second;
  it->second = peer.id;
  dropPeer(old);
}

void IngestServer::Impl::forgetIdlePeers(int64_t nowNs, bool reading) {
  if (!reading) lastPausedNs = nowNs;
  if (nowNs - lastIdleSweepNs < 1'000'000'000) return;
  lastIdleSweepNs = nowNs;
  const int64_t idleNs = std::chrono::nanoseconds(options.peerIdleTimeout).count();
  if (lastPausedNs != 0 && nowNs - lastPausedNs <= idleNs) return;
  std::vector<std::string> idle;
  for (const auto& [id, p] : peers) {
    if (nowNs - p.seenNs > idleNs) idle.push_back(id);
  }
  for (const auto& id : idle) dropPeer(id);
}

void IngestServer::Impl::serveZap() {
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

void IngestServer::Impl::readMonitor() {
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
      const std::string id = it->second;
      if (auto p = peers.find(id); p != peers.end()) who = describe(p->second);
      fdPeers.erase(it);
      dropPeer(id);
    }
    // libzmq closes a connection without telling us why; a message over maxMessageBytes is
    // one cause, a peer going away the common one.
    peerLog.log(LogLevel::kInfo, kComponent,
                "connection from " + who + " closed (peer left, or it sent a message over " +
                    std::to_string(options.maxMessageBytes) + " bytes)");
  }
}

}  // namespace trainscope::ingest
