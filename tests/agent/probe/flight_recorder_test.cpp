#include "agent/probe/flight_recorder.h"

#include <catch2/catch.hpp>

using trainscope::probe::FlightRecorder;
using trainscope::probe::Record;

namespace {
std::vector<Record> records(int64_t step, size_t n) {
  std::vector<Record> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = Record{};
    v[i].step = step;
    v[i].t0 = static_cast<int64_t>(i);
  }
  return v;
}
}  // namespace

TEST_CASE("flight recorder keeps the last K steps, oldest evicted first") {
  FlightRecorder fr(3, 1u << 20);
  for (int64_t s = 1; s <= 5; ++s) fr.add(s, records(s, 10));
  CHECK(fr.steps() == 3);
  CHECK(fr.bytes() == size_t{3} * 10 * sizeof(Record));
  CHECK(fr.heldSteps() == std::vector<int64_t>{3, 4, 5});
  auto snap = fr.snapshot(4, 10);
  REQUIRE(snap.size() == 20);
  CHECK(snap.front().step == 4);
  CHECK(snap.back().step == 5);
  CHECK(fr.snapshot(1, 2).empty());
}

TEST_CASE("flight recorder stays within its byte bound") {
  const uint64_t bound = 100 * sizeof(Record);
  FlightRecorder fr(8, bound);
  fr.add(1, records(1, 40));
  fr.add(2, records(2, 40));
  fr.add(3, records(3, 40));  // 120 records > 100: step 1 goes
  CHECK(fr.bytes() <= bound);
  CHECK(fr.heldSteps() == std::vector<int64_t>{2, 3});
  fr.add(4, records(4, 500));  // alone bigger than the bound: truncated, everything else goes
  CHECK(fr.bytes() == bound);
  CHECK(fr.heldSteps() == std::vector<int64_t>{4});
}
