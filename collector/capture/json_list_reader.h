// Reads one list out of a JSON document entry by entry, e.g. the "traceEvents" of a Chrome
// trace, without holding the document: how the merge (merge.h) reads rank files of any size
// in bounded memory, and how it refuses what would take the collector down (nesting deep
// enough to overflow the stack of a recursive dump, one entry bigger than memory allows).
// A reader belongs to one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/byte_source.h"
#include "common/json_limits.h"
#include "common/status.h"

namespace trainscope::capture {

struct ListReadLimits {
  // Arrays and objects nested deeper than this, anywhere in the document, fail the read.
  int maxDepth = kMaxTraceJsonDepth;
  // One entry of the list taking more than this in memory (string bytes plus a fixed cost a
  // value, about what nlohmann::json holds) fails the read: the bound on a reader's memory.
  uint64_t maxEntryBytes = 16u << 20;
};

// What a read found.
struct ListReadOutcome {
  uint64_t entries = 0;  // entries of the list seen (handed on when a callback was given)
};

// Reads `source`, which must hold a JSON object with the array member `listKey` (once), and
// calls `onEntry` with each entry of that array, in order, as soon as it is complete; the
// other members are checked and skipped. With no `onEntry` the document is only checked: a
// caller that must not act on half a document reads it twice, checking first. Fails, saying
// why, on text that is not such a document, on the limits above, or on an error of `source`.
using ListEntryFn = std::function<void(nlohmann::json& entry)>;
Result<ListReadOutcome> readJsonList(ByteSource& source, const std::string& listKey,
                                     const ListReadLimits& limits, const ListEntryFn& onEntry);

}  // namespace trainscope::capture
