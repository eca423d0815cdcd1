// The JSON list of a capture's per-rank states, in the one shape both the store's rank_status
// column and the HTTP API's "rank_status" field use (docs/CAPTURE.md). Pure; any thread.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "collector/storage/store.h"

namespace trainscope::storage {

// [{"rank", "node", "state", "detail", "bytes", "truncated", "first_step", "last_step",
//   "updated_ns"}, ...] in the rows' order.
nlohmann::json rankStatusJson(const std::vector<CaptureRankRow>& ranks);

}  // namespace trainscope::storage
