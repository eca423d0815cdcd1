#include <string>

#include <catch2/catch.hpp>

#include "common/clock.h"
#include "common/status.h"

using namespace trainscope;

TEST_CASE("Result carries a value or the reason there is none") {
  Result<int> good = 42;
  REQUIRE(good.isOk());
  CHECK(*good == 42);
  Result<int> bad = Result<int>::error("no value");
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.message() == "no value");
}

TEST_CASE("ManualClock moves only when told") {
  ManualClock clock(100);
  CHECK(clock.nowNs() == 100);
  clock.advance(5);
  CHECK(clock.nowNs() == 105);
}
