// Clocks. Every timestamp trainscope records is nanoseconds since the Unix epoch
// (CLOCK_REALTIME), so records from many hosts can be aligned with the agents' measured clock
// offsets. Code that decides by time takes a Clock so tests can drive it without sleeping.
#pragma once

#include <atomic>
#include <cstdint>
#include <ctime>

namespace trainscope {

inline int64_t wallNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

inline int64_t monotonicNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// A source of wall time. Implementations must be safe to call from any thread.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t nowNs() const = 0;
};

class SystemClock final : public Clock {
 public:
  int64_t nowNs() const override { return wallNowNs(); }
};

// A clock a test sets by hand.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t startNs = 0) : now_(startNs) {}
  int64_t nowNs() const override { return now_.load(); }
  void set(int64_t ns) { now_.store(ns); }
  void advance(int64_t ns) { now_.fetch_add(ns); }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace trainscope
