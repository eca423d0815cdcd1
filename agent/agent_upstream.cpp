// The upstream side of the agent: the DEALER to the collector, hello and heartbeat, the
// connection monitor, the batch window cut from the spool, acks and resends.
// Runs on the agent's loop thread only.
#include "agent/agent_impl.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <vector>

#include <unistd.h>

#include <zmq.hpp>

#include "common/clock.h"
#include "common/log.h"
#include "schema/wire.h"

namespace trainscope::agent {
using namespace internal;  // NOLINT(google-build-using-namespace): the agent's own constants

namespace {

void putVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

size_t varintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// Envelope{schema_version, batch: Batch{seq, items}} built from already-serialized item
// envelopes, so spooled records are sent without being parsed again.
std::string encodeBatchFrame(uint64_t seq, const std::vector<std::string>& items) {
  size_t body = 1 + varintSize(seq);
  for (const auto& it : items) body += 1 + varintSize(it.size()) + it.size();
  std::string out;
  out.reserve(body + 16);
  out.push_back(0x08);  // field 1 (schema_version), varint
  putVarint(out, wire::kSchemaVersion);
  putVarint(out, (17u << 3) | 2u);  // field 17 (batch), length-delimited
  putVarint(out, body);
  out.push_back(0x08);  // Batch field 1 (seq), varint
  putVarint(out, seq);
  for (const auto& it : items) {
    out.push_back(0x12);  // Batch field 2 (items), length-delimited
    putVarint(out, it.size());
    out.append(it);
  }
  return out;
}

}  // namespace

void Agent::Impl::handleAck(uint64_t seq) {
  if (seq <= spool->ackedIndex()) return;  // a late ack of something already acked
  if (seq > highestSent) {
    upstreamLog.log(LogLevel::kWarn, kLog,
                    "collector acked seq " + std::to_string(seq) + " beyond what was sent (" +
                        std::to_string(highestSent) + "); ignoring it");
    return;
  }
  spool->ack(seq);
  // A late ack of a batch sent before a restart of sending also moves the cursor on.
  if (seq > sendCursor) {
    sendCursor = seq;
    heldSeq = 0;
    heldFrame.clear();
  }
  while (!inflight.empty() && inflight.front().seq <= seq) inflight.pop_front();
}

void Agent::Impl::drainUpstream(int64_t now) {
  for (int i = 0; i < kDrainLimit; ++i) {
    zmq::message_t frame;
    if (!upstream.recv(frame, zmq::recv_flags::dontwait)) return;
    auto decoded = wire::decode(frame.data(), frame.size());
    if (!decoded) {
      ++counters.upstreamErrors;
      upstreamLog.log(LogLevel::kWarn, kLog, "bad frame from the collector: " + decoded.message());
      continue;
    }
    const wire::Envelope& env = *decoded;
    switch (env.body_case()) {
      case wire::Envelope::kAck:
        handleAck(env.ack().seq());
        break;
      case wire::Envelope::kHeartbeatReply: {
        const auto& r = env.heartbeat_reply();
        ++counters.heartbeatReplies;
        if (!offsets.add(r.t1_ns(), r.t2_ns(), r.t3_ns(), wallNowNs())) {
          upstreamLog.log(LogLevel::kDebug, kLog, "heartbeat reply with impossible times ignored");
        }
        break;
      }
      case wire::Envelope::kCommand:
        forwardCommand(env.command());
        break;
      case wire::Envelope::kError:
        ++counters.upstreamErrors;
        upstreamLog.log(
            LogLevel::kWarn, kLog,
            "collector rejected a frame (" + env.error().reason() + "): " + env.error().detail());
        break;
      default:
        ++counters.upstreamErrors;
        upstreamLog.log(LogLevel::kWarn, kLog,
                        "unexpected message from the collector (field " +
                            std::to_string(static_cast<int>(env.body_case())) + ")");
        break;
    }
  }
  (void)now;
}

void Agent::Impl::restartFromAcked(const std::string& why) {
  uint64_t from = spool->firstUnacked();
  if (!inflight.empty() || sendCursor != from) {
    ++counters.upstreamResends;
    upstreamLog.log(LogLevel::kInfo, kLog,
                    why + "; sending again from spool index " + std::to_string(from));
  }
  inflight.clear();
  sendCursor = from;
  heldSeq = 0;
  heldFrame.clear();
  if (spool->nextIndex() > from) unsentSinceMono = 1;  // long ago: send at once
}

void Agent::Impl::drainMonitor(int64_t now) {
  for (int i = 0; i < 64; ++i) {
    zmq::message_t ev;
    if (!monitor.recv(ev, zmq::recv_flags::dontwait)) return;
    zmq::message_t addr;
    if (ev.more()) (void)monitor.recv(addr, zmq::recv_flags::dontwait);
    if (ev.size() < 6) continue;
    uint16_t id = 0;
    std::memcpy(&id, ev.data(), sizeof id);
    if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      connected = true;
      logInfo(kLog, "connected to the collector at " + opts.collector);
      // A new connection may be a new collector process: what was in flight is lost with
      // the old one, so start from the oldest unacked record.
      restartFromAcked("collector (re)connected");
      retryAtMono = 0;
      sendHello();
      nextHello = now + opts.helloIntervalMs * kMs;
      nextHeartbeat = now;
    } else if (id == ZMQ_EVENT_DISCONNECTED) {
      if (connected) logWarn(kLog, "lost the collector at " + opts.collector + "; spooling");
      connected = false;
    }
  }
}

void Agent::Impl::sendHello() {
  wire::Envelope env;
  auto* h = env.mutable_agent_hello();
  h->set_node(opts.node);
  h->set_agent_version(kAgentVersion);
  h->set_pid(static_cast<uint32_t>(::getpid()));
  h->set_host(hostName());
  std::string data = wire::encode(env);
  (void)upstream.send(zmq::buffer(data), zmq::send_flags::dontwait);
}

void Agent::Impl::sendHeartbeat() {
  wire::Envelope env;
  auto* hb = env.mutable_heartbeat();
  hb->set_node(opts.node);
  hb->set_t1_ns(wallNowNs());
  if (offsets.hasEstimate()) {
    hb->set_offset_ns(offsets.best().offsetNs);
    hb->set_rtt_ns(offsets.best().rttNs);
  }
  SpoolStats ss = spool->stats();
  hb->set_spool_bytes(ss.bytes);
  hb->set_spool_dropped(ss.droppedItems);
  hb->set_ranks(static_cast<uint32_t>(ranks.size()));
  std::string data = wire::encode(env);
  if (upstream.send(zmq::buffer(data), zmq::send_flags::dontwait)) ++counters.heartbeatsSent;
}

void Agent::Impl::pumpUpstream(int64_t now) {
  if (now < retryAtMono) return;
  // Without a collector (ZMQ_IMMEDIATE refuses sends) there is nothing to try; the monitor
  // reports the handshake that opens the way again.
  if (!connected) return;
  while (inflight.size() < static_cast<size_t>(opts.windowBatches)) {
    if (sendCursor < spool->firstUnacked()) {
      sendCursor = spool->firstUnacked();  // the spool bound dropped what we were at
      heldSeq = 0;
      heldFrame.clear();
    }
    uint64_t unsent = spool->nextIndex() - sendCursor;
    if (unsent == 0) {
      unsentSinceMono = 0;
      return;
    }
    if (heldSeq == 0) {
      if (unsent < kMaxBatchItems && unsentSinceMono != 0 &&
          now - unsentSinceMono < opts.batchLingerMs * kMs) {
        return;  // let the batch fill; the loop wakes at the linger deadline
      }
      std::vector<std::string> items;
      uint64_t next = sendCursor;
      Status st = spool->read(sendCursor, kMaxBatchItems, kMaxBatchBytes, &items, &next);
      if (!st) {
        spoolLog.log(LogLevel::kError, kLog, st.message());
        retryAtMono = now + kRetryNs;
        return;
      }
      if (next == sendCursor) return;
      heldFrame = encodeBatchFrame(next, items);
      heldSeq = next;
    }
    if (!upstream.send(zmq::buffer(heldFrame), zmq::send_flags::dontwait)) {
      // The connection went away or its pipe is full: keep the frame for the next try.
      retryAtMono = now + kRetryNs;
      return;
    }
    ++counters.upstreamBatches;
    inflight.push_back(InFlight{heldSeq, now});
    highestSent = std::max(highestSent, heldSeq);
    sendCursor = heldSeq;
    heldSeq = 0;
    heldFrame.clear();
    if (sendCursor >= spool->nextIndex()) unsentSinceMono = 0;
  }
}

}  // namespace trainscope::agent
