// The captures table: every field round-trips (rank status included), a stored id is replaced,
// per-job reads come newest first, since-updated reads oldest update first, bad rows are
// refused naming the field, an unknown stored state is an error on read, a version-3 database
// (anomalies, no captures) migrates to the current version keeping its anomalies, a progress
// write changes only the ranks it names, and a version-5 database's rank_status lists become
// rows of capture_ranks.

#include <string>

#include <catch2/catch.hpp>

#include "collector/storage/sqlite_store.h"
#include "tests/collector/storage/sqlite_file.h"
#include "tests/collector/storage/test_store.h"
#include "tests/common/support.h"

using namespace trainscope::storage;
using trainscope::storage::testing::createAtVersion;
using trainscope::storage::testing::userVersion;
namespace wire = trainscope::wire;

namespace {

using trainscope::tests::TempDir;

std::unique_ptr<Store> openAt(const std::string& path) {
  return trainscope::storage::testing::openTestStore(path);
}

CaptureRow row(const std::string& id, const std::string& job, int64_t createdNs,
               int64_t updatedNs) {
  CaptureRow c;
  c.id = id;
  c.job = job;
  c.kind = "trace";
  c.state = wire::CaptureState::kRunning;
  c.reason = "on request";
  c.ranks = {0, 5};
  c.startStep = 120;
  c.steps = 3;
  c.history = 2;
  c.maxBytes = 67108864;
  c.createdNs = createdNs;
  c.updatedNs = updatedNs;
  c.deadlineNs = createdNs + 1000;
  c.summary = "0 of 2 ranks done";
  CaptureRankRow r0;
  r0.rank = 0;
  r0.node = "n0";
  r0.state = wire::RankState::kUploading;
  r0.detail = "steps 120..122, history from 118";
  r0.bytes = 0;
  r0.truncated = true;
  r0.firstStep = 118;
  r0.lastStep = 122;
  r0.updatedNs = updatedNs;
  CaptureRankRow r5;
  r5.rank = 5;
  r5.node = "n1";
  c.rankStatus = {r0, r5};
  return c;
}

}  // namespace

TEST_CASE("a capture round-trips every field") {
  auto store = openAt(":memory:");
  auto c = row("cap-1-aaaa", "j", 1000, 1000);
  c.anomalyId = "j/straggler/100/r5";
  REQUIRE(store->writeCapture(c));
  auto got = store->capture("cap-1-aaaa");
  REQUIRE(got);
  REQUIRE(got->has_value());
  const auto& g = **got;
  CHECK(g.id == "cap-1-aaaa");
  CHECK(g.job == "j");
  CHECK(g.kind == "trace");
  CHECK(g.state == wire::CaptureState::kRunning);
  CHECK(g.reason == "on request");
  CHECK(g.anomalyId == std::optional<std::string>("j/straggler/100/r5"));
  CHECK(g.ranks == std::vector<uint32_t>{0, 5});
  CHECK(g.startStep == 120);
  CHECK(g.steps == 3);
  CHECK(g.history == 2);
  CHECK(g.maxBytes == 67108864);
  CHECK(g.createdNs == 1000);
  CHECK(g.updatedNs == 1000);
  CHECK_FALSE(g.finishedNs.has_value());
  CHECK(g.deadlineNs == 2000);
  CHECK_FALSE(g.traceBytes.has_value());
  CHECK(g.summary == "0 of 2 ranks done");
  REQUIRE(g.rankStatus.size() == 2);
  CHECK(g.rankStatus[0].rank == 0);
  CHECK(g.rankStatus[0].node == "n0");
  CHECK(g.rankStatus[0].state == wire::RankState::kUploading);
  CHECK(g.rankStatus[0].detail == "steps 120..122, history from 118");
  CHECK(g.rankStatus[0].truncated);
  CHECK(g.rankStatus[0].firstStep == 118);
  CHECK(g.rankStatus[0].lastStep == 122);
  CHECK(g.rankStatus[0].updatedNs == 1000);
  CHECK(g.rankStatus[1].state == wire::RankState::kPending);
  CHECK(g.rankStatus[1].firstStep == -1);
  CHECK_FALSE(store->capture("cap-unknown")->has_value());
}

TEST_CASE("writing a stored id replaces it; reads by job and by update time are ordered") {
  auto store = openAt(":memory:");
  REQUIRE(store->writeCapture(row("cap-a", "j", 1000, 1000)));
  REQUIRE(store->writeCapture(row("cap-b", "j", 2000, 2000)));
  REQUIRE(store->writeCapture(row("cap-c", "k", 1500, 1500)));
  auto done = row("cap-a", "j", 1000, 3000);
  done.state = wire::CaptureState::kComplete;
  done.finishedNs = 2900;
  done.traceBytes = 4096;
  done.rankStatus[0].state = wire::RankState::kDone;
  done.rankStatus[0].bytes = 12345;
  REQUIRE(store->writeCapture(done));
  auto a = **store->capture("cap-a");
  CHECK(a.state == wire::CaptureState::kComplete);
  CHECK(a.finishedNs == std::optional<int64_t>(2900));
  CHECK(a.traceBytes == std::optional<uint64_t>(4096));
  CHECK(a.rankStatus[0].bytes == 12345);
  auto j = store->captures("j");
  REQUIRE(j);
  REQUIRE(j->size() == 2);
  CHECK((*j)[0].id == "cap-b");  // newest first
  CHECK((*j)[1].id == "cap-a");
  CHECK(store->captures("none")->empty());
  auto since = store->capturesSince(1500);
  REQUIRE(since);
  REQUIRE(since->size() == 3);
  CHECK((*since)[0].id == "cap-c");
  CHECK((*since)[1].id == "cap-b");
  CHECK((*since)[2].id == "cap-a");
  CHECK(store->capturesSince(3001)->empty());
}

TEST_CASE("bad capture rows are refused naming the field") {
  auto store = openAt(":memory:");
  auto noId = row("", "j", 1, 1);
  CHECK(store->writeCapture(noId).message() == "storage: capture without id");
  auto badKind = row("cap-x", "j", 1, 1);
  badKind.kind = "perf";
  CHECK(store->writeCapture(badKind).message() ==
        "storage: capture cap-x: kind must be trace, stacks or import, got 'perf'");
  CHECK_FALSE(store->capture("cap-x")->has_value());
}

TEST_CASE("a stored state no enum value names is an error on read, not a guess", "[sqlite]") {
  // The row types cannot hold a bad state; one in the file (edited by hand, or written by a
  // newer collector) is reported naming the capture, the rank and the text.
  TempDir dir;
  const std::string path = dir.sub("states.db");
  auto store = openAt(path);
  REQUIRE(store->writeCapture(row("cap-x", "j", 1, 1)));
  trainscope::storage::testing::execSql(path, "UPDATE captures SET state = 'paused'");
  auto read = store->capture("cap-x");
  REQUIRE_FALSE(read);
  CHECK(read.message() == "storage: capture cap-x: unknown state 'paused'");

  REQUIRE(store->writeCapture(row("cap-x", "j", 1, 1)));
  trainscope::storage::testing::execSql(path,
                                        "UPDATE capture_ranks SET state = 'paused' WHERE rank = 5");
  read = store->capture("cap-x");
  REQUIRE_FALSE(read);
  CHECK(read.message() == "storage: capture cap-x: rank 5 has an unknown state 'paused'");
}

TEST_CASE("a version-3 database gains the captures table and keeps its anomalies", "[sqlite]") {
  TempDir dir;
  const std::string path = dir.sub("v3.db");
  createAtVersion(path, 3,
                  "INSERT INTO anomalies(id, job, kind, detected_ns, updated_ns, capture_id)"
                  " VALUES('j/hang/5/r1', 'j', 'hang', 10, 10, NULL);");
  {
    auto store = openAt(path);
    CHECK(userVersion(path) == currentSchemaVersion());
    CHECK(currentSchemaVersion() >= 4);
    auto anomalies = store->anomalies("j");
    REQUIRE(anomalies);
    REQUIRE(anomalies->size() == 1);
    CHECK(anomalies->front().kind == "hang");
    REQUIRE(store->writeCapture(row("cap-1", "j", 5, 5)));
    // The anomaly gets its capture id; a later write without one keeps it.
    auto a = anomalies->front();
    a.captureId = "cap-1";
    REQUIRE(store->writeAnomalies({a}));
    a.captureId.reset();
    REQUIRE(store->writeAnomalies({a}));
  }
  auto reopened = openAt(path);
  CHECK(reopened->capture("cap-1")->has_value());
  CHECK(reopened->anomalies("j")->front().captureId == std::optional<std::string>("cap-1"));
}

TEST_CASE("a progress write replaces the ranks it names and the summary, nothing else") {
  auto store = openAt(":memory:");
  auto c = row("cap-p", "j", 1000, 1000);
  REQUIRE(store->writeCapture(c));
  CaptureProgress p;
  p.id = "cap-p";
  p.summary = "1 of 2 ranks done";
  p.updatedNs = 2000;
  CaptureRankRow r5 = c.rankStatus[1];
  r5.state = wire::RankState::kDone;
  r5.bytes = 777;
  r5.updatedNs = 1900;
  p.ranks = {r5};
  REQUIRE(store->writeCaptureProgress(p));
  auto got = **store->capture("cap-p");
  CHECK(got.summary == "1 of 2 ranks done");
  CHECK(got.updatedNs == 2000);
  CHECK(got.state == wire::CaptureState::kRunning);
  CHECK(got.ranks == std::vector<uint32_t>{0, 5});
  CHECK(got.deadlineNs == 2000);
  REQUIRE(got.rankStatus.size() == 2);
  CHECK(got.rankStatus[0].state == wire::RankState::kUploading);  // untouched
  CHECK(got.rankStatus[0].detail == "steps 120..122, history from 118");
  CHECK(got.rankStatus[1].rank == 5);
  CHECK(got.rankStatus[1].state == wire::RankState::kDone);
  CHECK(got.rankStatus[1].bytes == 777);
  CHECK(got.rankStatus[1].updatedNs == 1900);
  CHECK(store->capturesSince(2000)->size() == 1);

  p.id = "cap-unknown";
  auto refused = store->writeCaptureProgress(p);
  CHECK_FALSE(refused);
  CHECK(refused.message() == "storage: capture cap-unknown is not stored as running");
  CHECK_FALSE(store->capture("cap-unknown")->has_value());

  // Progress never changes a capture stored final (a late write of a collector's old copy).
  auto ended = c;
  ended.id = "cap-ended";
  ended.state = wire::CaptureState::kFailed;
  ended.summary = "0 of 2 ranks done, 2 failed";
  REQUIRE(store->writeCapture(ended));
  p.id = "cap-ended";
  CHECK_FALSE(store->writeCaptureProgress(p));
  auto kept = **store->capture("cap-ended");
  CHECK(kept.summary == "0 of 2 ranks done, 2 failed");
  CHECK(kept.rankStatus[1].state == wire::RankState::kPending);

  // A whole write afterwards replaces every rank again.
  REQUIRE(store->writeCapture(c));
  got = **store->capture("cap-p");
  CHECK(got.rankStatus[1].state == wire::RankState::kPending);
  CHECK(got.summary == "0 of 2 ranks done");
}

TEST_CASE("a version-5 database's rank_status lists become rows of capture_ranks", "[sqlite]") {
  TempDir dir;
  const std::string path = dir.sub("v5.db");
  // As a version-5 collector wrote them: the ranks in a JSON column. One list is not JSON
  // (every read of it failed): the migration leaves it, and the capture reads with no ranks.
  createAtVersion(
      path, 5,
      "INSERT INTO captures(id, job, kind, state, ranks, created_ns, updated_ns, summary,"
      " rank_status) VALUES('cap-old', 'j', 'trace', 'running', '[0,5,7]', 10, 20,"
      " '1 of 3 ranks done', '[{\"rank\":0,\"node\":\"n0\",\"state\":\"done\","
      "\"detail\":\"\",\"bytes\":12345,\"truncated\":true,\"first_step\":118,"
      "\"last_step\":122,\"updated_ns\":15},{\"rank\":5,\"node\":\"n1\","
      "\"state\":\"failed\",\"detail\":\"out of disk\",\"bytes\":0,"
      "\"truncated\":false,\"first_step\":-1,\"last_step\":-1,\"updated_ns\":16},"
      "{\"rank\":7,\"node\":\"n1\",\"state\":\"pending\"}]');"
      "INSERT INTO captures(id, job, kind, state, ranks, created_ns, updated_ns, rank_status)"
      " VALUES('cap-bad', 'j', 'trace', 'failed', '[1]', 11, 21, '[{not json');");
  auto store = openAt(path);
  CHECK(userVersion(path) == currentSchemaVersion());
  auto got = store->capture("cap-old");
  INFO(got.message());
  REQUIRE(got);
  REQUIRE(got->has_value());
  const auto& c = **got;
  CHECK(c.summary == "1 of 3 ranks done");
  REQUIRE(c.rankStatus.size() == 3);
  CHECK(c.rankStatus[0].rank == 0);
  CHECK(c.rankStatus[0].node == "n0");
  CHECK(c.rankStatus[0].state == wire::RankState::kDone);
  CHECK(c.rankStatus[0].bytes == 12345);
  CHECK(c.rankStatus[0].truncated);
  CHECK(c.rankStatus[0].firstStep == 118);
  CHECK(c.rankStatus[0].lastStep == 122);
  CHECK(c.rankStatus[0].updatedNs == 15);
  CHECK(c.rankStatus[1].rank == 5);
  CHECK(c.rankStatus[1].state == wire::RankState::kFailed);
  CHECK(c.rankStatus[1].detail == "out of disk");
  CHECK_FALSE(c.rankStatus[1].truncated);
  CHECK(c.rankStatus[2].rank == 7);
  CHECK(c.rankStatus[2].state == wire::RankState::kPending);
  CHECK(c.rankStatus[2].firstStep == -1);
  CHECK(c.rankStatus[2].bytes == 0);
  auto bad = store->capture("cap-bad");
  REQUIRE(bad);
  REQUIRE(bad->has_value());
  CHECK((*bad)->rankStatus.empty());
  CHECK(store->captures("j")->size() == 2);
}
