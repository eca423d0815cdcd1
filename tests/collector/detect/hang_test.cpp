#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <set>

#include "collector/detect/detector_set.h"
#include "tests/collector/detect/synth.h"

using namespace trainscope::detect;
using namespace trainscope::detect::test;
namespace wire = trainscope::wire;

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

// Ticks every `every` from `from` to `to`; `before(t)` runs before each tick (hellos).
std::vector<Anomaly> tickUntil(DetectorSet& set, int64_t from, int64_t to, int64_t every,
                               const std::function<void(int64_t)>& before = {}) {
  std::vector<Anomaly> out;
  for (int64_t t = from; t <= to; t += every) {
    if (before) before(t);
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

TEST_CASE(
    "hang: the rank that stopped first is named after the threshold, not before; resolved when it "
    "moves") {
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
  job.clockNs = t0 + 61 * kSec;
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

TEST_CASE(
    "hang: a process that exited is reported at once with process_gone, and hides the peers' "
    "silence") {
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
  // One rank ended before the job's last step, the others went on and hang: only the others
  // can be named.
  SynthJob job2;
  job2.job = "job2";
  DetectorSet set2;
  feed(job2, set2, 0, 300, {{0, 250}}, &events);
  set2.rankEnded("job2", 0, job2.now());
  auto hangs =
      ofKind(tickUntil(set2, job2.now(), job2.now() + 30 * kSec, kSec), AnomalyKind::kHang);
  REQUIRE(hangs.size() == 1);
  CHECK(std::find(hangs[0].ranks.begin(), hangs[0].ranks.end(), 0u) == hangs[0].ranks.end());
}

TEST_CASE(
    "hang: the stuck rank is named with labels culprit; ranks that all stopped at the same step "
    "are named together, culprit unknown") {
  {
    SynthJob job;
    DetectorSet set;
    std::vector<Anomaly> events;
    feed(job, set, 0, 300, {}, &events);
    std::map<uint32_t, int64_t> stop;
    for (uint32_t r = 0; r < 8; ++r) stop[r] = r == 3 ? 299 : 300;
    feed(job, set, 300, 301, stop, &events);
    auto hangs =
        ofKind(tickUntil(set, job.now(), job.now() + 20 * kSec, kSec / 2), AnomalyKind::kHang);
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
    auto hangs =
        ofKind(tickUntil(set, job.now(), job.now() + 20 * kSec, kSec / 2), AnomalyKind::kHang);
    REQUIRE(hangs.size() == 1);
    CHECK(hangs[0].ranks.size() == 8);
    CHECK(hangs[0].labels.at("culprit") == "unknown");
    CHECK(hangs[0].evidence.at("job_stalled") == 1.0);
  }
}

// ---- with the probes' progress (RankHello.progress every 2 s) ----
namespace {

// Progress as a probe reports it; times on the collector clock (offset 0).
wire::RankProgress progressOf(int64_t lastStep, int64_t openStep, int64_t lastRecordNs,
                              int64_t collectiveSinceNs, uint64_t begun) {
  wire::RankProgress p;
  p.set_last_step(lastStep);
  p.set_open_step(openStep);
  p.set_last_record_ns(lastRecordNs);
  p.set_collective_since_ns(collectiveSinceNs);
  p.set_collectives_begun(begun);
  return p;
}

// A synchronous job stuck in step `step`: `stuck` ranks stopped in their own code, the others
// entered the step's first all-reduce 50 ms after it began. `begun` gives each rank's count.
struct Stuck {
  std::set<uint32_t> stuck;
  std::map<uint32_t, bool> waits;  // overrides: rank -> in a collective
  std::map<uint32_t, uint64_t> begun;
};

// Ticks from `from` to `to` every 500 ms; every 2 s (from `helloFrom` on) each rank's hello
// brings its progress.
std::vector<Anomaly> silence(DetectorSet& set, SynthJob& job, int64_t step, const Stuck& s,
                             int64_t from, int64_t to, int64_t helloFrom) {
  const int64_t began = job.now();
  auto hellos = [&](int64_t t) {
    if (t < helloFrom || (t - helloFrom) % (2 * kSec) != 0) return;
    for (uint32_t r = 0; r < job.world; ++r) {
      bool waits = s.stuck.count(r) == 0;
      if (auto w = s.waits.find(r); w != s.waits.end()) waits = w->second;
      auto b = s.begun.find(r);
      const uint64_t begun =
          b != s.begun.end() ? b->second : static_cast<uint64_t>(step) + (waits ? 1 : 0);
      RankContext c = job.ctx(r);
      c.receivedNs = t;
      auto p = progressOf(step - 1, step, began + int64_t{waits ? 50 : 30} * 1'000'000,
                          waits ? began + 50'000'000 : 0, begun);
      REQUIRE(set.rankProgress(job.job, r, p, c).isOk());
    }
  };
  return tickUntil(set, from, to, kSec / 2, hellos);
}

}  // namespace

TEST_CASE(
    "hang: with progress, the rank not in a collective is named while its peers wait in one") {
  SynthJob job;
  DetectorSet set;
  std::vector<Anomaly> events;
  feed(job, set, 0, 300, {}, &events);  // every rank's last report is step 299
  const int64_t t0 = job.now();
  auto got = silence(set, job, 300, Stuck{{3}, {}, {}}, t0, t0 + 30 * kSec, t0 + kSec);
  INFO(describe(got));
  auto hangs = ofKind(got, AnomalyKind::kHang);
  REQUIRE(hangs.size() == 1);
  CHECK(hangs[0].ranks == std::vector<uint32_t>{3});
  CHECK(hangs[0].nodes == std::vector<std::string>{"node-0"});
  CHECK(hangs[0].onsetStep == 300);
  CHECK(hangs[0].labels.at("culprit") ==
        "not in a collective while 7 peers wait in one since step 300");
  CHECK(hangs[0].labels.at("scope") == "rank");
  CHECK(hangs[0].evidence.at("ranks_waiting") == 7.0);
  CHECK(hangs[0].evidence.at("ranks_not_waiting") == 1.0);
  CHECK(hangs[0].evidence.at("culprit_collectives_begun") == 300.0);
  CHECK(hangs[0].evidence.at("peers_collectives_begun") == 301.0);
  CHECK(hangs[0].evidence.at("culprit_idle_s") > 9.0);
  CHECK(hangs[0].evidence.at("wait_s") > 9.0);
  CHECK(hangs[0].detectedNs - t0 <= 11 * kSec);  // no later than without progress
  CHECK(hangs[0].summary.find("not in a collective") != std::string::npos);

  // Rank 3 moves again: resolved.
  job.clockNs = t0 + 31 * kSec;
  std::vector<Anomaly> after;
  std::map<uint32_t, int64_t> rest;
  for (uint32_t r = 0; r < 8; ++r) rest[r] = r == 3 ? 1000 : 299;
  feed(job, set, 300, 301, rest, &after);
  auto resolved = ofKind(after, AnomalyKind::kHang, AnomalyState::kResolved);
  REQUIRE(resolved.size() == 1);
  CHECK(resolved[0].id == hangs[0].id);
}

TEST_CASE(
    "hang: with progress, every rank waiting in a collective, or none, is a job-wide hang naming "
    "all") {
  for (bool allWait : {true, false}) {
    SynthJob job;
    DetectorSet set;
    std::vector<Anomaly> events;
    feed(job, set, 0, 300, {}, &events);
    const int64_t t0 = job.now();
    Stuck s;
    for (uint32_t r = 0; r < 8; ++r) s.waits[r] = allWait;
    auto hangs =
        ofKind(silence(set, job, 300, s, t0, t0 + 30 * kSec, t0 + kSec), AnomalyKind::kHang);
    INFO("all wait: " << allWait);
    REQUIRE(hangs.size() == 1);
    CHECK(hangs[0].ranks.size() == 8);
    CHECK(hangs[0].labels.at("scope") == "job");
    const std::string culprit = hangs[0].labels.at("culprit");
    CHECK(culprit.rfind(allWait ? "job-wide: every rank waits in a collective since step 300"
                                : "job-wide: no rank waits in a collective",
                        0) == 0);
    CHECK(hangs[0].summary.rfind("job-wide hang", 0) == 0);
  }
}

TEST_CASE(
    "hang: with progress and every rank waiting, the one that entered fewer collectives is named") {
  SynthJob job;
  DetectorSet set;
  std::vector<Anomaly> events;
  feed(job, set, 0, 300, {}, &events);
  const int64_t t0 = job.now();
  Stuck s;
  for (uint32_t r = 0; r < 8; ++r) {
    s.waits[r] = true;
    s.begun[r] = r == 5 ? 600 : 601;
  }
  auto hangs = ofKind(silence(set, job, 300, s, t0, t0 + 30 * kSec, t0 + kSec), AnomalyKind::kHang);
  REQUIRE(hangs.size() == 1);
  CHECK(hangs[0].ranks == std::vector<uint32_t>{5});
  CHECK(hangs[0].labels.at("culprit").find("entered 600 collectives") == 0);
}

TEST_CASE(
    "hang: progress from before the silence does not count; the hang waits a few seconds for a "
    "hello") {
  SynthJob job;
  DetectorSet set;
  std::vector<Anomaly> events;
  feed(job, set, 0, 300, {}, &events);
  const int64_t t0 = job.now();
  // Hellos from just before the silence: rank 3 happened to be outside the collective then.
  for (uint32_t r = 0; r < 8; ++r) {
    RankContext c = job.ctx(r);
    c.receivedNs = t0 - 30'000'000;
    REQUIRE(set.rankProgress(
                   "job1", r,
                   progressOf(298, 299, t0 - 40'000'000, r == 3 ? 0 : t0 - 40'000'000, 299), c)
                .isOk());
  }
  {
    // The hellos of the silence arrive late (from t0 + 12 s): the due hang waits for them.
    DetectorSet& s1 = set;
    auto got = silence(s1, job, 300, Stuck{{6}, {}, {}}, t0, t0 + 30 * kSec, t0 + 12 * kSec);
    auto hangs = ofKind(got, AnomalyKind::kHang);
    REQUIRE(hangs.size() == 1);
    CHECK(hangs[0].ranks == std::vector<uint32_t>{6});
    CHECK(hangs[0].detectedNs >= t0 + 12 * kSec);
  }
  {
    // No hello ever comes from the silence: after the wait, named as without progress.
    SynthJob job2;
    job2.job = "job2";
    DetectorSet set2;
    feed(job2, set2, 0, 300, {}, &events);
    const int64_t u0 = job2.now();
    for (uint32_t r = 0; r < 8; ++r) {
      RankContext c = job2.ctx(r);
      c.receivedNs = u0 - 30'000'000;
      REQUIRE(
          set2.rankProgress("job2", r, progressOf(298, 299, u0, r == 3 ? 0 : u0, 299), c).isOk());
    }
    auto hangs = ofKind(tickUntil(set2, u0, u0 + 30 * kSec, kSec / 2), AnomalyKind::kHang);
    REQUIRE(hangs.size() == 1);
    CHECK(hangs[0].ranks.size() == 8);
    CHECK(hangs[0].labels.at("culprit") == "unknown");
    CHECK(hangs[0].detectedNs >= u0 + 15 * kSec);
    CHECK(hangs[0].detectedNs <= u0 + 16 * kSec);
  }
}

TEST_CASE("hang: progress never opens a hang by itself, nor hides an exited process") {
  SynthJob job;
  DetectorSet set;
  // A job with no step report yet: its progress is ignored, nothing is tracked.
  RankContext c = job.ctx(0);
  c.receivedNs = job.now();
  REQUIRE(set.rankProgress("job1", 0, progressOf(-1, 0, job.now(), 0, 0), c).isOk());
  CHECK(set.stats().jobs == 0);
  std::vector<Anomaly> events;
  // Hellos every 2 s while every rank keeps stepping, rank 3 never in a collective.
  for (int64_t s = 0; s < 400; s += 20) {
    feed(job, set, s, s + 20, {}, &events);
    for (uint32_t r = 0; r < 8; ++r) {
      RankContext rc = job.ctx(r);
      rc.receivedNs = job.now();
      REQUIRE(set.rankProgress("job1", r,
                               progressOf(s + 19, s + 20, job.now(), r == 3 ? 0 : job.now(), 100),
                               rc)
                  .isOk());
    }
  }
  CHECK(ofKind(events, AnomalyKind::kHang).empty());
  // An exited process is still reported at once and explains its peers' silence.
  set.rankGone("job1", 2, job.now() + kSec);
  auto gone = ofKind(set.takeEvents(), AnomalyKind::kHang);
  REQUIRE(gone.size() == 1);
  CHECK(gone[0].evidence.at("process_gone") == 1.0);
  Stuck s{{3}, {}, {}};
  CHECK(ofKind(silence(set, job, 400, s, job.now(), job.now() + 60 * kSec, job.now() + kSec),
               AnomalyKind::kHang)
            .empty());
}

TEST_CASE("hang: bad progress fields are refused, naming the field") {
  SynthJob job;
  DetectorSet set;
  std::vector<Anomaly> events;
  feed(job, set, 0, 20, {}, &events);
  RankContext c = job.ctx(0);
  auto bad = set.rankProgress("job1", 0, progressOf(-2, -1, 0, 0, 0), c);
  CHECK_FALSE(bad.isOk());
  CHECK(bad.message().find("last_step") != std::string::npos);
  bad = set.rankProgress("job1", 0, progressOf(1, -1, -5, 0, 0), c);
  CHECK(bad.message().find("last_record_ns") != std::string::npos);
  bad = set.rankProgress("job1", 8, progressOf(1, -1, 0, 0, 0), c);
  CHECK(bad.message().find("world_size") != std::string::npos);
  bad = set.rankProgress("", 0, progressOf(1, -1, 0, 0, 0), c);
  CHECK(bad.message().find("job") != std::string::npos);
}

TEST_CASE("hang: goodbyes, exits and late reports of an ended job open nothing; a restart is new") {
  // Issue 10: after a clean end, a late hello re-registered a rank at its agent, whose process
  // watch then reported it gone, and the collector created a fresh state for the ended job.
  SynthJob job;
  DetectorSet set;
  std::vector<Anomaly> events;
  feed(job, set, 0, 290, {}, &events);
  std::vector<wire::StepReport> last;  // steps 290..299, replayed after the end
  for (int64_t s = 290; s < 300; ++s) {
    for (auto& r : job.step(s)) {
      RankContext c = job.ctx(r.rank());
      c.receivedNs = r.end_ns();
      REQUIRE(set.observe(r, c).isOk());
      last.push_back(r);
    }
  }
  for (uint32_t r = 0; r < 8; ++r) set.rankEnded("job1", r, job.now());
  REQUIRE(set.stats().jobs == 0);
  const uint64_t late = set.stats().late;
  set.rankGone("job1", 3, job.now() + kSec);   // a re-registered rank's exit, seen late
  set.rankEnded("job1", 4, job.now() + kSec);  // a goodbye resent
  for (const auto& r : last) {
    RankContext c = job.ctx(r.rank());
    c.receivedNs = job.now() + 2 * kSec;  // an agent's spool replayed after a reconnect
    REQUIRE(set.observe(r, c).isOk());
  }
  CHECK(set.takeEvents().empty());
  CHECK(set.stats().jobs == 0);
  CHECK(set.stats().late == late + last.size());
  CHECK(tickUntil(set, job.now(), job.now() + 120 * kSec, kSec).empty());

  // The same id runs again (a restart from step 0, new end times): a new job state.
  job.clockNs += 200 * kSec;
  std::vector<Anomaly> again;
  feed(job, set, 0, 50, {}, &again);
  CHECK(set.stats().jobs == 1);
  CHECK(ofKind(again, AnomalyKind::kHang).empty());
}

TEST_CASE("hang: ranks saying goodbye one by one after the job's last step open no hang") {
  // Issue 10: at the end of a 512-rank job whose goodbyes took 25 s, the ranks not yet ended
  // looked stalled ("233 of 233 ranks stalled"). Here 64 ranks end 0.5 s apart (32 s, past the
  // 10 s floor), the last ones without a goodbye (their processes exit).
  SynthJob job;
  job.world = 64;
  job.ranksPerNode = 32;
  DetectorSet set;
  std::vector<Anomaly> events;
  feed(job, set, 0, 100, {}, &events);
  int64_t t = job.now();
  for (uint32_t r = 0; r < 64; ++r) {
    t += kSec / 2;
    set.tick(t);
    if (r < 60) {
      set.rankEnded("job1", r, t);
    } else {
      set.rankGone("job1", r, t);
    }
    for (auto& e : set.takeEvents()) events.push_back(e);
  }
  for (auto& e : tickUntil(set, t, t + 60 * kSec, kSec)) events.push_back(e);
  INFO(describe(events));
  CHECK(events.empty());
}

TEST_CASE(
    "hang: silence is measured on the node's delivery clock: a lagging agent is no hang, a stuck "
    "rank whose agent delivers still is") {
  // One node's agent delivers its ranks' reports and host samples 150 steps (~16 s) at a time
  // (a loaded host, a spool replaying): the collector's clock runs on, the node's does not.
  SynthJob job;
  job.ranksPerNode = 8;
  DetectorSet set;
  std::vector<Anomaly> events;
  std::vector<wire::StepReport> held;
  auto deliver = [&] {
    for (auto& r : held) {
      RankContext c = job.ctx(r.rank());
      c.receivedNs = job.now();
      const auto observed = set.observe(std::move(r), c);
      REQUIRE(observed.isOk());
    }
    held.clear();
    set.nodeDelivered("node-0", job.now());
  };
  for (int64_t s = 0; s < 600; ++s) {
    for (auto& r : job.step(s)) held.push_back(std::move(r));
    if (s % 150 == 149) deliver();
    set.tick(job.now());
    for (auto& e : set.takeEvents()) events.push_back(e);
  }
  INFO(describe(events));
  CHECK(events.empty());

  // Rank 6 stops after step 599; its agent keeps sending host samples every second.
  for (auto& r : job.step(600)) {
    if (r.rank() != 6) held.push_back(std::move(r));
  }
  deliver();
  const int64_t t0 = job.now();
  auto hangs = ofKind(
      tickUntil(set, t0, t0 + 30 * kSec, kSec, [&](int64_t t) { set.nodeDelivered("node-0", t); }),
      AnomalyKind::kHang);
  REQUIRE(hangs.size() == 1);
  CHECK(hangs[0].ranks == std::vector<uint32_t>{6});
}
