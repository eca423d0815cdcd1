// ProgressTracker: where a rank is (last/open step, newest record, oldest open collective,
// collectives entered), and the RankHello that carries it to the agent.
#include <catch2/catch.hpp>

#include "agent/probe/fold.h"
#include "agent/probe/probe.h"
#include "agent/probe/progress.h"
#include "tests/agent/probe/fake_agent.h"
#include "tests/agent/probe/records.h"

using namespace trainscope::probe;
using trainscope::probe::testing::FakeAgent;
using trainscope::probe::testing::rec;
using trainscope::probe::testing::TempDir;
using trainscope::tests::waitFor;

namespace {

// One synchronous step as the simulator records it: begin, an op, an all-reduce, end.
void fullStep(ProgressTracker& t, int64_t step, int64_t base) {
  t.add(0, rec(RecordType::kStepBegin, step, base));
  t.add(0, rec(RecordType::kOp, 0, base + 10, base + 60));
  t.add(0, rec(RecordType::kCollective, 0, base + 60, base + 90));
  t.add(0, rec(RecordType::kStepEnd, step, base + 100));
}

}  // namespace

TEST_CASE("progress: nothing seen yet reads as no step and no collective") {
  ProgressTracker t;
  const auto p = t.progress();
  CHECK(p.last_step() == -1);
  CHECK(p.open_step() == -1);
  CHECK(p.last_record_ns() == 0);
  CHECK(p.collective_since_ns() == 0);
  CHECK(p.collectives_begun() == 0);
}

TEST_CASE("progress: steps and collectives move last/open step, newest record and the count") {
  ProgressTracker t;
  fullStep(t, 0, 1000);
  fullStep(t, 1, 1100);
  auto p = t.progress();
  CHECK(p.last_step() == 1);
  CHECK(p.open_step() == -1);
  CHECK(p.last_record_ns() == 1200);
  CHECK(p.collectives_begun() == 2);
  CHECK(p.collective_since_ns() == 0);
  t.add(0, rec(RecordType::kStepBegin, 2, 1200));
  t.add(0, rec(RecordType::kOp, 0, 1210, 1250));
  p = t.progress();
  CHECK(p.open_step() == 2);
  CHECK(p.last_step() == 1);
  CHECK(p.last_record_ns() == 1250);  // an op's end counts
}

TEST_CASE("progress: the stuck rank has no open collective while its peer waits in one") {
  ProgressTracker stuck, peer;
  for (int64_t s = 0; s < 3; ++s) {
    fullStep(stuck, s, 1000 + s * 100);
    fullStep(peer, s, 1000 + s * 100);
  }
  // Step 3: the stuck rank never leaves its backward pass; the peer enters the all-reduce.
  for (ProgressTracker* t : {&stuck, &peer}) {
    t->add(0, rec(RecordType::kStepBegin, 3, 1300));
    t->add(0, rec(RecordType::kOp, 0, 1310, 1350));
  }
  peer.add(0, rec(RecordType::kCollBegin, 0, 1355));
  CHECK(stuck.collectiveSinceNs() == 0);
  CHECK(peer.collectiveSinceNs() == 1355);
  CHECK(stuck.collectivesBegun() == 3);
  CHECK(peer.collectivesBegun() == 4);
  CHECK(stuck.openStep() == 3);
  CHECK(peer.openStep() == 3);
  CHECK(peer.lastRecordNs() == 1355);
  // The end closes it.
  peer.add(0, rec(RecordType::kCollEnd, 0, 1380));
  CHECK(peer.collectiveSinceNs() == 0);
  CHECK(peer.lastRecordNs() == 1380);
}

TEST_CASE("progress: begins pair with ends per ring; the oldest open one is reported") {
  ProgressTracker t;
  t.add(0, rec(RecordType::kStepBegin, 0, 100));
  t.add(0, rec(RecordType::kCollBegin, 0, 110));
  t.add(1, rec(RecordType::kCollBegin, 0, 120));
  t.add(1, rec(RecordType::kCollEnd, 0, 130));  // ends ring 1's, not ring 0's
  CHECK(t.collectiveSinceNs() == 110);
  t.add(2, rec(RecordType::kCollEnd, 0, 140));  // no begin on ring 2: ignored
  CHECK(t.collectiveSinceNs() == 110);
  t.add(1, rec(RecordType::kCollBegin, 0, 150));
  t.add(0, rec(RecordType::kCollEnd, 0, 160));
  CHECK(t.collectiveSinceNs() == 150);
  CHECK(t.collectivesBegun() == 3);
}

TEST_CASE("progress: a begin that outlived a whole step without its end is dropped") {
  ProgressTracker t;
  t.add(0, rec(RecordType::kStepBegin, 0, 100));
  t.add(0, rec(RecordType::kCollBegin, 0, 110));  // its end never comes
  t.add(0, rec(RecordType::kStepEnd, 0, 200));
  CHECK(t.collectiveSinceNs() == 110);  // may still complete after the step (async)
  t.add(0, rec(RecordType::kStepBegin, 1, 200));
  t.add(1, rec(RecordType::kCollBegin, 0, 250));
  t.add(0, rec(RecordType::kStepEnd, 1, 300));
  CHECK(t.collectiveSinceNs() == 250);
  t.add(0, rec(RecordType::kStepBegin, 2, 300));
  t.add(0, rec(RecordType::kStepEnd, 2, 400));
  CHECK(t.collectiveSinceNs() == 0);
  CHECK(t.lastStep() == 2);
}

TEST_CASE("progress: open begins per ring are bounded, all are counted") {
  ProgressTracker t;
  for (int i = 0; i < 1000; ++i) t.add(0, rec(RecordType::kCollBegin, 0, 100 + i));
  CHECK(t.collectivesBegun() == 1000);
  CHECK(t.collectiveSinceNs() == 100);
  for (size_t i = 0; i < ProgressTracker::kMaxOpenPerRing; ++i) {
    t.add(0, rec(RecordType::kCollEnd, 0, 2000));
  }
  CHECK(t.collectiveSinceNs() == 0);
}

TEST_CASE("progress: every RankHello to the agent carries it, also while the rank is stuck") {
  TempDir dir;
  const std::string ep = "ipc://" + dir.path() + "/agent.sock";
  FakeAgent agent(ep);
  REQUIRE(agent.bound());
  Probe p(testing::agentConfig(ep, "progress-test", 0, 2));
  REQUIRE(p.ok());
  const int64_t base = 1'000'000'000;
  p.stepBegin(0, base);
  p.stepEnd(0, base + 1000);
  p.stepBegin(1, base + 1000);
  p.collectiveBegin(TS_COLL_ALL_REDUCE, Name("dp"), 1024, base + 1500);
  // The first hello may predate these records; the next one (2 s later) cannot.
  trainscope::wire::RankProgress last;
  const bool seen = waitFor(
      [&] {
        for (const auto& b : agent.batches()) {
          for (const auto& item : b.batch.items()) {
            if (item.has_rank_hello() && item.rank_hello().has_progress()) {
              last = item.rank_hello().progress();
            }
          }
        }
        return last.collective_since_ns() != 0;
      },
      6000);
  REQUIRE(seen);
  CHECK(last.last_step() == 0);
  CHECK(last.open_step() == 1);
  CHECK(last.collective_since_ns() == base + 1500);
  CHECK(last.collectives_begun() == 1);
  CHECK(last.last_record_ns() == base + 1500);
}

TEST_CASE("progress: a wait hint (DDP's buckets in flight) reads as waiting until it is cleared") {
  ProgressTracker t;
  fullStep(t, 0, 1000);
  t.add(0, rec(RecordType::kStepBegin, 1, 2000));
  t.add(0, rec(RecordType::kOp, 0, 2010, 2050));
  t.add(0, rec(RecordType::kWaitHint, 0, 2050));  // the first bucket's all-reduce launched
  t.add(0, rec(RecordType::kOp, 0, 2050, 2080));
  t.add(0, rec(RecordType::kWaitHint, 0, 2080));  // the last one: from here it waits
  CHECK(t.collectiveSinceNs() == 2080);
  CHECK(t.lastRecordNs() == 2080);             // the hint is no record of work
  t.add(0, rec(RecordType::kWaitHint, 0, 0));  // backward returned
  CHECK(t.collectiveSinceNs() == 0);
  // A hint and an open collective: the older one.
  t.add(1, rec(RecordType::kCollBegin, 0, 2100));
  t.add(0, rec(RecordType::kWaitHint, 0, 2120));
  CHECK(t.collectiveSinceNs() == 2100);
}

TEST_CASE("progress: the folder ignores wait hints (they are not in any step)") {
  StepFolder f(FoldOptions{});
  f.add(0, rec(RecordType::kStepBegin, 1, 0));
  f.add(0, rec(RecordType::kWaitHint, 0, 50));
  f.add(0, rec(RecordType::kStepEnd, 1, 100));
  f.finish();
  auto out = f.take();
  REQUIRE(out.size() == 1);
  CHECK(out[0].report.records() == 0);
  CHECK(out[0].records.empty());
}
