#include <catch2/catch.hpp>

#include "collector/detect/layout.h"
#include "tests/collector/detect/parallel_synth.h"

using namespace trainscope;
using namespace trainscope::detect;
using namespace trainscope::detect::test;

TEST_CASE("layout: tp2 x pp2 x dp2 gives four workers of two ranks, by stage, with coords") {
  ParallelSynth job;
  auto layout = layoutOf(job.topology());
  REQUIRE(layout != nullptr);
  CHECK(layout->stages == 2);
  REQUIRE(layout->workers.size() == 4);
  CHECK(layout->workers[0].ranks == std::vector<uint32_t>{0, 1});
  CHECK(layout->workers[0].stage == 0);
  CHECK(layout->workers[0].coords == R"({"pp":0,"dp":0})");
  CHECK(layout->workers[1].ranks == std::vector<uint32_t>{2, 3});
  CHECK(layout->workers[1].coords == R"({"pp":0,"dp":1})");
  CHECK(layout->workers[3].ranks == std::vector<uint32_t>{6, 7});
  CHECK(layout->workers[3].stage == 1);
  CHECK(layout->workerOfRank(5) == 2);
  CHECK(layout->workerOfRank(99) == -1);
}

TEST_CASE("layout: nothing declared, or data parallel only, is judged flat (no layout)") {
  CHECK(layoutOf(topology::Topology{}) == nullptr);
  ParallelSynth job;
  job.tp = 1;
  job.pp = 1;
  job.dp = 8;
  CHECK(layoutOf(job.topology()) == nullptr);
  job.tp = 2;
  job.dp = 4;
  auto tpOnly = layoutOf(job.topology());
  REQUIRE(tpOnly != nullptr);
  CHECK(tpOnly->stages == 1);
  CHECK(tpOnly->workers.size() == 4);
}

TEST_CASE("layout: none until every rank of the layout has declared its groups") {
  // Ranks declare as they start: with 5 and 7 missing, stage 1's workers would be named {4}
  // and {6}, then replaced when the rest arrive (seen live: a stage_imbalance opened on
  // ranks 4 and 6 stayed open beside the one the restarted detector opened later).
  ParallelSynth job;
  job.undeclared = {5, 7};
  CHECK(layoutOf(job.topology()) == nullptr);
  job.undeclared = {};
  auto layout = layoutOf(job.topology());
  REQUIRE(layout != nullptr);
  CHECK(layout->workers[2].ranks == std::vector<uint32_t>{4, 5});
}

TEST_CASE("layout: the 1F1B what-if model replays the schedule by default") {
  // Two equal stages, 4 microbatches: (M + P - 1) slots of one forward and one backward.
  CHECK(pipelineStepNs({60.0, 60.0}, 4) == Approx(75.0));
  CHECK(pipelineStepNs({40.0, 40.0, 40.0, 40.0}, 8) == Approx(11 * 5.0));
  // Unknown microbatches: the slowest stage alone; one stage: its work.
  CHECK(pipelineStepNs({60.0, 90.0}, 0) == Approx(90.0));
  CHECK(pipelineStepNs({60.0}, 4) == Approx(60.0));
  // Stage 0 at 90 (forwards 7.5, backwards 15): replayed by hand, its last backward ends at
  // 97.5 (its own 90 plus 7.5 idle waiting for stage 1's first backward).
  CHECK(pipelineStepNs({90.0, 60.0}, 4) == Approx(97.5));
  CHECK(estimatedGain({60.0, 60.0}, 0, 90.0, 60.0, 4, 110.0) == Approx(22.5 / 110));
  // The same slowdown gains less on the lighter stage of an unbalanced pipeline, whose heavier
  // stage still sets the pace.
  const double light = estimatedGain({60.0, 80.0}, 0, 75.0, 60.0, 4, 100.0);
  const double heavy = estimatedGain({60.0, 80.0}, 1, 95.0, 80.0, 4, 100.0);
  CHECK(light > 0.0);
  CHECK(light < heavy);
  CHECK(estimatedGain({60.0, 60.0}, 5, 90.0, 60.0, 4, 110.0) == 0.0);
}

TEST_CASE(
    "layout: the replayed what-if saves only what a slow worker adds over the other replicas") {
  ParallelSynth job;  // tp2 x pp2 x dp2: workers 0 (pp0 dp0), 1 (pp0 dp1), 2 (pp1 dp0), 3 (pp1 dp1)
  auto layout = layoutOf(job.topology());
  REQUIRE(layout != nullptr);
  const auto step = [](std::vector<double> workers) {
    StepSummary s;
    s.stageNs = {60.0, 60.0};
    s.stepNs = 110.0;
    s.microbatches = 4;
    s.workerNs = std::move(workers);
    return s;
  };
  const pipeline::Schedule oneF1B;
  // Worker 0 at 90 against 60 everywhere else: the medians' what-if.
  CHECK(replayedGain({step({90, 60, 60, 60})}, *layout, 0, 60.0 / 90, 4, oneF1B) ==
        Approx(estimatedGain({60.0, 60.0}, 0, 90.0, 60.0, 4, 110.0)));
  // The other replica drew a slow step of its own (84): fixing worker 0 saves only the rest.
  const double noisy = replayedGain({step({90, 84, 60, 60})}, *layout, 0, 60.0 / 90, 4, oneF1B);
  CHECK(noisy == Approx((pipelineStepNs({90, 60}, 4) - pipelineStepNs({84, 60}, 4)) / 110.0));
  CHECK(noisy < estimatedGain({60.0, 60.0}, 0, 90.0, 60.0, 4, 110.0));
  // ... or one slower than the culprit: nothing to gain that step.
  CHECK(replayedGain({step({90, 95, 60, 60})}, *layout, 0, 60.0 / 90, 4, oneF1B) == 0.0);
  // The median over the steps; steps without their workers recorded are skipped, and none
  // at all is -1 (the caller falls back to the medians' what-if).
  CHECK(replayedGain(
            {step({90, 95, 60, 60}), step({90, 60, 60, 60}), step({90, 60, 60, 60}), step({})},
            *layout, 0, 60.0 / 90, 4,
            oneF1B) == Approx(estimatedGain({60.0, 60.0}, 0, 90.0, 60.0, 4, 110.0)));
  CHECK(replayedGain({step({})}, *layout, 0, 0.5, 4, oneF1B) == -1.0);
  CHECK(replayedGain({step({90, 60, 60, 60})}, *layout, 9, 0.5, 4, oneF1B) == -1.0);
}

TEST_CASE("layout: the replayed what-if takes the other replicas' ends from their dp waits") {
  ParallelSynth job;  // tp2 x pp2 x dp2: workers 0 (pp0 dp0), 1 (pp0 dp1), 2 (pp1 dp0), 3 (pp1 dp1)
  auto layout = layoutOf(job.topology());
  REQUIRE(layout != nullptr);
  CHECK(layout->dpGroups == std::vector<std::string>{"dp"});
  const pipeline::Schedule oneF1B;
  const auto step = [](std::vector<double> waits) {
    StepSummary s;
    s.stageNs = {60.0, 60.0};
    s.stepNs = 110.0;
    s.microbatches = 4;
    s.workerNs = {90, 60, 60, 60};
    s.dpWaitNs = std::move(waits);
    return s;
  };
  // Replica 1 waited 10 longer than the culprit's at both stages: it finished 10 sooner, so
  // fixing worker 0 saves 10, not the 22.5 the replay of replica 1's compute says (a replay
  // without noise or transfers that finishes a balanced replica too soon).
  const double waited = replayedGain({step({2, 12, 2, 12})}, *layout, 0, 60.0 / 90, 4, oneF1B);
  CHECK(waited == Approx(10.0 / 110));
  CHECK(replayedGain({step({})}, *layout, 0, 60.0 / 90, 4, oneF1B) ==
        Approx(estimatedGain({60.0, 60.0}, 0, 90.0, 60.0, 4, 110.0)));
  // Waiting longer than the replay's saving: the replay's saving (the culprit fixed is then
  // the latest).
  CHECK(replayedGain({step({2, 60, 2, 60})}, *layout, 0, 60.0 / 90, 4, oneF1B) ==
        Approx(estimatedGain({60.0, 60.0}, 0, 90.0, 60.0, 4, 110.0)));
  // The culprit's replica waited longer: the other was the latest, nothing to gain.
  CHECK(replayedGain({step({12, 2, 12, 2})}, *layout, 0, 60.0 / 90, 4, oneF1B) == 0.0);
  // A worker without a wait: the replays, as without waits.
  CHECK(replayedGain({step({2, -1, 2, 12})}, *layout, 0, 60.0 / 90, 4, oneF1B) ==
        Approx(estimatedGain({60.0, 60.0}, 0, 90.0, 60.0, 4, 110.0)));
}

TEST_CASE("layout: expert-parallel replicas go together in the replayed what-if") {
  ParallelSynth job;
  job.dp = 4;
  job.ep = 2;  // replicas {0, 1} and {2, 3} meet in every MoE layer
  auto layout = layoutOf(job.topology());
  REQUIRE(layout != nullptr);
  CHECK(layout->expertBlock == std::vector<uint32_t>{0, 0, 2, 2});
  job.ep = 1;
  CHECK(layoutOf(job.topology())->expertBlock == std::vector<uint32_t>{0, 1, 2, 3});
  // Workers 0-3: stage 0, replicas 0-3; 4-7: stage 1. Worker 0 at 90 against 60 elsewhere.
  StepSummary s;
  s.stageNs = {60.0, 60.0};
  s.stepNs = 110.0;
  s.microbatches = 4;
  s.workerNs = {90, 60, 60, 60, 60, 60, 60, 60};
  // Replica 1 waited as little as the culprit's, held up by it in the all_to_all; replicas 2
  // and 3 finished 10 sooner. Fixing worker 0 frees replica 1 too: 10 to gain, not 0.
  s.dpWaitNs = {2, 2, 12, 12, 2, 2, 12, 12};
  const pipeline::Schedule oneF1B;
  CHECK(replayedGain({s}, *layout, 0, 60.0 / 90, 4, oneF1B) == Approx(10.0 / 110));
  // Every replica in one block: no replica to read a wait from, the replays.
  job.ep = 4;
  auto one = layoutOf(job.topology());
  CHECK(one->expertBlock == std::vector<uint32_t>{0, 0, 0, 0});
  CHECK(replayedGain({s}, *one, 0, 60.0 / 90, 4, oneF1B) ==
        Approx(estimatedGain({60.0, 60.0}, 0, 90.0, 60.0, 4, 110.0)));
}

TEST_CASE("layout: the what-if model replays the job's own schedule") {
  namespace pl = trainscope::pipeline;
  const std::vector<double> even = {40.0, 40.0, 40.0, 40.0};
  const pl::Schedule il = *pl::parseSchedule("interleaved:2");
  const pl::Schedule zbv = *pl::parseSchedule("zb-v");
  // Interleaving 2 chunks halves 1F1B's bubble: 40 + 15 / 2; the V fills most of the rest.
  CHECK(pipelineStepNs(even, 8, il) == Approx(40.0 + 7.5));
  CHECK(pipelineStepNs(even, 8, zbv) < pipelineStepNs(even, 8, il));
  CHECK(pipelineStepNs(even, 8, zbv) >= 40.0);
  // With less bubble to hide in, a slow stage costs the job more of the (shorter) step.
  const double one = estimatedGain(even, 1, 60.0, 40.0, 8, 60.0);
  const double v = estimatedGain(even, 1, 60.0, 40.0, 8, 60.0, zbv);
  CHECK(one > 0.0);
  CHECK(v >= one);
  // A schedule that cannot run these microbatches is replayed as 1F1B (DualPipe-V needs 2P).
  CHECK(pipelineStepNs(even, 4, *pl::parseSchedule("dualpipe-v")) ==
        Approx(pipelineStepNs(even, 4)));
}

TEST_CASE("layout: medians come from the steps since onset, the schedule from a wider window") {
  namespace pl = trainscope::pipeline;
  const pl::Schedule il = *pl::parseSchedule("interleaved:2");
  auto summary = [](double stage0, const pl::Schedule& s, double micro) {
    StepSummary v;
    v.stageNs = {stage0, 40.0};
    v.stepNs = stage0 + 40.0;
    v.schedule = s;
    v.microbatches = micro;
    return v;
  };
  // Eight steps before the onset read as interleaved:2 over 4, the three since as 1F1B over
  // 12 (a slow stage tilts the bubble the schedule is told by).
  std::vector<StepSummary> all(8, summary(40.0, il, 4));
  std::vector<StepSummary> since(3, summary(80.0, pl::Schedule{}, 12));
  all.insert(all.end(), since.begin(), since.end());
  const StepSummary narrow = medianOf(since, 2);
  CHECK(pl::scheduleName(narrow.schedule) == "1f1b");
  CHECK(narrow.microbatches == 12);
  const StepSummary wide = medianOf(since, 2, &all);
  CHECK(pl::scheduleName(wide.schedule) == "interleaved:2");
  CHECK(wide.microbatches == 4);
  // The medians are the steps' since the onset either way.
  CHECK(wide.stageNs[0] == 80.0);
  CHECK(wide.stepNs == 120.0);
}

TEST_CASE("layout: viewStep takes workers' slowest rank, stages' lower median and microbatches") {
  ParallelSynth job;
  job.noise = 0;
  job.warmupSteps = 0;
  job.workerFactor = [](int64_t, uint32_t s, uint32_t d) { return s == 0 && d == 1 ? 2.0 : 1.0; };
  // One GPU of worker 0 (ranks 0 and 1) at 1.5x: the worker goes at its pace, undiluted.
  job.rankFactor = [](int64_t, uint32_t r) { return r == 1 ? 1.5 : 1.0; };
  auto layout = layoutOf(job.topology());
  AssembledStep step;
  for (auto& r : job.step(0)) step.ranks.push_back({std::move(r), RankContext{}});
  LayoutStep view;
  viewStep(step, *layout, &view);
  REQUIRE(view.workerNs.size() == 4);
  CHECK(view.workerNs[0] == Approx(90e6));
  CHECK(view.workerNs[1] == Approx(120e6));
  CHECK(view.stageNs[0] == Approx(90e6));  // the lower median of 90 and 120 ms
  CHECK(view.stageNs[1] == Approx(60e6));
  CHECK(view.microbatches == 4);
}

TEST_CASE("layout: workers know their replica and their ranks' tp index; the tp group names") {
  ParallelSynth job;
  job.tp = 2;
  job.pp = 2;
  job.dp = 2;
  auto layout = layoutOf(job.topology());
  REQUIRE(layout);
  CHECK(layout->replicas == 2);
  const int32_t w = layout->workerOfRank(6);  // pp 1, dp 1, tp 0
  REQUIRE(w >= 0);
  const Worker& wk = layout->workers[static_cast<size_t>(w)];
  CHECK(wk.ranks == std::vector<uint32_t>{6, 7});
  CHECK(wk.replica == 1);
  CHECK(wk.stage == 1);
  CHECK(wk.tp == std::vector<int32_t>{0, 1});
  CHECK(layout->tpGroups == std::vector<std::string>{"tp"});
}
