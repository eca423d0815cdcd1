// Capture requests (docs/CAPTURE.md): parsing and validating the POST body, rank specs
// ("0,3,5-7", a JSON list, "all") and capture ids. Pure functions, safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace trainscope::capture {

inline constexpr uint32_t kDefaultSteps = 5;
inline constexpr uint32_t kDefaultHistory = 4;
inline constexpr uint32_t kMaxSteps = 1000;
inline constexpr uint32_t kMaxHistory = 1000;
inline constexpr uint64_t kDefaultMaxBytes = 64ull << 20;
// The largest max_bytes a request may ask for: a rank file is decompressed whole for the merge
// (at most 1 GiB of JSON, MergeOptions), so a larger compressed file could never be merged.
inline constexpr uint64_t kMaxMaxBytes = 1ull << 30;
inline constexpr const char* kDefaultReason = "on request";

// A rank selection before the job's world size is known: every rank, or a list.
struct RankSpec {
  bool all = true;
  std::vector<uint32_t> ranks;  // sorted, unique; only when !all
};

// What a person (or the automatic trigger) asks for. Unset optionals take the defaults of
// docs/CAPTURE.md, which depend on the job (all ranks; latest step + 2).
struct CaptureRequest {
  RankSpec ranks;
  uint32_t steps = kDefaultSteps;      // N
  std::optional<int64_t> startStep;    // S
  uint32_t history = kDefaultHistory;  // K
  std::optional<uint64_t> maxBytes;    // per rank, compressed; unset: the collector's default
  std::string reason = kDefaultReason;
  std::string kind = "trace";  // "trace" or "stacks"
  // Automatic captures (not a POST field): the anomaly's onset step. K then grows past
  // `history` so the held steps begin kOnsetLeadSteps before it, up to historyLimit steps; the
  // reason says whether the onset is covered or out of reach.
  std::optional<int64_t> onsetStep;
  uint32_t historyLimit = kMaxHistory;
};

// Healthy steps an automatic capture's history holds before the anomaly's onset, so the trace
// shows the change, not only its result.
inline constexpr int64_t kOnsetLeadSteps = 3;

// "all", or comma-separated ranks and inclusive ranges ("0,3,5-7"). Errors name the field
// "ranks" and quote the bad part; a rank at or above wire::kMaxWorldSize is refused.
Result<RankSpec> parseRankSpec(std::string_view text);

// Parses a POST body (a JSON object with the fields of docs/CAPTURE.md; empty means {}).
// Every error names the field (callers answer it as invalid input): unknown fields, wrong
// types, N = 0 or N > 1000, K > 1000, max_bytes = 0 or above kMaxMaxBytes, an unknown kind, a
// body that is not a JSON object.
Result<CaptureRequest> parseCaptureRequest(std::string_view body);

// The spec's ranks for a job of `worldSize` ranks, sorted and unique; fails (invalid input) on
// a rank outside 0..worldSize-1, or a world size above wire::kMaxWorldSize (a database from
// before the limit). "all" of a job whose world size is unknown (0) is `knownRanks`.
Result<std::vector<uint32_t>> resolveRanks(const RankSpec& spec, uint32_t worldSize,
                                           const std::vector<uint32_t>& knownRanks);

// "cap-<unix ms>-<4 hex>" for a capture created at `nowNs`; the hex part is random.
std::string newCaptureId(int64_t nowNs);

}  // namespace trainscope::capture
