// ProgressTracker: where one rank is right now, from the same records the StepFolder is fed:
// the step it last ended and the one it has open, its newest record's time, and the oldest
// collective it entered and has not left (the RankProgress every RankHello carries). A rank
// stuck in its own code has no open collective; its peers wait in one. Pure and
// single-threaded: the runtime thread feeds it what it drains; tests feed it records.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "agent/probe/record.h"
#include "schema/trainscope.pb.h"

namespace trainscope::probe {

class ProgressTracker {
 public:
  // Open collective begins kept per ring (as the folder's maxPairDepth): deeper ones are
  // counted as begun but not tracked, so a begin without end cannot grow memory.
  static constexpr size_t kMaxOpenPerRing = 64;

  // Feeds one record taken from ring `ring`; collective begin/end pair per ring (the latest
  // open begin is the one an end completes, as in the folder).
  void add(uint32_t ring, const Record& r);
  // The progress as of the records fed so far.
  wire::RankProgress progress() const;
  void fill(wire::RankProgress* out) const;

  int64_t lastStep() const { return lastStep_; }
  int64_t openStep() const { return openStep_; }
  int64_t lastRecordNs() const { return lastRecordNs_; }
  // The oldest open collective's arrival, or the wait hint's time if older; 0: neither.
  int64_t collectiveSinceNs() const;
  uint64_t collectivesBegun() const { return collectivesBegun_; }

 private:
  int64_t lastStep_ = -1;
  int64_t openStep_ = -1;
  int64_t openStepBeginNs_ = 0;
  int64_t lastRecordNs_ = 0;
  uint64_t collectivesBegun_ = 0;
  int64_t waitSince_ = 0;  // ts_wait_hint: possibly blocked on communication since; 0: not
  std::unordered_map<uint32_t, std::vector<int64_t>> open_;  // ring -> arrival times, oldest first
};

}  // namespace trainscope::probe
