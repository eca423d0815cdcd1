// The detector evaluation's scenario suite (detect_eval): healthy jobs and injected faults on
// flat, parallel, pipeline-schedule, MoE and sweep layouts, chosen by EvalOptions, and the two
// summaries printed after the main tables (schedule inference, the sweep). Pure functions; any
// thread.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "tools/bench/detect_eval/eval_run.h"

namespace trainscope::bench {

struct EvalOptions {
  bool quick = false;        // fewer seeds and steps: a smoke run in seconds
  int seeds = 3;             // seeds per fault cell; more = tighter estimates, longer run
  int threads = 2;           // scenarios run in parallel (cost per report is then per thread)
  std::string json;          // "" writes no JSON
  std::string only;          // "" runs all; else only scenarios whose group, label or name has this
  bool copyReports = false;  // feed reports by const& (the set copies them) instead of moving
  bool noiseSweep = false;   // only healthy jobs at 5..10 % noise: where false alarms start
  std::string liveResults;   // "" runs the suite in-process; else scores a live_eval.py run
};

// The scenarios `o` selects (every one but the sweep's unless --only names it).
std::vector<Scenario> buildSuite(const EvalOptions& o);

// The sweep's layouts as one line for the run's header: "tp2pp2dp2 (8r, 300 steps), ...".
std::string sweepLayoutsText(bool quick);

// The sweep's cells folded by kind x schedule and kind x layout, and its healthy jobs' false
// alarms (nothing when the run had no sweep scenario).
void printSweepSummary(const std::vector<ScenarioResult>& results, std::FILE* out);

// How well the collector's inference named each schedule (steps right of those inferred).
void printScheduleInference(const std::vector<ScenarioResult>& results, std::FILE* out);

}  // namespace trainscope::bench
