#include "tools/cli/run_cmd.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <ostream>

#include "agent/probe/config.h"
#include "common/agent_endpoint.h"
#include "common/install_layout.h"

namespace trainscope::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kBootRel = "trainscope/_boot";
constexpr const char* kBootFile = "sitecustomize.py";

bool isFile(const std::string& path) {
  std::error_code ec;
  return !path.empty() && fs::is_regular_file(path, ec);
}

bool isIdentifier(const std::string& s) {
  if (s.empty() || (std::isdigit(static_cast<unsigned char>(s[0])) != 0)) return false;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '_') return false;
  }
  return true;
}

// "<host>-<YYYYmmdd-HHMMSS>-<pid>": unique per launch on a node. A multi-node job without a
// scheduler id needs --job, or each node's ranks form a job of their own.
std::string generatedJobName() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "host");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  return std::string(host) + '-' + stamp + '-' + std::to_string(getpid());
}

}  // namespace

Status checkStepSignal(const std::string& step) {
  if (step == "optimizer" || step == "profiler") return Status::ok();
  const std::string prefix = "function:";
  if (step.rfind(prefix, 0) == 0) {
    const std::string target = step.substr(prefix.size());
    const auto colon = target.rfind(':');
    if (colon != std::string::npos && colon > 0) {
      const std::string qualname = target.substr(colon + 1);
      bool ok = !qualname.empty();
      size_t start = 0;
      while (ok && start <= qualname.size()) {
        const auto dot = qualname.find('.', start);
        const std::string part =
            qualname.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        ok = isIdentifier(part);
        if (dot == std::string::npos) break;
        start = dot + 1;
      }
      if (ok) return Status::ok();
    }
  }
  return Status::error("--step: '" + step +
                       "' must be optimizer, profiler or function:MODULE:QUALNAME (e.g. "
                       "function:__main__:train_step)");
}

Result<RunLayout> findRunLayout(const GetEnv& getenv) {
  std::vector<std::string> tried;
  RunLayout layout;
  auto bootIn = [&](const std::string& pythonDir) {
    const std::string dir = (fs::path(pythonDir) / kBootRel).string();
    tried.push_back(dir);
    return isFile((fs::path(dir) / kBootFile).string()) ? dir : std::string();
  };
  auto firstFile = [](const std::vector<std::string>& paths) {
    for (const auto& p : paths) {
      if (isFile(p)) return p;
    }
    return std::string();
  };
  const std::string exeDir = executableDir();
  const bool buildTree = isInside(exeDir, TRAINSCOPE_BUILD_ROOT);
  if (auto v = getenv("TRAINSCOPE_PYTHON_DIR"); v && !v->empty()) {
    layout.bootDir = bootIn(*v);
    if (layout.bootDir.empty()) {
      return Result<RunLayout>::error("TRAINSCOPE_PYTHON_DIR=" + *v +
                                      " does not hold trainscope/_boot/sitecustomize.py");
    }
  }
  if (layout.bootDir.empty() && buildTree) layout.bootDir = bootIn(TRAINSCOPE_SOURCE_PYTHON_DIR);
  if (layout.bootDir.empty()) {
    for (const auto& dir :
         installedCandidates(exeDir, TRAINSCOPE_INSTALL_BINDIR, TRAINSCOPE_INSTALL_PREFIX,
                             TRAINSCOPE_INSTALL_PYTHONDIR)) {
      layout.bootDir = bootIn(dir);
      if (!layout.bootDir.empty()) break;
    }
  }
  if (layout.bootDir.empty()) layout.bootDir = bootIn(TRAINSCOPE_SOURCE_PYTHON_DIR);
  if (layout.bootDir.empty()) {
    std::string list;
    for (const auto& t : tried) list += (list.empty() ? "" : ", ") + t;
    return Result<RunLayout>::error("cannot find the trainscope Python package (looked for " +
                                    std::string(kBootRel) + "/" + kBootFile + " in: " + list +
                                    "); set TRAINSCOPE_PYTHON_DIR to the directory holding "
                                    "trainscope/");
  }
  auto libs = [&](const char* name) {
    std::vector<std::string> paths;
    if (buildTree) paths.push_back(std::string(TRAINSCOPE_BUILD_ROOT) + "/agent/" + name);
    for (const auto& dir :
         installedCandidates(exeDir, TRAINSCOPE_INSTALL_BINDIR, TRAINSCOPE_INSTALL_PREFIX,
                             TRAINSCOPE_INSTALL_LIBDIR)) {
      paths.push_back((fs::path(dir) / fs::path(name).filename()).string());
    }
    return firstFile(paths);
  };
  layout.probeLib = libs("probe/libtrainscope_probe.so");
  layout.torchLib = libs("torch/libtrainscope_torch.so");
  layout.ncclPlugin = libs("nccl_profiler/libnccl-profiler-trainscope.so");
  return layout;
}

Result<RunPlan> planRun(const RunArgs& args, const RunLayout& layout, const GetEnv& getenv,
                        const std::string& generatedJob) {
  RunPlan plan;
  if (args.command.empty() && !args.printEnv) {
    return Result<RunPlan>::error(
        "no command given; usage: trainscope run [OPTIONS] -- COMMAND [ARGS...] (e.g. "
        "trainscope run -- python3 train.py)");
  }
  auto unset = [&](const char* name) {
    auto v = getenv(name);
    return !v || v->empty();
  };
  auto set = [&](const std::string& name, const std::string& value) {
    plan.env.emplace_back(name, value);
  };
  set("TRAINSCOPE_AUTO", "1");
  std::string pythonPath = layout.bootDir;
  if (auto old = getenv("PYTHONPATH"); old && !old->empty()) pythonPath += ':' + *old;
  set("PYTHONPATH", pythonPath);

  if (!args.agent.empty()) {
    if (args.agent.rfind("ipc://", 0) != 0 && args.agent.rfind("tcp://", 0) != 0) {
      return Result<RunPlan>::error("--agent: '" + args.agent +
                                    "' must start with ipc:// or tcp:// (the agent's --endpoint)");
    }
    set("TRAINSCOPE_AGENT", args.agent);
  } else if (unset("TRAINSCOPE_AGENT")) {
    // Stated, so every process of the job (and its missing-agent check) uses the same one.
    set("TRAINSCOPE_AGENT", defaultProbeEndpoint());
  }
  if (!args.job.empty()) {
    set("TRAINSCOPE_JOB", args.job);
  } else if (unset("TRAINSCOPE_JOB") && unset("SLURM_JOB_ID")) {
    set("TRAINSCOPE_JOB_DEFAULT", generatedJob);
  }
  if (!args.step.empty()) {
    if (Status s = checkStepSignal(args.step); !s) return s;
    set("TRAINSCOPE_STEP", args.step);
  }
  if (args.noOps) set("TRAINSCOPE_OPS", "0");
  if (args.noCommHook) set("TRAINSCOPE_COMM_HOOK", "0");
  if (!args.captureDir.empty()) {
    if (args.captureDir[0] != '/') {
      return Result<RunPlan>::error("--capture-dir: must be an absolute path, got '" +
                                    args.captureDir + "'");
    }
    set("TRAINSCOPE_CAPTURE_DIR", args.captureDir);
  }
  // Pointed at explicitly, so the package loads these and not another copy it might find.
  if (unset("TRAINSCOPE_PROBE_LIB") && !layout.probeLib.empty()) {
    set("TRAINSCOPE_PROBE_LIB", layout.probeLib);
  }
  if (unset("TRAINSCOPE_TORCH_LIB") && !layout.torchLib.empty()) {
    set("TRAINSCOPE_TORCH_LIB", layout.torchLib);
  }
  // NCCL loads the profiler plugin NCCL_PROFILER_PLUGIN names (a path, or NAME for
  // libnccl-profiler-NAME.so); it finds the probe in the rank process itself. NCCL loads one
  // plugin, so a user's own choice stands, and the run says once why NCCL's device times of
  // collectives will be missing.
  if (!layout.ncclPlugin.empty()) {
    if (auto mine = getenv("NCCL_PROFILER_PLUGIN"); !mine || mine->empty()) {
      set("NCCL_PROFILER_PLUGIN", layout.ncclPlugin);
    } else if (*mine != layout.ncclPlugin && *mine != "trainscope") {
      plan.notes.push_back("NCCL_PROFILER_PLUGIN=" + *mine +
                           " is kept, so NCCL loads that profiler plugin instead of trainscope's "
                           "and collectives have no device times (unset it to get them)");
    }
  }
  plan.command = args.command;
  return plan;
}

int runRun(Context& ctx, const RunArgs& args) {
  GetEnv getenv = [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
  auto layout = findRunLayout(getenv);
  if (!layout) {
    ctx.err << "trainscope run: " << layout.message() << "\n";
    return kExitUsage;
  }
  auto plan = planRun(args, *layout, getenv, generatedJobName());
  if (!plan) {
    ctx.err << "trainscope run: " << plan.message() << "\n";
    return kExitUsage;
  }
  for (const auto& note : plan->notes) ctx.err << "trainscope run: " << note << "\n";
  if (args.printEnv) {
    for (const auto& [name, value] : plan->env) ctx.out << name << '=' << value << "\n";
    return kExitOk;
  }
  for (const auto& [name, value] : plan->env) {
    if (setenv(name.c_str(), value.c_str(), 1) != 0) {
      ctx.err << "trainscope run: cannot set " << name << ": " << std::strerror(errno) << "\n";
      return kExitUsage;
    }
  }
  std::vector<char*> argv;
  for (auto& a : plan->command) argv.push_back(a.data());
  argv.push_back(nullptr);
  ctx.out.flush();
  ctx.err.flush();
  execvp(argv[0], argv.data());
  const int e = errno;  // only reached when exec failed
  ctx.err << "trainscope run: cannot run '" << plan->command[0] << "': " << std::strerror(e)
          << "\n";
  return e == ENOENT ? 127 : 126;
}

void addRunCommand(CLI::App& app, Action* action,
                   const std::optional<std::vector<std::string>>& afterDashes) {
  auto args = std::make_shared<RunArgs>();
  auto* sub = app.add_subcommand(
      "run",
      "Run a training command with zero-code monitoring: `trainscope run [OPTIONS] -- COMMAND "
      "[ARGS...]`. Every Python process it starts loads trainscope at start-up (no import in "
      "the script): steps from optimizer.step(), data wait from the DataLoader, phases, every "
      "torch.distributed call, DDP's gradient buckets, and ATen operators when "
      "libtrainscope_torch.so is installed (built only where libtorch's headers are: Debian's "
      "libtorch-dev). The first rank on each node prints one line saying which of these it "
      "records and why not. The command then runs as this process (same pid, signals, exit "
      "status). TRAINSCOPE_AUTO=1 in an environment where the package is installed does the "
      "same without this wrapper");
  sub->add_option("--job", args->job,
                  "Job id shared by every rank (default: TRAINSCOPE_JOB, SLURM_JOB_ID, "
                  "TORCHELASTIC_RUN_ID, else HOST-DATE-TIME-PID: give --job when the ranks of "
                  "one job start on several nodes without a scheduler id)");
  const std::string nodeEndpoint = "ipc://" + std::string(kNodeAgentSocketDir) + "/agent.sock";
  const std::string ownEndpoint = defaultAgentEndpoint();
  sub->add_option("--agent", args->agent,
                  "The node agent's probe endpoint (default: TRAINSCOPE_AGENT, else the node "
                  "agent's " +
                      nodeEndpoint +
                      (ownEndpoint == nodeEndpoint
                           ? std::string()
                           : " when it exists, else this user's own agent's " + ownEndpoint) +
                      ")");
  sub->add_option("--step", args->step,
                  "What ends a step: optimizer (default: the last optimizer.step() of each "
                  "iteration), profiler (torch.profiler.profile.step()) or "
                  "function:MODULE:QUALNAME (each return of that function, e.g. "
                  "function:__main__:train_step)");
  sub->add_flag("--no-ops", args->noOps,
                "Do not record ATen operators (default: recorded when libtrainscope_torch.so "
                "is installed)");
  sub->add_flag("--no-comm-hook", args->noCommHook,
                "Do not install the DDP comm hook that times gradient buckets (default: "
                "installed unless the script registers its own)");
  sub->add_option("--capture-dir", args->captureDir,
                  "Where the probes write capture files; must match the agent's --capture-dir "
                  "(default: TRAINSCOPE_CAPTURE_DIR, else /tmp/trainscope-captures)");
  sub->add_flag("--print-env", args->printEnv,
                "Print the environment the command would get (NAME=VALUE lines) and run nothing");
  sub->prefix_command();  // the first argument that is not an option starts the command
  // The global flags' fallthrough would hand the command's first word to the parent, which
  // has no positionals: the command's words are ours.
  sub->fallthrough(false);
  sub->callback([action, args, sub, afterDashes] {
    args->command = sub->remaining();
    if (afterDashes) {
      // `run python3 a.py -- --x` keeps its "--" for the command; `run -- python3 a.py` drops it.
      if (!args->command.empty()) args->command.emplace_back("--");
      args->command.insert(args->command.end(), afterDashes->begin(), afterDashes->end());
    }
    *action = [args](Context& ctx) { return runRun(ctx, *args); };
  });
}

}  // namespace trainscope::cli
