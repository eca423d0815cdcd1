// The anomaly routes of the JSON API over a real socket against a fake store: the documented
// shape (resolved_* null while open), 404 for an unknown job, 400 naming a bad `since`.
#include <memory>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "collector/http/server.h"
#include "tests/collector/http/fake_store.h"
#include "tests/collector/http/test_client.h"

using nlohmann::json;
using trainscope::http::HttpOptions;
using trainscope::http::HttpServer;
using trainscope::testing::FakeStore;
using trainscope::testing::httpGet;
namespace storage = trainscope::storage;

namespace {

storage::AnomalyRow anomaly(const std::string& id, const std::string& job, int64_t updatedNs) {
  storage::AnomalyRow a;
  a.id = id;
  a.job = job;
  a.kind = "straggler";
  a.ranks = {3};
  a.nodes = {"node1"};
  a.onsetStep = 100;
  a.detectedStep = 112;
  a.detectedNs = 5000;
  a.magnitude = 1.5;
  a.confidence = 0.75;
  a.evidence = {{"baseline_ms", 100.0}};
  a.labels = {{"link", "nvlink"}};
  a.summary = "rank 3 computes 1.5x slower than its peers";
  a.updatedNs = updatedNs;
  return a;
}

struct Fixture {
  Fixture() {
    storage::JobRow j;
    j.job = "train";
    j.worldSize = 4;
    store.jobRows = {j};
    j.job = "quiet";
    store.jobRows.push_back(j);
    auto resolved = anomaly("train/step_shift/50/all", "train", 9000);
    resolved.kind = "step_shift";
    resolved.state = storage::AnomalyState::kResolved;
    resolved.resolvedStep = 80;
    resolved.resolvedNs = 8500;
    resolved.captureId = "cap-7";
    auto ended = anomaly("train/slow_comm/60/all", "train", 9500);
    ended.kind = "slow_comm";
    ended.state = storage::AnomalyState::kEnded;
    ended.resolvedStep = 499;  // the job's last step
    ended.resolvedNs = 9400;
    store.anomalyRows = {anomaly("train/straggler/100/r3", "train", 6000), resolved, ended,
                         anomaly("other/straggler/1/r0", "other", 2000)};
    HttpOptions o;
    o.port = 0;
    server = std::make_unique<HttpServer>(o, store);
    REQUIRE(server->start().isOk());
  }
  json get(const std::string& target, unsigned expectStatus = 200) {
    auto r = httpGet(server->port(), target);
    INFO(target << " -> " << r.status << " " << r.body);
    REQUIRE(r.status == expectStatus);
    return json::parse(r.body);
  }
  FakeStore store;
  std::unique_ptr<HttpServer> server;
};

}  // namespace

TEST_CASE(
    "job anomalies have the documented shape; resolved_* and ended_* null while open, ended_* "
    "set for one that ended with its job",
    "[http]") {
  Fixture f;
  json j = f.get("/api/v1/jobs/train/anomalies");
  REQUIRE(j["anomalies"].size() == 3);
  json expected = {{"id", "train/straggler/100/r3"},
                   {"job", "train"},
                   {"kind", "straggler"},
                   {"ranks", {3}},
                   {"nodes", {"node1"}},
                   {"onset_step", 100},
                   {"detected_step", 112},
                   {"detected_ns", 5000},
                   {"magnitude", 1.5},
                   {"confidence", 0.75},
                   {"evidence", {{"baseline_ms", 100.0}}},
                   {"labels", {{"link", "nvlink"}}},
                   {"state", "open"},
                   {"resolved_step", nullptr},
                   {"resolved_ns", nullptr},
                   {"ended_step", nullptr},
                   {"ended_ns", nullptr},
                   {"summary", "rank 3 computes 1.5x slower than its peers"},
                   {"capture_id", nullptr},
                   {"updated_ns", 6000}};
  CHECK(j["anomalies"][0] == expected);
  const json& r = j["anomalies"][1];
  CHECK(r["state"] == "resolved");
  CHECK(r["resolved_step"] == 80);
  CHECK(r["resolved_ns"] == 8500);
  CHECK(r["capture_id"] == "cap-7");
  CHECK(r["ended_step"] == nullptr);
  const json& e = j["anomalies"][2];
  CHECK(e["state"] == "ended");
  CHECK(e["ended_step"] == 499);
  CHECK(e["ended_ns"] == 9400);
  CHECK(e["resolved_step"] == nullptr);
  CHECK(e["resolved_ns"] == nullptr);
  CHECK(f.get("/api/v1/jobs/quiet/anomalies")["anomalies"] == json::array());
}

TEST_CASE("job anomalies: unknown job is 404, unknown parameter 400", "[http]") {
  Fixture f;
  CHECK(f.get("/api/v1/jobs/nope/anomalies", 404)["error"] == "unknown job 'nope'");
  CHECK(f.get("/api/v1/jobs/train/anomalies?x=1", 400)["error"].get<std::string>().find("'x'") !=
        std::string::npos);
}

TEST_CASE("anomalies since= passes the time through; default 0; bad values are 400", "[http]") {
  Fixture f;
  json all = f.get("/api/v1/anomalies");
  CHECK(all["anomalies"].size() == 4);
  CHECK(f.store.lastAnomaliesSince == std::optional<int64_t>(0));
  json recent = f.get("/api/v1/anomalies?since=5000");
  CHECK(f.store.lastAnomaliesSince == std::optional<int64_t>(5000));
  REQUIRE(recent["anomalies"].size() == 3);
  CHECK(recent["anomalies"][1]["state"] == "resolved");
  CHECK(recent["anomalies"][2]["state"] == "ended");
  for (const char* bad : {"/api/v1/anomalies?since=abc", "/api/v1/anomalies?since=-5",
                          "/api/v1/anomalies?since=1.5", "/api/v1/anomalies?since="}) {
    INFO(bad);
    auto err = f.get(bad, 400)["error"].get<std::string>();
    CHECK(err.find("since") != std::string::npos);
  }
  CHECK(f.get("/api/v1/anomalies?until=5", 400)["error"].get<std::string>().find("until") !=
        std::string::npos);
}

TEST_CASE("anomaly routes turn a store failure into a 500 with its message", "[http]") {
  Fixture f;
  {
    auto lock = f.store.lock();
    f.store.failWith = "disk on fire";
  }
  CHECK(f.get("/api/v1/anomalies", 500)["error"] == "disk on fire");
}
