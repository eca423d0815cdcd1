// The `anomalies` subcommand in-process: the anomaly table and --json against a real
// HttpServer over a fake store. (`detect` is in cli_detect_test.cpp.)
#include <memory>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "collector/http/server.h"
#include "tests/collector/http/fake_store.h"
#include "tests/tools/cli_run.h"
#include "tools/cli/cli.h"

using nlohmann::json;
using namespace trainscope::cli;
namespace storage = trainscope::storage;

namespace {

using trainscope::cli::testing::cli;
using trainscope::cli::testing::Run;

struct Collector {
  Collector() {
    storage::JobRow j;
    j.job = "train";
    j.worldSize = 8;
    store.jobRows = {j};
    j.job = "calm";
    store.jobRows.push_back(j);
    storage::AnomalyRow a;
    a.id = "train/straggler/120/r5";
    a.job = "train";
    a.kind = "straggler";
    a.ranks = {5};
    a.nodes = {"node1"};
    a.onsetStep = 120;
    a.detectedStep = 131;
    a.detectedNs = 1000;
    a.magnitude = 1.8;
    a.summary = "rank 5 computes 1.8x slower than its peers";
    store.anomalyRows.push_back(a);
    a.id = "train/step_shift/60/all";
    a.kind = "step_shift";
    a.ranks = {0, 1, 2, 3, 4, 5, 6, 7};
    a.nodes = {"node0", "node1"};
    a.magnitude = 1.25;
    a.state = trainscope::storage::AnomalyState::kResolved;
    a.resolvedStep = 90;
    a.summary = "job step time 1.25x";
    store.anomalyRows.push_back(a);
    trainscope::http::HttpOptions o;
    o.port = 0;
    server = std::make_unique<trainscope::http::HttpServer>(o, store);
    REQUIRE(server->start().isOk());
    url = "http://127.0.0.1:" + std::to_string(server->port());
  }
  trainscope::testing::FakeStore store;
  std::unique_ptr<trainscope::http::HttpServer> server;
  std::string url;
};

}  // namespace

TEST_CASE("cli anomalies: table lists id, kind, ranks, nodes, steps, magnitude, state", "[cli]") {
  Collector c;
  auto r = cli({"--server", c.url, "anomalies", "train"});
  INFO(r.err);
  REQUIRE(r.code == kExitOk);
  CHECK(r.out.find("ID") != std::string::npos);
  CHECK(r.out.find("MAGNITUDE") != std::string::npos);
  CHECK(r.out.find("train/straggler/120/r5") != std::string::npos);
  CHECK(r.out.find("straggler") != std::string::npos);
  CHECK(r.out.find("1.80x") != std::string::npos);
  CHECK(r.out.find("0,1,2,3,4,5,6,7") != std::string::npos);
  CHECK(r.out.find("node0,node1") != std::string::npos);
  CHECK(r.out.find("resolved at 90") != std::string::npos);
  CHECK(r.out.find("rank 5 computes 1.8x slower") != std::string::npos);
  auto calm = cli({"--server", c.url, "anomalies", "calm"});
  CHECK(calm.code == kExitOk);
  CHECK(calm.out == "no anomalies for job 'calm'\n");
}

TEST_CASE("cli anomalies --json prints the API's anomalies; unknown job exits 1", "[cli]") {
  Collector c;
  auto r = cli({"--server", c.url, "anomalies", "train", "--json"});
  REQUIRE(r.code == kExitOk);
  json j = json::parse(r.out);
  REQUIRE(j["anomalies"].size() == 2);
  CHECK(j["anomalies"][0]["kind"] == "straggler");
  CHECK(j["anomalies"][0]["ranks"] == json{5});
  CHECK(j["anomalies"][0]["resolved_step"].is_null());
  CHECK(j["anomalies"][1]["resolved_step"] == 90);
  auto missing = cli({"--server", c.url, "anomalies", "nope"});
  CHECK(missing.code == kExitApiError);
  CHECK(missing.err.find("unknown job 'nope'") != std::string::npos);
}
