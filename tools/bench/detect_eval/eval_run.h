// One scenario of the detector evaluation: a simulated job (tools/simtrain step model) whose
// rank-step timelines are folded into StepReports by the probe's real StepFolder and fed to a
// DetectorSet the way a collector receives them. Pure CPU work; one scenario per thread.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "collector/detect/anomaly.h"
#include "tools/simtrain/sim_options.h"

namespace trainscope::bench {

struct Scenario {
  std::string name;          // for the tables: "straggler x1.20 @60 seed 2"
  std::string group;         // "healthy" or the fault kind's truth name ("straggler", ...)
  std::string faultLabel;    // finer label: "op_one_rank", "op_all_ranks", ...
  sim::SimOptions sim;       // ranks, steps, noise, seed, injects (spikes included)
  double magnitude = 1.0;    // the fault factor (hang: 0)
  double hangTickS = 60.0;   // after a hang, simulated seconds of silence ticked through
  bool copyReports = false;  // observe(const&) (the set copies each report) instead of
                             // handing it over with observe(&&)
};

struct TruthFault {
  std::string kind;             // truth kind name: straggler, step_shift, slow_comm, ...
  std::vector<uint32_t> ranks;  // faulty ranks (every rank for job-wide faults)
  int64_t fromStep = 0;
  double factor = 1.0;
  std::string op;       // op_regression only
  int64_t startNs = 0;  // begin time of fromStep (hang: when the hung step began)
  // Every fault but hangs and spikes: the share of the step time the job saves
  // without this fault, measured by running the same job (same seed) without it: the median
  // over the faulty steps of (T_fault - T_without) / T_fault. NaN where not measured.
  double gain = std::numeric_limits<double>::quiet_NaN();
};

struct ScenarioResult {
  Scenario scenario;
  std::vector<TruthFault> truth;            // spikes left out
  std::vector<detect::Anomaly> detections;  // opened anomalies, in order
  int64_t stepsJudged = 0;                  // steps the detectors judged
  uint64_t reports = 0;                     // step reports observed
  int64_t detectNs = 0;                     // thread CPU time inside observe() and tick()
  double stepNs = 0.0;                      // healthy step time (for hang latency in steps)
  // --parallel with pp > 1: the steps whose schedule and microbatches the collector's inference
  // (collector/topology/schedule.h, on the folded reports) got right, of those inferred, and
  // the wrong guesses seen ("v-shape/16" ...), each once.
  int64_t scheduleSteps = 0;
  int64_t scheduleRight = 0;
  std::vector<std::string> scheduleWrong;
};

// Runs the scenario to its end (or through the hang and hangTickS of silence).
ScenarioResult runScenario(const Scenario& scenario);

}  // namespace trainscope::bench
