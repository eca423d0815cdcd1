#include "agent/probe/stacks.h"

#include <cxxabi.h>
#include <dirent.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>

#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <nlohmann/json.hpp>

#include "agent/probe/gzip_writer.h"
#include "agent/probe/stack_provider.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/thread_annotations.h"
#include "schema/capture_state.h"

namespace trainscope::probe {
namespace {

constexpr int kMaxThreads = 1024;
constexpr int kMaxFrames = 128;

enum SlotState : int { kIdle = 0, kWaiting = 1, kWriting = 2, kDone = 3, kAbandoned = 4 };

// Preallocated so the handler touches no heap: one slot per thread of the running dump.
struct Slot {
  std::atomic<int> tid{0};
  std::atomic<int> state{kIdle};
  int count = 0;  // written by the handler before it publishes kDone
  int skip = 0;   // frames up to and including the signal trampoline
  uintptr_t ips[kMaxFrames];
};
Slot gSlots[kMaxThreads];
std::atomic<int> gSlotCount{0};

Mutex gDumpMu;  // one dump at a time
bool gHandlerInstalled GUARDED_BY(gDumpMu) = false;
struct sigaction gPrevious GUARDED_BY(gDumpMu) {};

void onStackSignal(int, siginfo_t*, void*) {
  const int savedErrno = errno;
  const int n = gSlotCount.load(std::memory_order_acquire);
  const int me = static_cast<int>(syscall(SYS_gettid));
  for (int i = 0; i < n; ++i) {
    Slot& s = gSlots[i];
    if (s.tid.load(std::memory_order_relaxed) != me) continue;
    int expected = kWaiting;
    if (!s.state.compare_exchange_strong(expected, kWriting, std::memory_order_acq_rel)) break;
    unw_context_t uc;
    unw_cursor_t cursor;
    int count = 0;
    int skip = 0;
    if (unw_getcontext(&uc) == 0 && unw_init_local(&cursor, &uc) == 0) {
      do {
        unw_word_t ip = 0;
        if (unw_get_reg(&cursor, UNW_REG_IP, &ip) < 0) break;
        s.ips[count++] = static_cast<uintptr_t>(ip);
        if (skip == 0 && unw_is_signal_frame(&cursor) > 0) skip = count;
      } while (count < kMaxFrames && unw_step(&cursor) > 0);
    }
    s.count = count;
    s.skip = skip;
    s.state.store(kDone, std::memory_order_release);
    break;
  }
  errno = savedErrno;
}

// libunwind sets itself up on first use (its signal masks among it) under a lock that its
// later calls read without: done once here, in the thread that asks for a dump, so that the
// signal handlers of many threads never run that first use at once (TSan saw them race in
// libunwind's own globals).
void warmUpUnwinder() {
  unw_context_t uc;
  unw_cursor_t cursor;
  if (unw_getcontext(&uc) == 0 && unw_init_local(&cursor, &uc) == 0) (void)unw_step(&cursor);
}

std::string readFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string threadState(int tid) {
  const std::string stat = readFirstLine("/proc/self/task/" + std::to_string(tid) + "/stat");
  // "<tid> (<comm>) <state> ...": comm may hold spaces and parentheses, so look after the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return "?";
  return stat.substr(close + 2, 1);
}

std::vector<int> listThreads() {
  std::vector<int> out;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    out.push_back(std::atoi(e->d_name));
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

NativeFrame symbolize(uintptr_t ip, bool exact) {
  NativeFrame f;
  f.address = ip;
  // Outer frames hold return addresses: look up the call instruction, which may belong to
  // another function when the call was the last instruction (noreturn callees).
  const uintptr_t lookup = exact || ip == 0 ? ip : ip - 1;
  Dl_info info{};
  // An address from the unwinder: dladdr takes it as a pointer.
  const bool haveDl =
      dladdr(reinterpret_cast<void*>(lookup), &info) != 0;  // NOLINT(performance-no-int-to-ptr)
  if (haveDl && info.dli_fname != nullptr) f.module = info.dli_fname;
  char name[512];
  unw_word_t off = 0;
  unw_accessors_t* acc = unw_get_accessors(unw_local_addr_space);
  std::string raw;
  if (acc != nullptr && acc->get_proc_name != nullptr &&
      acc->get_proc_name(unw_local_addr_space, lookup, name, sizeof(name), &off, nullptr) == 0) {
    raw = name;
    f.offset = static_cast<uint64_t>(off) + (ip - lookup);
  } else if (haveDl && info.dli_sname != nullptr) {
    raw = info.dli_sname;
    f.offset = ip - reinterpret_cast<uintptr_t>(info.dli_saddr);
  }
  if (!raw.empty()) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(raw.c_str(), nullptr, nullptr, &status);
    f.function = status == 0 && demangled != nullptr ? demangled : raw;
    std::free(demangled);
  }
  return f;
}

std::string hexAddress(uint64_t a) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(a));
  return buf;
}

}  // namespace

int stackSignal() {
  return SIGRTMAX - 3;
}

std::vector<ThreadStack> unwindAllThreads(const StackOptions& options) {
  MutexLock lock(&gDumpMu);
  const int self = static_cast<int>(syscall(SYS_gettid));
  const pid_t pid = getpid();
  std::vector<int> tids = listThreads();
  tids.erase(std::remove(tids.begin(), tids.end(), self), tids.end());

  std::vector<ThreadStack> out(tids.size());
  const int n = static_cast<int>(std::min<size_t>(tids.size(), kMaxThreads));
  for (size_t i = 0; i < tids.size(); ++i) {
    out[i].tid = tids[i];
    const std::string base = "/proc/self/task/" + std::to_string(tids[i]);
    out[i].name = readFirstLine(base + "/comm");
    out[i].state = threadState(tids[i]);
    if (static_cast<int>(i) >= n) {
      out[i].error = "not unwound: more than " + std::to_string(kMaxThreads) + " threads";
    }
  }
  for (int i = 0; i < n; ++i) {
    gSlots[i].count = 0;
    gSlots[i].skip = 0;
    gSlots[i].tid.store(tids[static_cast<size_t>(i)], std::memory_order_relaxed);
    gSlots[i].state.store(kWaiting, std::memory_order_relaxed);
  }
  gSlotCount.store(n, std::memory_order_release);

  const int sig = stackSignal();
  if (!gHandlerInstalled) {
    warmUpUnwinder();
    struct sigaction sa {};
    sa.sa_sigaction = onStackSignal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&sa.sa_mask);
    if (sigaction(sig, &sa, &gPrevious) != 0) {
      gSlotCount.store(0, std::memory_order_release);
      const std::string why =
          std::string("cannot install the unwinding signal handler: ") + std::strerror(errno);
      for (ThreadStack& t : out) {
        if (t.error.empty()) t.error = why;
      }
      return out;
    }
    if ((gPrevious.sa_flags & SA_SIGINFO) != 0 || gPrevious.sa_handler != SIG_DFL) {
      logOnce(LogLevel::kWarn, "probe", "stack-signal-taken",
              "signal " + std::to_string(sig) +
                  " already had a handler; stack captures borrow it and restore it after");
    }
    gHandlerInstalled = true;
  }

  std::vector<std::string> sendErrors(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    if (syscall(SYS_tgkill, pid, tids[static_cast<size_t>(i)], sig) != 0) {
      sendErrors[static_cast<size_t>(i)] =
          errno == ESRCH ? "the thread exited before it was unwound"
                         : std::string("cannot signal the thread: ") + std::strerror(errno);
      int expected = kWaiting;
      gSlots[i].state.compare_exchange_strong(expected, kAbandoned);
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + options.answerTimeout;
  auto allAnswered = [&] {
    for (int i = 0; i < n; ++i) {
      const int st = gSlots[i].state.load(std::memory_order_acquire);
      if (st == kWaiting || st == kWriting) return false;
    }
    return true;
  };
  while (!allAnswered() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  bool someoneLate = false;
  for (int i = 0; i < n; ++i) {
    Slot& s = gSlots[i];
    ThreadStack& t = out[static_cast<size_t>(i)];
    int expected = kWaiting;
    if (s.state.compare_exchange_strong(expected, kAbandoned, std::memory_order_acq_rel)) {
      someoneLate = true;
      t.error = "did not answer the unwinding signal within " +
                std::to_string(options.answerTimeout.count()) +
                " ms (it may block signals or be stuck in the kernel)";
      continue;
    }
    if (expected == kWriting) {
      // Mid-unwind at the deadline: give it a little longer rather than read a torn stack.
      const auto extra = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
      while (s.state.load(std::memory_order_acquire) == kWriting &&
             std::chrono::steady_clock::now() < extra) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (s.state.load(std::memory_order_acquire) != kDone) {
        someoneLate = true;
        t.error = "was still unwinding itself at the deadline";
        continue;
      }
    }
    if (s.state.load(std::memory_order_acquire) != kDone) {
      t.error = sendErrors[static_cast<size_t>(i)];
      continue;
    }
    const int skip = s.skip < s.count ? s.skip : 0;
    for (int k = skip; k < s.count; ++k) {
      // The interrupted frame's address is exact; the handler's own frames (no trampoline
      // found) are return addresses like the outer ones.
      t.native.push_back(symbolize(s.ips[k], k == skip && skip > 0));
    }
  }
  gSlotCount.store(0, std::memory_order_release);
  if (!someoneLate) {
    sigaction(sig, &gPrevious, nullptr);
    gHandlerInstalled = false;
  }
  return out;
}

wire::CommandStatus runStackCapture(const wire::Command& cmd, const CaptureIdentity& identity,
                                    const std::string& dir, const StackOptions& options) {
  const std::string captureId =
      cmd.stacks().capture_id().empty() ? cmd.id() : cmd.stacks().capture_id();
  wire::CommandStatus st;
  st.set_command_id(cmd.id().empty() ? captureId : cmd.id());
  st.set_job(identity.job);
  st.set_rank(identity.rank);
  st.set_first_step(-1);
  st.set_last_step(-1);
  if (!safeCaptureId(captureId)) {
    wire::setCommandState(&st, wire::RankState::kFailed);
    st.set_detail("capture_id '" + captureId + "' " + kBadCaptureId);
    return st;
  }
  const int64_t takenNs = wallNowNs();
  std::vector<ThreadStack> threads = unwindAllThreads(options);
  ProviderStacks py = callStackProvider(options.providerTimeout);
  nlohmann::json pyByTid = nlohmann::json::object();
  std::string detail = py.detail;
  if (py.ok) {
    pyByTid = nlohmann::json::parse(py.json, nullptr, false);
    if (!pyByTid.is_object()) {
      py.ok = false;
      detail = "Python stacks not taken: the provider's answer is not a JSON object";
      pyByTid = nlohmann::json::object();
    }
  }

  nlohmann::json doc;
  doc["trainscope"] = {{"kind", "stacks"},      {"capture_id", captureId}, {"job", identity.job},
                       {"rank", identity.rank}, {"host", identity.host},   {"pid", identity.pid},
                       {"taken_ns", takenNs},   {"python", py.ok},         {"detail", detail}};
  nlohmann::json arr = nlohmann::json::array();
  for (const ThreadStack& t : threads) {
    nlohmann::json native = nlohmann::json::array();
    for (const NativeFrame& f : t.native) {
      native.push_back({{"address", hexAddress(f.address)},
                        {"function", f.function},
                        {"offset", f.offset},
                        {"module", f.module}});
    }
    nlohmann::json j = {
        {"tid", t.tid}, {"name", t.name}, {"state", t.state}, {"native", std::move(native)}};
    auto it = pyByTid.find(std::to_string(t.tid));
    j["python"] = it != pyByTid.end() && it->is_array() ? *it : nlohmann::json::array();
    if (!t.error.empty()) j["error"] = t.error;
    arr.push_back(std::move(j));
  }
  doc["threads"] = std::move(arr);
  const std::string text = doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);

  const std::string folder = dir + "/" + captureId;
  const std::string path = folder + "/rank-" + std::to_string(identity.rank) + ".json.gz";
  GzipWriter file;
  Status s = makeDirectories(folder);
  if (s) s = file.open(path);
  if (s) s = file.write(text);
  if (s) s = file.finish();
  if (!s) {
    wire::setCommandState(&st, wire::RankState::kFailed);
    st.set_detail(s.message());
    return st;
  }
  struct stat info {};
  wire::setCommandState(&st, wire::RankState::kUploading);
  st.set_detail(detail);
  st.set_file_path(path);
  st.set_file_bytes(stat(path.c_str(), &info) == 0 ? static_cast<uint64_t>(info.st_size) : 0);
  return st;
}

}  // namespace trainscope::probe
