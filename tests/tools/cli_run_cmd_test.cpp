// `trainscope run`: what the command's environment gets (planRun), the job id's precedence,
// errors naming the flag, and the command line's "--" handling through the whole CLI
// (--print-env runs nothing).
#include "tools/cli/run_cmd.h"

#include <map>
#include <optional>
#include <string>

#include <catch2/catch.hpp>

#include "tests/tools/cli_run.h"

using namespace trainscope::cli;

namespace {

GetEnv envOf(const std::map<std::string, std::string>& vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::map<std::string, std::string> planEnv(const RunPlan& plan) {
  return {plan.env.begin(), plan.env.end()};
}

const RunLayout kLayout{"/opt/ts/python/trainscope/_boot", "/opt/ts/lib/libtrainscope_probe.so",
                        "/opt/ts/lib/libtrainscope_torch.so",
                        "/opt/ts/lib/libnccl-profiler-trainscope.so"};

}  // namespace

TEST_CASE("run plan: the start-up hook first on PYTHONPATH, agent, libraries, generated job") {
  RunArgs args;
  args.command = {"python3", "train.py"};
  auto plan = planRun(args, kLayout, envOf({{"PYTHONPATH", "/home/u/lib"}}), "host-1");
  REQUIRE(plan);
  auto env = planEnv(*plan);
  CHECK(env["TRAINSCOPE_AUTO"] == "1");
  CHECK(env["PYTHONPATH"] == "/opt/ts/python/trainscope/_boot:/home/u/lib");
  CHECK(env["TRAINSCOPE_AGENT"].rfind("ipc://", 0) == 0);
  CHECK(env["TRAINSCOPE_PROBE_LIB"] == kLayout.probeLib);
  CHECK(env["TRAINSCOPE_TORCH_LIB"] == kLayout.torchLib);
  // Generated ids are a default: torchrun's run id, read in the rank, still wins.
  CHECK(env.count("TRAINSCOPE_JOB") == 0);
  CHECK(env["TRAINSCOPE_JOB_DEFAULT"] == "host-1");
  CHECK(plan->command == std::vector<std::string>{"python3", "train.py"});
}

TEST_CASE(
    "run plan: NCCL loads trainscope's profiler plugin unless the user chose one, said once") {
  RunArgs args;
  args.command = {"python3"};
  auto plan = planRun(args, kLayout, envOf({}), "gen");
  REQUIRE(plan);
  CHECK(planEnv(*plan)["NCCL_PROFILER_PLUGIN"] == kLayout.ncclPlugin);
  CHECK(plan->notes.empty());
  plan = planRun(args, kLayout, envOf({{"NCCL_PROFILER_PLUGIN", "inspector"}}), "gen");
  REQUIRE(plan);
  CHECK(planEnv(*plan).count("NCCL_PROFILER_PLUGIN") == 0);
  REQUIRE(plan->notes.size() == 1);
  CHECK(plan->notes[0].find("NCCL_PROFILER_PLUGIN=inspector is kept") == 0);
  CHECK(plan->notes[0].find("no device times") != std::string::npos);
  // Ours already (a nested run, or by name): nothing to say.
  plan = planRun(args, kLayout, envOf({{"NCCL_PROFILER_PLUGIN", "trainscope"}}), "gen");
  CHECK(plan->notes.empty());
  // Not built or installed: left alone, nothing said here (the package says what it records).
  RunLayout noPlugin = kLayout;
  noPlugin.ncclPlugin.clear();
  plan = planRun(args, noPlugin, envOf({}), "gen");
  CHECK(planEnv(*plan).count("NCCL_PROFILER_PLUGIN") == 0);
}

TEST_CASE("run plan: the job from --job, else the scheduler's, else generated") {
  RunArgs args;
  args.command = {"python3"};
  args.job = "mine";
  auto env = planEnv(*planRun(args, kLayout, envOf({{"SLURM_JOB_ID", "77"}}), "gen"));
  CHECK(env["TRAINSCOPE_JOB"] == "mine");
  args.job.clear();
  env = planEnv(*planRun(args, kLayout, envOf({{"SLURM_JOB_ID", "77"}}), "gen"));
  CHECK(env.count("TRAINSCOPE_JOB") == 0);  // the probe reads SLURM_JOB_ID itself
  CHECK(env.count("TRAINSCOPE_JOB_DEFAULT") == 0);
  env = planEnv(*planRun(args, kLayout, envOf({{"TRAINSCOPE_JOB", "set"}}), "gen"));
  CHECK(env.count("TRAINSCOPE_JOB_DEFAULT") == 0);
}

TEST_CASE("run plan: what the environment already says is kept") {
  RunArgs args;
  args.command = {"python3"};
  auto env = planEnv(*planRun(args, kLayout,
                              envOf({{"TRAINSCOPE_AGENT", "tcp://127.0.0.1:5555"},
                                     {"TRAINSCOPE_PROBE_LIB", "/mine/libtrainscope_probe.so"}}),
                              "gen"));
  CHECK(env.count("TRAINSCOPE_AGENT") == 0);
  CHECK(env.count("TRAINSCOPE_PROBE_LIB") == 0);
  CHECK(env["PYTHONPATH"] == kLayout.bootDir);
}

TEST_CASE("run plan: flags become the variables trainscope.auto reads; bad values name the flag") {
  RunArgs args;
  args.command = {"python3"};
  args.step = "function:__main__:Trainer.train_step";
  args.noOps = true;
  args.noCommHook = true;
  args.captureDir = "/scratch/captures";
  args.agent = "ipc:///run/ts.sock";
  auto env = planEnv(*planRun(args, kLayout, envOf({}), "gen"));
  CHECK(env["TRAINSCOPE_STEP"] == "function:__main__:Trainer.train_step");
  CHECK(env["TRAINSCOPE_OPS"] == "0");
  CHECK(env["TRAINSCOPE_COMM_HOOK"] == "0");
  CHECK(env["TRAINSCOPE_CAPTURE_DIR"] == "/scratch/captures");
  CHECK(env["TRAINSCOPE_AGENT"] == "ipc:///run/ts.sock");

  for (const std::string bad : {"epoch", "function:train_step", "function:m:1x", "function::f"}) {
    RunArgs b = args;
    b.step = bad;
    auto p = planRun(b, kLayout, envOf({}), "gen");
    INFO(bad);
    REQUIRE(!p);
    CHECK(p.message().find("--step") != std::string::npos);
  }
  CHECK(checkStepSignal("profiler"));
  CHECK(checkStepSignal("optimizer"));
  RunArgs relative = args;
  relative.captureDir = "captures";
  auto p = planRun(relative, kLayout, envOf({}), "gen");
  REQUIRE(!p);
  CHECK(p.message().find("--capture-dir") != std::string::npos);
  RunArgs badAgent = args;
  badAgent.agent = "/run/ts.sock";
  p = planRun(badAgent, kLayout, envOf({}), "gen");
  REQUIRE(!p);
  CHECK(p.message().find("--agent") != std::string::npos);
  RunArgs none;
  p = planRun(none, kLayout, envOf({}), "gen");
  REQUIRE(!p);
  CHECK(p.message().find("no command") != std::string::npos);
}

TEST_CASE("run command line: words after -- are the command's, not trainscope's") {
  using trainscope::cli::testing::cli;
  auto r = cli({"run", "--print-env", "--job", "j1", "--", "python3", "train.py", "--job", "x"});
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("TRAINSCOPE_JOB=j1\n") != std::string::npos);
  CHECK(r.out.find("TRAINSCOPE_AUTO=1\n") != std::string::npos);
  // Without "--", the first word that is not an option starts the command.
  r = cli({"run", "--print-env", "--job", "j2", "python3", "train.py", "--steps", "3"});
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("TRAINSCOPE_JOB=j2\n") != std::string::npos);
  r = cli({"run", "--step", "epoch", "--", "python3"});
  CHECK(r.code == 2);
  CHECK(r.err.find("--step") != std::string::npos);
  r = cli({"run", "--"});
  CHECK(r.code == 2);
  CHECK(r.err.find("no command") != std::string::npos);
}

TEST_CASE("run with no command says so once, with one prefix") {
  using trainscope::cli::testing::cli;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"run"}, std::vector<std::string>{"run", "--"}}) {
    auto r = cli(args);
    CHECK(r.code == trainscope::cli::kExitUsage);
    CHECK(r.err.rfind("trainscope run: no command given; usage: trainscope run [OPTIONS] -- ", 0) ==
          0);
    CHECK(r.err.find("run: run:") == std::string::npos);
  }
}
