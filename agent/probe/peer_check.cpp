#include "agent/probe/peer_check.h"

#include <zmq.h>

#include <unistd.h>

#include <map>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "common/thread_annotations.h"

namespace trainscope::probe {
namespace {

Mutex gMu;
std::map<void*, std::weak_ptr<PeerCheck>> gChecks GUARDED_BY(gMu);  // by context

bool parseUint(const std::string& s, uint32_t* out) {
  if (s.empty() || s.size() > 10) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > UINT32_MAX) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

// Reads one multi-part message; false when none is waiting.
bool readRequest(void* socket, std::vector<std::string>* parts) {
  parts->clear();
  for (;;) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, socket, parts->empty() ? ZMQ_DONTWAIT : 0) < 0) {
      zmq_msg_close(&m);
      return !parts->empty();
    }
    parts->emplace_back(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
    const bool more = zmq_msg_more(&m) != 0;
    zmq_msg_close(&m);
    if (!more) return true;
  }
}

void reply(void* socket, const std::string& requestId, const char* status, const char* text) {
  // ZAP 1.0 reply: version, request id, status code, status text, user id, metadata.
  const std::string frames[] = {"1.0", requestId, status, text, "", ""};
  for (size_t i = 0; i < 6; ++i) {
    zmq_send(socket, frames[i].data(), frames[i].size(), i + 1 < 6 ? ZMQ_SNDMORE : 0);
  }
}

}  // namespace

bool PeerCheck::allowed(const std::string& peerAddress, uint32_t self, uint32_t* uid,
                        uint32_t* pid) {
  *uid = UINT32_MAX;
  *pid = 0;
  const size_t pidColon = peerAddress.rfind(':');
  if (pidColon == std::string::npos || pidColon == 0) return false;
  const size_t gidColon = peerAddress.rfind(':', pidColon - 1);
  if (gidColon == std::string::npos || gidColon == 0) return false;
  const size_t uidColon = peerAddress.rfind(':', gidColon - 1);
  if (uidColon == std::string::npos) return false;
  uint32_t u = 0, p = 0;
  if (!parseUint(peerAddress.substr(uidColon + 1, gidColon - uidColon - 1), &u) ||
      !parseUint(peerAddress.substr(pidColon + 1), &p)) {
    return false;
  }
  *uid = u;
  *pid = p;
  return u == self || u == 0;
}

Result<std::shared_ptr<PeerCheck>> PeerCheck::acquire(void* zmqContext) {
  MutexLock lock(&gMu);
  if (auto existing = gChecks[zmqContext].lock()) return existing;
  void* socket = zmq_socket(zmqContext, ZMQ_REP);
  if (socket == nullptr) {
    return Result<std::shared_ptr<PeerCheck>>::error(
        std::string("cannot create the agent peer check: ") + zmq_strerror(zmq_errno()));
  }
  const int zero = 0;
  zmq_setsockopt(socket, ZMQ_LINGER, &zero, sizeof zero);
  if (zmq_bind(socket, "inproc://zeromq.zap.01") != 0) {
    const int err = zmq_errno();
    zmq_close(socket);
    return Result<std::shared_ptr<PeerCheck>>::error(
        std::string("cannot start the agent peer check (ZAP endpoint): ") + zmq_strerror(err));
  }
  std::shared_ptr<PeerCheck> check(new PeerCheck(socket));
  gChecks[zmqContext] = check;
  return check;
}

PeerCheck::~PeerCheck() {
  zmq_close(socket_);
}

void PeerCheck::serve() {
  const auto self = static_cast<uint32_t>(::geteuid());
  std::vector<std::string> req;
  for (int i = 0; i < 64 && readRequest(socket_, &req); ++i) {
    // ZAP 1.0 request: version, request id, domain, address, routing id, mechanism, ...
    if (req.size() < 6 || req[0] != "1.0") {
      reply(socket_, req.size() > 1 ? req[1] : "", "500", "malformed request");
      continue;
    }
    uint32_t uid = 0, pid = 0;
    if (req[2] != kDomain || allowed(req[3], self, &uid, &pid)) {
      reply(socket_, req[1], "200", "OK");  // not one of ours, or a listener we may talk to
    } else if (uid == UINT32_MAX) {
      logOnce(LogLevel::kError, "probe", "peer-unknown",
              "the agent endpoint's listener cannot be identified (no SO_PEERCRED in '" + req[3] +
                  "'); sending it nothing");
      reply(socket_, req[1], "400", "listener not identified");
    } else {
      logOnce(LogLevel::kError, "probe", "peer-" + std::to_string(uid),
              "the agent endpoint is held by a process of uid " + std::to_string(uid) + " (pid " +
                  std::to_string(pid) + "), not by this user (uid " + std::to_string(self) +
                  ") or root; sending it nothing (another user may be " +
                  "squatting the endpoint: see TRAINSCOPE_AGENT)");
      reply(socket_, req[1], "400", "listener of another user");
    }
  }
}

}  // namespace trainscope::probe
