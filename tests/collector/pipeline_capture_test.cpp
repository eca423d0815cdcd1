// The detect runner's hooks for automatic captures and the end of jobs: every stored anomaly
// row is handed to onStored, the rows pickCaptures returns from tick() are stored with their
// capture id (a later update than the open row); and open anomalies end with their job (every
// rank said goodbye, or the job went silent), also for a job that ended while the collector was
// down.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "collector/pipeline.h"
#include "collector/storage/store.h"
#include "common/clock.h"
#include "tests/collector/detect/parallel_synth.h"
#include "tests/collector/detect/synth.h"
#include "tests/collector/storage/memory_store.h"

using trainscope::ManualClock;
using trainscope::collector::DetectPipeline;
using trainscope::collector::PipelineOptions;
using trainscope::detect::test::SynthJob;
namespace storage = trainscope::storage;
namespace wire = trainscope::wire;

namespace {

using trainscope::storage::testing::memoryStore;

// A straggler job (rank 5 1.5x from step 60) fed through the store and the pipeline, as
// ingest does: the store sees the ranks, steps and goodbyes the pipeline sees.
struct StoredJob {
  SynthJob job;
  ManualClock& clock;
  storage::Store& store;
  DetectPipeline& pipeline;
  int64_t next = 0;

  StoredJob(ManualClock& c, storage::Store& s, DetectPipeline& p)
      : clock(c), store(s), pipeline(p) {
    job.computeFactor = [](int64_t step, uint32_t r) { return step >= 60 && r == 5 ? 1.5 : 1.0; };
    storage::WriteBatch reg;
    reg.receivedNs = clock.nowNs();
    for (uint32_t r = 0; r < job.world; ++r) {
      wire::RankInfo info;
      info.set_job(job.job);
      info.set_rank(r);
      info.set_world_size(job.world);
      info.set_node(job.nodeOf(r));
      info.set_pid(100 + r);
      reg.ranks.push_back(info);
    }
    commit(reg);
  }
  void commit(storage::WriteBatch& b) {
    REQUIRE(store.write(b));
    pipeline.onCommitted(b);
  }
  void steps(int64_t n) {
    for (int64_t i = 0; i < n; ++i, ++next) {
      clock.advance(100'000'000);
      storage::WriteBatch b;
      b.steps = job.step(next);
      b.receivedNs = clock.nowNs();
      commit(b);
    }
  }
  void goodbyes(uint32_t from, uint32_t to) {
    storage::WriteBatch b;
    b.receivedNs = clock.nowNs();
    for (uint32_t r = from; r < to; ++r) {
      wire::RankGoodbye g;
      g.set_job(job.job);
      g.set_rank(r);
      g.set_last_step(next - 1);
      b.goodbyes.push_back(g);
    }
    commit(b);
  }
};

std::vector<storage::AnomalyRow> stateRows(storage::Store& store, const std::string& job,
                                           storage::AnomalyState state) {
  auto rows = store.anomalies(job);
  REQUIRE(rows);
  std::vector<storage::AnomalyRow> out;
  for (const auto& r : *rows) {
    if (r.state == state) out.push_back(r);
  }
  return out;
}

constexpr int64_t kSec = 1'000'000'000;

}  // namespace

TEST_CASE(
    "pipeline: every stored anomaly row is offered, and the capture ids pickCaptures returns are "
    "stored as a later update") {
  auto owned = memoryStore();
  auto& store = *owned;
  ManualClock clock(1000 * kSec);
  std::vector<storage::AnomalyRow> offered;
  std::vector<std::string> picked;
  PipelineOptions po;
  po.onStored = [&](const storage::AnomalyRow& row) { offered.push_back(row); };
  po.pickCaptures = [&](int64_t) {
    std::vector<storage::AnomalyRow> out;
    for (const auto& row : offered) {
      if (row.state != storage::AnomalyState::kOpen || row.captureId) continue;
      if (std::find(picked.begin(), picked.end(), row.id) != picked.end()) continue;
      picked.push_back(row.id);
      out.push_back(row);
      out.back().captureId = "cap-" + std::to_string(picked.size());
    }
    return out;
  };
  DetectPipeline pipeline(po, store, clock);
  StoredJob job(clock, store, pipeline);
  job.steps(150);
  REQUIRE_FALSE(offered.empty());
  CHECK(picked.empty());  // captures are picked on tick() only
  std::map<std::string, int64_t> openUpdatedNs;
  for (const auto& r : stateRows(store, job.job.job, storage::AnomalyState::kOpen))
    openUpdatedNs[r.id] = r.updatedNs;
  pipeline.tick();
  REQUIRE_FALSE(picked.empty());
  CHECK(pipeline.stats().capturesStarted == picked.size());
  auto rows = store.anomalies(job.job.job);
  REQUIRE(rows);
  for (size_t i = 0; i < picked.size(); ++i) {
    bool found = false;
    for (const auto& r : *rows) {
      if (r.id != picked[i]) continue;
      found = true;
      CHECK(r.captureId == std::optional<std::string>("cap-" + std::to_string(i + 1)));
      // The capture id is a later update than the open row (the clock did not move in
      // between): the live feed, which follows updated_ns, sends it even when it sent the
      // open row before the capture id was stored.
      CHECK(r.updatedNs > openUpdatedNs.at(r.id));
    }
    CHECK(found);
  }
  // The rows with capture ids were offered too (the policy then knows them as captured).
  CHECK(std::any_of(offered.begin(), offered.end(), [](const auto& r) { return r.captureId; }));
}

TEST_CASE("pipeline: open anomalies end with their job once every rank said goodbye") {
  auto owned = memoryStore();
  auto& store = *owned;
  ManualClock clock(1000 * kSec);
  std::vector<storage::AnomalyRow> offered;
  PipelineOptions po;
  po.onStored = [&](const storage::AnomalyRow& row) { offered.push_back(row); };
  DetectPipeline pipeline(po, store, clock);
  StoredJob job(clock, store, pipeline);
  job.steps(150);
  const auto open = stateRows(store, job.job.job, storage::AnomalyState::kOpen);
  REQUIRE_FALSE(open.empty());  // the straggler, still slow
  pipeline.tick();
  // Half the ranks leave: the job is not over.
  job.goodbyes(0, 4);
  clock.advance(10 * kSec);
  pipeline.tick();
  CHECK(stateRows(store, job.job.job, storage::AnomalyState::kOpen).size() == open.size());
  job.goodbyes(4, job.job.world);
  clock.advance(10 * kSec);
  pipeline.tick();
  CHECK(stateRows(store, job.job.job, storage::AnomalyState::kOpen).empty());
  const auto ended = stateRows(store, job.job.job, storage::AnomalyState::kEnded);
  CHECK(ended.size() >= open.size());
  for (const auto& r : ended) {
    CHECK(r.resolvedStep == 149);  // the job's last step
    CHECK(r.resolvedNs == clock.nowNs());
  }
  CHECK(pipeline.stats().anomaliesEnded == ended.size());
  CHECK(std::count_if(offered.begin(), offered.end(), [](const auto& r) {
          return r.state == storage::AnomalyState::kEnded;
        }) == static_cast<std::ptrdiff_t>(ended.size()));
  // Resolved ones stay resolved.
  for (const auto& r : stateRows(store, job.job.job, storage::AnomalyState::kResolved))
    CHECK(r.resolvedStep < 149);
}

TEST_CASE("pipeline: a job silent for the job-end time is over; a shorter silence is not") {
  auto owned = memoryStore();
  auto& store = *owned;
  ManualClock clock(1000 * kSec);
  PipelineOptions po;
  po.jobEndIdleNs = 600 * kSec;
  DetectPipeline pipeline(po, store, clock);
  StoredJob job(clock, store, pipeline);
  job.steps(150);
  REQUIRE_FALSE(stateRows(store, job.job.job, storage::AnomalyState::kOpen).empty());
  clock.advance(590 * kSec);
  pipeline.tick();  // a hang opens for the silence; the job is not over yet
  CHECK(stateRows(store, job.job.job, storage::AnomalyState::kEnded).empty());
  clock.advance(20 * kSec);
  pipeline.tick();
  CHECK(stateRows(store, job.job.job, storage::AnomalyState::kOpen).empty());
  CHECK_FALSE(stateRows(store, job.job.job, storage::AnomalyState::kEnded).empty());
}

TEST_CASE("pipeline: anomalies of a job that ended while the collector was down end at restart") {
  auto owned = memoryStore();
  auto& store = *owned;
  ManualClock clock(1000 * kSec);
  size_t open = 0;
  {
    DetectPipeline before(PipelineOptions{}, store, clock);
    StoredJob job(clock, store, before);
    job.steps(150);
    open = stateRows(store, job.job.job, storage::AnomalyState::kOpen).size();
    REQUIRE(open > 0);
  }
  // The agents replay the goodbyes into the store (spool) before the new collector's detectors
  // know anything of the job.
  storage::WriteBatch bye;
  bye.receivedNs = clock.nowNs();
  for (uint32_t r = 0; r < 8; ++r) {
    wire::RankGoodbye g;
    g.set_job("job1");
    g.set_rank(r);
    g.set_last_step(149);
    bye.goodbyes.push_back(g);
  }
  REQUIRE(store.write(bye));
  DetectPipeline after(PipelineOptions{}, store, clock);
  clock.advance(kSec);
  after.tick();
  CHECK(stateRows(store, "job1", storage::AnomalyState::kOpen).empty());
  CHECK(stateRows(store, "job1", storage::AnomalyState::kEnded).size() == open);
}

TEST_CASE(
    "pipeline: an open anomaly's refreshes update its stored figures, keep its capture id "
    "and start no second capture") {
  auto owned = memoryStore();
  auto& store = *owned;
  ManualClock clock(1000 * kSec);
  std::vector<std::string> handed;
  // Open rows offered since the last tick, the latest of each (as the capture policy keeps).
  std::map<std::string, storage::AnomalyRow> fresh;
  PipelineOptions po;
  po.onStored = [&](const storage::AnomalyRow& row) {
    // Refreshes carry no capture id: the caller (the policy) knows what it captured.
    if (row.state == storage::AnomalyState::kOpen && !row.captureId &&
        std::find(handed.begin(), handed.end(), row.id) == handed.end())
      fresh[row.id] = row;
  };
  po.pickCaptures = [&](int64_t) {
    std::vector<storage::AnomalyRow> out;
    for (auto& [id, row] : fresh) {
      handed.push_back(id);
      row.captureId = "cap-" + std::to_string(handed.size());
      out.push_back(row);
    }
    fresh.clear();
    return out;
  };
  DetectPipeline pipeline(po, store, clock);
  // Work moving between 4 data-parallel replicas from the first step: workload_imbalance opens
  // within a few steps and is refreshed every 16 steps after.
  trainscope::detect::test::ParallelSynth job;
  job.seed = 42;
  job.dp = 4;
  job.workerFactor = [](int64_t s, uint32_t, uint32_t d) {
    return trainscope::detect::test::workload(42, s, d, 0.2);
  };
  storage::WriteBatch reg;
  for (const auto& g : job.rankGroups()) {
    wire::RankInfo info;
    info.set_job(job.job);
    info.set_rank(g.rank);
    info.set_world_size(job.world());
    info.set_node(job.ctx(g.rank).node);
    reg.ranks.push_back(info);
    reg.groups.push_back(storage::GroupsUpdate{job.job, g});
  }
  pipeline.onCommitted(reg);
  for (int64_t s = 0; s < 200; ++s) {
    clock.advance(kSec / 10);
    storage::WriteBatch b;
    b.steps = job.step(s);
    b.receivedNs = clock.nowNs();
    pipeline.onCommitted(b);
    if (s % 10 == 9) pipeline.tick();
  }
  auto rows = store.anomalies(job.job);
  REQUIRE(rows);
  const storage::AnomalyRow* imbalance = nullptr;
  for (const auto& r : *rows) {
    if (r.kind == "workload_imbalance") imbalance = &r;
  }
  REQUIRE(imbalance != nullptr);
  CHECK(std::count(handed.begin(), handed.end(), imbalance->id) == 1);
  CHECK(pipeline.stats().anomaliesOpened == rows->size());
  CHECK(imbalance->state == storage::AnomalyState::kOpen);
  REQUIRE(imbalance->captureId);
  CHECK(imbalance->captureId->rfind("cap-", 0) == 0);
  // Opened within 10 steps on under 10 steps (and published after the confirmation hold);
  // stored now: a refresh over the last 64.
  CHECK(imbalance->detectedStep <= 10 + trainscope::detect::FoldOptions{}.confirmSteps);
  CHECK(imbalance->evidence.at("steps_judged") == 64);
  CHECK(imbalance->evidence.at("estimated_gain") > 0.05);
}
