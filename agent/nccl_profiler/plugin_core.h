// The state behind trainscope's NCCL profiler plugin (libnccl-profiler-trainscope.so): a
// bounded pool of NCCL operations in flight, the conversion of the GPU's timer to the probe's
// clock, and the probe's device entries found in the process. plugin.cpp adapts each version
// of NCCL's profiler interface (v4, v5, v6) to the calls below.
//
// Threads: NCCL calls init and finalize from the thread that creates a communicator, starts
// and stops Coll and P2p events on the thread that enqueues the operation (the training
// thread), and starts, updates and stops KernelCh events on its proxy thread. Every event call
// here is lock-free and allocation-free: a pool slot claimed or released with one CAS, a few
// atomic stores, and at the end of an operation one wait-free record call into the probe.
// Nothing throws; whatever cannot be recorded is counted (Stats) and reported to the probe
// (ts_device_dropped), never silently lost.
//
// Device time of an operation: NCCL's kernel writes the GPU's globaltimer (ns) when each of
// its channels starts and stops the operation; the proxy thread polls those counters and calls
// the plugin with them (KernelCh start with pTimer, the KernelChStop state with pTimer). The
// operation ran on the device from the earliest channel start to the latest channel stop.
//
// The GPU's globaltimer and the host's CLOCK_REALTIME tick at the same rate (both ns) but
// from different origins that drift apart by milliseconds over hours, so the offset between
// them is measured from the events themselves: every KernelCh callback happens on the host
// after the GPU time it carries, so host_now - gpu_time is the true offset plus that
// callback's delay (the proxy thread's polling latency, >= 0). The smallest such sample over
// the last 10-20 s is the offset estimate: it is never below the true offset, and above it by
// the quickest callback's delay (microseconds when the proxy thread polls freely). Device
// times on the probe's clock are gpu_time + offset, so they may be late by that much; an
// operation's duration is exact, as both ends come from the same GPU timer. The windows
// follow drift; a GPU timer that steps (a driver resync) is followed within two windows.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "agent/probe/trainscope_probe.h"
#include "common/thread_annotations.h"

namespace trainscope::nccl {

// The probe's device entries (trainscope_probe.h), found in the process at run time.
struct ProbeApi {
  ts_probe* (*defaultExisting)() = nullptr;
  ts_name (*deviceGroup)(ts_probe*, uint64_t, const char*, int32_t, int32_t, int32_t*) = nullptr;
  void (*deviceCollective)(ts_probe*, uint32_t, ts_name, uint64_t, uint64_t, uint32_t, int64_t,
                           int64_t, int64_t) = nullptr;
  void (*deviceP2p)(ts_probe*, uint32_t, ts_name, int32_t, uint64_t, uint32_t, int64_t, int64_t,
                    int64_t) = nullptr;
  void (*deviceDropped)(ts_probe*, uint64_t) = nullptr;
  // ts_link_transfer: only for proxy steps (TRAINSCOPE_NCCL_PROXY_STEPS=1).
  void (*linkTransfer)(ts_probe*, ts_name, uint32_t, uint64_t, int64_t, int64_t) = nullptr;
  bool complete() const {
    return defaultExisting != nullptr && deviceGroup != nullptr && deviceCollective != nullptr &&
           deviceP2p != nullptr && deviceDropped != nullptr;
  }
};

// Finds the probe's library already loaded in this process, without loading it:
// $TRAINSCOPE_PROBE_LIB (what `trainscope run` points the Python package at), then
// libtrainscope_probe.so by its soname (Python's ctypes loads it privately, RTLD_LOCAL), then
// a probe linked into the program itself (exported symbols). Empty when none is there.
ProbeApi findProbe();

// GPU timer to probe clock (see the top of this file). Any thread, lock-free.
class ClockOffset {
 public:
  static constexpr int64_t kWindowNs = 10'000'000'000;
  static constexpr int64_t kNone = INT64_MAX;
  // One observation: the host clock `hostNs` when a callback carrying GPU time `gpuNs` ran.
  void observe(int64_t hostNs, uint64_t gpuNs);
  // The offset to add to GPU times, or kNone before any observation.
  int64_t offset() const;

 private:
  std::atomic<int64_t> cur_{kNone};
  std::atomic<int64_t> prev_{kNone};
  std::atomic<int64_t> windowStart_{0};
};

// Counters since the plugin was loaded; any thread reads them (ts_nccl_profiler_stats).
struct Stats {
  std::atomic<uint64_t> comms{0};          // communicators initialised with events on
  std::atomic<uint64_t> commsNoProbe{0};   // ... with events off: no probe in the process
  std::atomic<uint64_t> ops{0};            // collectives and p2p NCCL started
  std::atomic<uint64_t> recorded{0};       // ... handed to the probe with device times
  std::atomic<uint64_t> poolFull{0};       // ... not timed: every pool slot was in flight
  std::atomic<uint64_t> noProbe{0};        // ... not recorded: no probe instance yet
  std::atomic<uint64_t> incomplete{0};     // ... reclaimed without all their channels
  std::atomic<uint64_t> unknownEvents{0};  // KernelCh events without a parent we know
  std::atomic<uint64_t> dropsReported{0};  // drops told to the probe (ts_device_dropped)
  std::atomic<uint64_t> links{0};          // proxy steps recorded as link transfers
  std::atomic<uint64_t> linksDropped{0};   // proxy ops not followed: every link slot was busy
};

// One communicator (NCCL's profiler context). Fixed once init returns, except `group` and
// `globalRanks`, which the first completed operation fills when init could not.
struct Comm {
  uint64_t commHash = 0;
  int32_t nranks = 0;
  int32_t rank = 0;
  char name[64] = {};                  // NCCL's commName, cut
  std::atomic<ts_name> group{0};       // 0 until resolved
  std::atomic<bool> resolving{false};  // one thread resolves
  int32_t* globalRanks = nullptr;      // nranks entries (-1: unknown), set before group
  int32_t capacity = 0;                // entries globalRanks has room for
  std::atomic<bool> finalized{false};  // NCCL finalized it: a later init may reuse it
};

enum class OpKind : uint8_t { kColl = 1, kP2p = 2 };

// What NCCL's Coll and P2p descriptors say, in one shape for every interface version.
struct OpDescr {
  OpKind kind = OpKind::kColl;
  const char* func = nullptr;
  const char* datatype = nullptr;
  const char* algo = nullptr;   // collectives only
  const char* proto = nullptr;  // collectives only
  size_t count = 0;
  uint64_t seq = 0;   // collectives only
  int32_t peer = -1;  // p2p only: the communicator rank at the other end
  uint8_t channels = 0;
};

// One operation in flight. 64-byte aligned, so an event handle's low bits can say which kind
// of event it stands for (handleOf).
struct alignas(64) OpSlot {
  std::atomic<uint32_t> state{0};  // kFree, kActive, kDone (one thread emits)
  std::atomic<uint32_t> next{0};   // free list link (slot index + 1; 0 ends it)
  Comm* comm = nullptr;
  int64_t hostStartNs = 0;  // when NCCL started the event (reclaiming stale slots)
  uint64_t bytes = 0;
  uint64_t seq = 0;
  uint32_t info = 0;  // TS_DEVICE_INFO
  int32_t peer = -1;
  uint8_t op = 0;  // ts_collective_op
  OpKind kind = OpKind::kColl;
  uint16_t expected = 0;  // channels NCCL will report (0: unknown, then at least one)
  std::atomic<uint16_t> started{0};
  std::atomic<uint16_t> stopped{0};
  std::atomic<bool> hostStopped{false};
  std::atomic<bool> noGpuTimer{false};  // a channel came without a GPU time: host times used
  std::atomic<uint64_t> gpuStart{UINT64_MAX};
  std::atomic<uint64_t> gpuStop{0};
  std::atomic<int64_t> hostFirst{INT64_MAX};  // KernelCh callbacks' own host times
  std::atomic<int64_t> hostLast{0};
};

// One network send of an operation to one peer (NCCL's ProxyOp on a sending channel), followed
// only when proxy steps are on: its steps (ProxyStep) in flight, by NCCL's step index modulo
// kLinkSteps (NCCL keeps NCCL_STEPS = 8 in flight per channel). A step's time on the wire runs
// from its SendWait state (posted to the network, the receiver ready) to its stop (done).
struct alignas(64) LinkSlot {
  static constexpr int kLinkSteps = 8;
  std::atomic<bool> inUse{false};
  Comm* comm = nullptr;
  int32_t peer = -1;  // the communicator's rank
  std::atomic<int64_t> postedNs[kLinkSteps] = {};
  std::atomic<uint64_t> bytes[kLinkSteps] = {};
};

class Plugin {
 public:
  static constexpr uint32_t kDefaultPool = 4096;  // ops in flight; 256 KiB
  static constexpr uint32_t kMaxComms = 4096;
  static constexpr int64_t kStaleNs = 10'000'000'000;  // a slot with no channel in 10 s
  static constexpr uint32_t kLinkPool = 1024;          // proxy ops followed at once; 512 KiB

  // `poolSize` 0: $TRAINSCOPE_NCCL_POOL, else kDefaultPool (1..1048576).
  explicit Plugin(ProbeApi api, uint32_t poolSize = 0);
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  // The process's plugin (created on first use, never destroyed while NCCL may call it).
  static Plugin& get();

  // NCCL's init: a new communicator. Returns nullptr (and `*mask` 0) when the plugin records
  // nothing for it (no probe in the process, too many communicators).
  Comm* initComm(uint64_t commHash, const char* commName, int nranks, int rank, int* mask);
  void finalizeComm(Comm* comm);

  // Event entries; every one returns quickly and never fails NCCL.
  void* startOp(Comm* comm, const OpDescr& d);
  void* startKernelCh(void* parent, uint64_t gpuStartNs);
  void kernelChStop(void* handle, uint64_t gpuStopNs);
  void stopEvent(void* handle);
  // Proxy steps (link-level timing, on request).
  void* startProxyOp(void* parent, int pid, int peer, int isSend);
  void* startProxyStep(void* parent, int step);
  void proxyStepSendWait(void* handle, size_t transSize);

  const Stats& stats() const { return stats_; }
  const ClockOffset& clock() const { return clock_; }
  const ProbeApi& api() const { return api_; }
  uint32_t poolSize() const { return poolSize_; }

 private:
  Comm* reuseComm(int nranks);  // a finalized communicator with room for nranks, claimed
  OpSlot* acquire(int64_t nowNs);
  void release(OpSlot* s);
  void reclaimStale(int64_t nowNs);
  void tryComplete(OpSlot* s);
  void emit(OpSlot* s);
  ts_name resolveGroup(ts_probe* probe, Comm* c);
  void reportDrops(ts_probe* probe);

  Mutex initMu_;  // one initComm at a time (NCCL's init path, never an event)
  // Written by initComm under initMu_, and only while no communicator has events; read by
  // events without the lock.
  ProbeApi api_;
  uint32_t poolSize_;
  OpSlot* slots_;
  std::atomic<uint64_t> freeHead_{0};  // (ABA tag << 32) | (index + 1); 0 index: empty
  std::atomic<int64_t> lastReclaimNs_{0};
  // Every communicator made, never freed while NCCL may call (a finalized one is reused by a
  // later init: NCCL sends no event for a communicator after its finalize).
  std::atomic<Comm*> comms_[kMaxComms] = {};
  std::atomic<uint32_t> commCount_{0};
  LinkSlot* links_;
  std::atomic<uint32_t> linkCursor_{0};
  bool proxySteps_ = false;  // $TRAINSCOPE_NCCL_PROXY_STEPS=1, read at construction
  ClockOffset clock_;
  Stats stats_;
  std::atomic<uint64_t> dropsTold_{0};  // of the drop counters' sum, told to the probe
};

// Event handles: an OpSlot's address for the Coll/P2p event, with kKernelChTag for one of its
// kernel channels.
inline constexpr uintptr_t kKernelChTag = 1;
// A LinkSlot's address with kProxyOpTag for the ProxyOp event, with kProxyStepTag + (step
// modulo kLinkSteps) for one of its steps.
inline constexpr uintptr_t kProxyOpTag = 2;
inline constexpr uintptr_t kProxyStepTag = 3;

// Decoding of NCCL's strings (static strings in NCCL, compared by content).
uint8_t collectiveOpOf(const char* func);  // ts_collective_op; 0 for ops trainscope has not
uint8_t algoOf(const char* algo);          // ts_nccl_algo
uint8_t protoOf(const char* proto);        // ts_nccl_proto
uint8_t dtypeOf(const char* datatype);     // ts_dtype
uint32_t dtypeBytes(uint8_t dtype);        // 0 when unknown

}  // namespace trainscope::nccl
