// The queue detectors append anomaly events to, with the id scheme that keeps ids unique.
// Owned by a DetectorSet (or a test); used only from its caller's thread.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "collector/detect/anomaly.h"

namespace trainscope::detect {

class EventLog {
 public:
  // Fills in the id ("<job>/<kind>/<onset>/<subject>", suffixed "#2", "#3" if that id was
  // used before in this log), sorts ranks and nodes, marks it open and queues it. Returns the
  // stored copy, which the detector keeps to resolve it later.
  Anomaly open(Anomaly anomaly, const std::string& subject);
  // Queues an update of `anomaly` with state resolved at `step`.
  void resolve(const Anomaly& anomaly, int64_t step, int64_t nowNs);
  // Queues `anomaly` (opened by this log, still open) as a refresh: its figures recomputed
  // while it lasts, under the id, detection step and time it was opened with.
  void refresh(const Anomaly& anomaly);

  std::vector<Anomaly> take();
  size_t pending() const { return events_.size(); }
  uint64_t opened() const { return opened_; }
  uint64_t resolved() const { return resolved_; }

 private:
  std::vector<Anomaly> events_;
  std::set<std::string> usedIds_;
  uint64_t opened_ = 0;
  uint64_t resolved_ = 0;
};

// "r3" or "r0-7" style: sorted ranks as compact ranges joined by '+': "r0-3+r6".
std::string rankSubject(const std::vector<uint32_t>& ranks);
// "rank 3" or "ranks 0, 1, 2, 3", for summaries.
std::string rankList(const std::vector<uint32_t>& ranks);
// Milliseconds with two decimals, for summaries.
std::string formatMs(double ns);
std::string formatRatio(double ratio);  // "1.10x"

}  // namespace trainscope::detect
