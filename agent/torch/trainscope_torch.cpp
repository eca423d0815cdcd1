// The PyTorch operator callback behind trainscope_torch.h. One global RecordFunction callback
// (scopes FUNCTION and USER_SCOPE, no inputs, no sampling): the start callback notes the
// clock on a per-thread stack, the end callback records one ts_op with the operator's name.
// USER_SCOPE scopes (record_function: "DistributedDataParallel.forward", the DataLoader's
// __next__, "Optimizer.step#SGD.step", the process group's "gloo:all_reduce") wrap other work
// rather than compute, so they become ranges of kind other: on the timeline, but neither
// compute nor top operators (as ops, "gloo:all_reduce" hid every exposed communication); so
// do the function-scope communication calls and autograd's node wrappers (wrapsOtherWork).
#include "agent/torch/trainscope_torch.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/record_function.h>

#include "common/log.h"
#include "common/thread_annotations.h"

namespace trainscope::torch_ops {
namespace {

constexpr std::string_view kLog = "probe.torch";
// Operators nest (aten::linear runs aten::addmm); deeper nesting than this is not recorded,
// but the stack still matches ends to starts.
constexpr size_t kMaxDepth = 128;

struct Open {
  const at::RecordFunction* rf = nullptr;  // identity of the scope: its address until it ends
  int64_t startNs = 0;
};

// One per thread that ran an operator while enabled. `busy` lets disable() wait until no
// thread is between reading the probe pointer and finishing its record call.
struct ThreadState {
  ThreadState();
  ~ThreadState();
  ThreadState(const ThreadState&) = delete;
  ThreadState& operator=(const ThreadState&) = delete;

  std::atomic<bool> busy{false};
  Open open[kMaxDepth];
  size_t depth = 0;  // may exceed kMaxDepth; entries past it are not stored
  // Operator names by text (bounded by the operator vocabulary), and in front of it a small
  // cache by the pointer RecordFunction hands out: stable for registered operators, but
  // built afresh per call for some scopes ("autograd::engine::evaluate_function: ..."), so a
  // hit is confirmed against the text.
  struct NameHash {
    using is_transparent = void;  // NOLINT(readability-identifier-naming): the standard's name
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, ts_name, NameHash, std::equal_to<>> byText;
  struct Slot {
    const char* ptr = nullptr;
    const std::string* text = nullptr;  // the key in byText (nodes do not move)
    ts_name id = 0;
  };
  std::array<Slot, 256> byPtr{};
};

std::atomic<ts_probe*> gProbe{nullptr};
std::atomic<uint64_t> gOps{0};
Mutex gEnableMu;                                       // enable/disable
at::CallbackHandle gHandle GUARDED_BY(gEnableMu) = 0;  // 0: no callback registered
Mutex gThreadsMu;
std::vector<ThreadState*> gThreads GUARDED_BY(gThreadsMu);

ThreadState::ThreadState() {
  MutexLock lock(&gThreadsMu);
  gThreads.push_back(this);
}

ThreadState::~ThreadState() {
  MutexLock lock(&gThreadsMu);
  gThreads.erase(std::remove(gThreads.begin(), gThreads.end(), this), gThreads.end());
}

ThreadState& threadState() {
  thread_local ThreadState state;
  return state;
}

ts_name nameId(ThreadState& t, const char* name) {
  if (name == nullptr) name = "";
  auto& slot = t.byPtr[(reinterpret_cast<uintptr_t>(name) >> 4) % t.byPtr.size()];
  if (slot.ptr == name && std::strcmp(slot.text->c_str(), name) == 0) return slot.id;
  auto it = t.byText.find(std::string_view(name));
  if (it == t.byText.end()) {
    // First time on this thread: ts_intern locks, once per name per thread.
    it = t.byText.emplace(std::string(name), ts_intern(name)).first;
  }
  slot = ThreadState::Slot{name, &it->first, it->second};
  return it->second;
}

// Function-scope records that are not compute: the communication calls ("c10d::allreduce_",
// which return once the work is queued, or block until it is done) and autograd's per-node
// wrappers ("autograd::engine::evaluate_function: AddmmBackward0", whose time holds the
// node's operators, recorded on their own, and the hooks run after it: DDP copying gradients
// into its buckets and launching their all-reduce). As operators they counted communication
// as compute, and on a shared 2-core host they were most of the false operator regressions.
bool wrapsOtherWork(const char* name) {
  if (name == nullptr) return false;
  if (name[0] == 'c') return std::strncmp(name, "c10d::", 6) == 0;
  return name[0] == 'a' && std::strncmp(name, "autograd::engine::", 18) == 0;
}

std::unique_ptr<at::ObserverContext> onStart(const at::RecordFunction& rf) {
  ThreadState& t = threadState();
  if (t.depth < kMaxDepth) t.open[t.depth] = Open{&rf, ts_now_ns()};
  ++t.depth;
  return nullptr;
}

void onEnd(const at::RecordFunction& rf, at::ObserverContext* /*ctx*/) {
  int64_t endNs = ts_now_ns();
  ThreadState& t = threadState();
  size_t stored = std::min(t.depth, kMaxDepth);
  size_t i = stored;
  while (i > 0 && t.open[i - 1].rf != &rf) --i;
  if (i == 0) {
    // Not on this thread's stack: beyond the stored depth, or a user scope that started on
    // another thread (Python record_function may end elsewhere). Nothing to record.
    if (t.depth > kMaxDepth) --t.depth;
    return;
  }
  // Starts above the match whose ends went to another thread are dropped with it.
  t.depth = i - 1;
  int64_t startNs = t.open[i - 1].startNs;
  // Dekker with disable(): busy is set before the probe is read, both sequentially consistent.
  t.busy.store(true);
  ts_probe* probe = gProbe.load();
  if (probe != nullptr) {
    if (rf.scope() == at::RecordScope::USER_SCOPE || wrapsOtherWork(rf.name())) {
      ts_range(probe, nameId(t, rf.name()), TS_RANGE_OTHER, startNs, endNs);
    } else {
      ts_op(probe, nameId(t, rf.name()), startNs, endNs - startNs);
      gOps.fetch_add(1, std::memory_order_relaxed);
    }
  }
  t.busy.store(false, std::memory_order_release);
}

void waitForRecorders() {
  MutexLock lock(&gThreadsMu);
  for (ThreadState* t : gThreads) {
    while (t->busy.load()) std::this_thread::yield();
  }
}

}  // namespace
}  // namespace trainscope::torch_ops

using namespace trainscope::torch_ops;  // NOLINT(google-build-using-namespace): this file's own

extern "C" int32_t trainscope_torch_enable(ts_probe* probe) {
  if (probe == nullptr) probe = ts_default();
  trainscope::MutexLock lock(&gEnableMu);
  gProbe.store(probe);
  if (gHandle != 0) return 0;
  try {
    gHandle = at::addGlobalCallback(
        at::RecordFunctionCallback(&onStart, &onEnd)
            .needsInputs(false)
            .samplingProb(1.0)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
  } catch (const std::exception& e) {
    gProbe.store(nullptr);
    trainscope::logError(kLog, std::string("cannot add the operator callback: ") + e.what());
    return -1;
  }
  trainscope::logDebug(kLog, "recording PyTorch operators");
  return 0;
}

extern "C" void trainscope_torch_disable(void) {
  trainscope::MutexLock lock(&gEnableMu);
  if (gHandle == 0) return;
  try {
    at::removeCallback(gHandle);
  } catch (const std::exception& e) {
    trainscope::logError(kLog, std::string("cannot remove the operator callback: ") + e.what());
  }
  gHandle = 0;
  // Scopes that started before the removal still run their end callback; they see no probe.
  gProbe.store(nullptr);
  waitForRecorders();
}

extern "C" int32_t trainscope_torch_enabled(void) {
  trainscope::MutexLock lock(&gEnableMu);
  return gHandle != 0 ? 1 : 0;
}

extern "C" uint64_t trainscope_torch_ops_recorded(void) {
  return gOps.load(std::memory_order_relaxed);
}
