// Scoring of detector evaluation runs against the simulator's truth: per-kind precision,
// recall, right ranks named, latency, false alarms on healthy jobs and detector cost; printed
// as tables and written as JSON. Pure functions over finished ScenarioResults; any thread.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/bench/detect_eval/eval_run.h"

namespace trainscope::bench {

// How one detection was judged.
enum class Verdict {
  kMatched,    // right kind, at/after a truth fault of that kind (and its op)
  kSecondary,  // another kind of injected fault was active (e.g. a straggler also slows the
               // job's step time, so step_shift fires too); counted apart, not hidden
  kFalse,      // nothing injected explains it (every non-spike detection on a healthy job)
  kSpike,      // a periodic-spike notice: informational, never an error
};

struct Targets {
  double precision = 0.95;
  double recall = 0.95;
  double ranksNamed = 0.95;
  double latencyMedian = 5.0;
  double latencyP90 = 10.0;
  double falseAlarmsPer100k = 0.0;
  double costNsPerReport = 5000.0;
  bool scoreCost = true;  // false: the results carry no detector cost (a live run)
};

// Scores every result, prints the per-kind tables and the summary to `out`, and returns the
// whole evaluation as JSON. `passed` tells whether every target was met.
nlohmann::json scoreAndPrint(const std::vector<ScenarioResult>& results, const Targets& targets,
                             std::FILE* out, bool* passed);

}  // namespace trainscope::bench
