// Results of a live evaluation run (tools/bench/detect_eval/live_eval.py: simulated jobs
// through a real collector and agents) read back as ScenarioResults, so scoreAndPrint scores
// them exactly as it scores the in-process runs. Pure functions; any thread.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "tools/bench/detect_eval/eval_run.h"

namespace trainscope::bench {

// One result per job in `run` (live_eval.py's --out): its truth (the simulator's --truth file,
// spikes left out) and the anomalies the collector's API served for it. A job's job-steps are
// its simulated steps; reports and detector cost are 0 (not measured live). Fails naming the
// job and field when the file does not have that shape.
Result<std::vector<ScenarioResult>> liveResults(const nlohmann::json& run);

}  // namespace trainscope::bench
