#include "common/log.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <set>
#include <string>

namespace trainscope {
namespace {

LogLevel levelFromEnv() {
  const char* env = std::getenv("TRAINSCOPE_LOG");
  if (env == nullptr) return LogLevel::kInfo;
  std::string_view v(env);
  if (v == "debug") return LogLevel::kDebug;
  if (v == "warn") return LogLevel::kWarn;
  if (v == "error") return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& levelStore() {
  static std::atomic<int> level{static_cast<int>(levelFromEnv())};
  return level;
}

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "?";
}

}  // namespace

void setLogLevel(LogLevel level) {
  levelStore().store(static_cast<int>(level));
}
LogLevel logLevel() {
  return static_cast<LogLevel>(levelStore().load());
}

void logLine(LogLevel level, std::string_view component, std::string_view message) {
  if (static_cast<int>(level) < levelStore().load(std::memory_order_relaxed)) return;
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm parts{};
  gmtime_r(&ts.tv_sec, &parts);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &parts);
  // One fprintf per line keeps lines from different threads whole.
  std::fprintf(stderr, "%s.%03ldZ %-5s %.*s: %.*s\n", stamp, ts.tv_nsec / 1000000, levelName(level),
               static_cast<int>(component.size()), component.data(),
               static_cast<int>(message.size()), message.data());
}

void logOnce(LogLevel level, std::string_view component, std::string_view key,
             std::string_view message) {
  // Never destroyed: threads that outlive main (a probe's runtime thread stopped by an atexit
  // hook registered before this state existed) may still log while static objects go.
  struct Seen {
    std::mutex mu;
    std::set<std::string, std::less<>> keys;
  };
  static auto* seen = new Seen;
  {
    std::lock_guard lock(seen->mu);
    if (!seen->keys.emplace(std::string(component) + "/" + std::string(key)).second) return;
  }
  logLine(level, component, message);
}

void RateLimitedLog::log(LogLevel level, std::string_view component, std::string_view message) {
  uint64_t suppressed = 0;
  {
    MutexLock lock(&mu_);
    auto now = std::chrono::steady_clock::now();
    if (last_ != std::chrono::steady_clock::time_point{} && now - last_ < interval_) {
      ++suppressed_;
      return;
    }
    last_ = now;
    suppressed = suppressed_;
    suppressed_ = 0;
  }
  if (suppressed == 0) {
    logLine(level, component, message);
  } else {
    logLine(
        level, component,
        std::string(message) + " (" + std::to_string(suppressed) + " similar lines suppressed)");
  }
}

}  // namespace trainscope
