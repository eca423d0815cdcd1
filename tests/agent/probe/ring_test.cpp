#include "agent/probe/ring.h"

#include <catch2/catch.hpp>

#include <thread>
#include <vector>

using trainscope::probe::Record;
using trainscope::probe::RecordType;
using trainscope::probe::Ring;
using trainscope::probe::ringCapacityFor;

namespace {
Record rec(int64_t i) {
  Record r{};
  r.type = RecordType::kOp;
  r.t0 = i;
  r.t1 = i + 1;
  return r;
}
}  // namespace

TEST_CASE("ring capacity rounds up to a power of two") {
  CHECK(ringCapacityFor(0) == 64);
  CHECK(ringCapacityFor(100) == 128);
  CHECK(ringCapacityFor(16384) == 16384);
  CHECK(ringCapacityFor(16385) == 32768);
}

TEST_CASE("a full ring drops and counts, and keeps the oldest records") {
  Ring ring(64);
  for (int i = 0; i < 70; ++i) ring.push(rec(i));
  CHECK(ring.dropped() == 6);
  std::vector<int64_t> seen;
  CHECK(ring.drain([&](const Record& r) { seen.push_back(r.t0); }) == 64);
  REQUIRE(seen.size() == 64);
  CHECK(seen.front() == 0);
  CHECK(seen.back() == 63);
  // Space is free again after the drain.
  CHECK(ring.push(rec(100)));
  CHECK(ring.dropped() == 6);
}

TEST_CASE("a ring wraps around many times in order") {
  Ring ring(64);
  int64_t next = 0;
  int64_t expect = 0;
  bool inOrder = true;
  for (int round = 0; round < 100; ++round) {
    for (int i = 0; i < 50; ++i) ring.push(rec(next++));
    ring.drain([&](const Record& r) { inOrder = inOrder && r.t0 == expect++; });
  }
  CHECK(inOrder);
  CHECK(expect == 5000);
  CHECK(ring.dropped() == 0);
}

TEST_CASE("a producer and a consumer thread see every record exactly once") {
  Ring ring(1024);
  constexpr int64_t kCount = 200000;
  uint64_t failedPushes = 0;  // the producer's own count, read after join
  std::thread producer([&] {
    for (int64_t i = 0; i < kCount; ++i) {
      while (!ring.push(rec(i))) ++failedPushes;
    }
  });
  int64_t expect = 0;
  bool inOrder = true;
  while (expect < kCount) {
    ring.drain([&](const Record& r) { inOrder = inOrder && r.t0 == expect++; });
  }
  producer.join();
  CHECK(inOrder);
  CHECK(expect == kCount);
  // Each failed push counted once. (Whether the ring ever filled depends on the scheduler:
  // a loaded machine may run the consumer fast enough that it never does.)
  CHECK(ring.dropped() == failedPushes);
}
