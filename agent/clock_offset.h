// ClockOffsetEstimator: NTP-style estimate of (collector clock - agent clock) from heartbeat
// round trips, keeping the lowest-rtt sample of the last few. Pure arithmetic, no clock of its
// own; not thread-safe (the agent's event loop owns it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>

namespace trainscope::agent {

struct OffsetSample {
  int64_t offsetNs = 0;  // collector clock minus agent clock
  int64_t rttNs = 0;     // network round trip, collector processing time excluded
};

class ClockOffsetEstimator {
 public:
  // window: how many recent samples compete; the one with the lowest rtt wins because its
  // offset error is bounded by rtt / 2.
  explicit ClockOffsetEstimator(size_t window = 16) : window_(window == 0 ? 1 : window) {}

  // t1 agent send, t2 collector receive, t3 collector send, t4 agent receive. Returns false
  // (and keeps nothing) for impossible timestamps: t4 < t1 or t3 < t2 or a negative rtt.
  bool add(int64_t t1, int64_t t2, int64_t t3, int64_t t4);

  bool hasEstimate() const { return !samples_.empty(); }
  // The lowest-rtt sample of the window; zeros when there is none.
  OffsetSample best() const;
  size_t size() const { return samples_.size(); }

  // The formulas, exposed for tests.
  static OffsetSample compute(int64_t t1, int64_t t2, int64_t t3, int64_t t4);

 private:
  size_t window_;
  std::deque<OffsetSample> samples_;
};

}  // namespace trainscope::agent
