// The flight recorder: full records of the last K completed steps of one probe instance, in
// bounded memory, so a capture can include the steps before its trigger. The runtime thread
// adds; any thread may read (snapshot, sizes); a mutex guards the entries.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "agent/probe/record.h"
#include "common/thread_annotations.h"

namespace trainscope::probe {

// One held step: its bounds (0 when the adder did not give them) and its records.
struct HeldStep {
  int64_t step = 0;
  int64_t startNs = 0;
  int64_t endNs = 0;
  std::vector<Record> records;
};

class FlightRecorder {
 public:
  FlightRecorder(uint32_t maxSteps, uint64_t maxBytes);

  // Adds one completed step's records; evicts the oldest steps past either bound. A single
  // step bigger than the byte bound keeps its first records only.
  void add(int64_t step, std::vector<Record> records, int64_t startNs = 0, int64_t endNs = 0);

  // Records of the held steps with fromStep <= step <= toStep, oldest step first.
  // Unattributed records that arrived with a step come with it (their `step` is -1).
  std::vector<Record> snapshot(int64_t fromStep, int64_t toStep) const;

  // Copies of the held steps with fromStep <= step <= toStep, oldest first, with their bounds
  // (what a capture takes as its history).
  std::vector<HeldStep> stepsIn(int64_t fromStep, int64_t toStep) const;

  uint64_t bytes() const;
  uint64_t steps() const;
  // Steps held now, oldest first.
  std::vector<int64_t> heldSteps() const;

 private:
  const uint32_t maxSteps_;
  const uint64_t maxBytes_;
  mutable Mutex mu_;
  std::deque<HeldStep> entries_ GUARDED_BY(mu_);
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
};

}  // namespace trainscope::probe
