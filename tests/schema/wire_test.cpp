// The wire codec (schema/wire.h): frames encode with the schema version stamped, and decode
// rejects what a peer must not accept, with a reason token each reject is counted under;
// protobuf's own log lines go through a rate limit.
#include "schema/wire.h"

#include <string>

#include <catch2/catch.hpp>

#include "tests/common/capture_stderr.h"

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
  CHECK(wire::rejectReason(bad.status()) == "malformed");

  env.set_schema_version(99);
  std::string other;
  env.SerializeToString(&other);
  auto version = wire::decode(other.data(), other.size());
  REQUIRE_FALSE(version.isOk());
  CHECK(wire::rejectReason(version.status()) == "version");

  std::string big(wire::kMaxFrameBytes + 1, 'x');
  auto oversized = wire::decode(big.data(), big.size());
  CHECK(wire::rejectReason(oversized.status()) == "oversized");

  wire::Envelope empty;
  std::string emptyFrame = wire::encode(empty);
  auto none = wire::decode(emptyFrame.data(), emptyFrame.size());
  CHECK(wire::rejectReason(none.status()) == "empty");
  // The messages still open with the reason's token, for people reading logs.
  CHECK(bad.message().rfind("malformed: ", 0) == 0);
  CHECK(version.message().rfind("version: ", 0) == 0);
  CHECK(oversized.message().rfind("oversized: ", 0) == 0);
  CHECK(none.message().rfind("empty: ", 0) == 0);
  // The reason comes from the code, never from the message's text.
  CHECK(wire::rejectReason(trainscope::Status::error(trainscope::StatusCode::kMalformed,
                                                     "version: looks like another reason")) ==
        "malformed");
  CHECK(wire::rejectReason(trainscope::Status::error("oversized: not a decode failure")) ==
        "invalid");
}

namespace {

size_t countOf(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("protobuf's own error log goes through a rate limit once routed") {
  wire::Envelope env;
  env.mutable_rank_hello()->mutable_rank()->set_job("bad\xff\xfe");
  env.set_schema_version(wire::kSchemaVersion);
  std::string frame;
  env.SerializePartialToString(&frame);
  auto decodeMany = [&] {
    for (int i = 0; i < 1000; ++i) {
      auto r = wire::decode(frame.data(), frame.size());
      REQUIRE_FALSE(r);  // invalid UTF-8 in a string field: malformed
    }
  };
  wire::routeProtobufLogs();
  std::string text = testing::captureStderr(decodeMany);
  INFO(text);
  CHECK(countOf(text, "invalid UTF-8") == 1);  // was 1,000: one line per frame
  CHECK(countOf(text, " protobuf: ") == 1);
}
