// The collector on ClickHouse end to end: one simulated job (8 ranks, a straggler injected)
// runs twice at once from the same seed, once into a collector on SQLite and once into a
// collector with --store clickhouse://... (a clickhouse-server the test starts on a free
// loopback port), each through its own agent. Every row is stored once in ClickHouse's table,
// and the API's jobs, steps, summary and anomalies answers of the two collectors are equal
// (timestamps compared relative to the job's first step: the two simulators start at
// different wall times; detection and update times, and capture ids, are the collectors' own).
// Exits 77 where clickhouse-server is not installed.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/common/clickhouse_server.h"
#include "tests/e2e/harness.h"

using namespace trainscope::e2e;
using nlohmann::json;

namespace {

constexpr int kRanks = 8;
constexpr int kSteps = 200;

struct Pipeline {
  CollectorSpec spec;
  std::unique_ptr<Process> collector;
  std::unique_ptr<Process> agent;
  AgentSpec agentSpec;

  Pipeline(const TempDir& dir, const std::string& name, const std::vector<std::string>& args) {
    spec.dataDir = dir / (name + "-data");
    spec.ingestPort = freePort();
    spec.httpPort = freePort();
    collector = startCollector(dir, spec, "collector-" + name, args);
    // Both agents call themselves node0: the two runs then differ only in their stores.
    agentSpec = {"node0", "ipc://" + (dir / (name + ".sock")), dir / ("spool-" + name),
                 spec.ingest()};
    agent = startAgent(dir, agentSpec, "agent-" + name);
  }
  ~Pipeline() {
    agent.reset();
    collector.reset();
  }
  json get(const std::string& target) const {
    auto r = httpGet(spec.httpPort, target, 30s);
    INFO(target << " -> " << r.status << " " << r.body.substr(0, 300));
    REQUIRE(r.status == 200);
    return r.json();
  }
};

// The job's step rows with start/end relative to the job's first start.
json relativeSteps(json steps) {
  int64_t first = INT64_MAX;
  for (const auto& s : steps) first = std::min(first, s["start_ns"].get<int64_t>());
  for (auto& s : steps) {
    s["start_ns"] = s["start_ns"].get<int64_t>() - first;
    s["end_ns"] = s["end_ns"].get<int64_t>() - first;
  }
  return steps;
}

json withoutTimes(json rows, const std::vector<std::string>& keys) {
  for (auto& r : rows) {
    for (const auto& k : keys) r.erase(k);
    // How late the reports arrived at that collector: its own timing, like detected_ns.
    if (r.contains("evidence") && r["evidence"].is_object()) r["evidence"].erase("arrival_lag_ms");
  }
  return rows;
}

}  // namespace

TEST_CASE("e2e: a job stored in ClickHouse is stored once and the API answers as on SQLite") {
  trainscope::testing::ClickHouseServer::skipUnlessInstalled();
  // Skips (exit 77) come before the server starts: an exit leaves no destructor to remove it.
  for (const char* bin :
       {"TRAINSCOPE_COLLECTOR_BIN", "TRAINSCOPE_AGENT_BIN", "TRAINSCOPE_SIMTRAIN_BIN"}) {
    (void)binaryFromEnv(bin);
  }
  std::string error;
  auto server = trainscope::testing::ClickHouseServer::start(&error);
  INFO(error);
  REQUIRE(server);
  TempDir dir;
  Pipeline sqlite(dir, "sqlite", {});
  Pipeline ch(dir, "clickhouse", {"--store", server->url("e2e")});

  const std::string job = "ch-e2e";
  std::vector<std::unique_ptr<Process>> sims;
  for (const Pipeline* p : {&sqlite, &ch}) {
    sims.push_back(
        startSim(dir,
                 {"--agent", p->agentSpec.endpoint, "--job", job, "--ranks", std::to_string(kRanks),
                  "--steps", std::to_string(kSteps), "--step-ms", "20", "--seed", "7", "--inject",
                  "straggler:rank=3,from=100,factor=1.6", "--quiet"},
                 p == &sqlite ? "sim-sqlite" : "sim-clickhouse"));
  }
  requireExitZero(sims, 120s);
  const int64_t rows = int64_t{kRanks} * kSteps;
  for (const Pipeline* p : {&sqlite, &ch}) {
    INFO(p->collector->name() << " log:\n" << p->collector->logTail());
    REQUIRE(waitFor([&] { return jobStepRows(p->spec.httpPort, job) == rows; }, 30s));
    // The ranks' goodbyes come after their last reports: wait for them too before comparing.
    REQUIRE(waitFor(
        [&] {
          auto r = httpGet(p->spec.httpPort, "/api/v1/jobs", 5s);
          if (r.status != 200) return false;
          const json body = r.json();  // kept: a range over r.json()["jobs"] would dangle
          for (const auto& j : body["jobs"]) {
            if (j.value("job", "") == job) return j.value("ranks_ended", 0) == kRanks;
          }
          return false;
        },
        30s));
  }
  // Once in ClickHouse's table itself, not only once in the API's (FINAL) answers.
  trainscope::storage::clickhouse::Endpoint e;
  e.port = std::to_string(server->port());
  e.database = "e2e";
  trainscope::storage::clickhouse::HttpClient client(e, 10s);
  auto stored = client.query(
      "SELECT count(), uniqExact(job, step, rank) FROM steps"
      " FORMAT TabSeparated");
  REQUIRE(stored);
  CHECK(*stored == std::to_string(rows) + '\t' + std::to_string(rows) + '\n');

  // The straggler is detected on both before the answers are compared.
  for (const Pipeline* p : {&sqlite, &ch}) {
    REQUIRE(waitFor(
        [&] {
          auto r = httpGet(p->spec.httpPort, "/api/v1/jobs/" + job + "/anomalies", 5s);
          return r.status == 200 && r.body.find("straggler") != std::string::npos;
        },
        30s));
  }

  // "collector" too: the ClickHouse collector's name, null on SQLite (one collector).
  const std::vector<std::string> jobTimes = {"first_seen_ns", "last_seen_ns", "state", "collector"};
  CHECK(withoutTimes(ch.get("/api/v1/jobs")["jobs"], jobTimes) ==
        withoutTimes(sqlite.get("/api/v1/jobs")["jobs"], jobTimes));
  const std::string steps = "/api/v1/jobs/" + job + "/steps?limit=100000&detail=1";
  const json chSteps = relativeSteps(ch.get(steps)["steps"]);
  REQUIRE(chSteps.size() == static_cast<size_t>(rows));
  CHECK(chSteps == relativeSteps(sqlite.get(steps)["steps"]));
  const json chSummary = ch.get("/api/v1/jobs/" + job + "/summary?limit=1000");
  CHECK(chSummary["steps"].size() == static_cast<size_t>(kSteps));
  CHECK(chSummary == sqlite.get("/api/v1/jobs/" + job + "/summary?limit=1000"));
  for (const std::string& target :
       {"/api/v1/jobs/" + job + "/summary?from=90&to=120&limit=20",
        "/api/v1/jobs/" + job + "/heatmap?from=0&to=199", "/api/v1/jobs/" + job + "/ranks"}) {
    INFO(target);
    if (target.find("/ranks") != std::string::npos) {
      const std::vector<std::string> rankTimes = {"first_seen_ns", "last_seen_ns", "pid"};
      CHECK(withoutTimes(ch.get(target)["ranks"], rankTimes) ==
            withoutTimes(sqlite.get(target)["ranks"], rankTimes));
    } else {
      CHECK(ch.get(target) == sqlite.get(target));
    }
  }
  // Each collector publishes an anomaly once its confirmation hold has passed on its own clock
  // (--detect-confirm-ms), and ends it with the job on its own 5 s check: the detected step
  // and when it ended differ by timing, not by the store. Both must end it.
  const std::vector<std::string> anomalyTimes = {"detected_ns", "updated_ns",    "capture_id",
                                                 "resolved_ns", "detected_step", "ended_ns"};
  const std::string anomaliesPath = "/api/v1/jobs/" + job + "/anomalies";
  auto allEnded = [&](Pipeline& c) {
    const json list = c.get(anomaliesPath)["anomalies"];
    return !list.empty() && std::all_of(list.begin(), list.end(), [](const json& a) {
      return a["state"] == "ended" || a["state"] == "resolved";
    });
  };
  for (int i = 0; i < 150 && !(allEnded(ch) && allEnded(sqlite)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const json chAnomalies = withoutTimes(ch.get(anomaliesPath)["anomalies"], anomalyTimes);
  CHECK(!chAnomalies.empty());
  CHECK(chAnomalies == withoutTimes(sqlite.get(anomaliesPath)["anomalies"], anomalyTimes));
}
