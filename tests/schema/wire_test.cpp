// The wire codec (schema/wire.h): frames encode with the schema version stamped, and decode
// rejects what a peer must not accept, with a reason token each reject is counted under;
// protobuf's own log lines go through a rate limit.
#include "schema/wire.h"

#include <string>
#include <string_view>

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

TEST_CASE("itemRouteKey reads the job (a host sample's node) of every spooled item kind") {
  auto key = [](wire::Envelope env) {
    std::string bytes = wire::encode(env);
    std::string_view k;
    return wire::itemRouteKey(bytes, &k) ? std::string(k) : std::string("<none>");
  };
  wire::Envelope step;
  step.mutable_step()->set_rank(7);  // fields before and after the job are skipped
  step.mutable_step()->set_step(12);
  step.mutable_step()->set_job("job-s");
  step.mutable_step()->set_duration_ns(5);
  step.mutable_step()->add_ops()->set_name("aten::mm");
  CHECK(key(step) == "job-s");
  wire::Envelope hello;
  hello.mutable_rank_hello()->set_sent_ns(9);
  hello.mutable_rank_hello()->mutable_rank()->set_rank(1);
  hello.mutable_rank_hello()->mutable_rank()->set_job("job-h");
  CHECK(key(hello) == "job-h");
  wire::Envelope bye;
  bye.mutable_rank_goodbye()->set_job("job-g");
  CHECK(key(bye) == "job-g");
  wire::Envelope host;
  host.mutable_host()->set_time_ns(3);
  host.mutable_host()->set_node("node-1");
  host.mutable_host()->add_procs()->set_job("not-this");
  CHECK(key(host) == "node-1");
  wire::Envelope status;
  status.mutable_command_status()->set_command_id("cmd");
  status.mutable_command_status()->set_job("job-c");
  CHECK(key(status) == "job-c");
  wire::Envelope chunk;
  chunk.mutable_file_chunk()->set_command_id("cmd");
  chunk.mutable_file_chunk()->set_job("job-f");
  chunk.mutable_file_chunk()->set_data(std::string(100, 'x'));
  CHECK(key(chunk) == "job-f");
  // An empty job is a key too; what has none, or is cut short, is not.
  wire::Envelope noJob;
  noJob.mutable_step()->set_step(1);
  CHECK(key(noJob) == "<none>");
  wire::Envelope hb;
  hb.mutable_heartbeat()->set_node("n");
  CHECK(key(hb) == "<none>");
  const std::string cut = wire::encode(step).substr(0, 3);  // the body's length is cut off
  std::string_view k;
  CHECK_FALSE(wire::itemRouteKey(cut, &k));
}
