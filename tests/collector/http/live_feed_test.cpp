// The live feed's content (collector/http/live.h) on a collector that has seen many jobs: a
// client's first snapshot and the polls after it follow a bounded number of jobs, the newest,
// with one summary read per changed job, and forget jobs and nodes that left the listing.
// Counts store calls; times nothing.
#include "collector/http/live.h"

#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "tests/collector/http/fake_store.h"
#include "tests/common/gcc12_string_warnings.h"  // last: GCC 12 -O3 false positives

using nlohmann::json;
using trainscope::ManualClock;
using trainscope::http::kLiveMaxJobs;
using trainscope::http::LiveFeed;
using trainscope::testing::FakeStore;
namespace storage = trainscope::storage;

namespace {

constexpr int64_t kSec = 1'000'000'000;

storage::JobRow job(const std::string& name, int64_t lastSeenNs) {
  storage::JobRow j;
  j.job = name;
  j.worldSize = 1;
  j.ranksSeen = 1;
  j.firstSeenNs = lastSeenNs - kSec;
  j.lastSeenNs = lastSeenNs;
  j.latestStep = 3;
  j.stepRows = 4;
  return j;
}

}  // namespace

TEST_CASE("live feed: the first client's poll and snapshot follow only the newest jobs",
          "[http][live]") {
  FakeStore store;
  const size_t total = kLiveMaxJobs + 3000;
  for (size_t i = 0; i < total; ++i) {
    // Newest first, as the stores list them.
    store.jobRows.push_back(job("j" + std::to_string(i), 1000 * kSec - int64_t(i)));
  }
  ManualClock clock(1000 * kSec);
  LiveFeed feed(store, clock);
  auto baseline = feed.poll();  // what the server runs before a first client's snapshot
  REQUIRE(baseline);
  REQUIRE(baseline->size() == 1);
  json delta = json::parse(baseline->front());
  CHECK(delta["jobs"].size() == kLiveMaxJobs);
  CHECK(delta["jobs"][0]["job"] == "j0");
  CHECK(store.summaryCalls == kLiveMaxJobs);  // one summary read per job followed, no more
  CHECK(feed.followedJobs() == kLiveMaxJobs);
  auto snapshot = feed.snapshot();
  REQUIRE(snapshot);
  CHECK(json::parse(*snapshot)["jobs"].size() == kLiveMaxJobs);

  // Nothing changed: no message and no summary read.
  auto quiet = feed.poll();
  REQUIRE(quiet);
  CHECK(quiet->empty());
  CHECK(store.summaryCalls == kLiveMaxJobs);
}

TEST_CASE("live feed: jobs and nodes that leave the listing leave the feed's memory",
          "[http][live]") {
  FakeStore store;
  for (int i = 0; i < 10; ++i) store.jobRows.push_back(job("j" + std::to_string(i), kSec));
  for (int i = 0; i < 5; ++i) {
    storage::NodeRow n;
    n.node = "n" + std::to_string(i);
    n.lastSeenNs = kSec;
    store.nodeRows.push_back(n);
  }
  ManualClock clock(2 * kSec);
  LiveFeed feed(store, clock);
  REQUIRE(feed.poll());
  CHECK(feed.followedJobs() == 10);
  CHECK(feed.followedNodes() == 5);
  // Retention removed most of them.
  store.jobRows.resize(2);
  store.nodeRows.resize(1);
  auto after = feed.poll();
  REQUIRE(after);
  CHECK(after->empty());  // nothing left changed
  CHECK(feed.followedJobs() == 2);
  CHECK(feed.followedNodes() == 1);
  // A job that comes back is news again.
  store.jobRows.push_back(job("j9", 2 * kSec));
  auto back = feed.poll();
  REQUIRE(back);
  REQUIRE(back->size() == 1);
  CHECK(json::parse(back->front())["jobs"].size() == 1);
}
