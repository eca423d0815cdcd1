// A harness that drives libnccl-profiler-trainscope.so exactly as NCCL does (the built .so,
// dlopen'ed; each interface version's struct and init signature; the event sequences of
// NCCL's src/plugin/profiler.cc and src/transport/profiler.cc) and checks what reaches a
// probe linked into this program: its folded step reports. The plugin finds that probe
// through the program's exported ts_* symbols, as it would a probe linked into a C++ job.
//
// The fake GPU's timer runs kGpuBehindNs behind the host clock, and every GPU time handed to
// the plugin is taken when the call is made (a GPU time is always in the past by the time the
// proxy thread reports it), so the plugin's offset estimate settles within microseconds of
// kGpuBehindNs.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nccl/profiler.h>
#include <catch2/catch.hpp>

#include "agent/probe/runtime.h"
#include "agent/probe/trainscope_probe.h"
#include "tests/common/support.h"

namespace {

constexpr int64_t kGpuBehindNs = 1'000'000'000;
constexpr uint32_t kPool = 8;  // TRAINSCOPE_NCCL_POOL for this process
constexpr int kMask = ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh;

uint64_t gpuNow() {
  return static_cast<uint64_t>(ts_now_ns() - kGpuBehindNs);
}

// The plugin, loaded once for the whole process as NCCL loads it.
struct Plugin {
  void* lib = nullptr;
  ncclProfiler_v4_t* v4 = nullptr;
  ncclProfiler_v5_t* v5 = nullptr;
  ncclProfiler_v6_t* v6 = nullptr;
  int (*stats)(int64_t*, int) = nullptr;

  static Plugin& get() {
    static Plugin p = [] {
      Plugin q;
      setenv("TRAINSCOPE_NCCL_POOL", std::to_string(kPool).c_str(), 1);
      const char* path = std::getenv("TRAINSCOPE_NCCL_PLUGIN");
      REQUIRE(path != nullptr);
      q.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      INFO(dlerror());
      REQUIRE(q.lib != nullptr);
      q.v4 = static_cast<ncclProfiler_v4_t*>(dlsym(q.lib, "ncclProfiler_v4"));
      q.v5 = static_cast<ncclProfiler_v5_t*>(dlsym(q.lib, "ncclProfiler_v5"));
      q.v6 = static_cast<ncclProfiler_v6_t*>(dlsym(q.lib, "ncclProfiler_v6"));
      q.stats = reinterpret_cast<int (*)(int64_t*, int)>(dlsym(q.lib, "ts_nccl_profiler_stats"));
      return q;
    }();
    return p;
  }
  // ts_nccl_profiler_stats, by name.
  int64_t stat(int i) const {
    int64_t out[16] = {};
    stats(out, 16);
    return out[i];
  }
};
enum Stat { kComms, kCommsNoProbe, kOps, kRecorded, kPoolFull, kNoProbe, kIncomplete, kUnknown };

std::vector<std::string> gLog;
void logger(ncclDebugLogLevel, unsigned long, const char*, int, const char* fmt, ...) {
  gLog.emplace_back(fmt);
}

// The default probe (fold only, rank 0 of 4) and the reports it folds.
struct Probe {
  ts_probe* p = nullptr;
  std::mutex mu;
  std::vector<trainscope::wire::StepReport> reports;  // guarded by mu

  static Probe& get() {
    static Probe* probe = [] {
      auto* q = new Probe;
      ts_probe_config c;
      ts_config_init(&c);
      c.job = "nccl-plugin-test";
      c.rank = 0;
      c.world_size = 4;
      c.connect_agent = 1;
      REQUIRE(ts_init(&c) == 0);
      q->p = ts_default();
      reinterpret_cast<trainscope::probe::Instance*>(q->p)->setOnReport(
          [q](const trainscope::wire::StepReport& r) {
            std::lock_guard<std::mutex> lock(q->mu);
            q->reports.push_back(r);
          });
      return q;
    }();
    return *probe;
  }
  // The report of `step`, after folding what was recorded.
  trainscope::wire::StepReport report(int64_t step) {
    ts_probe_flush(p, 5000);
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& r : reports) {
      if (r.step() == step) return r;
    }
    FAIL("no report for step " << step);
    return {};
  }
};

// Catch2's assertions are not thread-safe: a call that fails on another thread (NCCL's proxy)
// is counted here, and the test checks the count once it joined that thread.
const std::thread::id kTestThread = std::this_thread::get_id();
std::atomic<int> gOffThreadFailures{0};

void must(bool ok) {
  if (std::this_thread::get_id() == kTestThread) {
    REQUIRE(ok);
  } else if (!ok) {
    gOffThreadFailures.fetch_add(1);
  }
}

// One interface version as NCCL drives it: the descriptor type differs per version, the calls
// are the same.
template <class Api, class Descr, class Args>
struct Driver {
  Api* api;
  void* ctx = nullptr;

  int init(uint64_t hash, const char* name, int nranks, int rank);

  void* start(Descr d) {
    void* h = reinterpret_cast<void*>(0x1);  // NCCL does not clear it; the plugin must
    must(api->startEvent(ctx, &h, &d) == ncclSuccess);
    return h;
  }
  void* coll(const char* func, size_t count, const char* dtype, uint64_t seq, uint8_t channels) {
    Descr d{};
    d.type = ncclProfileColl;
    d.coll.seqNumber = seq;
    d.coll.func = func;
    d.coll.count = count;
    d.coll.datatype = dtype;
    d.coll.nChannels = channels;
    d.coll.algo = "RING";
    d.coll.proto = "SIMPLE";
    return start(d);
  }
  void* p2p(const char* func, size_t count, int peer, uint8_t channels) {
    Descr d{};
    d.type = ncclProfileP2p;
    d.p2p.func = func;
    d.p2p.count = count;
    d.p2p.datatype = "ncclBfloat16";
    d.p2p.peer = peer;
    d.p2p.nChannels = channels;
    return start(d);
  }
  void* channelStart(void* parent, uint8_t ch, uint64_t pTimer) {
    Descr d{};
    d.type = ncclProfileKernelCh;
    d.parentObj = parent;
    d.kernelCh.channelId = ch;
    d.kernelCh.pTimer = pTimer;
    return start(d);
  }
  // ncclProfilerStopKernelChEvent: the state with the stop time, then the stop.
  void channelStop(void* h, uint64_t pTimer) {
    Args a{};
    a.kernelCh.pTimer = pTimer;
    must(api->recordEventState(h, ncclProfilerKernelChStop, &a) == ncclSuccess);
    must(api->stopEvent(h) == ncclSuccess);
  }
  void stop(void* h) { must(api->stopEvent(h) == ncclSuccess); }
};

using V4 = Driver<ncclProfiler_v4_t, ncclProfilerEventDescr_v4_t, ncclProfilerEventStateArgs_v4_t>;
using V5 = Driver<ncclProfiler_v5_t, ncclProfilerEventDescr_v5_t, ncclProfilerEventStateArgs_v5_t>;
using V6 = Driver<ncclProfiler_v6_t, ncclProfilerEventDescr_v6_t, ncclProfilerEventStateArgs_v6_t>;

template <>
int V4::init(uint64_t hash, const char* name, int nranks, int rank) {
  int mask = -1;
  REQUIRE(api->init(&ctx, &mask, name, hash, 1, nranks, rank, logger) == ncclSuccess);
  return mask;
}
template <>
int V5::init(uint64_t hash, const char* name, int nranks, int rank) {
  int mask = -1;
  REQUIRE(api->init(&ctx, hash, &mask, name, 1, nranks, rank, logger) == ncclSuccess);
  return mask;
}
template <>
int V6::init(uint64_t hash, const char* name, int nranks, int rank) {
  int mask = -1;
  REQUIRE(api->init(&ctx, hash, &mask, name, 1, nranks, rank, logger) == ncclSuccess);
  return mask;
}

const trainscope::wire::CollectiveTotal* find(const trainscope::wire::StepReport& r, int op) {
  for (const auto& c : r.collectives()) {
    if (c.op() == op) return &c;
  }
  return nullptr;
}

// group -> collective -> two kernel channels whose stops come in the other order, the host's
// stop of the collective between the channel starts (it only means "enqueued").
template <class D>
void oneAllReduce(D& d, int64_t step, uint64_t seq) {
  Probe& probe = Probe::get();
  ts_step_begin(probe.p, step, 0);
  const int64_t hostStart = ts_now_ns();
  ts_collective(probe.p, TS_COLL_ALL_REDUCE, ts_intern("world"), 4096, hostStart, 0);
  void* h = d.coll("AllReduce", 1024, "ncclFloat32", seq, 2);
  REQUIRE(h != nullptr);
  const uint64_t s0 = gpuNow();
  void* c0 = d.channelStart(h, 0, s0);
  d.stop(h);
  std::this_thread::sleep_for(std::chrono::microseconds(200));
  const uint64_t s1 = gpuNow();
  void* c1 = d.channelStart(h, 1, s1);
  REQUIRE(c0 != nullptr);
  REQUIRE(c1 != nullptr);
  std::this_thread::sleep_for(std::chrono::microseconds(300));
  const uint64_t e1 = gpuNow();
  d.channelStop(c1, e1);
  std::this_thread::sleep_for(std::chrono::microseconds(100));
  const uint64_t e0 = gpuNow();
  d.channelStop(c0, e0);
  ts_step_end(probe.p, step, 0);

  const auto rep = probe.report(step);
  const auto* c = find(rep, TS_COLL_ALL_REDUCE);
  REQUIRE(c != nullptr);
  CHECK(c->device_timed());
  CHECK(c->group() == "world");
  CHECK(c->bytes() == 4096);
  CHECK(c->count() == 1);
  // Earliest channel start to latest stop, on the GPU's own timer: exact.
  CHECK(c->total_ns() == static_cast<int64_t>(std::max(e0, e1) - std::min(s0, s1)));
  // On the probe's clock: where the host saw it start, within the callbacks' delays.
  const int64_t start = c->first_arrival_ns();
  CHECK(start >= hostStart - 1'000);
  CHECK(start - static_cast<int64_t>(s0 + kGpuBehindNs) < 1'000'000);
  CHECK(c->host_count() == 1);
  CHECK(c->first_seq() == seq);
  CHECK(c->last_seq() == seq);
  CHECK(c->algorithm() == "ring");
  CHECK(c->protocol() == "simple");
  CHECK(c->datatype() == "float32");
  CHECK(c->channels() == 2);
  CHECK(rep.device_comm_ns() == c->total_ns());
}

}  // namespace

// Test cases run in the order written: the first one runs before any probe exists.
TEST_CASE("plugin / before the probe starts, operations are counted and reported once it does") {
  Plugin& pl = Plugin::get();
  REQUIRE(pl.v4 != nullptr);
  REQUIRE(pl.v5 != nullptr);
  REQUIRE(pl.v6 != nullptr);
  REQUIRE(pl.stats != nullptr);
  CHECK(std::string(pl.v4->name) == "trainscope");
  REQUIRE(ts_default_existing() == nullptr);
  V5 d{pl.v5};
  CHECK(d.init(0x77, "early", 4, 0) == kMask);
  void* h = d.coll("AllReduce", 8, "ncclFloat32", 0, 1);
  REQUIRE(h != nullptr);
  d.stop(h);
  d.channelStop(d.channelStart(h, 0, gpuNow()), gpuNow());
  CHECK(pl.stat(kNoProbe) == 1);

  Probe& probe = Probe::get();
  ts_step_begin(probe.p, 1, 0);
  void* h2 = d.coll("AllReduce", 8, "ncclFloat32", 1, 1);
  d.channelStop(d.channelStart(h2, 0, gpuNow()), gpuNow());
  d.stop(h2);  // the channel done before the host's stop: completes here
  ts_step_end(probe.p, 1, 0);
  const auto rep = probe.report(1);
  CHECK(rep.device_dropped() == 1);
  const auto* c = find(rep, TS_COLL_ALL_REDUCE);
  REQUIRE(c != nullptr);
  CHECK(c->device_timed());
  // The communicator came up before the probe: named when its first operation completed.
  // Four ranks in a world of four: the world.
  CHECK(c->group() == "world");
  CHECK(c->host_count() == 0);
}

TEST_CASE(
    "plugin / each version's init and events: a two-channel all-reduce reaches the report "
    "with its device time") {
  Plugin& pl = Plugin::get();
  V4 d4{pl.v4};
  CHECK(d4.init(0x1004, "world4", 4, 0) == kMask);
  oneAllReduce(d4, 10, 40);
  V5 d5{pl.v5};
  CHECK(d5.init(0x1005, "world5", 4, 0) == kMask);
  oneAllReduce(d5, 11, 50);
  V6 d6{pl.v6};
  CHECK(d6.init(0x1006, "world6", 4, 0) == kMask);
  oneAllReduce(d6, 12, 60);
  REQUIRE(pl.v6->finalize(d6.ctx) == ncclSuccess);
}

TEST_CASE(
    "plugin / a communicator maps to the declared group with its ranks; p2p peers become "
    "global ranks; bytes count as the host counts them") {
  Plugin& pl = Plugin::get();
  Probe& probe = Probe::get();
  const int32_t pp[] = {0, 3};
  ts_declare_group(probe.p, ts_intern("pp"), TS_GROUP_PP, pp, 2);
  V5 d{pl.v5};
  REQUIRE(d.init(0x2002, "", 2, 0) == kMask);
  V5 other{pl.v5};
  REQUIRE(other.init(0xabcdef, "", 3, 1) == kMask);  // no such group: named by its hash

  ts_step_begin(probe.p, 20, 0);
  void* send = d.p2p("Send", 500, 1, 1);
  void* ch = d.channelStart(send, 0, gpuNow());
  d.channelStop(ch, gpuNow());
  d.stop(send);
  void* ag = d.coll("AllGather", 100, "ncclBfloat16", 9, 1);
  d.stop(ag);
  d.channelStop(d.channelStart(ag, 0, gpuNow()), gpuNow());
  void* bc = other.coll("Broadcast", 10, "ncclInt64", 3, 1);
  other.stop(bc);
  other.channelStop(other.channelStart(bc, 0, gpuNow()), gpuNow());
  ts_step_end(probe.p, 20, 0);

  const auto rep = probe.report(20);
  REQUIRE(rep.p2p_size() == 1);
  CHECK(rep.p2p(0).peer() == 3);
  CHECK(rep.p2p(0).group() == "pp");
  CHECK(rep.p2p(0).op() == trainscope::wire::SEND);
  CHECK(rep.p2p(0).bytes() == 1000);
  CHECK(rep.p2p(0).device_timed());
  const auto* g = find(rep, TS_COLL_ALL_GATHER);
  REQUIRE(g != nullptr);
  CHECK(g->group() == "pp");
  CHECK(g->bytes() == uint64_t{100} * 2 * 2);  // the gathered output: nranks x count x 2 bytes
  CHECK(g->datatype() == "bfloat16");
  const auto* b = find(rep, TS_COLL_BROADCAST);
  REQUIRE(b != nullptr);
  CHECK(b->group() == "nccl-0000000000abcdef");
  CHECK(b->bytes() == 80);
}

TEST_CASE("plugin / an operation waits for every channel NCCL announced, whatever the order") {
  Plugin& pl = Plugin::get();
  Probe& probe = Probe::get();
  V6 d{pl.v6};
  REQUIRE(d.init(0x3003, "", 4, 0) == kMask);
  const int64_t recorded = pl.stat(kRecorded);
  ts_step_begin(probe.p, 30, 0);
  void* h = d.coll("ReduceScatter", 64, "ncclFloat16", 5, 3);
  void* c0 = d.channelStart(h, 0, gpuNow());
  d.channelStop(c0, gpuNow());
  d.stop(h);
  CHECK(pl.stat(kRecorded) == recorded);  // one of three channels: not done
  void* c2 = d.channelStart(h, 2, gpuNow());
  void* c1 = d.channelStart(h, 1, gpuNow());
  d.channelStop(c2, gpuNow());
  CHECK(pl.stat(kRecorded) == recorded);
  d.channelStop(c1, gpuNow());
  CHECK(pl.stat(kRecorded) == recorded + 1);
  ts_step_end(probe.p, 30, 0);
  const auto rep = probe.report(30);
  const auto* c = find(rep, TS_COLL_REDUCE_SCATTER);
  REQUIRE(c != nullptr);
  CHECK(c->count() == 1);
  CHECK(c->bytes() == uint64_t{64} * 2 * 4);  // the input: nranks x count x 2 bytes
  CHECK(c->channels() == 3);
}

TEST_CASE("plugin / a full pool drops and counts operations, reports them, and refills") {
  Plugin& pl = Plugin::get();
  Probe& probe = Probe::get();
  V5 d{pl.v5};
  REQUIRE(d.init(0x4004, "", 4, 0) == kMask);
  const int64_t full = pl.stat(kPoolFull);
  ts_step_begin(probe.p, 40, 0);
  std::vector<void*> inFlight;
  for (uint32_t i = 0; i < kPool; ++i) {
    void* h = d.coll("AllReduce", 256, "ncclFloat32", 100 + i, 1);
    REQUIRE(h != nullptr);
    d.stop(h);
    inFlight.push_back(h);
  }
  // The ninth in flight: no handle, so NCCL sends nothing more for it; counted.
  void* dropped = d.coll("AllReduce", 256, "ncclFloat32", 200, 1);
  CHECK(dropped == nullptr);
  CHECK(d.channelStart(dropped, 0, gpuNow()) == nullptr);
  CHECK(pl.stat(kPoolFull) == full + 1);
  for (void* h : inFlight) d.channelStop(d.channelStart(h, 0, gpuNow()), gpuNow());
  // Slots are back.
  void* again = d.coll("AllReduce", 256, "ncclFloat32", 201, 1);
  REQUIRE(again != nullptr);
  d.stop(again);
  d.channelStop(d.channelStart(again, 0, gpuNow()), gpuNow());
  ts_step_end(probe.p, 40, 0);
  const auto rep = probe.report(40);
  CHECK(rep.device_dropped() == 1);
  const auto* c = find(rep, TS_COLL_ALL_REDUCE);
  REQUIRE(c != nullptr);
  CHECK(c->count() == kPool + 1);
  CHECK(c->first_seq() == 100);
  CHECK(c->last_seq() == 201);
}

TEST_CASE("plugin / events it does not keep get no handle and every call on them is harmless") {
  Plugin& pl = Plugin::get();
  V5 d{pl.v5};
  REQUIRE(d.init(0x5005, "", 4, 0) == kMask);
  for (uint64_t type :
       {uint64_t{ncclProfileGroup}, uint64_t{ncclProfileGroupApi}, uint64_t{ncclProfileCollApi},
        uint64_t{ncclProfileP2pApi}, uint64_t{ncclProfileKernelLaunch},
        uint64_t{ncclProfileProxyOp}, uint64_t{ncclProfileProxyCtrl}, uint64_t{1} << 40}) {
    ncclProfilerEventDescr_v5_t e{};
    e.type = type;
    void* h = reinterpret_cast<void*>(0x1);
    REQUIRE(pl.v5->startEvent(d.ctx, &h, &e) == ncclSuccess);
    CHECK(h == nullptr);
  }
  // A kernel channel whose parent NCCL lost (its own pool ran out), calls with NULL.
  const int64_t unknown = pl.stat(kUnknown);
  CHECK(d.channelStart(nullptr, 0, gpuNow()) == nullptr);
  CHECK(pl.stat(kUnknown) == unknown + 1);
  CHECK(pl.v5->stopEvent(nullptr) == ncclSuccess);
  CHECK(pl.v5->recordEventState(nullptr, ncclProfilerKernelChStop, nullptr) == ncclSuccess);
  CHECK(pl.v5->startEvent(d.ctx, nullptr, nullptr) == ncclSuccess);
  // A communicator the plugin keeps nothing for (NULL context): no handles.
  void* h = reinterpret_cast<void*>(0x1);
  ncclProfilerEventDescr_v5_t e{};
  e.type = ncclProfileColl;
  e.coll.func = "AllReduce";
  REQUIRE(pl.v5->startEvent(nullptr, &h, &e) == ncclSuccess);
  CHECK(h == nullptr);
  CHECK(pl.v5->finalize(nullptr) == ncclSuccess);
}

TEST_CASE(
    "plugin / the enqueuing and the proxy thread race to end each operation, and each is "
    "recorded once") {
  Plugin& pl = Plugin::get();
  Probe& probe = Probe::get();
  V5 d{pl.v5};
  REQUIRE(d.init(0x6006, "", 4, 0) == kMask);
  const int64_t recorded = pl.stat(kRecorded);
  const int64_t incomplete = pl.stat(kIncomplete);
  constexpr int kOps = 2000;
  std::mutex mu;
  std::vector<void*> queue;  // guarded by mu
  std::atomic<int> done{0};
  ts_step_begin(probe.p, 60, 0);
  std::thread proxy([&] {
    for (int n = 0; n < kOps;) {
      void* h = nullptr;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!queue.empty()) {
          h = queue.front();
          queue.erase(queue.begin());
        }
      }
      if (h == nullptr) {
        std::this_thread::yield();
        continue;
      }
      // NCCL's proxy: the channel may start before or after the host's stop below.
      d.channelStop(d.channelStart(h, 0, gpuNow()), gpuNow());
      done.fetch_add(1);
      ++n;
    }
  });
  for (int i = 0; i < kOps; ++i) {
    while (i - done.load() >= static_cast<int>(kPool) - 2) std::this_thread::yield();
    void* h = d.coll("AllReduce", 16, "ncclFloat32", static_cast<uint64_t>(i), 1);
    REQUIRE(h != nullptr);
    {
      std::lock_guard<std::mutex> lock(mu);
      queue.push_back(h);
    }
    d.stop(h);  // "enqueued": races with the proxy thread's channel stop
  }
  proxy.join();
  CHECK(gOffThreadFailures.load() == 0);
  ts_step_end(probe.p, 60, 0);
  CHECK(pl.stat(kRecorded) == recorded + kOps);
  CHECK(pl.stat(kIncomplete) == incomplete);
  const auto rep = probe.report(60);
  const auto* c = find(rep, TS_COLL_ALL_REDUCE);
  REQUIRE(c != nullptr);
  CHECK(c->count() == kOps);
}

TEST_CASE(
    "plugin / with TRAINSCOPE_NCCL_PROXY_STEPS=1 a send's proxy steps become link "
    "transfers to the peer's global rank; receives and other processes' ops are skipped") {
  // The setting is read when the plugin is loaded; this process's plugin has it off.
  Plugin& pl = Plugin::get();
  Probe& probe = Probe::get();
  V5 off{pl.v5};
  CHECK(off.init(0x7007, "", 4, 0) == kMask);  // off by default: no proxy events asked for
  // The same library loaded under another name is a second plugin with its own state.
  setenv("TRAINSCOPE_NCCL_PROXY_STEPS", "1", 1);
  // A copy (another file: the loader would hand back the loaded one for the same file).
  trainscope::tests::TempDir dir;
  const std::string copy = dir.sub("libnccl-profiler-copy.so");
  std::filesystem::copy_file(std::getenv("TRAINSCOPE_NCCL_PLUGIN"), copy);
  void* lib = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
  INFO(copy);
  REQUIRE(lib != nullptr);
  auto* api = static_cast<ncclProfiler_v5_t*>(dlsym(lib, "ncclProfiler_v5"));
  REQUIRE(api != nullptr);
  V5 d{api};
  // The plugin starts at NCCL's first init, and reads the variable then.
  REQUIRE(d.init(0x7008, "", 4, 0) == (kMask | ncclProfileProxyOp | ncclProfileProxyStep));
  unsetenv("TRAINSCOPE_NCCL_PROXY_STEPS");

  ts_step_begin(probe.p, 70, 0);
  void* h = d.coll("AllReduce", 1024, "ncclFloat32", 1, 1);
  auto proxyOp = [&](int peer, int isSend, pid_t pid) {
    ncclProfilerEventDescr_v5_t e{};
    e.type = ncclProfileProxyOp;
    e.parentObj = h;
    e.proxyOp.pid = pid;
    e.proxyOp.peer = peer;
    e.proxyOp.isSend = isSend;
    e.proxyOp.nSteps = 2;
    return d.start(e);
  };
  void* send = proxyOp(1, 1, getpid());
  REQUIRE(send != nullptr);
  CHECK(proxyOp(1, 0, getpid()) == nullptr);      // a receive
  CHECK(proxyOp(1, 1, getpid() + 1) == nullptr);  // PXN: another process's op
  for (int step = 0; step < 2; ++step) {
    ncclProfilerEventDescr_v5_t e{};
    e.type = ncclProfileProxyStep;
    e.parentObj = send;
    e.proxyStep.step = step;
    void* s = d.start(e);
    REQUIRE(s != nullptr);
    ncclProfilerEventStateArgs_v5_t a{};
    a.proxyStep.transSize = 0;
    REQUIRE(api->recordEventState(s, ncclProfilerProxyStepSendGPUWait, &a) == ncclSuccess);
    a.proxyStep.transSize = 65536;
    REQUIRE(api->recordEventState(s, ncclProfilerProxyStepSendWait, &a) == ncclSuccess);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    d.stop(s);
  }
  d.stop(send);
  d.stop(h);
  d.channelStop(d.channelStart(h, 0, gpuNow()), gpuNow());
  ts_step_end(probe.p, 70, 0);
  const auto rep = probe.report(70);
  REQUIRE(rep.links_size() == 1);
  CHECK(rep.links(0).peer() == 1);  // the world: communicator rank 1 is global rank 1
  CHECK(rep.links(0).group() == "world");
  CHECK(rep.links(0).bytes() == uint64_t{2} * 65536);
  CHECK(rep.links(0).transfers() == 2);
  CHECK(rep.links(0).wire_ns() >= int64_t{2} * 100'000);
}
