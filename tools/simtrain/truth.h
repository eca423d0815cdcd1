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
// Every fault but a hang or a spike has "gain": truthGains' (what detectors' estimated_gain
// is scored against, in-process and live).
nlohmann::json truthJson(const SimOptions& options);

// Per --inject, the fraction of step time the job would save without it: the same job (same
// seed, so the same noise draws) run through the step model without that fault, the median
// over the steps from its onset (after the warm-up) of (T - T without) / T. NaN for a hang (no
// step to compare) or a spike (a notice), or when no step follows the onset. At most
// kTruthGainSteps steps are replayed (all of them for --steps 0 runs up to that bound).
inline constexpr int64_t kTruthGainSteps = 5000;
std::vector<double> truthGains(const SimOptions& options);

// Writes truthJson() to `path` (replacing it). The message names the path on failure.
Status writeTruth(const SimOptions& options, const std::string& path);

}  // namespace trainscope::sim
