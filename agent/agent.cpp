#include "agent/agent.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <random>
#include <string_view>
#include <vector>

#include <malloc.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <zmq.hpp>

#include "agent/agent_impl.h"
#include "common/clock.h"
#include "common/log.h"
#include "schema/wire.h"

namespace trainscope::agent {
using namespace internal;  // NOLINT(google-build-using-namespace): the agent's own constants

namespace {

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

// Checks an ipc:// endpoint's socket file: a live listener means another agent owns it; a
// dead one is removed so we can bind.
Status claimIpcPath(const std::string& path) {
  struct stat sb {};
  if (::lstat(path.c_str(), &sb) != 0) return Status::ok();
  if (!S_ISSOCK(sb.st_mode)) {
    return Status::error("--endpoint: " + path +
                         " exists and is not a socket; refusing to replace it");
  }
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) {
    return Status::error("--endpoint: ipc path is longer than " +
                         std::to_string(sizeof addr.sun_path - 1) + " bytes: " + path);
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::error(std::string("socket(): ") + std::strerror(errno));
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int err = errno;
  ::close(fd);
  if (rc == 0) {
    return Status::error("another agent is already listening on ipc://" + path +
                         "; stop it first or pass a different --endpoint");
  }
  if (err != ECONNREFUSED && err != ENOENT) {
    return Status::error("--endpoint: cannot probe ipc://" + path + ": " + std::strerror(err));
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Status::error("--endpoint: cannot remove stale socket " + path + ": " +
                         std::strerror(errno));
  }
  logInfo(kLog, "removed stale socket " + path + " left by an agent that is gone");
  return Status::ok();
}

}  // namespace

Status Agent::Impl::start() {
  if (opts.node.empty()) opts.node = hostName();
  setLogLevel(opts.logLevel);
  if (opts.endpoint.rfind("ipc://", 0) == 0) {
    ipcPath = opts.endpoint.substr(6);
    Status st = claimIpcPath(ipcPath);
    if (!st) return st;
  }
  SpoolOptions so;
  so.dir = opts.spoolDir.empty() ? "/var/tmp/trainscope/spool-" + opts.node : opts.spoolDir;
  so.maxBytes = opts.spoolMaxBytes;
  so.segmentBytes = opts.spoolSegmentBytes;
  auto sp = Spool::open(so);
  if (!sp) return Status::error("--spool-dir: " + sp.message());
  spool = std::move(*sp);
  sendCursor = spool->firstUnacked();
  spoolDir = so.dir;
  resumeUploads();

  try {
    probes.set(zmq::sockopt::linger, 0);
    probes.set(zmq::sockopt::router_mandatory, 1);
    probes.bind(opts.endpoint);
    bound = probes.get(zmq::sockopt::last_endpoint);

    monitor.set(zmq::sockopt::linger, 0);
    upstream.set(zmq::sockopt::linger, 0);
    upstream.set(zmq::sockopt::immediate, 1);
    upstream.set(zmq::sockopt::routing_id, "agent-" + opts.node + "-" + randomHex(8));
    std::string monEndpoint = "inproc://agent-monitor-" + randomHex(8);
    if (zmq_socket_monitor(upstream.handle(), monEndpoint.c_str(),
                           ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED) != 0) {
      return Status::error(std::string("cannot monitor the upstream socket: ") +
                           zmq_strerror(zmq_errno()));
    }
    monitor.connect(monEndpoint);
    upstream.connect(opts.collector);
  } catch (const zmq::error_t& e) {
    if (!bound.empty() || opts.endpoint.rfind("tcp://", 0) != 0 || e.num() != EADDRINUSE) {
      return Status::error(
          "cannot open " +
          (bound.empty() ? "--endpoint " + opts.endpoint : "--collector " + opts.collector) + ": " +
          e.what());
    }
    return Status::error("--endpoint " + opts.endpoint +
                         " is already in use (another agent?): " + e.what());
  }
  stopFd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (stopFd < 0) return Status::error(std::string("eventfd: ") + std::strerror(errno));

  int64_t now = monotonicNowNs();
  nextSample = now;  // first sample at once: rates start from it
  nextHeartbeat = now;
  nextHello = now;
  nextSync = now + opts.syncIntervalMs * kMs;
  if (spool->pendingItems() > 0) unsentSinceMono = now - opts.batchLingerMs * kMs;
  logInfo(kLog, "node " + opts.node + ": probes on " + bound + ", collector " + opts.collector +
                    ", spool " + so.dir + " (" + std::to_string(spool->pendingItems()) +
                    " records to replay)");
  publish();
  return Status::ok();
}

bool Agent::Impl::spoolItems(const std::vector<std::string>& records, int64_t now) {
  if (records.empty()) return true;
  Status st = spool->append(records);
  if (!st) {
    spoolLog.log(LogLevel::kError, kLog,
                 "cannot spool " + std::to_string(records.size()) + " items: " + st.message());
    return false;
  }
  if (unsentSinceMono == 0) unsentSinceMono = now;
  return true;
}

void Agent::Impl::takeSample(int64_t now) {
  // Forget ranks that stopped saying hello (crashed without a goodbye).
  for (auto it = ranks.begin(); it != ranks.end();) {
    if (now - it->second.lastSeenMono > opts.rankExpiryMs * kMs) {
      logInfo(kLog, "rank " + std::to_string(it->first.second) + " of job " + it->first.first +
                        " sent no hello for " + std::to_string(opts.rankExpiryMs) +
                        " ms; forgetting it");
      it = ranks.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<WatchedProc> procs;
  procs.reserve(ranks.size());
  for (const auto& [key, entry] : ranks) {
    procs.push_back(WatchedProc{key.first, key.second, entry.info.pid()});
  }
  wire::Envelope env;
  *env.mutable_host() = sampler.sample(opts.node, procs, wallNowNs(), now);
  if (spoolItems({wire::encode(env)}, now)) ++counters.hostSamples;
}

int64_t Agent::Impl::nextDeadline(int64_t now) const {
  int64_t d = std::min({nextSample, nextHeartbeat, nextHello, nextSync});
  if (nextProbeDrain > now) d = std::min(d, nextProbeDrain);
  if (!inflight.empty()) d = std::min(d, inflight.front().sentMono + opts.resendTimeoutMs * kMs);
  if (!uploads.empty()) d = std::min(d, uploadRetryAtMono);  // the next chunks at once
  bool windowOpen = inflight.size() < static_cast<size_t>(opts.windowBatches);
  if (connected && windowOpen && unsentSinceMono != 0) {
    d = std::min(d, std::max(unsentSinceMono + opts.batchLingerMs * kMs, retryAtMono));
  }
  return std::max(d, now);
}

void Agent::Impl::publish() {
  counters.ranks = static_cast<uint32_t>(ranks.size());
  counters.upstreamAcked = spool->ackedIndex();
  counters.haveOffset = offsets.hasEstimate();
  counters.offsetNs = offsets.best().offsetNs;
  counters.rttNs = offsets.best().rttNs;
  counters.collectorConnected = connected;
  counters.uploadsActive = static_cast<uint32_t>(uploads.size());
  SpoolStats ss = spool->stats();
  counters.spoolBytes = ss.bytes;
  counters.spoolDropped = ss.droppedItems;
  counters.spoolPending = spool->pendingItems();
  std::lock_guard lock(statsMu);
  published = counters;
}

Status Agent::Impl::run() {
  while (!stopRequested.load()) {
    int64_t now = monotonicNowNs();
    long timeoutMs = static_cast<long>((nextDeadline(now) - now + kMs - 1) / kMs);
    timeoutMs = std::min(timeoutMs, 1000L);
    // Between drains the probe socket is left out of the poll, so messages from many ranks
    // are read, written and acked together instead of waking the loop one by one.
    bool pollProbes = now >= nextProbeDrain;
    zmq_pollitem_t items[] = {
        {probes.handle(), 0, static_cast<short>(pollProbes ? ZMQ_POLLIN : 0), 0},
        {upstream.handle(), 0, ZMQ_POLLIN, 0},
        {monitor.handle(), 0, ZMQ_POLLIN, 0},
        {nullptr, stopFd, ZMQ_POLLIN, 0},
    };
    int rc = zmq_poll(items, 4, timeoutMs);
    if (rc < 0 && zmq_errno() != EINTR) {
      return Status::error(std::string("zmq_poll: ") + zmq_strerror(zmq_errno()));
    }
    if (stopRequested.load()) break;
    now = monotonicNowNs();
    try {
      if (rc > 0) {
        if (items[0].revents & ZMQ_POLLIN) {
          drainProbes(now);
          nextProbeDrain = now + opts.probeCoalesceMs * kMs;
        }
        if (items[1].revents & ZMQ_POLLIN) drainUpstream(now);
        if (items[2].revents & ZMQ_POLLIN) drainMonitor(now);
      }
      if (now >= nextSample) {
        takeSample(now);
        nextSample = now + opts.sampleIntervalMs * kMs;
      }
      if (now >= nextHeartbeat) {
        sendHeartbeat();
        nextHeartbeat = now + opts.heartbeatIntervalMs * kMs;
      }
      if (now >= nextHello) {
        sendHello();
        nextHello = now + opts.helloIntervalMs * kMs;
      }
      if (!inflight.empty() && now - inflight.front().sentMono > opts.resendTimeoutMs * kMs) {
        restartFromAcked("no ack for upstream batch " + std::to_string(inflight.front().seq) +
                         " within " + std::to_string(opts.resendTimeoutMs) + " ms");
        retryAtMono = 0;
      }
      pumpUploads(now);
      pumpUpstream(now);
      if (now >= nextSync) {
        Status st = spool->sync();
        if (!st) spoolLog.log(LogLevel::kError, kLog, st.message());
        nextSync = now + opts.syncIntervalMs * kMs;
      }
    } catch (const std::exception& e) {
      // The loop boundary: log, skip this turn, carry on.
      upstreamLog.log(LogLevel::kError, kLog, std::string("event loop turn failed: ") + e.what());
    }
    publish();
  }
  Status st = spool->sync();
  publish();
  logInfo(kLog, "stopping: spool synced with " + std::to_string(spool->pendingItems()) +
                    " records not yet acked");
  return st;
}

Agent::Agent(AgentOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {}

Agent::~Agent() {
  if (impl_->stopFd >= 0) ::close(impl_->stopFd);
  for (auto& up : impl_->uploads) {
    if (up.fd >= 0) ::close(up.fd);  // the journal resumes it in the next agent
  }
  // Sockets close before the context; remove our socket file so no one finds it stale.
  impl_->monitor.close();
  impl_->probes.close();
  impl_->upstream.close();
  if (!impl_->ipcPath.empty() && !impl_->bound.empty()) ::unlink(impl_->ipcPath.c_str());
}

Status Agent::start() {
  return impl_->start();
}
Status Agent::run() {
  return impl_->run();
}

void Agent::stop() {
  impl_->stopRequested.store(true);
  if (impl_->stopFd >= 0) {
    uint64_t one = 1;
    ssize_t n = ::write(impl_->stopFd, &one, sizeof one);
    (void)n;
  }
}

AgentStats Agent::stats() const {
  std::lock_guard lock(impl_->statsMu);
  return impl_->published;
}

std::string Agent::boundEndpoint() const {
  return impl_->bound;
}

namespace {
std::atomic<Agent*> gSignalAgent{nullptr};
void onSignal(int) {
  Agent* a = gSignalAgent.load();
  if (a != nullptr) a->stop();
}
}  // namespace

int run(const AgentOptions& opts) {
  // Batch frames and spool reads come and go in MiB-sized buffers; with glibc's defaults
  // each free hands the memory back (munmap or a heap trim), and the TLB shootdowns that
  // follow were a visible share of the agent's CPU. Keep freed memory for reuse instead.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  Agent agent(opts);
  Status st = agent.start();
  if (!st) {
    logError(kLog, st.message());
    return 1;
  }
  gSignalAgent.store(&agent);
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  st = agent.run();
  gSignalAgent.store(nullptr);
  if (!st) {
    logError(kLog, st.message());
    return 1;
  }
  return 0;
}

}  // namespace trainscope::agent
