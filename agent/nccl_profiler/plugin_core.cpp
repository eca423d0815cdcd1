#include "agent/nccl_profiler/plugin_core.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iterator>
#include <new>

namespace trainscope::nccl {
namespace {

constexpr uint32_t kFree = 0;
constexpr uint32_t kActive = 1;
constexpr uint32_t kDone = 2;
// GPU times past this (146 years of ns) are not times: treated as "no GPU timer", which also
// keeps gpu + offset within int64_t.
constexpr uint64_t kMaxGpuNs = uint64_t{1} << 62;

int64_t hostNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);  // the probe's clock (ts_now_ns)
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

template <class T>
void atomicMin(std::atomic<T>& a, T v) {
  T cur = a.load(std::memory_order_relaxed);
  while (v < cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

template <class T>
void atomicMax(std::atomic<T>& a, T v) {
  T cur = a.load(std::memory_order_relaxed);
  while (v > cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

template <class F>
void bind(void* handle, const char* name, F* fn) {
  void* sym = dlsym(handle, name);
  *fn = reinterpret_cast<F>(sym);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
}

ProbeApi bindAll(void* handle) {
  ProbeApi api;
  bind(handle, "ts_default_existing", &api.defaultExisting);
  bind(handle, "ts_device_group", &api.deviceGroup);
  bind(handle, "ts_device_collective", &api.deviceCollective);
  bind(handle, "ts_device_p2p", &api.deviceP2p);
  bind(handle, "ts_device_dropped", &api.deviceDropped);
  bind(handle, "ts_link_transfer", &api.linkTransfer);
  return api;
}

bool same(const char* a, const char* b) {
  return a != nullptr && strcasecmp(a, b) == 0;
}

uint32_t poolFromEnv() {
  const char* v = std::getenv("TRAINSCOPE_NCCL_POOL");
  if (v == nullptr || *v == '\0') return Plugin::kDefaultPool;
  char* end = nullptr;
  const unsigned long n = std::strtoul(v, &end, 10);
  if (end == v || *end != '\0' || n < 1 || n > (1ul << 20)) return Plugin::kDefaultPool;
  return static_cast<uint32_t>(n);
}

}  // namespace

ProbeApi findProbe() {
  // RTLD_NOLOAD: only a library that is already there; the reference it takes is never
  // dropped, so the probe cannot be unloaded under the plugin.
  if (const char* path = std::getenv("TRAINSCOPE_PROBE_LIB"); path != nullptr && *path != '\0') {
    if (void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD)) {
      if (ProbeApi api = bindAll(h); api.complete()) return api;
    }
  }
  if (void* h = dlopen("libtrainscope_probe.so", RTLD_NOW | RTLD_NOLOAD)) {
    if (ProbeApi api = bindAll(h); api.complete()) return api;
  }
  if (ProbeApi api = bindAll(RTLD_DEFAULT); api.complete()) return api;
  return ProbeApi{};
}

void ClockOffset::observe(int64_t hostNs, uint64_t gpuNs) {
  if (gpuNs == 0 || gpuNs > kMaxGpuNs) return;
  const int64_t sample = hostNs - static_cast<int64_t>(gpuNs);
  int64_t start = windowStart_.load(std::memory_order_relaxed);
  if (hostNs - start >= kWindowNs &&
      windowStart_.compare_exchange_strong(start, hostNs, std::memory_order_relaxed)) {
    // A new window: the last one's minimum is kept beside it, so the estimate never jumps to a
    // single fresh sample.
    prev_.store(cur_.exchange(sample, std::memory_order_relaxed), std::memory_order_relaxed);
    return;
  }
  atomicMin(cur_, sample);
}

int64_t ClockOffset::offset() const {
  return std::min(cur_.load(std::memory_order_relaxed), prev_.load(std::memory_order_relaxed));
}

Plugin::Plugin(ProbeApi api, uint32_t poolSize)
    : api_(api), poolSize_(poolSize != 0 ? poolSize : poolFromEnv()) {
  slots_ = new OpSlot[poolSize_];
  // The free list holds every slot, lowest index first.
  for (uint32_t i = 0; i < poolSize_; ++i) {
    slots_[i].next.store(i + 1 < poolSize_ ? i + 2 : 0, std::memory_order_relaxed);
  }
  freeHead_.store(1, std::memory_order_relaxed);
  const char* steps = std::getenv("TRAINSCOPE_NCCL_PROXY_STEPS");
  proxySteps_ = steps != nullptr && std::strcmp(steps, "1") == 0;
  links_ = proxySteps_ ? new LinkSlot[kLinkPool] : nullptr;
}

Plugin::~Plugin() {
  delete[] slots_;
  delete[] links_;
  for (auto& slot : comms_) {
    Comm* c = slot.load(std::memory_order_relaxed);
    if (c == nullptr) continue;
    delete[] c->globalRanks;
    delete c;
  }
}

Plugin& Plugin::get() {
  // Never destroyed: NCCL's proxy thread may still call in while the process exits.
  static Plugin* plugin = new Plugin(findProbe());
  return *plugin;
}

Comm* Plugin::initComm(uint64_t commHash, const char* commName, int nranks, int rank, int* mask) {
  *mask = 0;
  // Communicators may come up on several threads at once; api_ is written only here, before any
  // event can read it (no communicator had events while it was incomplete).
  MutexLock lock(&initMu_);
  if (!api_.complete()) {
    // Looked for again at every communicator: Python may load the probe after NCCL's first.
    api_ = findProbe();
    if (!api_.complete()) {
      stats_.commsNoProbe.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
  }
  if (nranks < 1 || static_cast<size_t>(nranks) > (size_t{1} << 20)) {
    stats_.commsNoProbe.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  Comm* c = reuseComm(nranks);
  if (c == nullptr) {
    const uint32_t at = commCount_.fetch_add(1, std::memory_order_relaxed);
    if (at >= kMaxComms) {
      commCount_.fetch_sub(1, std::memory_order_relaxed);
      stats_.commsNoProbe.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    c = new (std::nothrow) Comm;
    if (c != nullptr) {
      c->globalRanks = new (std::nothrow) int32_t[static_cast<size_t>(nranks)];
      c->capacity = nranks;
      if (c->globalRanks == nullptr) {
        delete c;
        c = nullptr;
      }
    }
    comms_[at].store(c, std::memory_order_release);
    if (c == nullptr) return nullptr;
  }
  c->commHash = commHash;
  c->nranks = nranks;
  c->rank = rank;
  std::memset(c->name, 0, sizeof c->name);
  if (commName != nullptr) std::strncpy(c->name, commName, sizeof c->name - 1);
  std::fill(c->globalRanks, c->globalRanks + nranks, -1);
  c->group.store(0, std::memory_order_relaxed);
  c->resolving.store(false, std::memory_order_relaxed);
  if (ts_probe* probe = api_.defaultExisting()) resolveGroup(probe, c);
  stats_.comms.fetch_add(1, std::memory_order_relaxed);
  *mask = (1 << 1) | (1 << 2) | (1 << 6);  // ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh
  if (proxySteps_ && api_.linkTransfer != nullptr) {
    *mask |= (1 << 3) | (1 << 4);  // ncclProfileProxyOp | ncclProfileProxyStep
  }
  return c;
}

void Plugin::finalizeComm(Comm* comm) {
  // Kept (slots may still point at it); NCCL sends no events for it after finalize.
  if (comm != nullptr) comm->finalized.store(true, std::memory_order_release);
}

Comm* Plugin::reuseComm(int nranks) {
  const uint32_t n = std::min(commCount_.load(std::memory_order_acquire), kMaxComms);
  for (uint32_t i = 0; i < n; ++i) {
    Comm* c = comms_[i].load(std::memory_order_acquire);
    bool finalized = true;
    if (c != nullptr && c->capacity >= nranks &&
        c->finalized.compare_exchange_strong(finalized, false, std::memory_order_acq_rel)) {
      return c;
    }
  }
  return nullptr;
}

ts_name Plugin::resolveGroup(ts_probe* probe, Comm* c) {
  ts_name g = c->group.load(std::memory_order_acquire);
  if (g != 0) return g;
  bool expected = false;
  if (!c->resolving.compare_exchange_strong(expected, true)) return 0;  // another thread is
  g = api_.deviceGroup(probe, c->commHash, c->name, c->nranks, c->rank, c->globalRanks);
  if (g != 0) {
    c->group.store(g, std::memory_order_release);
  } else {
    c->resolving.store(false);
  }
  return g;
}

OpSlot* Plugin::acquire(int64_t nowNs) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    uint64_t head = freeHead_.load(std::memory_order_acquire);
    while ((head & 0xffffffffu) != 0) {
      OpSlot* s = &slots_[(head & 0xffffffffu) - 1];
      const uint64_t next = ((head >> 32) + 1) << 32 | s->next.load(std::memory_order_relaxed);
      if (freeHead_.compare_exchange_weak(head, next, std::memory_order_acq_rel)) return s;
    }
    if (attempt == 0) reclaimStale(nowNs);
  }
  return nullptr;
}

void Plugin::release(OpSlot* s) {
  const auto index = static_cast<uint32_t>(s - slots_) + 1;
  s->state.store(kFree, std::memory_order_relaxed);
  uint64_t head = freeHead_.load(std::memory_order_relaxed);
  do {
    s->next.store(static_cast<uint32_t>(head & 0xffffffffu), std::memory_order_relaxed);
  } while (!freeHead_.compare_exchange_weak(head, ((head >> 32) + 1) << 32 | index,
                                            std::memory_order_acq_rel));
}

void Plugin::reclaimStale(int64_t nowNs) {
  // Only when the pool ran dry, and at most every 100 ms: an operation whose channels never
  // all reported (graph capture, an aborted communicator) must not hold its slot for ever. A
  // slot with a channel still open is left alone, as NCCL holds that channel's handle.
  int64_t last = lastReclaimNs_.load(std::memory_order_relaxed);
  if (nowNs - last < 100'000'000 ||
      !lastReclaimNs_.compare_exchange_strong(last, nowNs, std::memory_order_relaxed)) {
    return;
  }
  for (uint32_t i = 0; i < poolSize_; ++i) {
    OpSlot& s = slots_[i];
    if (s.state.load(std::memory_order_acquire) != kActive) continue;
    if (!s.hostStopped.load(std::memory_order_acquire) || nowNs - s.hostStartNs < kStaleNs) {
      continue;
    }
    if (s.started.load(std::memory_order_acquire) != s.stopped.load(std::memory_order_acquire)) {
      continue;
    }
    uint32_t active = kActive;
    if (s.state.compare_exchange_strong(active, kDone, std::memory_order_acq_rel)) {
      stats_.incomplete.fetch_add(1, std::memory_order_relaxed);
      release(&s);
    }
  }
}

void* Plugin::startOp(Comm* comm, const OpDescr& d) {
  if (comm == nullptr) return nullptr;
  stats_.ops.fetch_add(1, std::memory_order_relaxed);
  const int64_t now = hostNowNs();
  OpSlot* s = acquire(now);
  if (s == nullptr) {
    stats_.poolFull.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  s->comm = comm;
  s->hostStartNs = now;
  s->kind = d.kind;
  const uint8_t dtype = dtypeOf(d.datatype);
  s->op = collectiveOpOf(d.func);
  // Bytes of one call as the host counts them (ts_collective): all_gather's gathered output and
  // reduce_scatter's input are nranks times NCCL's per-rank count, as is all_to_all's buffer.
  uint64_t bytes = static_cast<uint64_t>(d.count) * dtypeBytes(dtype);
  if (s->op == TS_COLL_ALL_GATHER || s->op == TS_COLL_REDUCE_SCATTER ||
      s->op == TS_COLL_ALL_TO_ALL) {
    bytes *= static_cast<uint64_t>(comm->nranks);
  }
  s->bytes = bytes;
  s->seq = d.seq;
  s->peer = d.peer;
  s->info = TS_DEVICE_INFO(algoOf(d.algo), protoOf(d.proto), dtype, d.channels);
  s->expected = d.channels;
  s->started.store(0, std::memory_order_relaxed);
  s->stopped.store(0, std::memory_order_relaxed);
  s->hostStopped.store(false, std::memory_order_relaxed);
  s->noGpuTimer.store(false, std::memory_order_relaxed);
  s->gpuStart.store(UINT64_MAX, std::memory_order_relaxed);
  s->gpuStop.store(0, std::memory_order_relaxed);
  s->hostFirst.store(INT64_MAX, std::memory_order_relaxed);
  s->hostLast.store(0, std::memory_order_relaxed);
  s->state.store(kActive, std::memory_order_release);
  return s;
}

void* Plugin::startKernelCh(void* parent, uint64_t gpuStartNs) {
  auto* s = static_cast<OpSlot*>(parent);
  if (s == nullptr || (reinterpret_cast<uintptr_t>(parent) & 63) != 0 ||
      s->state.load(std::memory_order_acquire) != kActive) {
    stats_.unknownEvents.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  const int64_t now = hostNowNs();
  if (gpuStartNs != 0 && gpuStartNs <= kMaxGpuNs) {
    clock_.observe(now, gpuStartNs);
    atomicMin(s->gpuStart, gpuStartNs);
  } else {
    s->noGpuTimer.store(true, std::memory_order_relaxed);
  }
  atomicMin(s->hostFirst, now);
  s->started.fetch_add(1);  // seq_cst, as below
  // Pointer arithmetic inside the slot, not an integer made a pointer.
  return reinterpret_cast<char*>(s) + kKernelChTag;
}

void Plugin::kernelChStop(void* handle, uint64_t gpuStopNs) {
  const auto bits = reinterpret_cast<uintptr_t>(handle);
  if ((bits & 63) != kKernelChTag) return;
  auto* s = reinterpret_cast<OpSlot*>(static_cast<char*>(handle) - kKernelChTag);
  const int64_t now = hostNowNs();
  if (gpuStopNs != 0 && gpuStopNs <= kMaxGpuNs) {
    clock_.observe(now, gpuStopNs);
    atomicMax(s->gpuStop, gpuStopNs);
  } else {
    s->noGpuTimer.store(true, std::memory_order_relaxed);
  }
  atomicMax(s->hostLast, now);
}

void* Plugin::startProxyOp(void* parent, int pid, int peer, int isSend) {
  // Only this process's own sends: a PXN proxy op comes from another process, whose parent
  // pointer means nothing here (NCCL's plugin README), and a receive has no wire time of its
  // own to give.
  if (links_ == nullptr || isSend == 0 || pid != static_cast<int>(getpid())) return nullptr;
  auto* op = static_cast<OpSlot*>(parent);
  if (op == nullptr || (reinterpret_cast<uintptr_t>(parent) & 63) != 0 ||
      op->state.load(std::memory_order_acquire) != 1) {
    return nullptr;
  }
  const uint32_t start = linkCursor_.fetch_add(1, std::memory_order_relaxed);
  for (uint32_t i = 0; i < kLinkPool; ++i) {
    LinkSlot& l = links_[(start + i) % kLinkPool];
    bool free = false;
    if (l.inUse.load(std::memory_order_relaxed) ||
        !l.inUse.compare_exchange_strong(free, true, std::memory_order_acquire)) {
      continue;
    }
    l.comm = op->comm;
    l.peer = peer;
    for (int k = 0; k < LinkSlot::kLinkSteps; ++k) {
      l.postedNs[k].store(0, std::memory_order_relaxed);
    }
    return reinterpret_cast<char*>(&l) + kProxyOpTag;
  }
  stats_.linksDropped.fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}

void* Plugin::startProxyStep(void* parent, int step) {
  const auto bits = reinterpret_cast<uintptr_t>(parent);
  if (bits == 0 || (bits & 63) != kProxyOpTag || step < 0) return nullptr;
  auto* l = reinterpret_cast<LinkSlot*>(static_cast<char*>(parent) - kProxyOpTag);
  const int k = step % LinkSlot::kLinkSteps;
  l->postedNs[k].store(0, std::memory_order_relaxed);
  return reinterpret_cast<char*>(l) + kProxyStepTag + k;
}

void Plugin::proxyStepSendWait(void* handle, size_t transSize) {
  const auto bits = reinterpret_cast<uintptr_t>(handle);
  const uintptr_t tag = bits & 63;
  if (bits == 0 || tag < kProxyStepTag || tag >= kProxyStepTag + LinkSlot::kLinkSteps) return;
  auto* l = reinterpret_cast<LinkSlot*>(static_cast<char*>(handle) - tag);
  const auto k = static_cast<int>(tag - kProxyStepTag);
  l->bytes[k].store(transSize, std::memory_order_relaxed);
  l->postedNs[k].store(hostNowNs(), std::memory_order_relaxed);
}

void Plugin::stopEvent(void* handle) {
  const auto bits = reinterpret_cast<uintptr_t>(handle);
  if (bits == 0) return;
  const uintptr_t tag = bits & 63;
  if (tag == kProxyOpTag) {
    auto* l = reinterpret_cast<LinkSlot*>(static_cast<char*>(handle) - tag);
    l->inUse.store(false, std::memory_order_release);  // NCCL stops its steps first
    return;
  }
  if (tag >= kProxyStepTag && tag < kProxyStepTag + LinkSlot::kLinkSteps) {
    auto* l = reinterpret_cast<LinkSlot*>(static_cast<char*>(handle) - tag);
    const auto k = static_cast<int>(tag - kProxyStepTag);
    const int64_t posted = l->postedNs[k].exchange(0, std::memory_order_relaxed);
    ts_probe* probe = api_.defaultExisting();
    if (posted == 0 || probe == nullptr || api_.linkTransfer == nullptr) return;
    Comm* c = l->comm;
    const ts_name group = resolveGroup(probe, c);
    uint32_t peer = l->peer < 0 ? 0 : static_cast<uint32_t>(l->peer);
    if (l->peer >= 0 && l->peer < c->nranks && c->group.load(std::memory_order_acquire) != 0 &&
        c->globalRanks[l->peer] >= 0) {
      peer = static_cast<uint32_t>(c->globalRanks[l->peer]);
    }
    api_.linkTransfer(probe, group, peer, l->bytes[k].load(std::memory_order_relaxed), posted,
                      hostNowNs());
    stats_.links.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  auto* s = reinterpret_cast<OpSlot*>(static_cast<char*>(handle) - tag);
  if (tag == kKernelChTag) {
    atomicMax(s->hostLast, hostNowNs());  // a stop without its state update still ends it
    s->stopped.fetch_add(1);              // seq_cst: see tryComplete
  } else if (tag == 0) {
    // NCCL stops a Coll or P2p event once it is enqueued, not when it ran: the slot stays until
    // its channels are done.
    s->hostStopped.store(true);  // seq_cst: see tryComplete
  } else {
    return;
  }
  tryComplete(s);
}

void Plugin::tryComplete(OpSlot* s) {
  // The host's stop and the last channel's stop may race on two threads; each stores its part
  // and then reads the other's, all sequentially consistent, so at least one of them sees both
  // (with acquire/release alone both could miss the other and the operation would never end).
  if (!s->hostStopped.load()) return;
  const uint16_t started = s->started.load();
  const uint16_t stopped = s->stopped.load();
  // Every channel NCCL said it would use has started and stopped (at least one when it did
  // not say); a channel that has not started yet may still come.
  if (started == 0 || stopped != started || started < s->expected) return;
  uint32_t active = kActive;
  if (!s->state.compare_exchange_strong(active, kDone, std::memory_order_acq_rel)) return;
  emit(s);
  release(s);
}

void Plugin::reportDrops(ts_probe* probe) {
  const uint64_t drops = stats_.poolFull.load(std::memory_order_relaxed) +
                         stats_.noProbe.load(std::memory_order_relaxed) +
                         stats_.incomplete.load(std::memory_order_relaxed);
  uint64_t told = dropsTold_.load(std::memory_order_relaxed);
  if (drops > told && dropsTold_.compare_exchange_strong(told, drops, std::memory_order_relaxed)) {
    api_.deviceDropped(probe, drops - told);
    stats_.dropsReported.fetch_add(drops - told, std::memory_order_relaxed);
  }
}

void Plugin::emit(OpSlot* s) {
  ts_probe* probe = api_.defaultExisting();
  if (probe == nullptr) {
    stats_.noProbe.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Comm* c = s->comm;
  const ts_name group = resolveGroup(probe, c);
  int64_t start = 0;
  int64_t end = 0;
  const int64_t offset = clock_.offset();
  const uint64_t gpuStart = s->gpuStart.load(std::memory_order_relaxed);
  const uint64_t gpuStop = s->gpuStop.load(std::memory_order_relaxed);
  if (!s->noGpuTimer.load(std::memory_order_relaxed) && offset != ClockOffset::kNone &&
      gpuStop >= gpuStart) {
    start = static_cast<int64_t>(gpuStart) + offset;
    end = static_cast<int64_t>(gpuStop) + offset;
  } else {
    // No GPU timer (an NCCL that passes 0, a channel stopped without its stop time): when the
    // proxy thread saw the channels start and stop, late by its polling.
    start = s->hostFirst.load(std::memory_order_relaxed);
    end = s->hostLast.load(std::memory_order_relaxed);
  }
  end = std::max(end, start);
  if (s->kind == OpKind::kColl) {
    api_.deviceCollective(probe, s->op, group, s->bytes, s->seq, s->info, s->hostStartNs, start,
                          end);
  } else {
    int32_t peer = s->peer;
    // The peer's global rank where the group is known; else its rank in the communicator.
    if (peer >= 0 && peer < c->nranks && c->group.load(std::memory_order_acquire) != 0 &&
        c->globalRanks[peer] >= 0) {
      peer = c->globalRanks[peer];
    }
    api_.deviceP2p(probe, s->op, group, peer, s->bytes, s->info, s->hostStartNs, start, end);
  }
  stats_.recorded.fetch_add(1, std::memory_order_relaxed);
  reportDrops(probe);
}

uint8_t collectiveOpOf(const char* func) {
  if (func == nullptr) return TS_COLL_UNKNOWN;
  struct Entry {
    const char* name;
    uint8_t op;
  };
  static constexpr Entry kOps[] = {
      {"AllReduce", TS_COLL_ALL_REDUCE},
      {"AllGather", TS_COLL_ALL_GATHER},
      {"ReduceScatter", TS_COLL_REDUCE_SCATTER},
      {"AlltoAll", TS_COLL_ALL_TO_ALL},
      {"Broadcast", TS_COLL_BROADCAST},
      {"Reduce", TS_COLL_REDUCE},
      {"Send", TS_COLL_SEND},
      {"Recv", TS_COLL_RECV},
  };
  for (const Entry& e : kOps) {
    if (std::strcmp(func, e.name) == 0) return e.op;
  }
  return TS_COLL_UNKNOWN;
}

uint8_t algoOf(const char* algo) {
  // NCCL 2.28+ spells them in capitals (ncclAlgoToString), earlier ones as in NCCL_ALGO.
  static constexpr const char* kNames[] = {
      "Tree", "Ring", "CollNet_Direct", "CollNet_Chain", "NVLS", "NVLS_Tree", "PAT"};
  static constexpr const char* kOld[] = {
      "Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"};
  for (size_t i = 0; i < std::size(kNames); ++i) {
    if (same(algo, kNames[i]) || same(algo, kOld[i])) return static_cast<uint8_t>(i + 1);
  }
  return TS_ALGO_UNKNOWN;
}

uint8_t protoOf(const char* proto) {
  if (same(proto, "LL")) return TS_PROTO_LL;
  if (same(proto, "LL128")) return TS_PROTO_LL128;
  if (same(proto, "Simple")) return TS_PROTO_SIMPLE;
  return TS_PROTO_UNKNOWN;
}

uint8_t dtypeOf(const char* datatype) {
  if (datatype == nullptr) return TS_DTYPE_UNKNOWN;
  // ncclDatatypeToString: "ncclFloat32", ...
  const char* t = std::strncmp(datatype, "nccl", 4) == 0 ? datatype + 4 : datatype;
  static constexpr const char* kNames[] = {"Int8",    "Uint8",    "Int32",      "Uint32",
                                           "Int64",   "Uint64",   "Float16",    "Float32",
                                           "Float64", "Bfloat16", "Float8e4m3", "Float8e5m2"};
  for (size_t i = 0; i < std::size(kNames); ++i) {
    if (same(t, kNames[i])) return static_cast<uint8_t>(i + 1);
  }
  return TS_DTYPE_UNKNOWN;
}

uint32_t dtypeBytes(uint8_t dtype) {
  switch (dtype) {
    case TS_DTYPE_INT8:
    case TS_DTYPE_UINT8:
    case TS_DTYPE_FLOAT8E4M3:
    case TS_DTYPE_FLOAT8E5M2:
      return 1;
    case TS_DTYPE_FLOAT16:
    case TS_DTYPE_BFLOAT16:
      return 2;
    case TS_DTYPE_INT32:
    case TS_DTYPE_UINT32:
    case TS_DTYPE_FLOAT32:
      return 4;
    case TS_DTYPE_INT64:
    case TS_DTYPE_UINT64:
    case TS_DTYPE_FLOAT64:
      return 8;
    default:
      return 0;
  }
}

}  // namespace trainscope::nccl
