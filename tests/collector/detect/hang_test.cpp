#include <catch2/catch.hpp>

#include "collector/detect/detector_set.h"
#include "tests/collector/detect/synth.h"

using namespace trainscope::detect;
using namespace trainscope::detect::test;

namespace {
constexpr int64_t kSec = 1'000'000'000;

// Feeds steps [from, to) of every rank except those in `stopAfter` past their last step.
void feed(SynthJob& job, DetectorSet& set, int64_t from, int64_t to,
          const std::map<uint32_t, int64_t>& stopAfter, std::vector<Anomaly>* events) {
  for (int64_t s = from; s < to; ++s) {
    for (auto& r : job.step(s)) {
      auto it = stopAfter.find(r.rank());
      if (it != stopAfter.end() && s > it->second) continue;
      RankContext c = job.ctx(r.rank());
      c.receivedNs = r.end_ns();
      REQUIRE(set.observe(r, c).isOk());
    }
    set.tick(job.now());
    for (auto& e : set.takeEvents()) events->push_back(e);
  }
}

std::vector<Anomaly> tickUntil(DetectorSet& set, int64_t from, int64_t to, int64_t every) {
  std::vector<Anomaly> out;
  for (int64_t t = from; t <= to; t += every) {
    set.tick(t);
    for (auto& e : set.takeEvents()) out.push_back(e);
  }
  return out;
}
}  // namespace

TEST_CASE("hang: no alarm while every rank keeps stepping, including slow checkpoints") {
  SynthJob job;
  job.checkpointEvery = 200;
  job.computeMs = 2000;  // 2 s steps: a 6 s checkpoint step is long but not a hang
  DetectorSet set;
  std::vector<Anomaly> events;
  feed(job, set, 0, 2000, {}, &events);
  INFO(describe(events));
  CHECK(ofKind(events, AnomalyKind::kHang).empty());
}

TEST_CASE("hang: the rank that stopped first is named after the threshold, not before; resolved when it moves") {
  SynthJob job;  // ~105 ms steps: the 10 s floor applies
  DetectorSet set;
  std::vector<Anomaly> events;
  feed(job, set, 0, 500, {}, &events);
  // Rank 6 stops after step 499; the others block in the next all-reduce after step 500.
  std::map<uint32_t, int64_t> stop;
  for (uint32_t r = 0; r < 8; ++r) stop[r] = r == 6 ? 499 : 500;
  feed(job, set, 500, 501, stop, &events);
  REQUIRE(ofKind(events, AnomalyKind::kHang).empty());
  int64_t t0 = job.now();
  auto early = tickUntil(set, t0, t0 + 9 * kSec, kSec / 2);
  CHECK(early.empty());
  auto late = tickUntil(set, t0 + 9 * kSec, t0 + 20 * kSec, kSec / 2);
  INFO(describe(late));
  auto hangs = ofKind(late, AnomalyKind::kHang);
  REQUIRE(hangs.size() == 1);
  CHECK(hangs[0].ranks == std::vector<uint32_t>{6});
  CHECK(hangs[0].nodes == std::vector<std::string>{"node-1"});
  CHECK(hangs[0].onsetStep == 500);
  CHECK(hangs[0].evidence.at("process_gone") == 0.0);
  CHECK(hangs[0].evidence.at("threshold_s") == Approx(10.0));
  // Time moves on: the whole job is silent, still one anomaly.
  CHECK(ofKind(tickUntil(set, t0 + 20 * kSec, t0 + 60 * kSec, kSec), AnomalyKind::kHang).empty());

  // Rank 6 comes back.
  job.clock_ = t0 + 61 * kSec;
  std::vector<Anomaly> after;
  std::map<uint32_t, int64_t> rest;
  for (uint32_t r = 0; r < 8; ++r) rest[r] = r == 6 ? 1000 : 499;  // only rank 6 reports 500
  feed(job, set, 500, 501, rest, &after);
  INFO(describe(after));
  auto resolved = ofKind(after, AnomalyKind::kHang, AnomalyState::kResolved);
  REQUIRE(resolved.size() == 1);
  CHECK(resolved[0].id == hangs[0].id);
  CHECK(resolved[0].resolvedStep == 500);
}

TEST_CASE("hang: the threshold follows the typical step time when it is long") {
  SynthJob job;
  job.computeMs = 3000;  // ~3 s steps: 10 x typical = ~30 s
  DetectorSet set;
  std::vector<Anomaly> events;
  feed(job, set, 0, 60, {}, &events);
  int64_t t0 = job.now();
  CHECK(tickUntil(set, t0, t0 + 25 * kSec, kSec).empty());
  auto hangs = ofKind(tickUntil(set, t0 + 25 * kSec, t0 + 40 * kSec, kSec), AnomalyKind::kHang);
  REQUIRE(hangs.size() == 1);
  CHECK(hangs[0].ranks.size() == 8);  // all stopped at the same step: all are named
  CHECK(hangs[0].evidence.at("job_stalled") == 1.0);
  CHECK(hangs[0].evidence.at("threshold_s") > 28.0);
}

TEST_CASE("hang: a process that exited is reported at once with process_gone, and hides the peers' silence") {
  SynthJob job;
  DetectorSet set;
  std::vector<Anomaly> events;
  feed(job, set, 0, 300, {}, &events);
  set.rankGone("job1", 2, job.now() + kSec);
  auto gone = set.takeEvents();
  REQUIRE(gone.size() == 1);
  CHECK(gone[0].kind == AnomalyKind::kHang);
  CHECK(gone[0].ranks == std::vector<uint32_t>{2});
  CHECK(gone[0].evidence.at("process_gone") == 1.0);
  CHECK(gone[0].summary.find("exited") != std::string::npos);
  CHECK(tickUntil(set, job.now(), job.now() + 120 * kSec, kSec).empty());
}

TEST_CASE("hang: a job whose ranks all ended cleanly is never reported") {
  SynthJob job;
  DetectorSet set;
  std::vector<Anomaly> events;
  feed(job, set, 0, 300, {}, &events);
  for (uint32_t r = 0; r < 8; ++r) set.rankEnded("job1", r, job.now());
  CHECK(set.stats().jobs == 0);
  CHECK(tickUntil(set, job.now(), job.now() + 120 * kSec, kSec).empty());
  // One rank ended, the others hang: only the others can be named.
  SynthJob job2;
  job2.job = "job2";
  DetectorSet set2;
  feed(job2, set2, 0, 300, {}, &events);
  set2.rankEnded("job2", 0, job2.now());
  auto hangs = ofKind(tickUntil(set2, job2.now(), job2.now() + 30 * kSec, kSec), AnomalyKind::kHang);
  REQUIRE(hangs.size() == 1);
  CHECK(std::find(hangs[0].ranks.begin(), hangs[0].ranks.end(), 0u) == hangs[0].ranks.end());
}

TEST_CASE("hang: the stuck rank is named with labels culprit; ranks that all stopped at the same step are named together, culprit unknown") {
  {
    SynthJob job;
    DetectorSet set;
    std::vector<Anomaly> events;
    feed(job, set, 0, 300, {}, &events);
    std::map<uint32_t, int64_t> stop;
    for (uint32_t r = 0; r < 8; ++r) stop[r] = r == 3 ? 299 : 300;
    feed(job, set, 300, 301, stop, &events);
    auto hangs = ofKind(tickUntil(set, job.now(), job.now() + 20 * kSec, kSec / 2), AnomalyKind::kHang);
    REQUIRE(hangs.size() == 1);
    CHECK(hangs[0].ranks == std::vector<uint32_t>{3});
    CHECK(hangs[0].labels.at("culprit") == "r3");
  }
  {
    // As trainscope-simtrain's hang: the stuck rank never reaches the first all-reduce of
    // step 300, so nobody reports step 300.
    SynthJob job;
    DetectorSet set;
    std::vector<Anomaly> events;
    feed(job, set, 0, 300, {}, &events);
    auto hangs = ofKind(tickUntil(set, job.now(), job.now() + 20 * kSec, kSec / 2), AnomalyKind::kHang);
    REQUIRE(hangs.size() == 1);
    CHECK(hangs[0].ranks.size() == 8);
    CHECK(hangs[0].labels.at("culprit") == "unknown");
    CHECK(hangs[0].evidence.at("job_stalled") == 1.0);
  }
}
