#include "agent/agent.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <memory>
#include <vector>

#include <malloc.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <zmq.hpp>

#include "agent/gpu_health.h"
#include "agent/host_metrics.h"
#include "agent/internal.h"
#include "agent/probe_side.h"
#include "agent/routing.h"
#include "agent/spool.h"
#include "agent/spool_writer.h"
#include "agent/uploads.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/thread_annotations.h"
#include "schema/wire.h"

namespace trainscope::agent {
using namespace internal;  // NOLINT(google-build-using-namespace): the agent's own constants

// The event loop and the parts it drives. The parts own their state (probe_side.h, routing.h
// and its upstream.h links, uploads.h); Impl owns the parts, the spool they share, the host
// sampler and the loop's own timers. Only the loop thread touches any of it, except stopRequested,
// stopFd and the published stats (statsMu), which any thread may use (see agent.h).
struct Agent::Impl {
  explicit Impl(AgentOptions o) : opts(std::move(o)), sampler(opts.procRoot) {}

  AgentOptions opts;
  // Declared before the parts, so their sockets close before the context does.
  zmq::context_t ctx{1};
  int stopFd = -1;
  std::atomic<bool> stopRequested{false};

  std::unique_ptr<Spool> spool;
  std::unique_ptr<SpoolWriter> writer;
  std::unique_ptr<ProbeSide> probes;
  std::unique_ptr<Routing> upstream;
  std::unique_ptr<Uploads> uploads;
  HostSampler sampler;
  std::unique_ptr<GpuSampler> gpus;  // GPU health, NVML loaded at start (none: no samples)

  // Timers (monotonic ns).
  int64_t nextSample = 0, nextSync = 0;
  int64_t nextProbeDrain = 0;  // the probe socket is not polled before this

  uint64_t hostSamples = 0;
  RateLimitedLog loopLog{std::chrono::seconds(5)};
  mutable Mutex statsMu;
  AgentStats published GUARDED_BY(statsMu);

  Status start();
  Status run();
  void takeSample(int64_t now);
  int64_t nextDeadline(int64_t now) const;
  void publish();
};

Status Agent::Impl::start() {
  if (opts.node.empty()) opts.node = hostName();
  setLogLevel(opts.logLevel);
  if (Status st = ProbeSide::claimEndpoint(opts); !st) return st;
  SpoolOptions so;
  so.dir = opts.spoolDir.empty() ? "/var/tmp/trainscope/spool-" + opts.node : opts.spoolDir;
  so.maxBytes = opts.spoolMaxBytes;
  so.segmentBytes = opts.spoolSegmentBytes;
  auto sp = Spool::open(so);
  if (!sp) return Status::error("--spool-dir: " + sp.message());
  spool = std::move(*sp);
  writer = std::make_unique<SpoolWriter>(*spool);
  probes = std::make_unique<ProbeSide>(ctx, opts, *writer);
  upstream = std::make_unique<Routing>(ctx, opts, *writer);
  uploads = std::make_unique<Uploads>(opts, *writer, so.dir);
  writer->onAppended = [this](int64_t now) { upstream->noteAppended(now); };
  probes->onUploading = [this](const wire::CommandStatus& st, uint32_t uid) {
    uploads->queue(st, uid);
  };
  upstream->onCommand = [this](const wire::Command& cmd) { probes->forwardCommand(cmd); };
  upstream->rankCount = [this] { return probes->rankCount(); };
  uploads->resume();

  gpus = std::make_unique<GpuSampler>();

  int64_t now = monotonicNowNs();
  if (Status st = probes->bind(); !st) return st;
  if (Status st = upstream->connect(now); !st) return st;
  stopFd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (stopFd < 0) return Status::error(std::string("eventfd: ") + std::strerror(errno));

  nextSample = now;  // first sample at once: rates start from it
  nextSync = now + opts.syncIntervalMs * kMs;
  std::string collectors;
  for (const auto& c : opts.collectors) {
    if (!collectors.empty()) collectors += ", ";
    collectors += c;
  }
  logInfo(kLog, "node " + opts.node + ": probes on " + probes->boundEndpoint() +
                    (opts.collectors.size() > 1 ? ", collectors " : ", collector ") + collectors +
                    ", spool " + so.dir + " (" + std::to_string(spool->pendingItems()) +
                    " records to replay)");
  publish();
  return Status::ok();
}

void Agent::Impl::takeSample(int64_t now) {
  probes->expireRanks(now);
  wire::Envelope env;
  wire::HostSample& host = *env.mutable_host();
  host = sampler.sample(opts.node, probes->watchedProcs(), wallNowNs(), now);
  for (auto& g : gpus->sample()) *host.add_gpus() = std::move(g);
  for (auto& e : gpus->takeEvents()) *host.add_gpu_events() = std::move(e);
  if (writer->append({wire::encode(env)}, now)) ++hostSamples;
}

int64_t Agent::Impl::nextDeadline(int64_t now) const {
  int64_t d =
      std::min({nextSample, nextSync, upstream->nextDeadline(now), uploads->nextDeadline(now)});
  if (nextProbeDrain > now) d = std::min(d, nextProbeDrain);
  return std::max(d, now);
}

void Agent::Impl::publish() {
  AgentStats s;
  probes->fill(s);
  upstream->fill(s);
  uploads->fill(s);
  s.hostSamples = hostSamples;
  SpoolStats ss = spool->stats();
  s.spoolBytes = ss.bytes;
  s.spoolDropped = ss.droppedItems;
  s.spoolPending = spool->pendingItems();
  MutexLock lock(&statsMu);
  published = std::move(s);
}

Status Agent::Impl::run() {
  std::vector<zmq_pollitem_t> items;
  while (!stopRequested.load()) {
    int64_t now = monotonicNowNs();
    long timeoutMs = static_cast<long>((nextDeadline(now) - now + kMs - 1) / kMs);
    timeoutMs = std::min(timeoutMs, 1000L);
    // Between drains the probe socket is left out of the poll, so messages from many ranks
    // are read, written and acked together instead of waking the loop one by one.
    bool pollProbes = now >= nextProbeDrain;
    items.clear();
    items.push_back({probes->handle(), 0, static_cast<short>(pollProbes ? ZMQ_POLLIN : 0), 0});
    items.push_back({nullptr, stopFd, ZMQ_POLLIN, 0});
    upstream->addPollItems(items);  // two per collector, from items[2] on
    int rc = zmq_poll(items.data(), static_cast<int>(items.size()), timeoutMs);
    if (rc < 0 && zmq_errno() != EINTR) {
      return Status::error(std::string("zmq_poll: ") + zmq_strerror(zmq_errno()));
    }
    if (stopRequested.load()) break;
    now = monotonicNowNs();
    try {
      if (rc > 0) {
        if (items[0].revents & ZMQ_POLLIN) {
          probes->drain(now);
          nextProbeDrain = now + opts.probeCoalesceMs * kMs;
        }
        upstream->handlePolled(items.data() + 2, now);
      }
      if (now >= nextSample) {
        takeSample(now);
        nextSample = now + opts.sampleIntervalMs * kMs;
      }
      upstream->tick(now);
      uploads->pump(now);
      upstream->pump(now);
      if (now >= nextSync) {
        Status st = spool->sync();
        if (!st) writer->logProblem(LogLevel::kError, st.message());
        nextSync = now + opts.syncIntervalMs * kMs;
      }
    } catch (const std::exception& e) {
      // The loop boundary: log, skip this turn, carry on.
      loopLog.log(LogLevel::kError, kLog, std::string("event loop turn failed: ") + e.what());
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
  MutexLock lock(&impl_->statsMu);
  return impl_->published;
}

std::string Agent::boundEndpoint() const {
  return impl_->probes ? impl_->probes->boundEndpoint() : std::string();
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
