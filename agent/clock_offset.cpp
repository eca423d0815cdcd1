#include "agent/clock_offset.h"

namespace trainscope::agent {

OffsetSample ClockOffsetEstimator::compute(int64_t t1, int64_t t2, int64_t t3, int64_t t4) {
  OffsetSample s;
  // Halve each difference before adding so large epoch values cannot overflow.
  s.offsetNs = (t2 - t1) / 2 + (t3 - t4) / 2;
  s.rttNs = (t4 - t1) - (t3 - t2);
  return s;
}

bool ClockOffsetEstimator::add(int64_t t1, int64_t t2, int64_t t3, int64_t t4) {
  if (t4 < t1 || t3 < t2) return false;
  OffsetSample s = compute(t1, t2, t3, t4);
  if (s.rttNs < 0) return false;
  samples_.push_back(s);
  while (samples_.size() > window_) samples_.pop_front();
  return true;
}

OffsetSample ClockOffsetEstimator::best() const {
  OffsetSample out;
  bool first = true;
  for (const auto& s : samples_) {
    if (first || s.rttNs < out.rttNs) out = s;
    first = false;
  }
  return out;
}

}  // namespace trainscope::agent
