// The wire codec (schema/wire.h): frames encode with the schema version stamped, and decode
// rejects what a peer must not accept, with a reason token each reject is counted under.
#include "schema/wire.h"

#include <string>

#include <catch2/catch.hpp>

using namespace trainscope;

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
