#include "collector/ingest/job_limiter.h"

#include <algorithm>

namespace trainscope::ingest {

bool NewJobLimiter::admit(std::string_view sender, const std::string& job, int64_t nowNs) {
  if (auto it = known_.find(job); it != known_.end()) {
    jobOrder_.splice(jobOrder_.end(), jobOrder_, it->second);
    return true;
  }
  std::string key(sender);
  auto [it, fresh] = senders_.try_emplace(key);
  Bucket& b = it->second;
  if (fresh) {
    b.tokens = limits_.burst;
    b.atNs = nowNs;
    b.order = senderOrder_.insert(senderOrder_.end(), key);
    while (senders_.size() > limits_.maxSenders) {
      senders_.erase(senderOrder_.front());
      senderOrder_.pop_front();
    }
  } else {
    senderOrder_.splice(senderOrder_.end(), senderOrder_, b.order);
    const double elapsed = static_cast<double>(std::max<int64_t>(0, nowNs - b.atNs)) / 1e9;
    b.tokens = std::min(limits_.burst, b.tokens + elapsed * limits_.perSecond);
    b.atNs = nowNs;
  }
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  known_.emplace(job, jobOrder_.insert(jobOrder_.end(), job));
  while (known_.size() > limits_.maxKnownJobs) {
    known_.erase(jobOrder_.front());
    jobOrder_.pop_front();
  }
  return true;
}

}  // namespace trainscope::ingest
