// libFuzzer target: NCCL's profiler plugin interface (agent/nccl_profiler) driven by arbitrary
// event sequences, as NCCL could make them: communicators through each version's init, Coll
// and P2p events with any strings and counts (or none), kernel channels started under any
// handle the plugin gave out (before or after the host's stop, more or fewer than announced,
// under an operation long finished), stop states with any GPU time, stops in any order,
// proxy ops and steps (sends and receives, this process's and others') with any states,
// finalize, and step marks on the probe the plugin records into (linked here; the plugin
// finds it through the program's exported symbols).
// Properties beyond "no crash, leak or UB": every handle NCCL gets is NULL or one the plugin
// made, and the plugin never records or drops more operations than NCCL started.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include <unistd.h>

#include <nccl/profiler.h>

#include "agent/probe/trainscope_probe.h"
#include "tests/fuzz/fuzz_util.h"

using trainscope::fuzz::check;

extern "C" int ts_nccl_profiler_stats(int64_t* out, int n);
// The plugin's exported names, as NCCL spells them.
// NOLINTBEGIN(readability-identifier-naming)
extern "C" ncclProfiler_v4_t ncclProfiler_v4;
extern "C" ncclProfiler_v5_t ncclProfiler_v5;
extern "C" ncclProfiler_v6_t ncclProfiler_v6;
// NOLINTEND(readability-identifier-naming)

namespace {

const char* pick(FuzzedDataProvider& in, std::deque<std::string>& keep,
                 std::initializer_list<const char*> names) {
  const size_t i = in.ConsumeIntegralInRange<size_t>(0, names.size() + 1);
  if (i < names.size()) return *(names.begin() + static_cast<ptrdiff_t>(i));
  if (i == names.size()) return nullptr;
  keep.push_back(in.ConsumeRandomLengthString(12));
  return keep.back().c_str();
}

ts_probe* probe() {
  static ts_probe* p = [] {
    ts_probe_config c;
    ts_config_init(&c);
    c.job = "nccl-fuzz";
    c.rank = 0;
    c.world_size = 4;
    c.connect_agent = 1;
    ts_init(&c);
    return ts_default();
  }();
  return p;
}

template <class Descr>
void fillOp(FuzzedDataProvider& in, std::deque<std::string>& keep, Descr& d, bool p2p) {
  if (p2p) {
    d.type = ncclProfileP2p;
    d.p2p.func = pick(in, keep, {"Send", "Recv"});
    d.p2p.datatype = pick(in, keep, {"ncclFloat32", "ncclBfloat16", "ncclInt8"});
    d.p2p.count = in.ConsumeIntegral<size_t>();
    d.p2p.peer = in.ConsumeIntegralInRange<int>(-2, 6);
    d.p2p.nChannels = in.ConsumeIntegral<uint8_t>();
  } else {
    d.type = ncclProfileColl;
    d.coll.func = pick(in, keep, {"AllReduce", "AllGather", "ReduceScatter", "AlltoAll"});
    d.coll.datatype = pick(in, keep, {"ncclFloat32", "ncclBfloat16", "ncclFloat8e5m2"});
    d.coll.algo = pick(in, keep, {"RING", "TREE", "NVLS_TREE"});
    d.coll.proto = pick(in, keep, {"SIMPLE", "LL", "LL128"});
    d.coll.count = in.ConsumeIntegral<size_t>();
    d.coll.seqNumber = in.ConsumeIntegral<uint64_t>();
    d.coll.nChannels = in.ConsumeIntegralInRange<uint8_t>(0, 4);
  }
}

template <class Api, class Descr, class Args>
void drive(FuzzedDataProvider& in, Api* api, std::vector<void*>& contexts) {
  std::deque<std::string> keep;  // stable: NCCL's strings outlive the calls
  std::vector<void*> ops;        // Coll/P2p handles given out (kept after their stop: misuse)
  std::vector<void*> channels;   // KernelCh handles not stopped yet
  std::vector<void*> proxyOps;   // ProxyOp handles not stopped yet
  std::vector<void*> steps;      // ProxyStep handles not stopped yet
  int64_t step = in.ConsumeIntegralInRange<int64_t>(0, 1000);
  const uint64_t gpuBase = in.ConsumeIntegral<uint64_t>();
  ts_step_begin(probe(), step, 0);
  while (in.remaining_bytes() > 0) {
    void* ctx = contexts.empty()
                    ? nullptr
                    : contexts[in.ConsumeIntegralInRange<size_t>(0, contexts.size() - 1)];
    switch (in.ConsumeIntegralInRange<int>(0, 11)) {
      case 0:
      case 1: {
        Descr d{};
        fillOp(in, keep, d, in.ConsumeBool());
        void* h = nullptr;
        check(api->startEvent(ctx, &h, &d) == ncclSuccess);
        if (h != nullptr) ops.push_back(h);
        break;
      }
      case 2: {
        if (ops.empty()) break;
        Descr d{};
        d.type = ncclProfileKernelCh;
        d.parentObj =
            in.ConsumeBool() ? ops[in.ConsumeIntegralInRange<size_t>(0, ops.size() - 1)] : nullptr;
        d.kernelCh.channelId = in.ConsumeIntegral<uint8_t>();
        d.kernelCh.pTimer = in.ConsumeBool() ? gpuBase + in.ConsumeIntegral<uint16_t>()
                                             : in.ConsumeIntegral<uint64_t>();
        void* h = nullptr;
        check(api->startEvent(ctx, &h, &d) == ncclSuccess);
        if (h != nullptr) channels.push_back(h);
        break;
      }
      case 3:
      case 4: {
        if (channels.empty()) break;
        const size_t i = in.ConsumeIntegralInRange<size_t>(0, channels.size() - 1);
        if (in.ConsumeBool()) {
          Args a{};
          a.kernelCh.pTimer = gpuBase + in.ConsumeIntegral<uint32_t>();
          check(api->recordEventState(channels[i], ncclProfilerKernelChStop, &a) == ncclSuccess);
        }
        check(api->stopEvent(channels[i]) == ncclSuccess);
        channels.erase(channels.begin() + static_cast<ptrdiff_t>(i));
        break;
      }
      case 5: {
        if (ops.empty()) break;
        check(api->stopEvent(ops[in.ConsumeIntegralInRange<size_t>(0, ops.size() - 1)]) ==
              ncclSuccess);
        break;
      }
      case 6: {
        Descr d{};
        d.type = uint64_t{1} << in.ConsumeIntegralInRange<int>(0, 15);
        void* h = nullptr;
        check(api->startEvent(ctx, &h, &d) == ncclSuccess);
        check(h == nullptr || d.type == ncclProfileColl || d.type == ncclProfileP2p ||
              d.type == ncclProfileKernelCh);
        if (h != nullptr && d.type != ncclProfileKernelCh) ops.push_back(h);
        if (h != nullptr && d.type == ncclProfileKernelCh) channels.push_back(h);
        break;
      }
      case 9: {  // a proxy op under an operation, or a proxy step under a proxy op
        Descr d{};
        const bool op = proxyOps.empty() || in.ConsumeBool();
        if (op) {
          if (ops.empty()) break;
          d.type = ncclProfileProxyOp;
          d.parentObj = ops[in.ConsumeIntegralInRange<size_t>(0, ops.size() - 1)];
          d.proxyOp.pid = in.ConsumeBool() ? getpid() : in.ConsumeIntegral<int>();
          d.proxyOp.peer = in.ConsumeIntegralInRange<int>(-2, 9);
          d.proxyOp.isSend = in.ConsumeIntegralInRange<int>(0, 1);
        } else {
          d.type = ncclProfileProxyStep;
          d.parentObj = proxyOps[in.ConsumeIntegralInRange<size_t>(0, proxyOps.size() - 1)];
          d.proxyStep.step = in.ConsumeIntegral<int>();
        }
        void* h = nullptr;
        check(api->startEvent(ctx, &h, &d) == ncclSuccess);
        if (h != nullptr) (op ? proxyOps : steps).push_back(h);
        break;
      }
      case 10: {  // a proxy step's states, then its stop
        if (steps.empty()) break;
        const size_t i = in.ConsumeIntegralInRange<size_t>(0, steps.size() - 1);
        Args a{};
        a.proxyStep.transSize = in.ConsumeIntegral<size_t>();
        const auto state =
            static_cast<ncclProfilerEventState_t>(in.ConsumeIntegralInRange<int>(8, 22));
        check(api->recordEventState(steps[i], state, &a) == ncclSuccess);
        if (in.ConsumeBool()) {
          check(api->stopEvent(steps[i]) == ncclSuccess);
          steps.erase(steps.begin() + static_cast<ptrdiff_t>(i));
        }
        break;
      }
      case 11: {  // a proxy op's stop, once NCCL stopped its steps
        if (proxyOps.empty() || !steps.empty()) break;
        const size_t i = in.ConsumeIntegralInRange<size_t>(0, proxyOps.size() - 1);
        check(api->stopEvent(proxyOps[i]) == ncclSuccess);
        proxyOps.erase(proxyOps.begin() + static_cast<ptrdiff_t>(i));
        break;
      }
      case 7:
        ts_step_end(probe(), step, 0);
        ts_step_begin(probe(), ++step, 0);
        break;
      default:
        check(api->recordEventState(nullptr, ncclProfilerKernelChStop, nullptr) == ncclSuccess);
        check(api->stopEvent(nullptr) == ncclSuccess);
        break;
    }
  }
  // NCCL stops every event it started: steps, then their proxy ops, and channels.
  for (void* h : steps) check(api->stopEvent(h) == ncclSuccess);
  for (void* h : proxyOps) check(api->stopEvent(h) == ncclSuccess);
  for (void* h : channels) check(api->stopEvent(h) == ncclSuccess);
  ts_step_end(probe(), step, 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Proxy steps on (read when the plugin starts, at the first init below).
  static const bool kProxySteps = setenv("TRAINSCOPE_NCCL_PROXY_STEPS", "1", 1) == 0;
  (void)kProxySteps;
  FuzzedDataProvider in(data, size);
  if (in.ConsumeBool()) probe();  // else a later input starts it: first inputs run without
  // Communicators, each through its version's init.
  std::vector<void*> contexts;
  const int version = in.ConsumeIntegralInRange<int>(4, 6);
  const int comms = in.ConsumeIntegralInRange<int>(0, 3);
  for (int i = 0; i < comms; ++i) {
    void* ctx = nullptr;
    int mask = 0;
    const std::string name = in.ConsumeRandomLengthString(80);
    const int nranks = in.ConsumeIntegralInRange<int>(-1, 8);
    const int rank = in.ConsumeIntegralInRange<int>(-1, 8);
    const uint64_t hash = in.ConsumeIntegral<uint64_t>();
    ncclResult_t rc = ncclSuccess;
    if (version == 4) {
      rc = ncclProfiler_v4.init(&ctx, &mask, name.c_str(), hash, 1, nranks, rank, nullptr);
    } else if (version == 5) {
      rc = ncclProfiler_v5.init(&ctx, hash, &mask, name.c_str(), 1, nranks, rank, nullptr);
    } else {
      rc = ncclProfiler_v6.init(&ctx, hash, &mask, name.c_str(), 1, nranks, rank, nullptr);
    }
    check(rc == ncclSuccess);
    check((ctx == nullptr) == (mask == 0));
    contexts.push_back(ctx);
  }
  if (version == 4) {
    drive<ncclProfiler_v4_t, ncclProfilerEventDescr_v4_t, ncclProfilerEventStateArgs_v4_t>(
        in, &ncclProfiler_v4, contexts);
  } else if (version == 5) {
    drive<ncclProfiler_v5_t, ncclProfilerEventDescr_v5_t, ncclProfilerEventStateArgs_v5_t>(
        in, &ncclProfiler_v5, contexts);
  } else {
    drive<ncclProfiler_v6_t, ncclProfilerEventDescr_v6_t, ncclProfilerEventStateArgs_v6_t>(
        in, &ncclProfiler_v6, contexts);
  }
  for (void* ctx : contexts) check(ncclProfiler_v5.finalize(ctx) == ncclSuccess);
  int64_t s[16] = {};
  ts_nccl_profiler_stats(s, 16);
  // ops started >= recorded + pool full + no probe + reclaimed incomplete
  check(s[2] >= s[3] + s[4] + s[5] + s[6]);
  return 0;
}
