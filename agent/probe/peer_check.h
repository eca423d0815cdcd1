// PeerCheck: a probe sends nothing to an agent endpoint held by a process of another user.
// The default endpoint lives in a private directory (common/agent_endpoint.h), but an
// endpoint may be anywhere (TRAINSCOPE_AGENT), and a process that binds it first would get
// the job's telemetry and could send it commands. So every probe DEALER on an ipc:// endpoint
// asks ZeroMQ's authentication hook (ZAP, with the NULL mechanism) before its handshake
// completes; libzmq passes the listener's SO_PEERCRED, and PeerCheck accepts only our
// effective uid or root. A refused connection never carries a message; libzmq retries it, and
// the refusal is logged once per endpoint and uid.
// One PeerCheck serves a ZeroMQ context (it binds the context's ZAP endpoint); acquire() shares
// it among the transports of that context. serve() and the destructor run on the thread that
// services those transports (the probe's runtime thread); acquire() on any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace trainscope::probe {

class PeerCheck {
 public:
  // The PeerCheck of `zmqContext`, made (and its ZAP socket bound) on first use.
  static Result<std::shared_ptr<PeerCheck>> acquire(void* zmqContext);
  ~PeerCheck();
  PeerCheck(const PeerCheck&) = delete;
  PeerCheck& operator=(const PeerCheck&) = delete;

  // The ZAP domain a DEALER must set (ZMQ_ZAP_DOMAIN) to be checked.
  static constexpr const char* kDomain = "trainscope-agent-peer";

  // Answers the requests waiting now; never blocks.
  void serve();

  // "<host>:<uid>:<gid>:<pid>" (libzmq's address of an ipc peer): whether a listener with
  // these credentials may receive a probe's data, run as `self`; *uid and *pid are filled
  // when the address carries them (else *uid is UINT32_MAX, and the answer no). Pure.
  static bool allowed(const std::string& peerAddress, uint32_t self, uint32_t* uid, uint32_t* pid);

 private:
  explicit PeerCheck(void* socket) : socket_(socket) {}
  void* socket_;  // REP bound to inproc://zeromq.zap.01 in the context
};

}  // namespace trainscope::probe
