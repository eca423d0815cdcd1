// Upstream: the agent's side of the agent -> collector hop to one collector (schema/PROTOCOL.md).
// It owns the DEALER to the collector and its connection monitor, the hello and heartbeat
// timers, the clock-offset estimate, and the send window: batches cut from the spool, in flight
// until the collector acks them, sent again from the oldest unacked record after a timeout or a
// reconnect. Commands from the collector go to onCommand.
// With several collectors (agent/routing.h) each has its own Upstream, which sends only the
// spool records `owns` accepts and skips the others; its acked() position then means "every
// record below it that this link sends is acked", and the spool itself is acked only up to the
// lowest such position of the links that are up.
// Owned by the agent's loop thread; nothing in it is touched from another thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>

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
  // `endpoint` is the collector's ingest endpoint, one of opts.collectors.
  Upstream(zmq::context_t& ctx, const AgentOptions& opts, SpoolWriter& spool, std::string endpoint);
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
  // Adds this link's counters to `s` and its state to s.collectors.
  void fill(AgentStats& s, bool up) const;

  const std::string& endpoint() const { return endpoint_; }
  bool connected() const { return connected_; }
  // Heard from (a handshake, an ack, a heartbeat reply, any frame) within `boundNs`; a link
  // never heard from counts from connect().
  bool heardWithin(int64_t nowMono, int64_t boundNs) const {
    return nowMono - lastHeardMono_ <= boundNs;
  }
  // Every record below this index that this link sends has been acked by its collector.
  uint64_t acked() const { return acked_; }
  // The records this link sends changed (a collector went or came back): forget what is in
  // flight and send again from the spool's oldest unacked record. Acks of batches sent before
  // this are ignored from now on (they covered the old choice of records; see epoch_).
  void rerouted(const std::string& why);

  // Which spool records this link sends (a serialized item envelope in, true to send it);
  // unset: all of them (a single collector).
  std::function<bool(std::string_view record)> owns;
  // Called when acked() moved forward; the owner acks the spool.
  std::function<void()> onAcked;
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

  // Batch.seq on the wire: the spool index after the batch's last record, with epoch_ in the
  // bits above kIndexBits, so an ack of a batch sent before rerouted() cannot be mistaken for
  // the ack of a batch sent after it that ends at the same index. Epoch 0 (one collector, or no
  // change yet) sends the spool index itself, as a single-collector agent always did.
  static constexpr int kIndexBits = 48;
  uint64_t wireSeq(uint64_t index) const { return (epoch_ << kIndexBits) | index; }

  const AgentOptions& opts_;
  SpoolWriter& spool_;
  const std::string endpoint_;
  zmq::socket_t socket_;
  zmq::socket_t monitor_;
  ClockOffsetEstimator offsets_;

  uint64_t epoch_ = 0;             // rerouted() calls so far
  uint64_t acked_ = 0;             // see acked()
  int64_t lastHeardMono_ = 0;      // last frame or handshake from the collector
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
