// The bound on the jobs one sender may start (collector/ingest/job_limiter.h): a burst, then a
// rate; jobs already seen cost nothing, from any sender; what it remembers is bounded.
#include "collector/ingest/job_limiter.h"

#include <string>

#include <catch2/catch.hpp>

#include "tests/common/gcc12_string_warnings.h"  // last: GCC 12 -O3 false positives

using trainscope::ingest::NewJobLimiter;
using trainscope::ingest::NewJobLimits;

namespace {
constexpr int64_t kSec = 1'000'000'000;
}

TEST_CASE("new jobs: a sender starts a burst of jobs, then only as many as the rate allows") {
  NewJobLimits limits;
  limits.burst = 100;
  limits.perSecond = 10;
  NewJobLimiter limiter(limits);
  int admitted = 0;
  for (int i = 0; i < 10'000; ++i) {
    admitted += limiter.admit("flood", "j" + std::to_string(i), kSec) ? 1 : 0;
  }
  CHECK(admitted == 100);
  // Another sender has its own bucket; jobs already seen pass for anyone.
  CHECK(limiter.admit("agent", "mine", kSec));
  CHECK(limiter.admit("flood", "mine", kSec));
  CHECK(limiter.admit("other", "j5", kSec));
  // One second later, ten more.
  admitted = 0;
  for (int i = 10'000; i < 10'100; ++i) {
    admitted += limiter.admit("flood", "j" + std::to_string(i), 2 * kSec) ? 1 : 0;
  }
  CHECK(admitted == 10);
}

TEST_CASE("new jobs: the jobs and senders remembered are bounded") {
  NewJobLimits limits;
  limits.burst = 1e9;
  limits.maxKnownJobs = 1000;
  limits.maxSenders = 50;
  NewJobLimiter limiter(limits);
  for (int i = 0; i < 5000; ++i) {
    REQUIRE(limiter.admit("s" + std::to_string(i % 200), "j" + std::to_string(i), kSec));
  }
  CHECK(limiter.knownJobs() == 1000);
  CHECK(limiter.senders() == 50);
}
