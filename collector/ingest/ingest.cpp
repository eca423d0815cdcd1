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

#include "collector/ingest/ingest_impl.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/thread_annotations.h"

namespace trainscope::ingest {
namespace {

constexpr const char* kComponent = "ingest";
// Messages read from the socket per wake-up before the other sockets get a look.
constexpr int kReadBurst = 256;

}  // namespace

void IngestServer::Impl::sendTo(const std::string& id, const std::string& frame) {
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

void IngestServer::Impl::sendError(const std::string& id, const std::string& reason,
                                   const std::string& detail) {
  if (id.empty()) return;
  auto env = wire::errorReply(reason, detail);
  sendTo(id, wire::encode(env));
}

void IngestServer::Impl::sendQueuedCommands() {
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

void IngestServer::Impl::handOff() {
  if (pending.empty()) return;
  {
    MutexLock lock(&mu);
    queue.push_back(std::move(pending));
  }
  cv.notifyOne();
  pending = Commit{};
  pendingSinceNs = 0;
  lastHandOffNs = monotonicNowNs();
}

int64_t IngestServer::Impl::gapLeftNs(int64_t nowNs) const {
  if (lastHandOffNs == 0) return 0;
  return std::max<int64_t>(
      0, lastHandOffNs + std::chrono::nanoseconds(options.minCommitGap).count() - nowNs);
}

void IngestServer::Impl::sendCompletedAcks() {
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

void IngestServer::Impl::socketLoop() {
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
    forgetIdlePeers(monotonicNowNs(), readRouter);
    forgetIdleJobs(monotonicNowNs());
    long timeoutMs = 100;
    if (!pending.empty()) {
      const int64_t now = monotonicNowNs();
      // An idle writer takes the items once the gap has passed; a busy one after the interval.
      int64_t leftNs = queued == 0 ? 0
                                   : std::chrono::nanoseconds(options.commitInterval).count() -
                                         (now - pendingSinceNs);
      leftNs = std::max(leftNs, gapLeftNs(now));
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
      // light); a busy one lets items gather up to the interval or the item bound. Either
      // waits out the minimum gap since the last commit, unless the item bound is reached.
      const int64_t now = monotonicNowNs();
      const bool due = writerIdle || now - pendingSinceNs >=
                                         std::chrono::nanoseconds(options.commitInterval).count();
      if (pending.items >= options.commitItems || (due && gapLeftNs(now) == 0)) handOff();
    }
  }
}

void IngestServer::Impl::writerLoop() {
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

bool IngestServer::stopping() const {
  return impl_->stopping.load();
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
  s.peers = m.peerCount.load();
  s.jobsHeld = m.jobCount.load();
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
