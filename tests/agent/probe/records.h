// Record builders shared by the probe's tests; plain functions, any thread.
#pragma once

#include <cstdint>

#include "agent/probe/record.h"

namespace trainscope::probe::testing {

// A record of `type` for `step` with times t0 (and t1 where the type has an end).
inline Record rec(RecordType type, int64_t step, int64_t t0, int64_t t1 = 0) {
  Record r{};
  r.type = type;
  r.step = step;
  r.t0 = t0;
  r.t1 = t1;
  return r;
}

}  // namespace trainscope::probe::testing
