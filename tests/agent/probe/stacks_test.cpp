// Stack captures of a live process: a thread parked in a named function shows it in its
// native frames, a thread that blocks the signal gets an error entry instead of hanging the
// dump, and a language stack provider's frames (or its time-out) land in the file.
#include "agent/probe/stacks.h"

#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include <catch2/catch.hpp>

#include "agent/probe/stack_provider.h"
#include "tests/agent/probe/capture_files.h"
#include "tests/agent/probe/fake_agent.h"

using namespace trainscope::probe;

namespace {

std::mutex gMu;
std::condition_variable gCv;
bool gRelease = false;

// Parks the calling thread until release(); its name must show in the unwound stack.
// The thread id is published under gMu, which the thread gives up only inside the wait.
[[gnu::noinline]] void blockedInNamedFunction(std::atomic<int>* tid) {
  std::unique_lock<std::mutex> lock(gMu);
  tid->store(static_cast<int>(syscall(SYS_gettid)));
  gCv.wait(lock, [] { return gRelease; });
  asm volatile("" ::: "memory");  // keeps the frame from becoming a tail call
}

void release() {
  {
    std::lock_guard<std::mutex> lock(gMu);
    gRelease = true;
  }
  gCv.notify_all();
}

struct Parked {
  std::atomic<int> tid{0};
  std::thread thread;
  explicit Parked(bool blockSignal) {
    thread = std::thread([this, blockSignal] {
      pthread_setname_np(pthread_self(), blockSignal ? "ts-deaf" : "ts-parked");
      if (blockSignal) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, stackSignal());
        pthread_sigmask(SIG_BLOCK, &set, nullptr);
      }
      blockedInNamedFunction(&tid);
    });
    while (tid.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::lock_guard<std::mutex> inTheWait(gMu);  // free once the thread waits
  }
};

const ThreadStack* find(const std::vector<ThreadStack>& v, int tid) {
  for (const ThreadStack& t : v) {
    if (t.tid == tid) return &t;
  }
  return nullptr;
}

int64_t providerFor(char* buf, int64_t cap, void* user) {
  const std::string json = "{\"" + std::to_string(*static_cast<int*>(user)) +
                           "\": [{\"function\": \"train_step\", \"file\": \"train.py\", "
                           "\"line\": 42}]}";
  if (static_cast<int64_t>(json.size()) <= cap) json.copy(buf, json.size());
  return static_cast<int64_t>(json.size());
}

// A language-stack provider that does not answer until the test lets it (a GIL held on).
std::mutex gProviderMu;
std::condition_variable gProviderCv;
bool gProviderRelease = false;  // guarded by gProviderMu
bool gProviderDone = false;     // guarded by gProviderMu

int64_t stuckProvider(char*, int64_t, void*) {
  std::unique_lock<std::mutex> lock(gProviderMu);
  gProviderCv.wait(lock, [] { return gProviderRelease; });
  gProviderDone = true;
  gProviderCv.notify_all();
  return -1;
}

}  // namespace

TEST_CASE("stacks: every thread is unwound; a parked thread shows its function") {
  gRelease = false;
  Parked parked(false);
  Parked deaf(true);
  const std::vector<ThreadStack> threads = unwindAllThreads();
  release();
  parked.thread.join();
  deaf.thread.join();

  const ThreadStack* p = find(threads, parked.tid.load());
  REQUIRE(p != nullptr);
  CHECK(p->name == "ts-parked");
  CHECK(p->state == "S");
  CHECK(p->error.empty());
  REQUIRE_FALSE(p->native.empty());
  bool named = false;
  bool inTestBinary = false;
  for (const NativeFrame& f : p->native) {
    if (f.function.find("blockedInNamedFunction") != std::string::npos) {
      named = true;
      inTestBinary = f.module.find("stacks_test") != std::string::npos;
      CHECK(f.offset > 0);
    }
  }
  CHECK(named);
  CHECK(inTestBinary);
  // Innermost first: the parked thread sits in the kernel's futex wait, under libc.
  CHECK(p->native.front().module.find("libc") != std::string::npos);

  const ThreadStack* d = find(threads, deaf.tid.load());
  REQUIRE(d != nullptr);
  CHECK(d->name == "ts-deaf");
  CHECK(d->native.empty());
  CHECK(d->error.find("did not answer") != std::string::npos);
  // What the deaf thread costs in time: tools/bench/stacks_bench.
  // The caller is not in the list (it cannot unwind itself through the signal).
  CHECK(find(threads, static_cast<int>(syscall(SYS_gettid))) == nullptr);
}

TEST_CASE("stacks: the file has the contract's shape, with the provider's Python frames") {
  gRelease = false;
  Parked parked(false);
  int tid = parked.tid.load();
  setStackProvider(providerFor, &tid);
  testing::TempDir dir;
  trainscope::wire::Command cmd;
  cmd.set_id("cap-st");
  cmd.mutable_stacks()->set_capture_id("cap-st");
  CaptureIdentity id;
  id.job = "j";
  id.rank = 2;
  id.host = "h";
  id.pid = static_cast<uint32_t>(getpid());
  const trainscope::wire::CommandStatus st = runStackCapture(cmd, id, dir.path());
  setStackProvider(nullptr, nullptr);
  release();
  parked.thread.join();

  CHECK(st.state() == "uploading");
  CHECK(st.file_path() == dir.path() + "/cap-st/rank-2.json.gz");
  const nlohmann::json doc = testing::readJsonGz(st.file_path());
  REQUIRE(doc.is_object());
  const auto& meta = doc["trainscope"];
  CHECK(meta["kind"] == "stacks");
  CHECK(meta["capture_id"] == "cap-st");
  CHECK(meta["rank"] == 2);
  CHECK(meta["python"] == true);
  CHECK(meta["detail"] == "");
  CHECK(meta["taken_ns"].get<int64_t>() > 0);
  bool found = false;
  for (const auto& t : doc["threads"]) {
    if (t["tid"] != tid) continue;
    found = true;
    CHECK(t["name"] == "ts-parked");
    REQUIRE(t["python"].size() == 1);
    CHECK(t["python"][0]["function"] == "train_step");
    CHECK(t["python"][0]["line"] == 42);
    REQUIRE_FALSE(t["native"].empty());
    const auto& f = t["native"][0];
    CHECK(f["address"].get<std::string>().rfind("0x", 0) == 0);
    CHECK(f.contains("function"));
    CHECK(f.contains("offset"));
    CHECK(f.contains("module"));
  }
  CHECK(found);
}

// The capture returns while the provider is still stuck (else this test never ends); how soon
// after the deadline: tools/bench/stacks_bench.
TEST_CASE("stacks: a provider that does not answer in time leaves python false with a reason") {
  setStackProvider(stuckProvider, nullptr);
  testing::TempDir dir;
  trainscope::wire::Command cmd;
  cmd.set_id("cap-slow");
  cmd.mutable_stacks()->set_capture_id("cap-slow");
  StackOptions opt;
  opt.providerTimeout = std::chrono::milliseconds(100);
  const trainscope::wire::CommandStatus st =
      runStackCapture(cmd, CaptureIdentity{}, dir.path(), opt);
  {
    std::lock_guard<std::mutex> lock(gProviderMu);
    CHECK_FALSE(gProviderDone);
  }
  setStackProvider(nullptr, nullptr);
  CHECK(st.state() == "uploading");
  const nlohmann::json doc = testing::readJsonGz(st.file_path());
  REQUIRE(doc.is_object());
  CHECK(doc["trainscope"]["python"] == false);
  CHECK(doc["trainscope"]["detail"].get<std::string>().find("did not answer within 100 ms") !=
        std::string::npos);
  // Let the detached provider call finish before the process exits.
  std::unique_lock<std::mutex> lock(gProviderMu);
  gProviderRelease = true;
  gProviderCv.notify_all();
  gProviderCv.wait(lock, [] { return gProviderDone; });
}
