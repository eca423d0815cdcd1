// Capture states, typed: a capture's (CaptureState) and each rank's part in it
// (RankCaptureState, also on the wire as CommandStatus.rank_state), with the one place that
// names them as strings (the JSON API, the store's columns, CommandStatus.state for peers from
// before the enum). Pure functions, safe from any thread.
#pragma once

#include <optional>
#include <string_view>

#include "schema/trainscope.pb.h"

namespace trainscope::wire {

// A rank's part in a capture: pending until its probe starts, recording its steps, uploading
// the file, then done or failed (final).
enum class RankState { kPending, kRecording, kUploading, kDone, kFailed };
// A capture: running until every rank is final, then complete (every rank done), partial
// (some) or failed (none).
enum class CaptureState { kRunning, kComplete, kPartial, kFailed };

// "pending", "recording", "uploading", "done", "failed".
const char* toString(RankState state);
// "running", "complete", "partial", "failed".
const char* toString(CaptureState state);
// The inverse of toString; nullopt for any other text.
std::optional<RankState> parseRankState(std::string_view text);
std::optional<CaptureState> parseCaptureState(std::string_view text);

inline bool isFinal(RankState state) {
  return state == RankState::kDone || state == RankState::kFailed;
}

// A status's state: rank_state when the sender set it, else its string `state` (a peer from
// before the enum); nullopt when neither names a state.
std::optional<RankState> commandState(const CommandStatus& status);
// Sets both rank_state and the string `state`, so peers from before the enum understand it.
void setCommandState(CommandStatus* status, RankState state);

}  // namespace trainscope::wire
