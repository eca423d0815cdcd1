// Capture states (schema/capture_state.h): every state's name round-trips and nothing else
// parses; a CommandStatus carries both the enum and the string, and a reader understands a
// peer from before the enum (string only) as well as one that sends only the enum.
#include "schema/capture_state.h"

#include <string>

#include <catch2/catch.hpp>

#include "schema/wire.h"

using namespace trainscope;
using wire::CaptureState;
using wire::RankState;

TEST_CASE("every capture and rank state's name parses back to it; other text does not") {
  for (RankState s : {RankState::kPending, RankState::kRecording, RankState::kUploading,
                      RankState::kDone, RankState::kFailed}) {
    CHECK(wire::parseRankState(wire::toString(s)) == s);
  }
  for (CaptureState s : {CaptureState::kRunning, CaptureState::kComplete, CaptureState::kPartial,
                         CaptureState::kFailed}) {
    CHECK(wire::parseCaptureState(wire::toString(s)) == s);
  }
  // The JSON API's names, which clients (the CLI, the dashboard) compare against.
  CHECK(std::string(wire::toString(RankState::kUploading)) == "uploading");
  CHECK(std::string(wire::toString(CaptureState::kPartial)) == "partial");
  CHECK_FALSE(wire::parseRankState("Done"));
  CHECK_FALSE(wire::parseRankState(""));
  CHECK_FALSE(wire::parseRankState("complete"));  // a capture's state, not a rank's
  CHECK_FALSE(wire::parseCaptureState("done"));
  CHECK(wire::isFinal(RankState::kDone));
  CHECK(wire::isFinal(RankState::kFailed));
  CHECK_FALSE(wire::isFinal(RankState::kUploading));
}

TEST_CASE("a command status carries the enum and the string; readers take either") {
  wire::CommandStatus both;
  wire::setCommandState(&both, RankState::kUploading);
  CHECK(both.state() == "uploading");  // what a collector from before the enum reads
  CHECK(both.rank_state() == wire::RANK_CAPTURE_UPLOADING);
  CHECK(wire::commandState(both) == RankState::kUploading);

  // A probe or agent from before the enum: the string only, through a real frame.
  wire::Envelope old;
  old.mutable_command_status()->set_state("recording");
  const std::string frame = wire::encode(old);
  auto decoded = wire::decode(frame.data(), frame.size());
  REQUIRE(decoded);
  CHECK(decoded->command_status().rank_state() == wire::RANK_CAPTURE_UNSPECIFIED);
  CHECK(wire::commandState(decoded->command_status()) == RankState::kRecording);

  // A sender that sets only the enum; and the enum wins where the two disagree.
  wire::CommandStatus enumOnly;
  enumOnly.set_rank_state(wire::RANK_CAPTURE_FAILED);
  CHECK(wire::commandState(enumOnly) == RankState::kFailed);
  enumOnly.set_state("done");
  CHECK(wire::commandState(enumOnly) == RankState::kFailed);

  // Neither names a state.
  wire::CommandStatus none;
  CHECK_FALSE(wire::commandState(none));
  none.set_state("paused");
  CHECK_FALSE(wire::commandState(none));
}
