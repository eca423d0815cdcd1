// The C ABI (trainscope_probe.h). Record calls are the hot path: find the calling thread's
// ring for the instance through a thread slot, claim a record, fill it, publish it.
#include "agent/probe/trainscope_probe.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "agent/probe/capture.h"
#include "agent/probe/cpu_wait.h"
#include "agent/probe/intern.h"
#include "agent/probe/runtime.h"
#include "agent/probe/stack_provider.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/thread_annotations.h"

using trainscope::probe::Instance;
using trainscope::probe::Record;
using trainscope::probe::RecordType;
using trainscope::probe::Ring;
using trainscope::probe::Runtime;

namespace {

// Thread slots index Instance::slots_, so the hot path finds its ring with two loads. A slot
// is returned when its thread exits and the next thread inherits its rings (the old producer
// is gone, so each ring still has one producer at a time).
trainscope::Mutex gSlotMu;
std::vector<int> gFreeSlots GUARDED_BY(gSlotMu);
int gNextSlot GUARDED_BY(gSlotMu) = 0;

// -1: not assigned yet; -2: no slot left (the thread uses Instance's thread-local map).
// initial-exec keeps the access a single load, in libtrainscope_probe.so too.
__attribute__((tls_model("initial-exec"))) thread_local int tSlot = -1;

struct SlotOwner {
  int slot = -1;
  ~SlotOwner() {
    if (slot < 0) return;
    trainscope::MutexLock lock(&gSlotMu);
    gFreeSlots.push_back(slot);
  }
};
thread_local SlotOwner tSlotOwner;

thread_local std::string tLastError;

[[gnu::noinline]] Ring* slowRing(Instance* inst) {
  if (tSlot == -1) {
    trainscope::MutexLock lock(&gSlotMu);
    if (!gFreeSlots.empty()) {
      tSlot = gFreeSlots.back();
      gFreeSlots.pop_back();
    } else if (gNextSlot < trainscope::probe::kMaxThreadSlots) {
      tSlot = gNextSlot++;
    } else {
      tSlot = -2;
    }
    if (tSlot >= 0) tSlotOwner.slot = tSlot;
  }
  if (tSlot >= 0) {
    if (Ring* r = inst->ringAt(tSlot)) return r;
  }
  return inst->registerRing(tSlot >= 0 ? tSlot : -1);
}

inline Ring* ringOf(ts_probe* probe) {
  auto* inst = reinterpret_cast<Instance*>(probe);
  const int slot = tSlot;
  if (slot >= 0) [[likely]] {
    if (Ring* r = inst->ringAt(slot)) [[likely]]
      return r;
  }
  return slowRing(inst);
}

inline int64_t orNow(int64_t t) {
  return t != 0 ? t : trainscope::wallNowNs();
}

// A step mark's t1: the calling thread's run delay (cpu_wait.h) when the mark is live (no time
// given, or one within kLiveMarkNs of now: `trainscope run` passes the time it just took), so
// the delay between two marks is the step's; -1 for marks of another time (replays).
constexpr int64_t kLiveMarkNs = 5'000'000;
inline int64_t runDelayAt(int64_t tNs, int64_t t) {
  if (tNs != 0) {
    const int64_t away = t - trainscope::wallNowNs();
    if (away > kLiveMarkNs || away < -kLiveMarkNs) return -1;
  }
  return trainscope::probe::threadRunDelayNs();
}

// Claims a slot on the calling thread's ring; nullptr when the probe is NULL or the ring is
// full (counted there).
inline Record* claim(ts_probe* probe, Ring** ring) {
  if (probe == nullptr) [[unlikely]]
    return nullptr;
  Ring* r = ringOf(probe);
  if (r == nullptr) [[unlikely]]
    return nullptr;
  *ring = r;
  return r->claim();
}

inline void fill(Record* rec, RecordType type, uint8_t kind, uint32_t name, uint32_t group,
                 int64_t step, int64_t t0, int64_t t1, uint64_t bytes) {
  rec->type = type;
  rec->kind = kind;
  rec->reserved = 0;
  rec->name = name;
  rec->group = group;
  rec->ring = 0;
  rec->step = step;
  rec->t0 = t0;
  rec->t1 = t1;
  rec->bytes = bytes;
  rec->seq = 0;
  rec->info = 0;
  rec->pad = 0;
}

trainscope::Mutex gDefaultMu;  // creates and replaces gDefault one caller at a time
std::atomic<Instance*> gDefault{nullptr};
std::once_flag gAtExitOnce;

void atExit() {
  // A forked child (a DataLoader worker) has no runtime thread; locks may be held by threads
  // that stayed in the parent. Touch nothing.
  if (Runtime::get().forked()) return;
  // Never hold the exit for long: a short wait for the goodbye's ack (exitWaitMs says when).
  if (gDefault.load() != nullptr) ts_shutdown(ts_exit_wait_ms());
  Runtime::get().stop();
}

Instance* createInstance(const ts_probe_config* config) {
  std::call_once(gAtExitOnce, [] { std::atexit(atExit); });
  auto resolved = trainscope::probe::resolveConfig(config);
  if (!resolved) {
    tLastError = resolved.message();
    trainscope::logError("probe", "invalid probe configuration: " + tLastError);
    return nullptr;
  }
  auto* inst = new (std::nothrow) Instance(std::move(*resolved));
  if (inst == nullptr) {
    tLastError = "out of memory";
    return nullptr;
  }
  if (trainscope::Status s = Runtime::get().add(inst); !s) {
    tLastError = s.message();
    trainscope::logError("probe", "cannot start the probe: " + tLastError);
    delete inst;
    return nullptr;
  }
  tLastError.clear();
  return inst;
}

}  // namespace

extern "C" {

// The C ABI keeps the header's ts_snake_case names (docs/STYLE.md).
// NOLINTBEGIN(readability-identifier-naming)

void ts_config_init(ts_probe_config* config) {
  if (config == nullptr) return;
  *config = ts_probe_config{};
  config->rank = -1;
  config->world_size = 0;
  config->local_rank = -1;
}

ts_probe* ts_probe_create(const ts_probe_config* config) {
  try {
    return reinterpret_cast<ts_probe*>(createInstance(config));
  } catch (const std::exception& e) {
    tLastError = e.what();
    return nullptr;
  }
}

void ts_probe_destroy(ts_probe* probe, int32_t timeout_ms) {
  if (probe == nullptr) return;
  auto* inst = reinterpret_cast<Instance*>(probe);
  try {
    Runtime::get().remove(inst, timeout_ms);
  } catch (const std::exception& e) {
    trainscope::logOnce(trainscope::LogLevel::kError, "probe", "destroy",
                        std::string("probe destroy failed: ") + e.what());
    return;  // leak rather than free something the runtime may still touch
  }
  delete inst;
}

ts_probe* ts_default(void) {
  if (Instance* d = gDefault.load(std::memory_order_acquire)) return reinterpret_cast<ts_probe*>(d);
  trainscope::MutexLock lock(&gDefaultMu);
  if (Instance* d = gDefault.load()) return reinterpret_cast<ts_probe*>(d);
  Instance* d = createInstance(nullptr);
  if (d == nullptr) {
    // "Never NULL": fall back to rank 0 of 1 and, failing that, a fold-only probe.
    ts_probe_config c;
    ts_config_init(&c);
    c.rank = 0;
    c.world_size = 1;
    c.local_rank = 0;
    d = createInstance(&c);
    if (d == nullptr) {
      const std::string endpoint = trainscope::defaultProbeEndpoint();
      c.agent_endpoint = endpoint.c_str();
      c.connect_agent = 1;
      d = createInstance(&c);
    }
  }
  gDefault.store(d, std::memory_order_release);
  return reinterpret_cast<ts_probe*>(d);
}

int32_t ts_init(const ts_probe_config* config) {
  trainscope::MutexLock lock(&gDefaultMu);
  if (gDefault.load() != nullptr) {
    tLastError = "the default probe already exists (ts_init after ts_default or ts_init)";
    return -1;
  }
  Instance* d = nullptr;
  try {
    d = createInstance(config);
  } catch (const std::exception& e) {
    tLastError = e.what();
  }
  if (d == nullptr) return -1;
  gDefault.store(d, std::memory_order_release);
  return 0;
}

void ts_shutdown(int32_t timeout_ms) {
  Instance* d = nullptr;
  {
    trainscope::MutexLock lock(&gDefaultMu);
    d = gDefault.exchange(nullptr);
  }
  ts_probe_destroy(reinterpret_cast<ts_probe*>(d), timeout_ms);
}

int32_t ts_exit_wait_ms(void) {
  Instance* d = gDefault.load();
  if (d == nullptr) return 0;
  ts_probe_stats st;
  d->stats(&st);
  return trainscope::probe::exitWaitMs(st);
}

ts_name ts_intern(const char* name) {
  if (name == nullptr) return 0;
  try {
    return trainscope::probe::internName(name);
  } catch (...) {
    return 0;
  }
}

const char* ts_name_str(ts_name name) {
  return trainscope::probe::nameString(name);
}

int64_t ts_now_ns(void) {
  return trainscope::wallNowNs();
}

void ts_step_begin(ts_probe* probe, int64_t step, int64_t t_ns) {
  Ring* ring = nullptr;
  if (Record* rec = claim(probe, &ring)) {
    const int64_t t = orNow(t_ns);
    fill(rec, RecordType::kStepBegin, 0, 0, 0, step, t, runDelayAt(t_ns, t), 0);
    ring->publish();
  }
}

void ts_step_end(ts_probe* probe, int64_t step, int64_t t_ns) {
  Ring* ring = nullptr;
  if (Record* rec = claim(probe, &ring)) {
    const int64_t t = orNow(t_ns);
    fill(rec, RecordType::kStepEnd, 0, 0, 0, step, t, runDelayAt(t_ns, t), 0);
    ring->publish();
  }
}

void ts_range_push(ts_probe* probe, ts_name name, uint32_t kind, int64_t t_ns) {
  Ring* ring = nullptr;
  if (Record* rec = claim(probe, &ring)) {
    fill(rec, RecordType::kRangePush, static_cast<uint8_t>(kind), name, 0, 0, orNow(t_ns), 0, 0);
    ring->publish();
  }
}

void ts_range_pop(ts_probe* probe, int64_t t_ns) {
  Ring* ring = nullptr;
  if (Record* rec = claim(probe, &ring)) {
    fill(rec, RecordType::kRangePop, 0, 0, 0, 0, orNow(t_ns), 0, 0);
    ring->publish();
  }
}

void ts_range(ts_probe* probe, ts_name name, uint32_t kind, int64_t start_ns, int64_t end_ns) {
  Ring* ring = nullptr;
  if (Record* rec = claim(probe, &ring)) {
    fill(rec, RecordType::kRange, static_cast<uint8_t>(kind), name, 0, 0, orNow(start_ns),
         orNow(end_ns), 0);
    ring->publish();
  }
}

void ts_op(ts_probe* probe, ts_name name, int64_t start_ns, int64_t duration_ns) {
  Ring* ring = nullptr;
  if (Record* rec = claim(probe, &ring)) {
    const int64_t t0 = orNow(start_ns);
    fill(rec, RecordType::kOp, 0, name, 0, 0, t0, t0 + duration_ns, 0);
    ring->publish();
  }
}

void ts_collective(ts_probe* probe, uint32_t op, ts_name group, uint64_t bytes, int64_t arrive_ns,
                   int64_t complete_ns) {
  Ring* ring = nullptr;
  if (Record* rec = claim(probe, &ring)) {
    fill(rec, RecordType::kCollective, static_cast<uint8_t>(op), 0, group, 0, orNow(arrive_ns),
         orNow(complete_ns), bytes);
    ring->publish();
  }
}

void ts_collective_begin(ts_probe* probe, uint32_t op, ts_name group, uint64_t bytes,
                         int64_t t_ns) {
  Ring* ring = nullptr;
  if (Record* rec = claim(probe, &ring)) {
    fill(rec, RecordType::kCollBegin, static_cast<uint8_t>(op), 0, group, 0, orNow(t_ns), 0, bytes);
    ring->publish();
  }
}

void ts_collective_end(ts_probe* probe, int64_t t_ns) {
  Ring* ring = nullptr;
  if (Record* rec = claim(probe, &ring)) {
    fill(rec, RecordType::kCollEnd, 0, 0, 0, 0, orNow(t_ns), 0, 0);
    ring->publish();
  }
}

void ts_wait_hint(ts_probe* probe, int64_t since_ns) {
  Ring* ring = nullptr;
  if (Record* rec = claim(probe, &ring)) {
    fill(rec, RecordType::kWaitHint, 0, 0, 0, 0, std::max<int64_t>(0, since_ns), 0, 0);
    ring->publish();
  }
}

void ts_link_transfer(ts_probe* probe, ts_name group, uint32_t peer, uint64_t bytes,
                      int64_t posted_ns, int64_t delivered_ns) {
  Ring* ring = nullptr;
  if (Record* rec = claim(probe, &ring)) {
    fill(rec, RecordType::kLink, 0, peer, group, 0, orNow(posted_ns), orNow(delivered_ns), bytes);
    ring->publish();
  }
}

void ts_declare_group(ts_probe* probe, ts_name group, uint32_t kind, const int32_t* ranks,
                      int32_t count) {
  if (probe == nullptr) {
    tLastError = "ts_declare_group: the probe is NULL";
    return;
  }
  try {
    auto* inst = reinterpret_cast<Instance*>(probe);
    trainscope::Status s = inst->declareGroup(ts_name_str(group), kind, ranks, count);
    if (s) {
      tLastError.clear();  // callers without a status (Python) tell success by ""
    } else {
      tLastError = "ts_declare_group: " + s.message();
      trainscope::logOnce(
          trainscope::LogLevel::kWarn, "probe", "declare-" + s.message(),
          "rank " + std::to_string(inst->config().rank) + ": " + tLastError + "; not declared");
    }
  } catch (const std::exception& e) {
    tLastError = std::string("ts_declare_group: ") + e.what();
  }
}

void ts_p2p(ts_probe* probe, uint32_t op, ts_name group, int32_t peer, uint64_t bytes,
            int64_t arrive_ns, int64_t complete_ns) {
  if (peer < 0 || (op != TS_COLL_SEND && op != TS_COLL_RECV)) [[unlikely]]
    return;
  Ring* ring = nullptr;
  if (Record* rec = claim(probe, &ring)) {
    fill(rec, RecordType::kP2p, static_cast<uint8_t>(op), static_cast<uint32_t>(peer), group, 0,
         orNow(arrive_ns), orNow(complete_ns), bytes);
    ring->publish();
  }
}

ts_probe* ts_default_existing(void) {
  return reinterpret_cast<ts_probe*>(gDefault.load(std::memory_order_acquire));
}

ts_name ts_device_group(ts_probe* probe, uint64_t comm_hash, const char* comm_name, int32_t nranks,
                        int32_t rank, int32_t* global_ranks) {
  if (probe == nullptr || nranks < 1 ||
      static_cast<size_t>(nranks) > trainscope::probe::kMaxGroupRanks) {
    return 0;
  }
  try {
    auto* inst = reinterpret_cast<Instance*>(probe);
    const std::string name = inst->deviceGroup(comm_hash, comm_name == nullptr ? "" : comm_name,
                                               nranks, rank, global_ranks);
    return trainscope::probe::internName(name);
  } catch (...) {
    return 0;
  }
}

void ts_device_collective(ts_probe* probe, uint32_t op, ts_name group, uint64_t bytes, uint64_t seq,
                          uint32_t info, int64_t launch_ns, int64_t start_ns, int64_t end_ns) {
  Ring* ring = nullptr;
  if (Record* rec = claim(probe, &ring)) {
    fill(rec, RecordType::kDeviceColl, static_cast<uint8_t>(op), 0, group, launch_ns, start_ns,
         std::max(start_ns, end_ns), bytes);
    rec->seq = seq;
    rec->info = info;
    ring->publish();
  }
}

void ts_device_p2p(ts_probe* probe, uint32_t op, ts_name group, int32_t peer, uint64_t bytes,
                   uint32_t info, int64_t launch_ns, int64_t start_ns, int64_t end_ns) {
  if (peer < 0 || (op != TS_COLL_SEND && op != TS_COLL_RECV)) [[unlikely]]
    return;
  Ring* ring = nullptr;
  if (Record* rec = claim(probe, &ring)) {
    fill(rec, RecordType::kDeviceP2p, static_cast<uint8_t>(op), static_cast<uint32_t>(peer), group,
         launch_ns, start_ns, std::max(start_ns, end_ns), bytes);
    rec->info = info;
    ring->publish();
  }
}

void ts_device_dropped(ts_probe* probe, uint64_t count) {
  if (probe == nullptr) return;
  reinterpret_cast<Instance*>(probe)->addDeviceDropped(count);
}

void ts_set_flops(ts_probe* probe, double model_flops_per_step, double hardware_flops_per_step,
                  double peak_flops) {
  if (probe == nullptr) return;
  reinterpret_cast<Instance*>(probe)->setFlops(model_flops_per_step, hardware_flops_per_step,
                                               peak_flops);
}

int32_t ts_probe_flush(ts_probe* probe, int32_t timeout_ms) {
  if (probe == nullptr) return 1;
  try {
    return Runtime::get().flush(reinterpret_cast<Instance*>(probe), timeout_ms);
  } catch (...) {
    return 1;
  }
}

void ts_probe_get_stats(ts_probe* probe, ts_probe_stats* out) {
  if (out == nullptr) return;
  if (probe == nullptr) {
    *out = ts_probe_stats{};
    return;
  }
  reinterpret_cast<Instance*>(probe)->stats(out);
}

void ts_probe_set_stack_provider(ts_stack_provider provider, void* user) {
  trainscope::probe::setStackProvider(provider, user);
}

int32_t ts_probe_request_stacks(ts_probe* probe, const char* capture_id, char* path_out,
                                int32_t path_cap) {
  if (probe == nullptr || capture_id == nullptr) return -1;
  try {
    if (!trainscope::probe::safeCaptureId(capture_id)) {
      tLastError =
          std::string("capture id '") + capture_id + "' " + trainscope::probe::kBadCaptureId;
      return -1;
    }
    trainscope::wire::Command cmd;
    cmd.set_id(capture_id);
    cmd.mutable_stacks()->set_capture_id(capture_id);
    auto* inst = reinterpret_cast<Instance*>(probe);
    inst->submitCommand(cmd);
    if (path_out != nullptr && path_cap > 0) {
      const std::string path = inst->config().captureDir + "/" + capture_id + "/rank-" +
                               std::to_string(inst->config().rank) + ".json.gz";
      const size_t n = std::min(path.size(), static_cast<size_t>(path_cap - 1));
      path.copy(path_out, n);
      path_out[n] = '\0';
    }
    return 0;
  } catch (const std::exception& e) {
    tLastError = e.what();
    return -1;
  }
}

const char* ts_last_error(void) {
  return tLastError.c_str();
}

// NOLINTEND(readability-identifier-naming)

}  // extern "C"
