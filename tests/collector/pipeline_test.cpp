// The collector's detect runner against a real (in-memory) SQLite store: committed batches
// in, stored anomalies out, with node names from registrations or the store, hangs found on
// tick(), goodbyes and vanished processes passed on, and detector rejects counted.
#include "collector/pipeline.h"

#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "collector/storage/store.h"
#include "common/clock.h"
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

constexpr int64_t kSec = 1'000'000'000;

storage::WriteBatch registrations(const SynthJob& job) {
  storage::WriteBatch b;
  for (uint32_t r = 0; r < job.world; ++r) {
    wire::RankInfo info;
    info.set_job(job.job);
    info.set_rank(r);
    info.set_world_size(job.world);
    info.set_node(job.nodeOf(r));
    info.set_pid(1000 + r);
    b.ranks.push_back(info);
  }
  return b;
}

// Feeds steps [from, to) one batch per step, the clock moving 100 ms per step; `take` feeds
// them as ingest's writer does (takeCommitted) and checks the reports were taken.
void feed(DetectPipeline& p, SynthJob& job, ManualClock& clock, int64_t from, int64_t to,
          bool take = false) {
  for (int64_t s = from; s < to; ++s) {
    clock.advance(kSec / 10);
    storage::WriteBatch b;
    b.steps = job.step(s);
    b.receivedNs = clock.nowNs();
    if (take) {
      p.takeCommitted(b);
      for (const auto& r : b.steps) CHECK(r.ops_size() == 0);  // moved out
    } else {
      p.onCommitted(b);
    }
  }
}

const storage::AnomalyRow* findKind(const std::vector<storage::AnomalyRow>& rows,
                                    const std::string& kind) {
  for (const auto& r : rows) {
    if (r.kind == kind) return &r;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("pipeline: a straggler is stored with its rank and node; a hang is found on tick") {
  auto store = memoryStore();
  ManualClock clock(1000 * kSec);
  DetectPipeline pipeline(PipelineOptions{}, *store, clock);
  SynthJob job;
  job.computeFactor = [](int64_t s, uint32_t r) { return s >= 60 && r == 5 ? 1.5 : 1.0; };
  auto reg = registrations(job);
  pipeline.onCommitted(reg);
  feed(pipeline, job, clock, 0, 150);

  auto rows = store->anomalies(job.job);
  REQUIRE(rows);
  const auto* straggler = findKind(*rows, "straggler");
  REQUIRE(straggler != nullptr);
  CHECK(straggler->ranks == std::vector<uint32_t>{5});
  CHECK(straggler->nodes == std::vector<std::string>{"node-1"});
  CHECK(straggler->state == storage::AnomalyState::kOpen);
  CHECK(straggler->onsetStep >= 55);
  CHECK(straggler->updatedNs > 0);
  CHECK(pipeline.stats().reportsFed == uint64_t{150} * job.world);
  CHECK(pipeline.stats().anomaliesOpened >= 1);
  CHECK(findKind(*rows, "hang") == nullptr);

  // Silence: the hang detector needs (default floor) 10 s without reports.
  clock.advance(30 * kSec);
  pipeline.tick();
  rows = store->anomalies(job.job);
  REQUIRE(rows);
  const auto* hang = findKind(*rows, "hang");
  REQUIRE(hang != nullptr);
  CHECK(hang->state == storage::AnomalyState::kOpen);
  auto since = store->anomaliesSince(clock.nowNs());
  REQUIRE(since);
  CHECK(findKind(*since, "hang") != nullptr);
}

TEST_CASE("pipeline: nodes come from the store when the registration was in an earlier run") {
  auto store = memoryStore();
  ManualClock clock(1000 * kSec);
  SynthJob job;
  job.computeFactor = [](int64_t s, uint32_t r) { return s >= 60 && r == 2 ? 1.6 : 1.0; };
  REQUIRE(store->write(registrations(job)));  // stored, but never seen by this pipeline
  DetectPipeline pipeline(PipelineOptions{}, *store, clock);
  feed(pipeline, job, clock, 0, 150);
  auto rows = store->anomalies(job.job);
  REQUIRE(rows);
  const auto* straggler = findKind(*rows, "straggler");
  REQUIRE(straggler != nullptr);
  CHECK(straggler->ranks == std::vector<uint32_t>{2});
  CHECK(straggler->nodes == std::vector<std::string>{"node-0"});
  CHECK(pipeline.stats().storeLookups >= 1);
}

TEST_CASE("pipeline: goodbyes prevent hangs; a process gone without one is a hang at once") {
  auto store = memoryStore();
  ManualClock clock(1000 * kSec);
  DetectPipeline pipeline(PipelineOptions{}, *store, clock);
  SynthJob ended;
  ended.job = "ended";
  SynthJob died;
  died.job = "died";
  pipeline.onCommitted(registrations(ended));
  pipeline.onCommitted(registrations(died));
  feed(pipeline, ended, clock, 0, 40);
  feed(pipeline, died, clock, 0, 40);

  storage::WriteBatch bye;
  for (uint32_t r = 0; r < ended.world; ++r) {
    wire::RankGoodbye g;
    g.set_job("ended");
    g.set_rank(r);
    g.set_last_step(39);
    bye.goodbyes.push_back(g);
  }
  wire::HostSample host;
  host.set_node("node-0");
  auto* proc = host.add_procs();
  proc->set_job("died");
  proc->set_rank(1);
  proc->set_pid(1001);
  proc->set_alive(false);
  bye.hosts.push_back(host);
  bye.hosts.push_back(host);  // reported again: passed on once
  bye.receivedNs = clock.nowNs();
  pipeline.onCommitted(bye);
  CHECK(pipeline.stats().goodbyes == ended.world);
  CHECK(pipeline.stats().gone == 1);

  clock.advance(60 * kSec);
  pipeline.tick();
  auto endedRows = store->anomalies("ended");
  REQUIRE(endedRows);
  CHECK(findKind(*endedRows, "hang") == nullptr);
  auto diedRows = store->anomalies("died");
  REQUIRE(diedRows);
  const auto* gone = findKind(*diedRows, "hang");
  REQUIRE(gone != nullptr);
  CHECK(gone->ranks == std::vector<uint32_t>{1});
}

TEST_CASE("pipeline: reports the detectors refuse are counted, the rest still judged") {
  auto store = memoryStore();
  ManualClock clock(1000 * kSec);
  DetectPipeline pipeline(PipelineOptions{}, *store, clock);
  SynthJob job;
  job.world = 4;
  pipeline.onCommitted(registrations(job));
  storage::WriteBatch b;
  b.steps = job.step(0);
  b.steps[1].set_rank(99);  // >= world size
  b.steps[2].set_job("");
  b.receivedNs = clock.nowNs();
  pipeline.onCommitted(b);
  CHECK(pipeline.stats().rejected == 2);
  CHECK(pipeline.stats().reportsFed == 2);
  const std::string text =
      trainscope::collector::detectMetricsText(pipeline.stats(), pipeline.detectStats());
  CHECK(text.find("# TYPE trainscope_detect_rejected_total counter\n"
                  "trainscope_detect_rejected_total 2\n") != std::string::npos);
  CHECK(text.find("trainscope_detect_reports_total 2\n") != std::string::npos);
}

TEST_CASE("pipeline: takeCommitted judges as onCommitted does, taking the reports from the batch") {
  auto run = [](bool take) {
    SynthJob job;  // the same seed each run: the same reports
    job.computeFactor = [](int64_t s, uint32_t r) { return s >= 60 && r == 3 ? 1.5 : 1.0; };
    auto store = memoryStore();
    ManualClock clock(1000 * kSec);
    DetectPipeline pipeline(PipelineOptions{}, *store, clock);
    auto reg = registrations(job);
    pipeline.onCommitted(reg);
    feed(pipeline, job, clock, 0, 150, take);
    auto rows = store->anomalies(job.job);
    REQUIRE(rows);
    std::vector<std::string> found;
    for (const auto& r : *rows) found.push_back(r.kind + " " + std::to_string(r.onsetStep));
    CHECK(pipeline.stats().reportsFed == uint64_t{150} * job.world);
    return found;
  };
  const auto copied = run(false);
  CHECK_FALSE(copied.empty());
  CHECK(run(true) == copied);
}
