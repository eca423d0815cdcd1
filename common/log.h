// Logging for daemons and for the probe. Lines go to stderr with a time, a level and a
// component. Safe from any thread. `logOnce` and `RateLimitedLog` keep a repeating failure
// from flooding the log: the probe logs every error once and swallows it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/thread_annotations.h"

namespace trainscope {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Lines below this level are not written. Read once from TRAINSCOPE_LOG (debug, info,
// warn, error) at first use; setLogLevel overrides it.
void setLogLevel(LogLevel level);
LogLevel logLevel();

void logLine(LogLevel level, std::string_view component, std::string_view message);

inline void logDebug(std::string_view c, std::string_view m) {
  logLine(LogLevel::kDebug, c, m);
}
inline void logInfo(std::string_view c, std::string_view m) {
  logLine(LogLevel::kInfo, c, m);
}
inline void logWarn(std::string_view c, std::string_view m) {
  logLine(LogLevel::kWarn, c, m);
}
inline void logError(std::string_view c, std::string_view m) {
  logLine(LogLevel::kError, c, m);
}

// Logs `message` the first time this key is seen in the process, then stays quiet.
void logOnce(LogLevel level, std::string_view component, std::string_view key,
             std::string_view message);

// Lets at most one line through per interval and reports how many were suppressed.
class RateLimitedLog {
 public:
  explicit RateLimitedLog(std::chrono::milliseconds interval) : interval_(interval) {}
  void log(LogLevel level, std::string_view component, std::string_view message);

 private:
  std::chrono::milliseconds interval_;
  Mutex mu_;
  std::chrono::steady_clock::time_point last_ GUARDED_BY(mu_){};
  uint64_t suppressed_ GUARDED_BY(mu_) = 0;
};

}  // namespace trainscope
