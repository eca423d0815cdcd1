// The anomalies table: upsert by id (a resolution updates the stored row), per-job and
// since-updated reads ordered by detection time, that it survives reopening the file, and that
// an unknown stored state is an error on read.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

#include <catch2/catch.hpp>

#include "collector/storage/sqlite_store.h"
#include "tests/collector/storage/sqlite_file.h"
#include "tests/collector/storage/test_store.h"
#include "tests/common/support.h"

using namespace trainscope::storage;
using trainscope::tests::TempDir;

namespace {

AnomalyRow row(const std::string& id, const std::string& job, int64_t detectedNs,
               int64_t updatedNs) {
  AnomalyRow r;
  r.id = id;
  r.job = job;
  r.kind = "straggler";
  r.ranks = {3};
  r.nodes = {"node1"};
  r.onsetStep = 100;
  r.detectedStep = 110;
  r.detectedNs = detectedNs;
  r.magnitude = 1.5;
  r.confidence = 0.9;
  r.evidence = {{"baseline_ms", 100.0}, {"current_ms", 150.0}};
  r.labels = {{"op", "matmul"}};
  r.summary = "rank 3 is 1.5x slower";
  r.updatedNs = updatedNs;
  return r;
}

std::unique_ptr<Store> memoryStore() {
  return trainscope::storage::testing::openTestStore(":memory:");
}

}  // namespace

TEST_CASE("anomalies round-trip every field, JSON columns included") {
  auto store = memoryStore();
  REQUIRE(store->writeAnomalies({row("j/straggler/100/r3", "j", 1000, 1000)}));
  auto rows = store->anomalies("j");
  REQUIRE(rows);
  REQUIRE(rows->size() == 1);
  const auto& a = rows->front();
  CHECK(a.id == "j/straggler/100/r3");
  CHECK(a.kind == "straggler");
  CHECK(a.ranks == std::vector<uint32_t>{3});
  CHECK(a.nodes == std::vector<std::string>{"node1"});
  CHECK(a.onsetStep == 100);
  CHECK(a.detectedStep == 110);
  CHECK(a.detectedNs == 1000);
  CHECK(a.magnitude == Approx(1.5));
  CHECK(a.confidence == Approx(0.9));
  CHECK(a.evidence.at("current_ms") == Approx(150.0));
  CHECK(a.labels.at("op") == "matmul");
  CHECK(a.state == AnomalyState::kOpen);
  CHECK(a.resolvedStep == -1);
  CHECK(a.resolvedNs == 0);
  CHECK(a.summary == "rank 3 is 1.5x slower");
  CHECK_FALSE(a.captureId.has_value());
  CHECK(a.updatedNs == 1000);
  CHECK(store->anomalies("other")->empty());
}

TEST_CASE("a resolution upserts the same id; capture id and first detection are kept") {
  auto store = memoryStore();
  auto open = row("j/straggler/100/r3", "j", 1000, 1000);
  open.captureId = "cap-1";
  REQUIRE(store->writeAnomalies({open}));
  auto resolved = row("j/straggler/100/r3", "j", 5000, 7000);
  resolved.state = AnomalyState::kResolved;
  resolved.resolvedStep = 180;
  resolved.resolvedNs = 6500;
  REQUIRE(store->writeAnomalies({resolved}));
  auto rows = store->anomalies("j");
  REQUIRE(rows);
  REQUIRE(rows->size() == 1);
  CHECK(rows->front().state == AnomalyState::kResolved);
  CHECK(rows->front().resolvedStep == 180);
  CHECK(rows->front().resolvedNs == 6500);
  CHECK(rows->front().detectedNs == 1000);
  CHECK(rows->front().captureId == std::optional<std::string>("cap-1"));
  CHECK(rows->front().updatedNs == 7000);
  // A poller that saw everything up to 5000 still sees the resolution.
  auto since = store->anomaliesSince(5000);
  REQUIRE(since);
  REQUIRE(since->size() == 1);
  CHECK(since->front().state == AnomalyState::kResolved);
  CHECK(store->anomaliesSince(7001)->empty());
}

TEST_CASE("an anomaly ended with its job keeps state ended, the job's last step and its time") {
  auto store = memoryStore();
  auto open = row("j/straggler/100/r3", "j", 1000, 1000);
  open.captureId = "cap-1";
  REQUIRE(store->writeAnomalies({open}));
  auto ended = open;
  ended.captureId.reset();
  ended.state = AnomalyState::kEnded;
  ended.resolvedStep = 499;
  ended.resolvedNs = 9000;
  ended.updatedNs = 9000;
  REQUIRE(store->writeAnomalies({ended}));
  auto rows = store->anomalies("j");
  REQUIRE(rows);
  REQUIRE(rows->size() == 1);
  CHECK(rows->front().state == AnomalyState::kEnded);
  CHECK(std::string(toString(rows->front().state)) == "ended");
  CHECK(rows->front().resolvedStep == 499);
  CHECK(rows->front().resolvedNs == 9000);
  CHECK(rows->front().captureId == std::optional<std::string>("cap-1"));
  auto since = store->anomaliesSince(9000);
  REQUIRE(since);
  REQUIRE(since->size() == 1);
  CHECK(since->front().state == AnomalyState::kEnded);
  CHECK(parseAnomalyState("ended") == AnomalyState::kEnded);
}

TEST_CASE("anomaliesSince filters by updated_ns and orders by detected_ns across jobs") {
  auto store = memoryStore();
  REQUIRE(store->writeAnomalies(
      {row("b/x", "b", 300, 3000), row("a/x", "a", 100, 4000), row("c/x", "c", 200, 1000)}));
  auto all = store->anomaliesSince(0);
  REQUIRE(all);
  REQUIRE(all->size() == 3);
  CHECK((*all)[0].id == "a/x");
  CHECK((*all)[1].id == "c/x");
  CHECK((*all)[2].id == "b/x");
  auto recent = store->anomaliesSince(2000);
  REQUIRE(recent);
  REQUIRE(recent->size() == 2);
  CHECK((*recent)[0].id == "a/x");
  CHECK((*recent)[1].id == "b/x");
}

TEST_CASE("a bad anomaly row fails the whole write, naming the field") {
  auto store = memoryStore();
  auto bad = row("", "j", 1, 1);
  auto s = store->writeAnomalies({row("j/ok", "j", 1, 1), bad});
  REQUIRE_FALSE(s);
  CHECK(s.message().find("id") != std::string::npos);
  CHECK(store->anomalies("j")->empty());  // nothing of the batch stored
}

TEST_CASE("a stored anomaly state no enum value names is an error on read", "[sqlite]") {
  // The row type cannot hold a bad state; one in the file (edited by hand, or written by a
  // newer collector) is reported naming the anomaly and the text.
  TempDir dir;
  const std::string path = dir.sub("states.db");
  auto store = trainscope::storage::testing::openTestStore(path);
  REQUIRE(store->writeAnomalies({row("j/a", "j", 1, 1)}));
  trainscope::storage::testing::execSql(path, "UPDATE anomalies SET state = 'closed'");
  auto read = store->anomalies("j");
  REQUIRE_FALSE(read);
  CHECK(read.message() == "storage: anomaly j/a: unknown state 'closed'");
  CHECK(toString(AnomalyState::kOpen) == std::string("open"));
  CHECK(parseAnomalyState("resolved") == AnomalyState::kResolved);
  CHECK_FALSE(parseAnomalyState("Open").has_value());
}

TEST_CASE("non-finite evidence is stored as null and dropped on read") {
  auto store = memoryStore();
  auto r = row("j/nan", "j", 1, 1);
  r.evidence["z"] = std::numeric_limits<double>::quiet_NaN();
  REQUIRE(store->writeAnomalies({r}));
  auto rows = store->anomalies("j");
  REQUIRE(rows);
  REQUIRE(rows->size() == 1);
  CHECK(rows->front().evidence.count("z") == 0);
  CHECK(rows->front().evidence.count("baseline_ms") == 1);
}

TEST_CASE("anomalies survive reopening a database file (migration 3 applied once)") {
  auto dir =
      std::filesystem::temp_directory_path() / ("anomaly_store_test." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "t.db").string();
  {
    auto s = trainscope::storage::testing::openTestStore(path);
    REQUIRE(s->writeAnomalies({row("j/a", "j", 10, 10)}));
  }
  {
    auto s = trainscope::storage::testing::openTestStore(path);
    auto rows = s->anomalies("j");
    REQUIRE(rows);
    CHECK(rows->size() == 1);
  }
  CHECK(currentSchemaVersion() >= 3);
  std::filesystem::remove_all(dir);
}
