#include "schema/capture_state.h"

#include <array>
#include <utility>

namespace trainscope::wire {
namespace {

// The one table of names, in the enums' order.
constexpr std::array<std::pair<RankState, const char*>, 5> kRankNames{{
    {RankState::kPending, "pending"},
    {RankState::kRecording, "recording"},
    {RankState::kUploading, "uploading"},
    {RankState::kDone, "done"},
    {RankState::kFailed, "failed"},
}};
constexpr std::array<std::pair<CaptureState, const char*>, 4> kCaptureNames{{
    {CaptureState::kRunning, "running"},
    {CaptureState::kComplete, "complete"},
    {CaptureState::kPartial, "partial"},
    {CaptureState::kFailed, "failed"},
}};

// The wire's values, in RankState's order.
constexpr std::array<RankCaptureState, 5> kRankWire{RANK_CAPTURE_PENDING, RANK_CAPTURE_RECORDING,
                                                    RANK_CAPTURE_UPLOADING, RANK_CAPTURE_DONE,
                                                    RANK_CAPTURE_FAILED};

template <typename Table, typename E>
const char* nameIn(const Table& table, E state) {
  for (const auto& [s, name] : table) {
    if (s == state) return name;
  }
  return "unknown";
}

template <typename E, typename Table>
std::optional<E> parseIn(const Table& table, std::string_view text) {
  for (const auto& [s, name] : table) {
    if (text == name) return s;
  }
  return std::nullopt;
}

}  // namespace

const char* toString(RankState state) {
  return nameIn(kRankNames, state);
}

const char* toString(CaptureState state) {
  return nameIn(kCaptureNames, state);
}

std::optional<RankState> parseRankState(std::string_view text) {
  return parseIn<RankState>(kRankNames, text);
}

std::optional<CaptureState> parseCaptureState(std::string_view text) {
  return parseIn<CaptureState>(kCaptureNames, text);
}

std::optional<RankState> commandState(const CommandStatus& status) {
  for (size_t i = 0; i < kRankWire.size(); ++i) {
    if (status.rank_state() == kRankWire[i]) return kRankNames[i].first;
  }
  return parseRankState(status.state());
}

void setCommandState(CommandStatus* status, RankState state) {
  status->set_state(toString(state));
  status->set_rank_state(kRankWire[static_cast<size_t>(state)]);
}

}  // namespace trainscope::wire
