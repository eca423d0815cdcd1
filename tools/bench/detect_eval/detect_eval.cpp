// detect_eval: runs the detector evaluation suite (healthy jobs and injected faults on the
// simulator's step model, folded by the real probe folder, judged by a default DetectorSet)
// and prints per-kind precision, recall, ranks named, latency, false alarms and cost.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/guarded_main.h"
#include "tools/bench/detect_eval/eval_live.h"
#include "tools/bench/detect_eval/eval_run.h"
#include "tools/bench/detect_eval/eval_score.h"
#include "tools/bench/detect_eval/eval_suite.h"

namespace ts = trainscope;
using ts::bench::EvalOptions;
using ts::bench::Scenario;

namespace {

// Writes `js` to `path` ("" writes nothing); false, said on stderr, when it cannot.
bool writeJson(const std::string& path, const nlohmann::json& js) {
  if (path.empty()) return true;
  std::ofstream f(path, std::ios::trunc);
  if (!f) {
    std::fprintf(stderr, "detect_eval: --json '%s': cannot open for writing\n", path.c_str());
    return false;
  }
  f << js.dump(2) << "\n";
  return true;
}

// Scores a live run (live_eval.py --out) with the in-process scoring; exit code as main's.
int scoreLive(const EvalOptions& o) {
  std::ifstream in(o.liveResults);
  if (!in) {
    std::fprintf(stderr, "detect_eval: --live-results '%s': cannot open\n", o.liveResults.c_str());
    return 2;
  }
  nlohmann::json run = nlohmann::json::parse(in, nullptr, false);
  if (run.is_discarded()) {
    std::fprintf(stderr, "detect_eval: --live-results '%s': not JSON\n", o.liveResults.c_str());
    return 2;
  }
  auto results = ts::bench::liveResults(run);
  if (!results) {
    std::fprintf(stderr, "detect_eval: --live-results '%s': %s\n", o.liveResults.c_str(),
                 results.message().c_str());
    return 2;
  }
  std::printf(
      "detect_eval: live run of %zu jobs (collector, 2 agents, trainscope-simtrain processes) "
      "in %.0f s; busy loop beside the collector: %s; node1's agent stopped %.1f s every %.1f "
      "s\n",
      results->size(), run.value("wall_s", 0.0), run.value("busy_loop", false) ? "yes" : "no",
      run.value("burst_stop_s", 0.0), run.value("burst_every_s", 0.0));
  for (const auto& s : run["scenarios"]) {
    if (s.value("cut", false)) {
      std::printf("  cut short by the budget: %s\n", s.value("name", "?").c_str());
    }
  }
  ts::bench::Targets targets;
  targets.scoreCost = false;
  bool passed = false;
  nlohmann::json js = ts::bench::scoreAndPrint(*results, targets, stdout, &passed);
  if (!writeJson(o.json, js)) return 2;
  return passed ? 0 : 1;
}

int benchMain(int argc, char** argv) {
  EvalOptions o;
  CLI::App app{
      "detect_eval: scores the collector's detectors on simulated jobs with injected "
      "faults (simtrain step model -> probe StepFolder -> DetectorSet with default "
      "options) and prints precision, recall, ranks named, latency, false alarms and "
      "cost per kind. Exit status 0 when every target is met, 1 otherwise."};
  app.add_flag("--quick", o.quick,
               "short run: 1 seed per fault cell, 10,000 healthy 5% steps, "
               "no 2%/10% fault runs (default: off)");
  app.add_option("--seeds", o.seeds, "seeds per fault cell and healthy size (default: 3)")
      ->check(CLI::Range(1, 100));
  app.add_option("--threads", o.threads, "scenarios run in parallel (default: 2)")
      ->check(CLI::Range(1, 64));
  app.add_option("--json", o.json, "write the results as JSON to this file (default: none)");
  app.add_option("--only", o.only,
                 "run only scenarios whose kind, label or name contains this "
                 "text, e.g. straggler, healthy, op_one, 1024r (default: all but the sweep). "
                 "The layout x schedule sweep of issue 11 runs only when this names it: "
                 "'sweep', 'seqlen sweep', 'sweep tp2pp2dp2' (with --quick: 2 small layouts)");
  app.add_flag("--copy-reports", o.copyReports,
               "feed reports with observe(const&), which copies each one, instead of handing "
               "them over with observe(&&) (default: off)");
  app.add_flag("--noise-sweep", o.noiseSweep,
               "run only healthy 64- and 256-rank jobs (600/300 steps, checkpoints) at noise "
               "5, 6, ... 10 %, --seeds of each, to see at which noise false alarms start "
               "(default: off)");
  app.add_option("--live-results", o.liveResults,
                 "score a live run instead of running the suite in-process: the --out file of "
                 "tools/bench/detect_eval/live_eval.py (default: none)");
  CLI11_PARSE(app, argc, argv);
  if (!o.liveResults.empty()) return scoreLive(o);

  std::vector<Scenario> suite = ts::bench::buildSuite(o);
  for (auto& s : suite) s.copyReports = o.copyReports;
  uint64_t rankSteps = 0;
  for (const auto& s : suite) rankSteps += static_cast<uint64_t>(s.sim.steps) * s.sim.ranks;
  std::printf("detect_eval: %zu scenarios (%llu rank-steps), %d thread(s)%s, reports %s\n",
              suite.size(), static_cast<unsigned long long>(rankSteps), o.threads,
              o.quick ? ", quick" : "",
              o.copyReports ? "copied (observe const&)" : "moved (observe &&)");
  std::printf(
      "  healthy: 8/64/256/1024 ranks, noise 2/5/10%%, warm-up 5 steps at 2x, checkpoint "
      "every 50 steps at 3x; 1024 ranks: 200 steps (5%%), 150 (2/10%%)\n");
  std::printf(
      "  faults: 16 ranks, 500 steps, checkpoint every 75 at 2.5x, onset 60 and 400, "
      "factors 1.05-2.0, %d seed(s) at 5%% noise%s; op = aten::matmul; stragglers also from "
      "step 0 and 3 (x1.1-2.0), a hang also in step 3\n",
      o.quick ? 1 : o.seeds, o.quick ? "" : ", 1 seed at 2%/10% (x1.1, x1.5, onset 60)");
  std::printf(
      "  parallel (1F1B, 2*pp microbatches, 5%% noise): healthy tp2pp2dp2, tp2pp4dp2, tp4pp2dp4, "
      "tp2pp4dp8, balanced and edge-loaded (first stage +2.5%%, last +5%%); worker (tp group), "
      "stage, gpu (one rank of a tp group) and p2p (one pipeline link) faults x1.05-2.0 and "
      "seqlen (work moving between replicas) cv 0.05-0.3, from step 0 and 100, 300 steps, 2 "
      "seeds%s\n",
      o.quick ? " (quick: 2 layouts, x1.1/x1.5, 1 seed)" : "");
  std::printf(
      "  schedules (label 'sched'): tp2pp4dp2, 8 microbatches, 1f1b / interleaved:2 / zb-v / "
      "dualpipe-v, 5%% noise: healthy balanced and edge-loaded (1000 steps, 2 seeds); worker, "
      "stage, gpu, p2p x1.1-2.0 and seqlen cv 0.1-0.3 from step 0 and 100 (one seed each), 300 "
      "steps\n");
  std::printf(
      "  MoE (expert parallelism from data parallelism, 2 all_to_alls per forward/backward): "
      "healthy tp2pp2dp4ep2, tp1pp2dp8ep4, tp1pp1dp8ep8, tp2pp2dp2cp2ep2, tp2pp4dp8ep8, "
      "balanced and edge-loaded; experts skew x1.05-2.0 at one ep index, and worker and stage "
      "faults in tp2pp2dp4ep2, from step 0 and 100, 300 steps, 2 seeds%s\n",
      o.quick ? " (quick: 2 layouts, x1.1/x1.5, 1 seed)" : "");
  if (o.only.find("sweep") != std::string::npos) {
    const std::string ls = ts::bench::sweepLayoutsText(o.quick);
    std::printf(
        "  sweep (label 'sweep'; only with --only ...sweep...): %s; each under 1f1b, "
        "interleaved:2, zb-v and dualpipe-v (2*pp microbatches), 5%% noise: healthy balanced and "
        "edge-loaded (1 seed each); worker, gpu, stage, p2p x1.1/1.5/2, seqlen cv 0.1/0.2/0.3 "
        "(dp >= 2), experts skew 1.1/1.5/2 (ep >= 2), from step 0 and 100, 1 seed per cell\n",
        ls.c_str());
  }
  if (!o.quick) {
    std::printf(
        "  hangs: also seeds up to 10 at 16 ranks (onsets alternate) and one 64- and one "
        "256-rank job (onset 60)\n");
  }
  std::fflush(stdout);

  auto t0 = std::chrono::steady_clock::now();
  std::vector<ts::bench::ScenarioResult> results(suite.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, o.threads); ++t) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < suite.size(); i = next++)
        results[i] = ts::bench::runScenario(suite[i]);
    });
  }
  for (auto& th : pool) th.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  bool passed = false;
  nlohmann::json js = ts::bench::scoreAndPrint(results, ts::bench::Targets{}, stdout, &passed);
  ts::bench::printScheduleInference(results, stdout);
  ts::bench::printSweepSummary(results, stdout);
  std::printf("ran in %.1f s\n", secs);
  js["runtime_s"] = secs;
  js["scenarios"] = suite.size();
  if (!writeJson(o.json, js)) return 2;
  return passed ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return trainscope::guardedMain("detect_eval", [&] { return benchMain(argc, argv); });
}
