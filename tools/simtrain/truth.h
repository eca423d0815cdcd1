// The truth file of a simulated run: which faults were injected where, so a test or a
// benchmark can score what the detectors found. Pure functions, safe from any thread.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "tools/simtrain/sim_options.h"

namespace trainscope::sim {

// A JSON list with one object per --inject: {"kind", "ranks": [...], "from_step", "factor"},
// plus "op" for op_regression and "every" for spike. A hang's factor is 0 (no slow-down: it
// never finishes); its from_step is the step that hangs. A seqlen fault has "cv" and factor
// 1 + cv (its size, for tables); a p2p fault "from_rank" and "to_rank" (ranks: both, sender
// first); a gpu fault its rank's "coords"; an experts fault its hot "ep" index, "skew" (its
// factor) and "coords" {"ep": K}, ranks every rank at that expert-parallel index. With
// --parallel each also has the pipeline "schedule" (as given) and "microbatches" (per step).
nlohmann::json truthJson(const SimOptions& options);

// Writes truthJson() to `path` (replacing it). The message names the path on failure.
Status writeTruth(const SimOptions& options, const std::string& path);

}  // namespace trainscope::sim
