#include "agent/probe/cpu_wait.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace trainscope::probe {

namespace {

// 1 on, 0 off, -1: not decided yet ($TRAINSCOPE_CPU_WAIT at the first read).
std::atomic<int> gEnabled{-1};

bool enabled() {
  int on = gEnabled.load(std::memory_order_relaxed);
  if (on < 0) {
    const char* v = std::getenv("TRAINSCOPE_CPU_WAIT");
    on = v == nullptr || std::strcmp(v, "0") != 0 ? 1 : 0;
    int expected = -1;
    if (!gEnabled.compare_exchange_strong(expected, on)) on = expected;
  }
  return on == 1;
}

// One descriptor per thread, closed when the thread exits; -2: not opened yet, -1: failed.
struct ThreadFd {
  int fd = -2;
  pid_t pid = 0;  // the process that opened it: a forked child reopens its own
  ~ThreadFd() {
    if (fd >= 0) ::close(fd);
  }
};
thread_local ThreadFd tFd;

}  // namespace

int64_t parseRunDelay(const char* text, long length) {
  // Two unsigned decimal numbers separated by blanks; the second is the run delay.
  long i = 0;
  auto skipBlanks = [&] {
    while (i < length && (text[i] == ' ' || text[i] == '\t')) ++i;
  };
  auto number = [&](int64_t* out) {
    const long start = i;
    int64_t v = 0;
    while (i < length && text[i] >= '0' && text[i] <= '9') {
      if (v > (INT64_MAX - 9) / 10) return false;
      v = v * 10 + (text[i] - '0');
      ++i;
    }
    *out = v;
    return i > start;
  };
  int64_t cpu = 0;
  int64_t delay = 0;
  skipBlanks();
  if (!number(&cpu)) return -1;
  skipBlanks();
  if (!number(&delay)) return -1;
  return delay;
}

void setCpuWaitEnabled(bool on) {
  gEnabled.store(on ? 1 : 0, std::memory_order_relaxed);
}

int64_t threadRunDelayNs() {
  if (!enabled()) return -1;
  const pid_t pid = ::getpid();
  if (tFd.fd == -2 || tFd.pid != pid) {
    if (tFd.fd >= 0) ::close(tFd.fd);
    tFd.fd = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    tFd.pid = pid;
  }
  if (tFd.fd < 0) return -1;
  char buf[96];
  const ssize_t n = ::pread(tFd.fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return -1;
  return parseRunDelay(buf, static_cast<long>(n));
}

}  // namespace trainscope::probe
