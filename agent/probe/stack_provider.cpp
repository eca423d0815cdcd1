#include "agent/probe/stack_provider.h"

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

namespace trainscope::probe {
namespace {

std::mutex gMu;
ts_stack_provider gProvider = nullptr;  // guarded by gMu
void* gUser = nullptr;                  // guarded by gMu

// Past this a provider's answer is refused rather than allocated.
constexpr int64_t kMaxProviderBytes = 64 << 20;
constexpr int64_t kFirstTryBytes = 256 << 10;

struct Call {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;    // guarded by mu
  int64_t length = -1;  // guarded by mu
  std::string json;     // guarded by mu
};

}  // namespace

void setStackProvider(ts_stack_provider provider, void* user) {
  std::lock_guard<std::mutex> lock(gMu);
  gProvider = provider;
  gUser = user;
}

bool hasStackProvider() {
  std::lock_guard<std::mutex> lock(gMu);
  return gProvider != nullptr;
}

ProviderStacks callStackProvider(std::chrono::milliseconds deadline) {
  ts_stack_provider fn = nullptr;
  void* user = nullptr;
  {
    std::lock_guard<std::mutex> lock(gMu);
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
      std::lock_guard<std::mutex> lock(call->mu);
      call->length = n;
      if (n >= 0) call->json = std::move(buf);
      call->done = true;
      call->cv.notify_all();
    }).detach();
  } catch (const std::exception& e) {
    out.detail = std::string("language stacks not taken: cannot start a thread: ") + e.what();
    return out;
  }
  std::unique_lock<std::mutex> lock(call->mu);
  if (!call->cv.wait_for(lock, deadline, [&] { return call->done; })) {
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
