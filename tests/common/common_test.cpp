#include <catch2/catch.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "schema/wire.h"

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

TEST_CASE("wire decode rejects by reason and accepts a stamped envelope") {
  wire::Envelope env;
  env.mutable_heartbeat()->set_node("n1");
  std::string frame = wire::encode(env);
  auto ok = wire::decode(frame.data(), frame.size());
  REQUIRE(ok.isOk());
  CHECK(ok->heartbeat().node() == "n1");

  std::string junk = "\xff\xff\xff\xff garbage";
  auto bad = wire::decode(junk.data(), junk.size());
  REQUIRE_FALSE(bad.isOk());
  CHECK(wire::rejectReason(bad.message()) == "malformed");

  env.set_schema_version(99);
  std::string other;
  env.SerializeToString(&other);
  auto version = wire::decode(other.data(), other.size());
  REQUIRE_FALSE(version.isOk());
  CHECK(wire::rejectReason(version.message()) == "version");

  std::string big(wire::kMaxFrameBytes + 1, 'x');
  auto oversized = wire::decode(big.data(), big.size());
  CHECK(wire::rejectReason(oversized.message()) == "oversized");

  wire::Envelope empty;
  std::string emptyFrame = wire::encode(empty);
  auto none = wire::decode(emptyFrame.data(), emptyFrame.size());
  CHECK(wire::rejectReason(none.message()) == "empty");
}
