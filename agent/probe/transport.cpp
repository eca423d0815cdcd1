#include "agent/probe/transport.h"

#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "agent/probe/trainscope_probe.h"
#include "common/clock.h"
#include "common/log.h"
#include "schema/wire.h"

namespace trainscope::probe {

Transport::Transport(void* zmqContext, TransportOptions options, wire::RankInfo info)
    : ctx_(zmqContext), options_(std::move(options)), info_(std::move(info)) {}

Transport::~Transport() {
  if (socket_ != nullptr) zmq_close(socket_);
}

Status Transport::open() {
  socket_ = zmq_socket(ctx_, ZMQ_DEALER);
  if (socket_ == nullptr) {
    return Status::error(std::string("zmq_socket(DEALER) failed: ") + zmq_strerror(zmq_errno()));
  }
  const int one = 1;
  const int zero = 0;
  zmq_setsockopt(socket_, ZMQ_IMMEDIATE, &one, sizeof(one));
  zmq_setsockopt(socket_, ZMQ_LINGER, &zero, sizeof(zero));
  if (options_.endpoint.rfind("ipc://", 0) == 0) {
    // The handshake waits for PeerCheck's answer, so no message leaves before the listener's
    // uid is checked. The check is bound before the connect, so libzmq always finds it (an
    // unanswered domain would let the handshake through).
    auto check = PeerCheck::acquire(ctx_);
    if (!check) return check.status();
    peerCheck_ = *check;
    zmq_setsockopt(socket_, ZMQ_ZAP_DOMAIN, PeerCheck::kDomain, std::strlen(PeerCheck::kDomain));
  }
  if (zmq_connect(socket_, options_.endpoint.c_str()) != 0) {
    return Status::error("agent_endpoint '" + options_.endpoint +
                         "': cannot connect: " + zmq_strerror(zmq_errno()));
  }
  return Status::ok();
}

void Transport::addReport(wire::StepReport report, int64_t nowNs) {
  if (queuedReports_ == 0) firstReportNs_ = nowNs;
  if (lastEndNs_ != 0 && report.end_ns() > lastEndNs_) stepGapNs_ = report.end_ns() - lastEndNs_;
  lastEndNs_ = report.end_ns();
  wire::Envelope env;
  *env.mutable_step() = std::move(report);
  queued_.push_back(std::move(env));
  ++queuedReports_;
  backlogReports.fetch_add(1, std::memory_order_relaxed);
  enforceBound();
}

void Transport::addGoodbye(int64_t lastStep, int64_t nowWallNs) {
  if (firstOtherNs_ == 0) firstOtherNs_ = monotonicNowNs();
  // Groups declared since the outstanding hello went out (or not yet sent at all) would never
  // reach the collector: no hello follows a goodbye. One last hello carries them, ahead of it.
  // A rank that ends within one ack of declaring its groups (a short job, a slow agent) needs
  // this; the hello is one message, once.
  if (groupsDeclaredNs_ != 0 && !groupsAcked_ && (helloWanted_ || !helloOutstanding_)) {
    helloOutstanding_ = false;
    helloWanted_ = false;
    queueHello(monotonicNowNs());
  }
  wire::Envelope env;
  auto* bye = env.mutable_rank_goodbye();
  bye->set_job(info_.job());
  bye->set_rank(info_.rank());
  bye->set_last_step(lastStep);
  bye->set_sent_ns(nowWallNs);
  queued_.push_back(std::move(env));
  goodbyeQueued_ = true;
}

void Transport::addStatus(wire::CommandStatus status) {
  if (firstOtherNs_ == 0) firstOtherNs_ = monotonicNowNs();
  wire::Envelope env;
  *env.mutable_command_status() = std::move(status);
  queued_.push_back(std::move(env));
}

void Transport::setGroups(std::vector<wire::ProcessGroup> groups, int64_t declaredNs) {
  groups_ = std::move(groups);
  groupsDeclaredNs_ = declaredNs;
  groupsAcked_ = false;
  // Without waiting for the 2 s period: the collector should know the layout before the
  // first steps arrive.
  if (helloOutstanding_) {
    helloWanted_ = true;
  } else {
    lastHelloNs_ = 0;
  }
}

void Transport::queueHello(int64_t nowNs) {
  lastHelloNs_ = nowNs;
  if (goodbyeQueued_) return;  // the rank has ended (see addGoodbye)
  // One hello waiting for its ack is enough; an absent agent must not fill the backlog.
  if (helloOutstanding_) return;
  if (firstOtherNs_ == 0) firstOtherNs_ = nowNs;
  wire::Envelope env;
  auto* hello = env.mutable_rank_hello();
  *hello->mutable_rank() = info_;
  hello->set_sent_ns(wallNowNs());
  if (progress) progress(hello->mutable_progress());
  if (groupsDeclaredNs_ != 0 && !groupsAcked_) {
    for (const auto& g : groups_) *hello->add_groups() = g;
    hello->set_groups_declared_ns(groupsDeclaredNs_);
  }
  // Hellos go first so an agent that just came up learns the rank before its reports.
  queued_.insert(queued_.begin(), std::move(env));
  helloOutstanding_ = true;
}

void Transport::enforceBound() {
  // Oldest first: the backlog keeps the most recent reports, as PROTOCOL.md's loss bound says.
  while (backlogReports.load(std::memory_order_relaxed) > options_.backlogReports &&
         !backlog_.empty()) {
    const Pending& old = backlog_.front();
    backlogReports.fetch_sub(old.reports, std::memory_order_relaxed);
    backlogDropped.fetch_add(old.reports, std::memory_order_relaxed);
    if (old.hello) helloOutstanding_ = false;
    backlog_.pop_front();
  }
  if (backlogReports.load(std::memory_order_relaxed) > options_.backlogReports) {
    // Everything older is gone and the queue alone is over the bound: drop queued reports.
    for (auto it = queued_.begin();
         it != queued_.end() &&
         backlogReports.load(std::memory_order_relaxed) > options_.backlogReports;) {
      if (it->has_step()) {
        it = queued_.erase(it);
        --queuedReports_;
        backlogReports.fetch_sub(1, std::memory_order_relaxed);
        backlogDropped.fetch_add(1, std::memory_order_relaxed);
      } else {
        ++it;
      }
    }
  }
}

// Whether the queued items should leave now (cutNow and a full batch aside).
bool Transport::batchDue(int64_t nowNs) const {
  if (firstOtherNs_ != 0 && nowNs - firstOtherNs_ >= options_.batchIntervalNs) return true;
  if (queuedReports_ == 0) return false;
  const int64_t waited = nowNs - firstReportNs_;
  if (waited < options_.batchIntervalNs) return false;
  if (queuedReports_ >= options_.batchSteps) return true;
  // Wait for the next step only when it is due before the oldest report's bound.
  return stepGapNs_ <= 0 || waited + stepGapNs_ > options_.batchLatencyNs;
}

void Transport::cutBatch() {
  firstOtherNs_ = 0;
  while (!queued_.empty()) {
    const size_t n = std::min<size_t>(queued_.size(), options_.batchMaxItems);
    wire::Envelope env;
    auto* batch = env.mutable_batch();
    batch->set_seq(nextSeq_);
    Pending p{nextSeq_, {}, 0, false};
    for (size_t i = 0; i < n; ++i) {
      if (queued_[i].has_step()) ++p.reports;
      if (queued_[i].has_rank_hello()) {
        p.hello = true;
        p.groupsNs = queued_[i].rank_hello().groups_declared_ns();
      }
      queued_[i].set_schema_version(wire::kSchemaVersion);
      *batch->add_items() = std::move(queued_[i]);
    }
    queued_.erase(queued_.begin(), queued_.begin() + static_cast<ptrdiff_t>(n));
    queuedReports_ -= p.reports;
    p.frame = wire::encode(env);
    ++nextSeq_;
    backlog_.push_back(std::move(p));
  }
}

void Transport::sendDue(int64_t nowNs) {
  for (Pending& p : backlog_) {
    if (p.lastSentNs != 0 && nowNs - p.lastSentNs < options_.resendAfterNs) continue;
    const int rc = zmq_send(socket_, p.frame.data(), p.frame.size(), ZMQ_DONTWAIT);
    if (rc < 0) {
      const int err = zmq_errno();
      if (err != EAGAIN) {
        logOnce(LogLevel::kWarn, "probe", std::string("send-") + std::to_string(err),
                std::string("sending to the agent failed: ") + zmq_strerror(err));
      }
      // No connection (ZMQ_IMMEDIATE): stop here so batches leave in order once it is up.
      linkUp_ = false;
      return;
    }
    if (!linkUp_) {
      linkUp_ = true;
      if (!helloOutstanding_) queueHello(nowNs);  // "on connect" hello
    }
    if (p.lastSentNs == 0) reportsSent.fetch_add(p.reports, std::memory_order_relaxed);
    p.lastSentNs = nowNs;
    batchesSent.fetch_add(1, std::memory_order_relaxed);
  }
}

void Transport::receive(int64_t nowNs) {
  for (int i = 0; i < 1024; ++i) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, socket_, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&msg);
      return;
    }
    auto decoded = wire::decode(zmq_msg_data(&msg), zmq_msg_size(&msg));
    zmq_msg_close(&msg);
    if (!decoded) {
      logOnce(LogLevel::kWarn, "probe", "bad-frame-" + wire::rejectReason(decoded.status()),
              "rejected a frame from the agent: " + decoded.message());
      continue;
    }
    const wire::Envelope& env = *decoded;
    switch (env.body_case()) {
      case wire::Envelope::kAck: {
        const uint64_t seq = env.ack().seq();
        lastAckNs_.store(nowNs, std::memory_order_relaxed);
        if (seq > lastAckedSeq.load(std::memory_order_relaxed)) {
          lastAckedSeq.store(seq, std::memory_order_relaxed);
        }
        while (!backlog_.empty() && backlog_.front().seq <= seq) {
          const Pending& p = backlog_.front();
          reportsAcked.fetch_add(p.reports, std::memory_order_relaxed);
          backlogReports.fetch_sub(p.reports, std::memory_order_relaxed);
          if (p.hello) {
            helloOutstanding_ = false;
            if (p.groupsNs != 0 && p.groupsNs == groupsDeclaredNs_) groupsAcked_ = true;
            if (helloWanted_) {
              helloWanted_ = false;
              lastHelloNs_ = 0;
            }
          }
          backlog_.pop_front();
        }
        break;
      }
      case wire::Envelope::kError:
        logOnce(
            LogLevel::kWarn, "probe", "agent-error-" + env.error().reason(),
            "the agent rejected a frame: " + env.error().reason() + ": " + env.error().detail());
        break;
      case wire::Envelope::kCommand:
        if (onCommand) {
          onCommand(env.command());
        } else {
          logOnce(LogLevel::kInfo, "probe", "command-ignored",
                  "received a command from the agent; this probe does not run commands yet");
        }
        break;
      default:
        logOnce(LogLevel::kWarn, "probe", "unexpected-" + std::to_string(env.body_case()),
                "unexpected message from the agent (body " + std::to_string(env.body_case()) +
                    "); ignored");
        break;
    }
  }
}

void Transport::service(int64_t nowNs, bool cutNow) {
  if (socket_ == nullptr) return;
  if (peerCheck_ != nullptr) peerCheck_->serve();
  receive(nowNs);
  if (lastHelloNs_ == 0 || nowNs - lastHelloNs_ >= options_.helloIntervalNs) queueHello(nowNs);
  if (!queued_.empty() && (cutNow || queued_.size() >= options_.batchMaxItems || batchDue(nowNs))) {
    cutBatch();
    enforceBound();
  }
  sendDue(nowNs);
}

}  // namespace trainscope::probe
