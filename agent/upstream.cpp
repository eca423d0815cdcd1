#include "agent/upstream.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "agent/internal.h"
#include "common/clock.h"
#include "common/curve_keys.h"
#include "common/log.h"

namespace trainscope::agent {
using namespace internal;  // NOLINT(google-build-using-namespace): the agent's own constants

namespace {

// After a send finds no connected collector, wait this long before trying again.
constexpr int64_t kRetryNs = 100 * kMs;
// Spool reads of only other links' records one pump() may do (each up to kMaxBatchItems).
constexpr int kMaxSkippedReads = 16;

std::string randomHex(size_t bytes) {
  std::random_device rd;
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes; ++i) {
    unsigned v = rd() & 0xff;
    out.push_back(kHex[v >> 4]);
    out.push_back(kHex[v & 0xf]);
  }
  return out;
}

}  // namespace

Upstream::Upstream(zmq::context_t& ctx, const AgentOptions& opts, SpoolWriter& spool,
                   std::string endpoint)
    : opts_(opts),
      spool_(spool),
      endpoint_(std::move(endpoint)),
      socket_(ctx, zmq::socket_type::dealer),
      monitor_(ctx, zmq::socket_type::pair) {}

Upstream::~Upstream() {
  monitor_.close();
  socket_.close();
}

Status Upstream::connect(int64_t now) {
  sendCursor_ = spool_.spool().firstUnacked();
  acked_ = sendCursor_;
  lastHeardMono_ = now;
  const bool curve = !opts_.collectorKeyFile.empty();
  CurveKeyPair own;
  std::string server;
  if (curve) {
    if (Status st = curveAvailable("--agent-key"); !st) return st;
    auto keys = readCurveSecretFile(opts_.agentKeyFile);
    if (!keys) return Status::error("--agent-key: " + keys.message());
    own = *keys;
    auto pub = readCurvePublicFile(opts_.collectorKeyFile);
    if (!pub) return Status::error("--collector-key: " + pub.message());
    server = *pub;
  }
  try {
    monitor_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::immediate, 1);
    socket_.set(zmq::sockopt::routing_id, "agent-" + opts_.node + "-" + randomHex(8));
    // Handshake failures too, for plain text as well: a collector with --curve-keys refuses a
    // plain-text agent that way.
    const int events = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED |
                       ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                       ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    if (curve) {
      socket_.set(zmq::sockopt::curve_serverkey, server);
      socket_.set(zmq::sockopt::curve_publickey, own.publicKey);
      socket_.set(zmq::sockopt::curve_secretkey, own.secretKey);
    }
    std::string monEndpoint = "inproc://agent-monitor-" + randomHex(8);
    if (zmq_socket_monitor(socket_.handle(), monEndpoint.c_str(), events) != 0) {
      return Status::error(std::string("cannot monitor the upstream socket: ") +
                           zmq_strerror(zmq_errno()));
    }
    monitor_.connect(monEndpoint);
    socket_.connect(endpoint_);
  } catch (const zmq::error_t& e) {
    return Status::error("cannot open --collector " + endpoint_ + ": " + e.what());
  }
  nextHeartbeat_ = now;
  nextHello_ = now;
  if (spool_.spool().pendingItems() > 0) unsentSinceMono_ = now - opts_.batchLingerMs * kMs;
  return Status::ok();
}

void Upstream::tick(int64_t now) {
  if (redialAtMono_ != 0 && now >= redialAtMono_) {
    redialAtMono_ = 0;
    // The failed connection is gone already; disconnect only clears what libzmq may keep
    // of it (an error here just means nothing was left).
    (void)zmq_disconnect(socket_.handle(), endpoint_.c_str());
    if (zmq_connect(socket_.handle(), endpoint_.c_str()) != 0) {
      log_.log(
          LogLevel::kError, kLog,
          "cannot dial the collector at " + endpoint_ + " again: " + zmq_strerror(zmq_errno()));
      scheduleRedial(now);
    }
  }
  if (now >= nextHeartbeat_) {
    sendHeartbeat();
    nextHeartbeat_ = now + opts_.heartbeatIntervalMs * kMs;
  }
  if (now >= nextHello_) {
    sendHello();
    nextHello_ = now + opts_.helloIntervalMs * kMs;
  }
  if (!inflight_.empty() && now - inflight_.front().sentMono > opts_.resendTimeoutMs * kMs) {
    restartFromAcked("no ack for upstream batch " + std::to_string(inflight_.front().seq) +
                     " within " + std::to_string(opts_.resendTimeoutMs) + " ms");
    retryAtMono_ = 0;
  }
}

int64_t Upstream::nextDeadline(int64_t now) const {
  int64_t d = std::min(nextHeartbeat_, nextHello_);
  if (redialAtMono_ != 0) d = std::min(d, redialAtMono_);
  if (!inflight_.empty()) {
    d = std::min(d, inflight_.front().sentMono + opts_.resendTimeoutMs * kMs);
  }
  bool windowOpen = inflight_.size() < static_cast<size_t>(opts_.windowBatches);
  if (connected_ && windowOpen && unsentSinceMono_ != 0) {
    d = std::min(d, std::max(unsentSinceMono_ + opts_.batchLingerMs * kMs, retryAtMono_));
  }
  return std::max(d, now);
}

void Upstream::fill(AgentStats& s, bool up) const {
  s.upstreamBatches += batches_;
  s.upstreamResends += resends_;
  s.upstreamAcked = spool_.spool().ackedIndex();
  s.upstreamErrors += errors_;
  s.heartbeatsSent += heartbeatsSent_;
  s.heartbeatReplies += heartbeatReplies_;
  if (!s.haveOffset && offsets_.hasEstimate()) {  // the first collector's with an estimate
    s.haveOffset = true;
    s.offsetNs = offsets_.best().offsetNs;
    s.rttNs = offsets_.best().rttNs;
  }
  s.collectorConnected = s.collectorConnected || connected_;
  s.collectors.push_back({endpoint_, connected_, up, acked_, batches_, resends_});
}

void Upstream::handleAck(uint64_t wire) {
  if ((wire >> kIndexBits) != epoch_) return;  // a batch sent before rerouted(): see wireSeq
  const uint64_t seq = wire & ((uint64_t{1} << kIndexBits) - 1);
  if (seq <= acked_) return;  // a late ack of something already acked
  if (seq > highestSent_) {
    log_.log(LogLevel::kWarn, kLog,
             "collector acked seq " + std::to_string(seq) + " beyond what was sent (" +
                 std::to_string(highestSent_) + "); ignoring it");
    return;
  }
  // A late ack of a batch sent before a restart of sending also moves the cursor on.
  if (seq > sendCursor_) {
    sendCursor_ = seq;
    heldSeq_ = 0;
    heldFrame_.clear();
  }
  while (!inflight_.empty() && inflight_.front().seq <= seq) inflight_.pop_front();
  // With nothing in flight, the records this link skipped up to its cursor count as done too.
  acked_ = std::max(acked_, inflight_.empty() ? sendCursor_ : seq);
  if (onAcked) onAcked();
}

void Upstream::drain(int64_t now) {
  for (int i = 0; i < kDrainLimit; ++i) {
    zmq::message_t frame;
    if (!socket_.recv(frame, zmq::recv_flags::dontwait)) return;
    lastHeardMono_ = now;
    auto decoded = wire::decode(frame.data(), frame.size());
    if (!decoded) {
      ++errors_;
      log_.log(LogLevel::kWarn, kLog, "bad frame from the collector: " + decoded.message());
      continue;
    }
    const wire::Envelope& env = *decoded;
    switch (env.body_case()) {
      case wire::Envelope::kAck:
        handleAck(env.ack().seq());
        break;
      case wire::Envelope::kHeartbeatReply: {
        const auto& r = env.heartbeat_reply();
        ++heartbeatReplies_;
        if (!offsets_.add(r.t1_ns(), r.t2_ns(), r.t3_ns(), wallNowNs())) {
          log_.log(LogLevel::kDebug, kLog, "heartbeat reply with impossible times ignored");
        }
        break;
      }
      case wire::Envelope::kCommand:
        if (onCommand) onCommand(env.command());
        break;
      case wire::Envelope::kError:
        ++errors_;
        log_.log(
            LogLevel::kWarn, kLog,
            "collector rejected a frame (" + env.error().reason() + "): " + env.error().detail());
        break;
      default:
        ++errors_;
        log_.log(LogLevel::kWarn, kLog,
                 "unexpected message from the collector (field " +
                     std::to_string(static_cast<int>(env.body_case())) + ")");
        break;
    }
  }
}

void Upstream::rerouted(const std::string& why) {
  ++epoch_;
  acked_ = spool_.spool().firstUnacked();
  restartFromAcked(why);
  retryAtMono_ = 0;
}

void Upstream::restartFromAcked(const std::string& why) {
  uint64_t from = spool_.spool().firstUnacked();
  if (!inflight_.empty() || sendCursor_ != from) {
    ++resends_;
    log_.log(LogLevel::kInfo, kLog,
             why + "; sending again from spool index " + std::to_string(from));
  }
  inflight_.clear();
  sendCursor_ = from;
  heldSeq_ = 0;
  heldFrame_.clear();
  if (spool_.spool().nextIndex() > from) unsentSinceMono_ = 1;  // long ago: send at once
}

void Upstream::drainMonitor(int64_t now) {
  for (int i = 0; i < 64; ++i) {
    zmq::message_t ev;
    if (!monitor_.recv(ev, zmq::recv_flags::dontwait)) return;
    zmq::message_t addr;
    if (ev.more()) (void)monitor_.recv(addr, zmq::recv_flags::dontwait);
    if (ev.size() < 6) continue;
    uint16_t id = 0;
    std::memcpy(&id, ev.data(), sizeof id);
    if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      connected_ = true;
      lastHeardMono_ = now;
      logInfo(kLog, "connected to the collector at " + endpoint_);
      // A new connection may be a new collector process: what was in flight is lost with
      // the old one, so start from the oldest unacked record.
      restartFromAcked("collector (re)connected");
      retryAtMono_ = 0;
      redialAtMono_ = 0;
      redialBackoffMs_ = 0;
      sendHello();
      nextHello_ = now + opts_.helloIntervalMs * kMs;
      nextHeartbeat_ = now;
    } else if (id == ZMQ_EVENT_DISCONNECTED) {
      if (connected_) logWarn(kLog, "lost the collector at " + endpoint_ + "; spooling");
      connected_ = false;
    } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
      log_.log(LogLevel::kError, kLog,
               "the collector at " + endpoint_ + " refused this agent's key (" +
                   opts_.agentKeyFile + "): its --curve-keys agents/ must hold " + opts_.node +
                   ".pub; spooling meanwhile");
      scheduleRedial(now);
    } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
               id == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
      log_.log(LogLevel::kError, kLog,
               opts_.agentKeyFile.empty()
                   ? "the collector at " + endpoint_ +
                         " refused a plain-text handshake: it needs CurveZMQ keys (--agent-key, "
                         "--collector-key); spooling meanwhile"
                   : "the CURVE handshake with the collector at " + endpoint_ +
                         " failed: is it started with --curve-keys, and is --collector-key its "
                         "server.pub? Spooling meanwhile");
      scheduleRedial(now);
    }
  }
}

void Upstream::scheduleRedial(int64_t now) {
  connected_ = false;
  redialBackoffMs_ = std::clamp<int64_t>(redialBackoffMs_ * 2, 1000, 30000);
  redialAtMono_ = now + redialBackoffMs_ * kMs;
}

void Upstream::sendHello() {
  wire::Envelope env;
  auto* h = env.mutable_agent_hello();
  h->set_node(opts_.node);
  h->set_agent_version(kAgentVersion);
  h->set_pid(static_cast<uint32_t>(::getpid()));
  h->set_host(hostName());
  std::string data = wire::encode(env);
  (void)socket_.send(zmq::buffer(data), zmq::send_flags::dontwait);
}

void Upstream::sendHeartbeat() {
  wire::Envelope env;
  auto* hb = env.mutable_heartbeat();
  hb->set_node(opts_.node);
  hb->set_t1_ns(wallNowNs());
  if (offsets_.hasEstimate()) {
    hb->set_offset_ns(offsets_.best().offsetNs);
    hb->set_rtt_ns(offsets_.best().rttNs);
  }
  SpoolStats ss = spool_.spool().stats();
  hb->set_spool_bytes(ss.bytes);
  hb->set_spool_dropped(ss.droppedItems);
  hb->set_ranks(rankCount ? rankCount() : 0);
  std::string data = wire::encode(env);
  if (socket_.send(zmq::buffer(data), zmq::send_flags::dontwait)) ++heartbeatsSent_;
}

void Upstream::pump(int64_t now) {
  if (now < retryAtMono_) return;
  // Without a collector (ZMQ_IMMEDIATE refuses sends) there is nothing to try; the monitor
  // reports the handshake that opens the way again.
  if (!connected_) return;
  // Reads that found none of this link's records, per call: a link that owns little of a long
  // backlog skips through it over several loop turns instead of stalling the others.
  int skippedReads = 0;
  while (inflight_.size() < static_cast<size_t>(opts_.windowBatches)) {
    if (sendCursor_ < spool_.spool().firstUnacked()) {
      sendCursor_ = spool_.spool().firstUnacked();  // the spool bound dropped what we were at
      heldSeq_ = 0;
      heldFrame_.clear();
    }
    uint64_t unsent = spool_.spool().nextIndex() - sendCursor_;
    if (unsent == 0) {
      unsentSinceMono_ = 0;
      return;
    }
    if (heldSeq_ == 0) {
      if (unsent < kMaxBatchItems && unsentSinceMono_ != 0 &&
          now - unsentSinceMono_ < opts_.batchLingerMs * kMs) {
        return;  // let the batch fill; the loop wakes at the linger deadline
      }
      std::vector<std::string> items;
      uint64_t next = sendCursor_;
      Status st = spool_.spool().read(sendCursor_, kMaxBatchItems, kMaxBatchBytes, &items, &next);
      if (!st) {
        spool_.logProblem(LogLevel::kError, st.message());
        retryAtMono_ = now + kRetryNs;
        return;
      }
      if (next == sendCursor_) return;
      if (owns) {
        std::erase_if(items, [this](const std::string& record) { return !owns(record); });
        if (items.empty()) {
          sendCursor_ = next;
          if (inflight_.empty() && next > acked_) {
            acked_ = next;
            if (onAcked) onAcked();
          }
          if (sendCursor_ >= spool_.spool().nextIndex()) unsentSinceMono_ = 0;
          if (++skippedReads >= kMaxSkippedReads) {
            retryAtMono_ = now + kMs;  // carry on in a millisecond
            return;
          }
          continue;
        }
      }
      heldFrame_ = wire::encodeBatchFrame(wireSeq(next), items);
      heldSeq_ = next;
    }
    if (!socket_.send(zmq::buffer(heldFrame_), zmq::send_flags::dontwait)) {
      // The connection went away or its pipe is full: keep the frame for the next try.
      retryAtMono_ = now + kRetryNs;
      return;
    }
    ++batches_;
    inflight_.push_back(InFlight{heldSeq_, now});
    highestSent_ = std::max(highestSent_, heldSeq_);
    sendCursor_ = heldSeq_;
    heldSeq_ = 0;
    heldFrame_.clear();
    if (sendCursor_ >= spool_.spool().nextIndex()) unsentSinceMono_ = 0;
  }
}

}  // namespace trainscope::agent
