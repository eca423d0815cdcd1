// A bound on the jobs one sender may start. Any ingest sender could make 10,000 jobs a second,
// each a row in the jobs table, an entry in every per-job table and cache, and a line in every
// jobs listing. Each sender (an agent's node, or its address before it said hello) gets a
// token bucket: a job the collector has not seen lately costs one token, and tokens come back
// at `perSecond` up to `burst`. Jobs seen lately, from any sender, cost nothing, so a job's
// ranks on many nodes are never refused. Pure: the caller passes the time. Socket thread only.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>

namespace trainscope::ingest {

struct NewJobLimits {
  // A sender may start this many jobs at once (a node starting many small jobs together)...
  double burst = 200;
  // ...and this many a second after that: far above real training, far below a flood.
  double perSecond = 20;
  // Jobs remembered as seen (the least recently seen are forgotten first and cost a token
  // again when they return) and senders remembered (the least recently heard first).
  size_t maxKnownJobs = 65'536;
  size_t maxSenders = 16'384;
};

class NewJobLimiter {
 public:
  explicit NewJobLimiter(NewJobLimits limits = {}) : limits_(limits) {}

  // Whether `sender` may send items of `job` at monotonic time nowNs. A refused job is not
  // remembered: a later try costs a token again.
  bool admit(std::string_view sender, const std::string& job, int64_t nowNs);

  size_t knownJobs() const { return known_.size(); }
  size_t senders() const { return senders_.size(); }

 private:
  struct Bucket {
    double tokens = 0;
    int64_t atNs = 0;
    std::list<std::string>::iterator order;
  };
  NewJobLimits limits_;
  std::list<std::string> jobOrder_;  // least recently seen first
  std::unordered_map<std::string, std::list<std::string>::iterator> known_;
  std::list<std::string> senderOrder_;  // least recently heard first
  std::unordered_map<std::string, Bucket> senders_;
};

}  // namespace trainscope::ingest
