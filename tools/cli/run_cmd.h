// `trainscope run [OPTIONS] -- COMMAND [ARGS...]`: runs an unmodified training command with
// zero-code monitoring. It sets what the probe and trainscope.auto read (agent endpoint, job,
// step signal, ...), puts the package's start-up hook (trainscope/_boot/sitecustomize.py)
// first on PYTHONPATH, so every Python process the command starts (the script, a launcher's
// rank processes) loads trainscope.auto, and then replaces itself with the command (execvp):
// the command keeps this pid, gets every signal sent to it directly, and its exit status is
// that of `trainscope run`. Planning is pure (planRun), for tests; single-threaded.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "tools/cli/cli.h"

namespace trainscope::cli {

struct RunArgs {
  std::vector<std::string> command;  // what runs, after "--"
  std::string job;                   // --job: TRAINSCOPE_JOB for every rank
  std::string agent;                 // --agent: TRAINSCOPE_AGENT
  std::string step;                  // --step: TRAINSCOPE_STEP ("" keeps the environment's)
  bool noOps = false;                // --no-ops: TRAINSCOPE_OPS=0
  bool noCommHook = false;           // --no-comm-hook: TRAINSCOPE_COMM_HOOK=0
  std::string captureDir;            // --capture-dir: TRAINSCOPE_CAPTURE_DIR
  bool printEnv = false;             // --print-env: print the plan, run nothing
};

// Files the job is pointed at.
struct RunLayout {
  std::string bootDir;     // the directory holding the package's sitecustomize.py
  std::string probeLib;    // libtrainscope_probe.so; "" when not found (the package searches)
  std::string torchLib;    // libtrainscope_torch.so; "" when not found (no operators)
  std::string ncclPlugin;  // libnccl-profiler-trainscope.so; "" when not found (NCCL's own
                           // events, and device times of collectives, are not recorded)
};

// The value of an environment variable, nothing when unset.
using GetEnv = std::function<std::optional<std::string>(const std::string&)>;

// Finds the layout: $TRAINSCOPE_PYTHON_DIR (the directory holding trainscope/), else the source
// tree for a binary run from the build tree, else the installation (under the prefix found
// from this binary's path, then the configured prefix), else the source tree. The error lists
// where it looked.
Result<RunLayout> findRunLayout(const GetEnv& getenv);

struct RunPlan {
  std::vector<std::pair<std::string, std::string>> env;  // set before exec, in this order
  std::vector<std::string> command;
  std::vector<std::string> notes;  // said once on stderr before the command starts
};

// What the command gets. `generatedJob` is used when neither --job nor a scheduler's id
// (TRAINSCOPE_JOB, SLURM_JOB_ID, TORCHELASTIC_RUN_ID) names the job: it goes to
// TRAINSCOPE_JOB_DEFAULT, so a torchrun started below still wins with its run id. Errors
// name the flag.
Result<RunPlan> planRun(const RunArgs& args, const RunLayout& layout, const GetEnv& getenv,
                        const std::string& generatedJob);

// "optimizer", "profiler" or "function:MODULE:QUALNAME" (the TRAINSCOPE_STEP grammar).
Status checkStepSignal(const std::string& step);

// The subcommand: on success it does not return (the command replaces this process); else
// 2 for bad usage, 126/127 when the command cannot be run (as a shell does).
int runRun(Context& ctx, const RunArgs& args);

}  // namespace trainscope::cli
