// trainscope-simtrain: a simulated data-parallel (or, with --parallel, tensor x pipeline x data
// parallel) training job driving the real probe library.
// Parses flags into SimOptions and calls run().
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/guarded_main.h"
#include "tools/simtrain/sim_options.h"
#include "tools/simtrain/sim_runner.h"

namespace {

int simtrainMain(int argc, char** argv) {
  using namespace trainscope::sim;
  SimOptions o;
  std::vector<std::string> injects;
  CLI::App app{
      "trainscope-simtrain: a simulated synchronous data-parallel training job (with --parallel,\n"
      "a tensor x pipeline x data parallel one with a pipeline schedule). Each rank is a\n"
      "real probe instance reporting to an agent; faults can be injected and written to a\n"
      "truth file.\n"
      "Exit codes: 0 ok, 1 some step reports were not acknowledged in time, 2 bad flags."};
  app.add_option("--agent", o.agents,
                 "agent endpoint (repeatable); global rank r reports to agent r % (number of "
                 "agents), agent i standing for host node<i>")
      ->required();
  app.add_option("--job", o.job, "job id (default: sim-<unix time>)");
  app.add_option("--ranks", o.ranks, "simulated ranks hosted by this process, one probe each")
      ->capture_default_str();
  app.add_option("--first-rank", o.firstRank,
                 "global rank of the first hosted rank; with --world-size one job can be split "
                 "over several simtrain processes (each hosting --first-rank.. "
                 "--first-rank+--ranks-1)")
      ->capture_default_str();
  app.add_option("--world-size", o.worldSize,
                 "ranks of the whole job; every process models all of them from the same "
                 "--seed and reports its own; 0 means --first-rank + --ranks")
      ->capture_default_str();
  app.add_option("--steps", o.steps, "steps to run; 0 runs until SIGINT/SIGTERM")
      ->capture_default_str();
  app.add_option("--step-ms", o.stepMs, "healthy step time in milliseconds")->capture_default_str();
  app.add_option("--seed", o.seed, "random seed; the same seed gives the same timeline")
      ->capture_default_str();
  app.add_option("--noise", o.noise, "relative log-normal spread (sigma) of operator times")
      ->capture_default_str();
  app.add_option("--warmup", o.warmup, "the first N steps run 2x slower")->capture_default_str();
  app.add_flag("--fast", o.fast,
               "do not sleep: run as fast as the probes fold (timestamps run ahead of real "
               "time); default paces each step in real time");
  app.add_option("--inject", injects,
                 "fault to inject (repeatable): straggler:rank=R,from=S,factor=F | "
                 "shift:from=S,factor=F | comm:from=S,factor=F[,rank=R] | "
                 "op:name=NAME,from=S,factor=F[,rank=R] | hang:rank=R,at=S | "
                 "spike:every=N,factor=F | stage:pp=S,factor=F[,from=N] | "
                 "worker:dp=I,pp=S,factor=F[,from=N] | gpu:rank=R,factor=F[,from=N] | "
                 "p2p:from=R,to=Q,factor=F[,from=N] | seqlen:cv=X[,from=N] | "
                 "experts:skew=X[,ep=K][,from=N]. comm slows rank R's "
                 "link to its ring neighbour R+1 (without rank: every link) by F, and with it "
                 "every rank's all_reduce; with --parallel, stage makes every rank of pipeline "
                 "stage S compute F times longer (stage imbalance), worker the tensor-parallel "
                 "group of replica I at stage S (a slow worker), gpu one rank inside its "
                 "tensor-parallel group, and p2p rank R's pipeline sends to rank Q (the next or "
                 "previous stage; the first from= is R, a second one the first step); seqlen "
                 "gives each data-parallel replica (each rank without --parallel) a random "
                 "amount of work per step (log-normal, mean 1, coefficient of variation X), so "
                 "the slowest replica moves from step to step; experts (--parallel ep=E) gives the "
                 "experts of expert-parallel index K (default 0) X times the tokens of the "
                 "others, so those ranks' all_to_all and expert compute take longer and their "
                 "peers wait in the all_to_all. These six are present from step 0 unless from= "
                 "says");
  std::string parallel;
  auto* parallelOpt = app.add_option(
      "--parallel", parallel,
      "tp=T,pp=P,dp=D[,cp=C,ep=E]: a tensor x context x pipeline x data (x expert) parallel "
      "job (T * C * P * D ranks, Megatron's rank order: rank = ((pp * D + dp) * C + cp) * T + "
      "tp) whose ranks declare their groups; stages pass microbatches by p2p send/recv, "
      "tensor-parallel ranks all_reduce after every forward and backward, context-parallel "
      "ranks all_gather keys and values, replicas all_reduce gradients per stage. ep=E (E "
      "divides D): every forward and backward has a MoE layer whose tokens go to the experts' "
      "ranks and back in two all_to_alls within each group of E consecutive replicas. Sets "
      "--ranks to T * C * P * D unless given");
  app.add_option("--schedule", o.schedule,
                 "pipeline schedule with --parallel: 1f1b; interleaved:V (Megatron's interleaved "
                 "1F1B, V model chunks per rank, microbatches a multiple of pp); zb-v "
                 "(ZeroBubble's V schedule, backward split into input and weight gradients); "
                 "dualpipe-v (DeepSeek's DualPipe-V, at least 2 * pp microbatches). Every "
                 "schedule does the same work per rank: they differ in bubbles")
      ->capture_default_str();
  app.add_option("--microbatches", o.microbatches,
                 "microbatches per step and replica with --parallel; 0 = 2 * pp")
      ->capture_default_str();
  app.add_option("--edge-load", o.edgeLoad,
                 "with --parallel, a naturally unbalanced pipeline: the first stage computes "
                 "F/2 more (embedding), the last F more (head and loss); 0 = balanced")
      ->capture_default_str();
  app.add_option("--truth", o.truthFile,
                 "write the injected faults as JSON to this file, each with the share of the step "
                 "the job would save without it (\"gain\": the same run replayed without that "
                 "fault, up to 5,000 steps). The file is written at the start; the gains are "
                 "replayed beside the job at idle priority and added when ready, at the latest "
                 "when the job ends (on SIGINT/SIGTERM: from the steps replayed so far) "
                 "(default: none)");
  app.add_option("--flush-timeout-ms", o.flushTimeoutMs,
                 "at the end, wait this long for every report to be acknowledged; exit 1 if "
                 "some were not")
      ->capture_default_str();
  app.add_option("--hang-hold-s", o.hangHoldS,
                 "after an injected hang, stay alive this many seconds; 0 = until killed")
      ->capture_default_str();
  app.add_option("--end-stagger-ms", o.endStaggerMs,
                 "at the end, the hosted ranks end (flush, goodbye) one by one, this many "
                 "milliseconds apart, as the ranks of a real job finish at different times; 0 "
                 "ends them together")
      ->capture_default_str();
  app.add_flag("--quiet", o.quiet, "no progress lines (the final line is still printed)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  if (*parallelOpt) {
    auto layout = parseParallel(parallel);
    if (!layout) {
      std::fprintf(stderr, "trainscope-simtrain: %s\n", layout.message().c_str());
      return kExitUsage;
    }
    o.parallel = *layout;
    if (app.count("--ranks") == 0 && app.count("--world-size") == 0) o.ranks = layout->world();
  }
  for (const auto& spec : injects) {
    auto in = parseInject(spec);
    if (!in) {
      std::fprintf(stderr, "trainscope-simtrain: %s\n", in.message().c_str());
      return kExitUsage;
    }
    o.injects.push_back(*in);
  }
  return run(o);
}

}  // namespace

int main(int argc, char** argv) {
  return trainscope::guardedMain("trainscope-simtrain", [&] { return simtrainMain(argc, argv); });
}
