// The detect runner's automatic-capture hook: each newly opened anomaly is handed to onOpened
// once, and the capture id it returns is stored on the anomaly; resolutions, refreshes and later
// steps do not call it again.
#include <algorithm>
#include <cmath>
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

using trainscope::ManualClock;
using trainscope::collector::DetectPipeline;
using trainscope::collector::PipelineOptions;
using trainscope::detect::test::SynthJob;
namespace storage = trainscope::storage;
namespace wire = trainscope::wire;

namespace {

std::unique_ptr<storage::Store> memoryStore() {
  storage::SqliteOptions so;
  so.path = ":memory:";
  auto opened = storage::openSqliteStore(so);
  REQUIRE(opened);
  return std::move(opened.value());
}

}  // namespace

TEST_CASE("pipeline: a new anomaly gets the capture id onOpened returns, once") {
  auto owned = memoryStore();
  auto& store = *owned;
  constexpr int64_t kSec = 1'000'000'000;
  ManualClock clock(1000 * kSec);
  std::vector<storage::AnomalyRow> handed;
  std::vector<int64_t> openUpdatedNs;  // the stored open row's updated_ns, as onOpened saw it
  PipelineOptions po;
  po.onOpened = [&](const storage::AnomalyRow& row) -> std::optional<std::string> {
    handed.push_back(row);
    auto stored = store.anomalies(row.job);
    REQUIRE(stored);
    for (const auto& r : *stored) {
      if (r.id == row.id) openUpdatedNs.push_back(r.updatedNs);
    }
    return "cap-" + std::to_string(handed.size());
  };
  DetectPipeline pipeline(po, store, clock);
  SynthJob job;
  job.computeFactor = [](int64_t s, uint32_t r) { return s >= 60 && r == 5 ? 1.5 : 1.0; };
  storage::WriteBatch reg;
  for (uint32_t r = 0; r < job.world; ++r) {
    wire::RankInfo info;
    info.set_job(job.job);
    info.set_rank(r);
    info.set_world_size(job.world);
    info.set_node(job.nodeOf(r));
    reg.ranks.push_back(info);
  }
  pipeline.onCommitted(reg);
  for (int64_t s = 0; s < 150; ++s) {
    clock.advance(kSec / 10);
    storage::WriteBatch b;
    b.steps = job.step(s);
    b.receivedNs = clock.nowNs();
    pipeline.onCommitted(b);
  }
  REQUIRE_FALSE(handed.empty());
  CHECK(handed.front().state == trainscope::storage::AnomalyState::kOpen);
  CHECK(pipeline.stats().capturesStarted == handed.size());
  auto rows = store.anomalies(job.job);
  REQUIRE(rows);
  REQUIRE(rows->size() == handed.size());  // one call per anomaly, none for updates
  for (size_t i = 0; i < handed.size(); ++i) {
    bool found = false;
    for (const auto& r : *rows) {
      if (r.id == handed[i].id) {
        found = true;
        CHECK(r.captureId == std::optional<std::string>("cap-" + std::to_string(i + 1)));
        // The capture id is a later update than the open row (the clock did not move in
        // between): the live feed, which follows updated_ns, sends it even when it sent the
        // open row before the capture id was stored.
        REQUIRE(openUpdatedNs.size() == handed.size());
        CHECK(r.updatedNs > openUpdatedNs[i]);
      }
    }
    CHECK(found);
  }
}

TEST_CASE(
    "pipeline: an open anomaly's refreshes update its stored figures, keep its capture id "
    "and start no second capture") {
  auto owned = memoryStore();
  auto& store = *owned;
  constexpr int64_t kSec = 1'000'000'000;
  ManualClock clock(1000 * kSec);
  std::vector<std::string> handed;
  PipelineOptions po;
  po.onOpened = [&](const storage::AnomalyRow& row) -> std::optional<std::string> {
    handed.push_back(row.id);
    return "cap-" + std::to_string(handed.size());
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
  // Opened within 10 steps on under 10 steps; stored now: a refresh over the last 64.
  CHECK(imbalance->detectedStep <= 10);
  CHECK(imbalance->evidence.at("steps_judged") == 64);
  CHECK(imbalance->evidence.at("estimated_gain") > 0.05);
}
