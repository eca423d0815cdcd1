// Upstream: the agent's side of the agent -> collector hop (schema/PROTOCOL.md). It owns the
// DEALER to the collector and its connection monitor, the hello and heartbeat timers, the
// clock-offset estimate, and the send window: batches cut from the spool, in flight until the
// collector acks them, sent again from the oldest unacked record after a timeout or a
// reconnect. Commands from the collector go to onCommand.
// Owned by the agent's loop thread; nothing in it is touched from another thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>

#include <zmq.hpp>

#include "agent/agent.h"
#include "agent/clock_offset.h"
#include "agent/options.h"
#include "agent/spool_writer.h"
#include "common/log.h"
#include "common/status.h"
#include "schema/wire.h"

namespace trainscope::agent {

class Upstream {
 public:
  Upstream(zmq::context_t& ctx, const AgentOptions& opts, SpoolWriter& spool);
  ~Upstream();
  Upstream(const Upstream&) = delete;
  Upstream& operator=(const Upstream&) = delete;

  // Sets the socket up, starts the monitor and connects (the connection itself completes in
  // the background). Sending starts from the spool's oldest unacked record.
  Status connect(int64_t nowMono);
  void* handle() { return socket_.handle(); }
  void* monitorHandle() { return monitor_.handle(); }

  // Acks, heartbeat replies and commands from the collector.
  void drain(int64_t nowMono);
  // Connection events: a handshake (re)starts sending from the oldest unacked record.
  void drainMonitor(int64_t nowMono);
  // Heartbeat and hello when due; a resend when the oldest batch waited too long for its ack;
  // dialing again after a failed handshake.
  void tick(int64_t nowMono);
  // Sends batches cut from the spool while the window has room.
  void pump(int64_t nowMono);
  // Earliest time one of the above has something to do (at least nowMono).
  int64_t nextDeadline(int64_t nowMono) const;
  // Records were appended to the spool at nowMono (the batch linger starts at the first).
  void noteAppended(int64_t nowMono) {
    if (unsentSinceMono_ == 0) unsentSinceMono_ = nowMono;
  }
  // Copies this part's counters and state into `s`.
  void fill(AgentStats& s) const;

  // Called for each Command envelope from the collector.
  std::function<void(const wire::Command&)> onCommand;
  // The number of ranks registered now, for heartbeats.
  std::function<uint32_t()> rankCount;

 private:
  struct InFlight {
    uint64_t seq = 0;  // spool index after the batch's last record
    int64_t sentMono = 0;
  };

  void handleAck(uint64_t seq);
  void restartFromAcked(const std::string& why);
  void sendHello();
  void sendHeartbeat();
  void scheduleRedial(int64_t nowMono);

  const AgentOptions& opts_;
  SpoolWriter& spool_;
  zmq::socket_t socket_;
  zmq::socket_t monitor_;
  ClockOffsetEstimator offsets_;

  uint64_t sendCursor_ = 0;        // next spool index to send
  uint64_t highestSent_ = 0;       // highest batch seq ever sent (acks above it are bogus)
  std::string heldFrame_;          // a built batch the socket refused, sent again as is
  uint64_t heldSeq_ = 0;           // its seq; 0 when none is held
  std::deque<InFlight> inflight_;  // oldest first
  int64_t unsentSinceMono_ = 0;    // when the oldest unsent record was appended; 0: none
  int64_t retryAtMono_ = 0;        // no send attempts before this
  bool connected_ = false;
  int64_t nextHeartbeat_ = 0, nextHello_ = 0;  // monotonic ns
  // libzmq gives up on a connection whose handshake failed (a refused key, plain text against
  // CURVE): the agent dials again itself at redialAtMono_ (0: not scheduled), backing off
  // from 1 s to 30 s, so a collector that is fixed (key added, restarted) gets the spool.
  int64_t redialAtMono_ = 0;
  int64_t redialBackoffMs_ = 0;

  uint64_t batches_ = 0;
  uint64_t resends_ = 0;
  uint64_t errors_ = 0;
  uint64_t heartbeatsSent_ = 0;
  uint64_t heartbeatReplies_ = 0;
  RateLimitedLog log_{std::chrono::seconds(5)};
};

}  // namespace trainscope::agent
