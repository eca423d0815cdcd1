#include "agent/probe/runtime.h"

#include <pthread.h>
#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>

#include "agent/probe/stack_provider.h"
#include "common/clock.h"
#include "common/log.h"
#include "schema/capture_state.h"

#ifdef TRAINSCOPE_HAVE_UNWIND
#include "agent/probe/stacks.h"
#endif

namespace trainscope::probe {
namespace {

std::atomic<uint64_t> gNextInstanceId{1};

// How often the runtime drains rings; a shorter period needs smaller rings, costs more CPU.
constexpr auto kPassPeriod = std::chrono::milliseconds(2);
// How often an instance's socket is serviced outside of shutdown (1024 instances share the
// thread, so a receive poll per pass would cost more than the draining).
constexpr int64_t kIoPeriodNs = 5'000'000;

FoldOptions foldOptionsFor(const ProbeConfig& c) {
  FoldOptions f;
  f.job = c.job;
  f.rank = c.rank;
  f.topOps = c.topOps;
  return f;
}

CaptureIdentity identityFor(const ProbeConfig& c) {
  CaptureIdentity id;
  id.job = c.job;
  id.rank = c.rank;
  id.host = c.host;
  id.pid = c.pid;
  return id;
}

CaptureOptions captureOptionsFor(const ProbeConfig& c) {
  CaptureOptions o;
  o.dir = c.captureDir;
  return o;
}

}  // namespace

Instance::Instance(ProbeConfig config)
    : config_(std::move(config)),
      id_(gNextInstanceId.fetch_add(1)),
      folder_(foldOptionsFor(config_)),
      flight_(config_.flightSteps, config_.flightMaxBytes),
      capture_(
          identityFor(config_), captureOptionsFor(config_), &flight_,
          [this](wire::CommandStatus st) { postStatus(std::move(st)); }, config_.flightMaxBytes) {}

Instance::~Instance() {
  // The capture worker posts its last status into outbox_ as it ends: end it here, while
  // outbox_ and mailMu_ still live (members die in reverse order, and capture_ is declared
  // before them; its own destructor came too late and wrote into a destroyed vector).
  capture_.close(-1);
  if (stackWorker_.joinable()) stackWorker_.join();
}

void Instance::setOnStatus(std::function<void(const wire::CommandStatus&)> fn) {
  MutexLock lock(&hooksMu_);
  onStatus_ = std::move(fn);
}

void Instance::submitCommand(const wire::Command& cmd) {
  MutexLock lock(&mailMu_);
  inbox_.push_back(cmd);
  mail_.store(true, std::memory_order_release);
}

Status Instance::declareGroup(const std::string& name, uint32_t kind, const int32_t* ranks,
                              int32_t count) {
  const std::string what = "group '" + name + "'";
  if (name.empty()) return Status::error("a group needs a name (ts_intern of a non-empty string)");
  if (!wire::GroupKind_IsValid(static_cast<int>(kind))) {
    return Status::error(what + ": unknown kind " + std::to_string(kind) +
                         " (expected TS_GROUP_OTHER..TS_GROUP_EP, 0..5)");
  }
  if (ranks == nullptr || count <= 0 || static_cast<uint64_t>(count) > kMaxGroupRanks) {
    return Status::error(what + ": " + std::to_string(count) + " ranks" +
                         (ranks == nullptr ? " at NULL" : "") + "; a group has 1.." +
                         std::to_string(kMaxGroupRanks));
  }
  std::vector<uint32_t> sorted;
  sorted.reserve(static_cast<size_t>(count));
  for (int32_t i = 0; i < count; ++i) {
    if (ranks[i] < 0) {
      return Status::error(what + ": rank " + std::to_string(ranks[i]) + " is negative");
    }
    sorted.push_back(static_cast<uint32_t>(ranks[i]));
  }
  const std::vector<uint32_t> inOrder = sorted;
  bool member = false;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] >= config_.worldSize) {
      return Status::error(what + ": rank " + std::to_string(sorted[i]) +
                           " is not below the world size " + std::to_string(config_.worldSize));
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      return Status::error(what + ": rank " + std::to_string(sorted[i]) + " appears twice");
    }
    member = member || sorted[i] == config_.rank;
  }
  if (!member) {
    return Status::error(what + ": rank " + std::to_string(config_.rank) +
                         " declares a group it is not in");
  }
  wire::ProcessGroup g;
  g.set_name(name);
  g.set_kind(static_cast<wire::GroupKind>(kind));
  g.mutable_ranks()->Add(inOrder.begin(), inOrder.end());
  MutexLock lock(&groupsMu_);
  auto it = std::find_if(groups_.begin(), groups_.end(),
                         [&](const wire::ProcessGroup& x) { return x.name() == name; });
  if (it != groups_.end()) {
    if (it->SerializeAsString() == g.SerializeAsString()) return Status::ok();  // no news
    *it = std::move(g);
  } else {
    groups_.push_back(std::move(g));
  }
  // Strictly increasing, so a receiver can tell each new set from the one before.
  groupsDeclaredNs_ = std::max(wallNowNs(), groupsDeclaredNs_ + 1);
  groupsDirty_.store(true, std::memory_order_release);
  return Status::ok();
}

std::vector<wire::ProcessGroup> Instance::groups(int64_t* declaredNs) const {
  MutexLock lock(&groupsMu_);
  if (declaredNs != nullptr) *declaredNs = groupsDeclaredNs_;
  return groups_;
}

std::string Instance::deviceGroup(uint64_t commHash, const std::string& commName, int32_t nranks,
                                  int32_t rank, int32_t* globalRanks) const {
  if (globalRanks != nullptr) std::fill(globalRanks, globalRanks + nranks, -1);
  if (static_cast<uint32_t>(nranks) == config_.worldSize) {
    // The world's communicator: NCCL numbers its ranks as the job does.
    if (globalRanks != nullptr) {
      for (int32_t i = 0; i < nranks; ++i) globalRanks[i] = i;
    }
    return "world";
  }
  // A declared group of the same size that has this rank where NCCL has it; two such groups
  // (a 2x2 layout's data- and tensor-parallel groups) cannot be told apart by size and index.
  const wire::ProcessGroup* found = nullptr;
  int matches = 0;
  {
    MutexLock lock(&groupsMu_);
    for (const wire::ProcessGroup& g : groups_) {
      if (g.ranks_size() != nranks || rank < 0 || rank >= nranks || g.ranks(rank) != config_.rank) {
        continue;
      }
      found = &g;
      ++matches;
    }
    if (matches == 1) {
      if (globalRanks != nullptr) {
        for (int32_t i = 0; i < nranks; ++i) globalRanks[i] = static_cast<int32_t>(found->ranks(i));
      }
      return found->name();
    }
  }
  if (!commName.empty()) return commName;
  char buf[32];
  std::snprintf(buf, sizeof buf, "nccl-%016llx", static_cast<unsigned long long>(commHash));
  return buf;
}

void Instance::setFlops(double model, double hardware, double peak) {
  auto sane = [](double v) { return std::isfinite(v) && v > 0 ? v : 0.0; };
  modelFlops_.store(sane(model), std::memory_order_relaxed);
  hardwareFlops_.store(sane(hardware), std::memory_order_relaxed);
  peakFlops_.store(sane(peak), std::memory_order_relaxed);
}

void Instance::postStatus(wire::CommandStatus status) {
  MutexLock lock(&mailMu_);
  outbox_.push_back(std::move(status));
  mail_.store(true, std::memory_order_release);
}

void Instance::emitStatuses(std::vector<wire::CommandStatus> statuses) {
  if (statuses.empty()) return;
  for (wire::CommandStatus& st : statuses) {
    if (st.job().empty()) st.set_job(config_.job);
    st.set_rank(config_.rank);
  }
  {
    MutexLock lock(&hooksMu_);
    if (onStatus_) {
      for (const wire::CommandStatus& st : statuses) onStatus_(st);
    }
  }
  for (wire::CommandStatus& st : statuses) {
    logInfo("probe", "rank " + std::to_string(config_.rank) + ": command " + st.command_id() + " " +
                         st.state() + (st.detail().empty() ? "" : ": " + st.detail()));
    if (transport_ != nullptr) transport_->addStatus(std::move(st));
  }
}

void Instance::takeMail() {
  if (!mail_.exchange(false, std::memory_order_acq_rel)) return;
  std::vector<wire::Command> commands;
  std::vector<wire::CommandStatus> statuses;
  {
    MutexLock lock(&mailMu_);
    commands.swap(inbox_);
    statuses.swap(outbox_);
  }
  emitStatuses(std::move(statuses));
  for (const wire::Command& cmd : commands) {
    handleCommand(cmd);
    MutexLock lock(&hooksMu_);
    if (onCommand_) onCommand_(cmd);
  }
}

void Instance::handleCommand(const wire::Command& cmd) {
  if (!cmd.job().empty() && cmd.job() != config_.job) {
    logOnce(LogLevel::kWarn, "probe", "command-job-" + cmd.job(),
            "ignored command '" + cmd.id() + "' for job '" + cmd.job() + "' (this probe is job '" +
                config_.job + "')");
    return;
  }
  if (cmd.ranks_size() > 0 &&
      std::find(cmd.ranks().begin(), cmd.ranks().end(), config_.rank) == cmd.ranks().end()) {
    return;  // for other ranks of the job
  }
  switch (cmd.kind_case()) {
    case wire::Command::kCapture:
      capture_.command(cmd, folder_.lastStep());
      return;
    case wire::Command::kStacks:
      startStackDump(cmd);
      return;
    default: {
      wire::CommandStatus st;
      st.set_command_id(cmd.id());
      st.set_job(config_.job);
      st.set_rank(config_.rank);
      wire::setCommandState(&st, wire::RankState::kFailed);
      st.set_detail("command '" + cmd.id() + "' has neither a capture nor a stacks part");
      emitStatuses({std::move(st)});
      return;
    }
  }
}

void Instance::startStackDump(const wire::Command& cmd) {
  wire::CommandStatus st;
  st.set_command_id(cmd.id().empty() ? cmd.stacks().capture_id() : cmd.id());
  st.set_job(config_.job);
  st.set_rank(config_.rank);
#ifndef TRAINSCOPE_HAVE_UNWIND
  wire::setCommandState(&st, wire::RankState::kFailed);
  st.set_detail("built without libunwind");
  emitStatuses({std::move(st)});
#else
  if (stackBusy_.load(std::memory_order_acquire)) {
    wire::setCommandState(&st, wire::RankState::kFailed);
    st.set_detail("a stack dump is already running on rank " + std::to_string(config_.rank));
    emitStatuses({std::move(st)});
    return;
  }
  if (stackWorker_.joinable()) stackWorker_.join();  // the previous one, finished
  wire::setCommandState(&st, wire::RankState::kRecording);
  st.set_detail(hasStackProvider() ? "unwinding every thread, with Python stacks"
                                   : "unwinding every thread");
  wire::CommandStatus failed = st;
  emitStatuses({std::move(st)});
  // Its own thread: the signals must find the runtime thread free to answer, and the Python
  // provider may wait up to 2 s for the GIL.
  stackBusy_.store(true, std::memory_order_release);
  try {
    stackWorker_ = std::thread([this, cmd] {
      wire::CommandStatus done;
      try {
        done = runStackCapture(cmd, identityFor(config_), config_.captureDir);
      } catch (const std::exception& e) {
        done.set_command_id(cmd.id());
        done.set_job(config_.job);
        done.set_rank(config_.rank);
        wire::setCommandState(&done, wire::RankState::kFailed);
        done.set_detail(std::string("stack capture failed: ") + e.what());
      }
      postStatus(std::move(done));
      stackBusy_.store(false, std::memory_order_release);
    });
  } catch (const std::exception& e) {
    stackBusy_.store(false, std::memory_order_release);
    wire::setCommandState(&failed, wire::RankState::kFailed);
    failed.set_detail(std::string("cannot start the stack dump thread: ") + e.what());
    emitStatuses({std::move(failed)});
  }
#endif
}

void Instance::setOnReport(std::function<void(const wire::StepReport&)> fn) {
  MutexLock lock(&hooksMu_);
  onReport_ = std::move(fn);
}

void Instance::setOnCommand(std::function<void(const wire::Command&)> fn) {
  MutexLock lock(&hooksMu_);
  onCommand_ = std::move(fn);
}

Ring* Instance::registerRing(int slot) {
  // Threads past kMaxThreadSlots find their rings here; only this thread touches its map.
  thread_local std::unordered_map<uint64_t, Ring*> tRings;
  if (slot < 0) {
    auto it = tRings.find(id_);
    if (it != tRings.end()) return it->second;
  }
  try {
    MutexLock lock(&ringsMu_);
    rings_.push_back(std::make_unique<Ring>(config_.ringRecords));
    Ring* r = rings_.back().get();
    if (slot >= 0) {
      slots_[slot].store(r, std::memory_order_release);
    } else {
      tRings[id_] = r;
    }
    return r;
  } catch (const std::exception& e) {
    logOnce(LogLevel::kError, "probe", "ring-alloc",
            std::string("cannot allocate a record ring; records are lost: ") + e.what());
    return nullptr;
  }
}

Status Instance::open(void* zmqContext) {
  if (!config_.connectAgent) return Status::ok();
  wire::RankInfo info;
  info.set_job(config_.job);
  info.set_rank(config_.rank);
  info.set_world_size(config_.worldSize);
  info.set_local_rank(config_.localRank);
  info.set_host(config_.host);
  info.set_pid(config_.pid);
  info.set_probe_version(TS_PROBE_VERSION);
  info.set_gpu_uuid(config_.gpuUuid);
  TransportOptions t;
  t.endpoint = config_.endpoint;
  t.backlogReports = config_.backlogReports;
  t.batchLatencyNs = config_.batchLatencyMs * 1'000'000;
  t.batchSteps = config_.batchSteps;
  transport_ = std::make_unique<Transport>(zmqContext, t, std::move(info));
  // Handled at the start of the next pass, outside the transport's receive loop.
  transport_->onCommand = [this](const wire::Command& cmd) { submitCommand(cmd); };
  // Hellos go out every 2 s even while the training thread is stuck (this thread keeps
  // draining), so the collector learns where each rank stopped.
  transport_->progress = [this](wire::RankProgress* p) { progress_.fill(p); };
  Status s = transport_->open();
  if (!s) transport_.reset();
  return s;
}

void Instance::service(int64_t nowNs, bool closing) {
  {
    MutexLock lock(&ringsMu_);
    ringView_.resize(rings_.size());
    for (size_t i = 0; i < rings_.size(); ++i) ringView_[i] = rings_[i].get();
  }
  uint64_t taken = 0;
  uint64_t dropped = 0;
  for (size_t i = 0; i < ringView_.size(); ++i) {
    const auto ring = static_cast<uint32_t>(i);
    taken += ringView_[i]->drain([&](const Record& r) {
      folder_.add(ring, r);
      progress_.add(ring, r);
    });
    dropped += ringView_[i]->dropped();
  }
  records_.fetch_add(taken, std::memory_order_relaxed);
  takeMail();
  if (groupsDirty_.exchange(false, std::memory_order_acq_rel) && transport_ != nullptr) {
    int64_t declaredNs = 0;
    std::vector<wire::ProcessGroup> groups = this->groups(&declaredNs);
    transport_->setGroups(std::move(groups), declaredNs);
  }
  folder_.setFlops(modelFlops_.load(std::memory_order_relaxed),
                   hardwareFlops_.load(std::memory_order_relaxed),
                   peakFlops_.load(std::memory_order_relaxed));
  dropped_.store(dropped, std::memory_order_relaxed);
  if (closing) {
    folder_.finish();
  } else {
    folder_.endPass(nowNs);
  }
  holding.store(folder_.holding(), std::memory_order_release);
  std::vector<FoldedStep> folded = folder_.take();
  if (!folded.empty()) deliverSteps(folded, dropped, nowNs);
  unattributed_.store(folder_.unattributed(), std::memory_order_relaxed);
  if (closing && !finished) {
    // Statuses go before the goodbye: a capture cut short by the close writes what it has,
    // and a stack dump in flight finishes (within its ~2.5 s deadlines).
    if (stackWorker_.joinable()) stackWorker_.join();
    capture_.close(folder_.lastStep());
    mail_.store(true, std::memory_order_release);
    takeMail();
    if (transport_ != nullptr) transport_->addGoodbye(folder_.lastStep(), wallNowNs());
    finished = true;
  }
  // A flush in progress sends what is queued at once instead of letting it wait for more steps.
  const bool cutNow = closing || flushers.load(std::memory_order_acquire) > 0;
  if (transport_ != nullptr && (cutNow || nowNs - lastIoNs_ >= kIoPeriodNs)) {
    lastIoNs_ = nowNs;
    transport_->service(nowNs, cutNow);
  }
  idleFlag.store(transportIdle(), std::memory_order_release);
  passes.fetch_add(1, std::memory_order_release);
}

void Instance::deliverSteps(std::vector<FoldedStep>& folded, uint64_t dropped, int64_t nowNs) {
  MutexLock hooks(&hooksMu_);
  for (FoldedStep& f : folded) {
    f.report.set_dropped(dropped - droppedReported_);
    droppedReported_ = dropped;
    const uint64_t deviceDropped = deviceDropped_.load(std::memory_order_relaxed);
    f.report.set_device_dropped(deviceDropped - deviceDroppedReported_);
    deviceDroppedReported_ = deviceDropped;
    if (!config_.device.empty()) f.report.set_device(config_.device);
    const int64_t step = f.report.step();
    const int64_t startNs = f.report.start_ns();
    const int64_t endNs = f.report.end_ns();
    if (onReport_) onReport_(f.report);
    if (transport_ != nullptr) transport_->addReport(std::move(f.report), nowNs);
    // A running capture takes the step (and adds it to the flight recorder once written).
    if (!capture_.offer(step, startNs, endNs, f.records)) {
      flight_.add(step, std::move(f.records), startNs, endNs);
    }
    stepsFolded_.fetch_add(1, std::memory_order_relaxed);
  }
}

void Instance::stats(ts_probe_stats* out) const {
  *out = ts_probe_stats{};
  out->records = records_.load(std::memory_order_relaxed);
  out->dropped = dropped_.load(std::memory_order_relaxed);
  out->steps_folded = stepsFolded_.load(std::memory_order_relaxed);
  out->unattributed = unattributed_.load(std::memory_order_relaxed);
  out->flight_bytes = flight_.bytes();
  out->flight_steps = flight_.steps();
  if (const Transport* t = transport_.get()) {
    out->reports_sent = t->reportsSent.load(std::memory_order_relaxed);
    out->reports_acked = t->reportsAcked.load(std::memory_order_relaxed);
    out->backlog = t->backlogReports.load(std::memory_order_relaxed);
    out->backlog_dropped = t->backlogDropped.load(std::memory_order_relaxed);
    out->connected = t->connected(monotonicNowNs()) ? 1 : 0;
  }
}

int32_t exitWaitMs(const ts_probe_stats& stats) {
  if (stats.connected != 0) return kExitWaitConnectedMs;
  // Something recorded (folded or not yet) and nothing ever acknowledged.
  if (stats.reports_acked == 0 && (stats.backlog > 0 || stats.records > 0)) {
    return kExitWaitFirstAckMs;
  }
  return 0;
}

Runtime& Runtime::get() {
  // Leaked on purpose: the thread and the context must outlive static destructors.
  static Runtime* rt = new Runtime();
  return *rt;
}

Runtime::Runtime() : ctx_(zmq_ctx_new()) {
  // The simulator hosts ~1024 ranks in one process, one DEALER each.
  zmq_ctx_set(ctx_, ZMQ_MAX_SOCKETS, 8192);
  zmq_ctx_set(ctx_, ZMQ_IO_THREADS, 1);
  pthread_atfork(nullptr, nullptr, [] {
    Runtime& rt = Runtime::get();
    rt.forked_.store(true);
    rt.stopped_.store(true);
  });
}

Status Runtime::add(Instance* inst) {
  if (ctx_ == nullptr) return Status::error("cannot create a ZeroMQ context");
  if (forked_.load()) {
    return Status::error("the probe cannot start in a child forked from a process using it");
  }
  if (stopped_.load()) return Status::error("the probe runtime has stopped (process exiting)");
  if (Status s = inst->open(ctx_); !s) return s;
  MutexLock lock(&mu_);
  instances_.push_back(inst);
  if (!thread_.joinable()) {
    try {
      thread_ = std::thread([this] { loop(); });
    } catch (const std::exception& e) {
      instances_.pop_back();
      inst->closeTransport();
      return Status::error(std::string("cannot start the probe runtime thread: ") + e.what());
    }
  }
  return Status::ok();
}

void Runtime::remove(Instance* inst, int32_t timeoutMs) {
  if (forked_.load()) {
    // The lock may have been held by a thread that did not survive the fork.
    inst->abandonTransport();
    return;
  }
  inst->closeDeadlineNs =
      monotonicNowNs() + static_cast<int64_t>(std::max(timeoutMs, 0)) * 1'000'000;
  inst->closeRequested.store(true, std::memory_order_release);
  UniqueLock lock(&mu_);
  wake_ = true;
  cv_.notifyAll();
  while (!stopped_.load() &&
         std::find(instances_.begin(), instances_.end(), inst) != instances_.end()) {
    cv_.wait(lock);
  }
  auto it = std::find(instances_.begin(), instances_.end(), inst);
  if (it != instances_.end()) {
    // The runtime thread is gone (process exit): close here, no goodbye.
    instances_.erase(it);
    inst->closeTransport();
  }
}

int32_t Runtime::flush(Instance* inst, int32_t timeoutMs) {
  if (forked_.load()) return 1;
  const int64_t deadline =
      monotonicNowNs() + static_cast<int64_t>(std::max(timeoutMs, 0)) * 1'000'000;
  // Passes that start after this call drain everything recorded before it; the folder needs
  // one more pass to declare a step final, and one may be in progress now.
  const uint64_t target = inst->passes.load(std::memory_order_acquire) + 3;
  inst->flushers.fetch_add(1, std::memory_order_acq_rel);
  {
    MutexLock lock(&mu_);
    wake_ = true;
  }
  cv_.notifyAll();
  int32_t rc = 1;
  while (!stopped_.load()) {
    // An ended step held open for device records (FoldOptions::deviceLagNs) is waited for too.
    if (inst->passes.load(std::memory_order_acquire) >= target &&
        inst->idleFlag.load(std::memory_order_acquire) &&
        !inst->holding.load(std::memory_order_acquire)) {
      rc = 0;
      break;
    }
    if (monotonicNowNs() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  inst->flushers.fetch_sub(1, std::memory_order_acq_rel);
  return rc;
}

void Runtime::stop() {
  if (forked_.load()) {
    leakThreadAfterFork();
    return;
  }
  std::thread t;
  {
    MutexLock lock(&mu_);
    stopped_.store(true);
    t = std::move(thread_);
  }
  cv_.notifyAll();
  if (t.joinable()) t.join();
  cv_.notifyAll();
}

void Runtime::leakThreadAfterFork() {
  static_cast<void>(new std::thread(std::move(thread_)));
}

void Runtime::loop() {
  std::vector<Instance*> list;
  while (!stopped_.load()) {
    {
      UniqueLock lock(&mu_);
      const auto deadline = std::chrono::steady_clock::now() + kPassPeriod;
      while (!wake_ && !stopped_.load() && cv_.waitUntil(lock, deadline)) {
      }
      wake_ = false;
      list = instances_;
    }
    if (stopped_.load()) break;
    const int64_t now = monotonicNowNs();
    std::vector<Instance*> done;
    for (Instance* inst : list) {
      const bool closing = inst->closeRequested.load(std::memory_order_acquire);
      try {
        inst->service(now, closing);
      } catch (const std::exception& e) {
        logOnce(LogLevel::kError, "probe", std::string("service-") + e.what(),
                std::string("probe runtime pass failed; skipping: ") + e.what());
        if (closing) inst->finished = true;
      } catch (...) {
        logOnce(LogLevel::kError, "probe", "service-unknown",
                "probe runtime pass failed with an unknown error; skipping");
        if (closing) inst->finished = true;
      }
      if (closing && inst->finished &&
          (inst->transportIdle() || monotonicNowNs() >= inst->closeDeadlineNs)) {
        inst->closeTransport();
        done.push_back(inst);
      }
    }
    if (!done.empty()) {
      {
        MutexLock lock(&mu_);
        for (Instance* inst : done) {
          instances_.erase(std::find(instances_.begin(), instances_.end(), inst));
        }
      }
      cv_.notifyAll();
    }
  }
}

}  // namespace trainscope::probe
