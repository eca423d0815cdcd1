// libnccl-profiler-trainscope.so: the symbols NCCL looks up (ncclProfiler_v6 from NCCL 2.29,
// ncclProfiler_v5 from 2.28, ncclProfiler_v4 from 2.26; NCCL takes the newest it finds), each
// adapting its version's init signature and event descriptors to Plugin (plugin_core.h).
// Only these three symbols and ts_nccl_profiler_stats are exported. NCCL calls them from its
// own threads (plugin_core.h says which); nothing here throws or blocks.
#include <cstdint>
#include <cstring>

#include <nccl/profiler.h>

#include "agent/nccl_profiler/plugin_core.h"

namespace trainscope::nccl {
namespace {

constexpr const char* kName = "trainscope";

template <class Descr>
OpDescr collOf(const Descr* d) {
  OpDescr o;
  o.kind = OpKind::kColl;
  o.func = d->coll.func;
  o.datatype = d->coll.datatype;
  o.algo = d->coll.algo;
  o.proto = d->coll.proto;
  o.count = d->coll.count;
  o.seq = d->coll.seqNumber;
  o.channels = d->coll.nChannels;
  return o;
}

template <class Descr>
OpDescr p2pOf(const Descr* d) {
  OpDescr o;
  o.kind = OpKind::kP2p;
  o.func = d->p2p.func;
  o.datatype = d->p2p.datatype;
  o.count = d->p2p.count;
  o.peer = d->p2p.peer;
  o.channels = d->p2p.nChannels;
  return o;
}

// The descriptor's fields this plugin reads have the same names in v4, v5 and v6 (v4's `type`
// is a uint8_t, the others' a uint64_t; the unions differ in their other members).
template <class Descr>
ncclResult_t startEvent(void* context, void** eHandle, Descr* eDescr) {
  if (eHandle == nullptr) return ncclSuccess;
  *eHandle = nullptr;  // the Group and API events NCCL starts for the hierarchy are not kept
  if (eDescr == nullptr) return ncclSuccess;
  Plugin& p = Plugin::get();
  switch (static_cast<uint64_t>(eDescr->type)) {
    case ncclProfileColl:
      *eHandle = p.startOp(static_cast<Comm*>(context), collOf(eDescr));
      break;
    case ncclProfileP2p:
      *eHandle = p.startOp(static_cast<Comm*>(context), p2pOf(eDescr));
      break;
    case ncclProfileKernelCh:
      *eHandle = p.startKernelCh(eDescr->parentObj, eDescr->kernelCh.pTimer);
      break;
    case ncclProfileProxyOp:
      *eHandle = p.startProxyOp(eDescr->parentObj, static_cast<int>(eDescr->proxyOp.pid),
                                eDescr->proxyOp.peer, eDescr->proxyOp.isSend);
      break;
    case ncclProfileProxyStep:
      *eHandle = p.startProxyStep(eDescr->parentObj, eDescr->proxyStep.step);
      break;
    default:
      break;
  }
  return ncclSuccess;
}

ncclResult_t stopEvent(void* eHandle) {
  if (eHandle != nullptr) Plugin::get().stopEvent(eHandle);
  return ncclSuccess;
}

template <class Args>
ncclResult_t recordEventState(void* eHandle, ncclProfilerEventState_t eState, Args* eStateArgs) {
  if (eHandle == nullptr || eStateArgs == nullptr) return ncclSuccess;
  if (eState == ncclProfilerKernelChStop) {
    Plugin::get().kernelChStop(eHandle, eStateArgs->kernelCh.pTimer);
  } else if (eState == ncclProfilerProxyStepSendWait) {
    Plugin::get().proxyStepSendWait(eHandle, eStateArgs->proxyStep.transSize);
  }
  return ncclSuccess;
}

ncclResult_t init(void** context, int* eActivationMask, const char* commName, uint64_t commHash,
                  int nranks, int rank, ncclDebugLogger_t logfn) {
  if (context == nullptr || eActivationMask == nullptr) return ncclInvalidArgument;
  *context = nullptr;
  *eActivationMask = 0;
  Plugin& p = Plugin::get();
  const bool hadProbe = p.api().complete();
  *context = p.initComm(commHash, commName, nranks, rank, eActivationMask);
  if (logfn != nullptr && *context == nullptr && !hadProbe) {
    // Once per communicator, at NCCL's INFO level: why this communicator has no device times.
    logfn(NCCL_LOG_INFO, NCCL_INIT, __FILE__, __LINE__,
          "trainscope: no trainscope probe in this process; NCCL events not recorded");
  }
  // Never an error: NCCL would switch the plugin off for every communicator.
  return ncclSuccess;
}

ncclResult_t finalize(void* context) {
  Plugin::get().finalizeComm(static_cast<Comm*>(context));
  return ncclSuccess;
}

ncclResult_t initV4(void** context, int* eActivationMask, const char* commName, uint64_t commHash,
                    int /*nNodes*/, int nranks, int rank, ncclDebugLogger_t logfn) {
  return init(context, eActivationMask, commName, commHash, nranks, rank, logfn);
}

ncclResult_t initV5(void** context, uint64_t commId, int* eActivationMask, const char* commName,
                    int /*nNodes*/, int nranks, int rank, ncclDebugLogger_t logfn) {
  return init(context, eActivationMask, commName, commId, nranks, rank, logfn);
}

}  // namespace
}  // namespace trainscope::nccl

// The names NCCL looks up (dlsym); C linkage, exported.
// NOLINTBEGIN(readability-identifier-naming)
extern "C" {

__attribute__((visibility("default"))) ncclProfiler_v4_t ncclProfiler_v4 = {
    trainscope::nccl::kName,
    trainscope::nccl::initV4,
    trainscope::nccl::startEvent<ncclProfilerEventDescr_v4_t>,
    trainscope::nccl::stopEvent,
    trainscope::nccl::recordEventState<ncclProfilerEventStateArgs_v4_t>,
    trainscope::nccl::finalize,
};

__attribute__((visibility("default"))) ncclProfiler_v5_t ncclProfiler_v5 = {
    trainscope::nccl::kName,
    trainscope::nccl::initV5,
    trainscope::nccl::startEvent<ncclProfilerEventDescr_v5_t>,
    trainscope::nccl::stopEvent,
    trainscope::nccl::recordEventState<ncclProfilerEventStateArgs_v5_t>,
    trainscope::nccl::finalize,
};

__attribute__((visibility("default"))) ncclProfiler_v6_t ncclProfiler_v6 = {
    trainscope::nccl::kName,
    trainscope::nccl::initV5,
    trainscope::nccl::startEvent<ncclProfilerEventDescr_v6_t>,
    trainscope::nccl::stopEvent,
    trainscope::nccl::recordEventState<ncclProfilerEventStateArgs_v6_t>,
    trainscope::nccl::finalize,
};

// What the plugin counted since it was loaded, for tests, benchmarks and diagnostics: fills
// up to `n` counters in this order and returns how many it has: communicators with events on,
// communicators without a probe, operations started, recorded with device times, not timed
// for a full pool, not recorded for want of a probe instance, reclaimed incomplete, unknown
// kernel-channel events, drops told to the probe, the pool's size, the clock offset (GPU
// timer to probe clock, ns; INT64_MAX before the first kernel channel), proxy steps recorded as
// link transfers, and proxy ops not followed for want of a link slot.
__attribute__((visibility("default"))) int ts_nccl_profiler_stats(int64_t* out, int n) {
  const auto& p = trainscope::nccl::Plugin::get();
  const auto& s = p.stats();
  const int64_t all[] = {
      static_cast<int64_t>(s.comms.load()),
      static_cast<int64_t>(s.commsNoProbe.load()),
      static_cast<int64_t>(s.ops.load()),
      static_cast<int64_t>(s.recorded.load()),
      static_cast<int64_t>(s.poolFull.load()),
      static_cast<int64_t>(s.noProbe.load()),
      static_cast<int64_t>(s.incomplete.load()),
      static_cast<int64_t>(s.unknownEvents.load()),
      static_cast<int64_t>(s.dropsReported.load()),
      static_cast<int64_t>(p.poolSize()),
      p.clock().offset(),
      static_cast<int64_t>(s.links.load()),
      static_cast<int64_t>(s.linksDropped.load()),
  };
  const int have = static_cast<int>(sizeof all / sizeof all[0]);
  if (out != nullptr) {
    for (int i = 0; i < n && i < have; ++i) out[i] = all[i];
  }
  return have;
}

}  // extern "C"
// NOLINTEND(readability-identifier-naming)
