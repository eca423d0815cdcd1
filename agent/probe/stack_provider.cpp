#include "agent/probe/stack_provider.h"

#include <exception>
#include <memory>
#include <thread>

#include "common/thread_annotations.h"

namespace trainscope::probe {
namespace {

Mutex gMu;
ts_stack_provider gProvider GUARDED_BY(gMu) = nullptr;
void* gUser GUARDED_BY(gMu) = nullptr;

// Past this a provider's answer is refused rather than allocated.
constexpr int64_t kMaxProviderBytes = 64 << 20;
constexpr int64_t kFirstTryBytes = 256 << 10;

struct Call {
  Mutex mu;
  CondVar cv;
  bool done GUARDED_BY(mu) = false;
  int64_t length GUARDED_BY(mu) = -1;
  std::string json GUARDED_BY(mu);
};

}  // namespace

void setStackProvider(ts_stack_provider provider, void* user) {
  MutexLock lock(&gMu);
  gProvider = provider;
  gUser = user;
}

bool hasStackProvider() {
  MutexLock lock(&gMu);
  return gProvider != nullptr;
}

ProviderStacks callStackProvider(std::chrono::milliseconds deadline) {
  ts_stack_provider fn = nullptr;
  void* user = nullptr;
  {
    MutexLock lock(&gMu);
    fn = gProvider;
    user = gUser;
  }
  ProviderStacks out;
  if (fn == nullptr) return out;
  auto call = std::make_shared<Call>();
  try {
    std::thread([call, fn, user] {
      std::string buf(static_cast<size_t>(kFirstTryBytes), '\0');
      int64_t n = fn(buf.data(), kFirstTryBytes, user);
      if (n > kFirstTryBytes && n <= kMaxProviderBytes) {
        buf.assign(static_cast<size_t>(n), '\0');
        const int64_t room = n;
        n = fn(buf.data(), room, user);
        if (n > room) n = -2;  // grew again between the calls
      } else if (n > kMaxProviderBytes) {
        n = -3;
      }
      if (n >= 0) buf.resize(static_cast<size_t>(n));
      MutexLock lock(&call->mu);
      call->length = n;
      if (n >= 0) call->json = std::move(buf);
      call->done = true;
      call->cv.notifyAll();
    }).detach();
  } catch (const std::exception& e) {
    out.detail = std::string("language stacks not taken: cannot start a thread: ") + e.what();
    return out;
  }
  UniqueLock lock(&call->mu);
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (!call->done && call->cv.waitUntil(lock, until)) {
  }
  if (!call->done) {
    out.detail = "Python stacks not taken: the provider did not answer within " +
                 std::to_string(deadline.count()) + " ms (a thread may be holding the GIL)";
    return out;
  }
  if (call->length < 0) {
    out.detail = call->length == -3 ? "Python stacks not taken: the provider's answer is over "
                                      "64 MiB"
                                    : "Python stacks not taken: the provider failed";
    return out;
  }
  out.ok = true;
  out.json = std::move(call->json);
  return out;
}

}  // namespace trainscope::probe
