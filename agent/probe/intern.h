// The process-wide table of interned names (operators, ranges, process groups). Thread-safe:
// interning locks and may allocate, so callers intern once outside the hot loop.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace trainscope::probe {

// Same string, same id; ids start at 1 (0 is "no name").
uint32_t internName(std::string_view name);
// The string of an id; "" for 0 or an unknown id. The pointer stays valid for the process.
const char* nameString(uint32_t id);

}  // namespace trainscope::probe
