#include "agent/probe/progress.h"

#include <algorithm>

namespace trainscope::probe {

void ProgressTracker::add(uint32_t ring, const Record& r) {
  if (r.type != RecordType::kWaitHint) lastRecordNs_ = std::max(lastRecordNs_, r.t0);
  switch (r.type) {
    case RecordType::kStepBegin:
      openStep_ = r.step;
      openStepBeginNs_ = r.t0;
      return;
    case RecordType::kStepEnd: {
      lastStep_ = std::max(lastStep_, r.step);
      if (openStep_ == r.step) openStep_ = -1;
      // A begin that outlived a whole step without its end lost its pair (an end recorded on
      // another thread, a ring drop); kept, it would show the rank as waiting forever.
      for (auto& [id, stack] : open_) {
        stack.erase(std::remove_if(stack.begin(), stack.end(),
                                   [&](int64_t t) { return t < openStepBeginNs_; }),
                    stack.end());
      }
      return;
    }
    case RecordType::kCollBegin: {
      ++collectivesBegun_;
      auto& stack = open_[ring];
      if (stack.size() < kMaxOpenPerRing) stack.push_back(r.t0);
      return;
    }
    case RecordType::kCollEnd: {
      auto it = open_.find(ring);
      if (it != open_.end() && !it->second.empty()) it->second.pop_back();
      return;
    }
    case RecordType::kCollective:
      ++collectivesBegun_;
      lastRecordNs_ = std::max(lastRecordNs_, r.t1);
      return;
    case RecordType::kWaitHint:
      waitSince_ = r.t0;
      return;
    case RecordType::kRange:
    case RecordType::kOp:
    case RecordType::kP2p:  // complete when recorded; not a collective every rank enters
      lastRecordNs_ = std::max(lastRecordNs_, r.t1);
      return;
    default:  // range push/pop and kinds that say nothing about steps or collectives
      return;
  }
}

int64_t ProgressTracker::collectiveSinceNs() const {
  int64_t since = waitSince_;
  for (const auto& [ring, stack] : open_) {
    if (!stack.empty() && (since == 0 || stack.front() < since)) since = stack.front();
  }
  return since;
}

void ProgressTracker::fill(wire::RankProgress* out) const {
  out->set_last_step(lastStep_);
  out->set_open_step(openStep_);
  out->set_last_record_ns(lastRecordNs_);
  out->set_collective_since_ns(collectiveSinceNs());
  out->set_collectives_begun(collectivesBegun_);
}

wire::RankProgress ProgressTracker::progress() const {
  wire::RankProgress p;
  fill(&p);
  return p;
}

}  // namespace trainscope::probe
