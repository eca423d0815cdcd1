// Several collectors on one ClickHouse cluster, end to end: two clickhouse-server processes
// with Distributed tables over two shards (tests/common/clickhouse_server.h), two collectors
// sharing them (--store clickhouse://A,B/DB?cluster=two), four agents that list both collectors,
// and two simulated jobs of 8 ranks spread over the four agents, one job owned by each collector
// by the agents' rendezvous hashing (job names picked so). Checked: each job is stored by its
// owner and listed and served by both; then the first collector is killed with SIGKILL mid-run:
// its job moves to the other collector, every step row is stored exactly once (row counts exact
// in ClickHouse's tables and in the API), and detection goes on there (the straggler injected
// after the kill is found). Finally the killed collector is started again and every API answer
// is equal from either collector. Prints the failover time (SIGKILL -> the job's reports stored
// by the other collector) as measured here. Exits 77 where clickhouse-server is not installed.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/rendezvous.h"
#include "tests/common/clickhouse_server.h"
#include "tests/e2e/harness.h"

using namespace trainscope::e2e;
using nlohmann::json;

namespace {

constexpr int kRanks = 8;
constexpr int kSteps = 300;
constexpr int kKillAtStep = 80;      // the first collector is killed once its job is past this
constexpr int kStragglerFrom = 180;  // injected into the first collector's job, after the kill
constexpr int kStragglerRank = 3;

// The job (and its fields) as the collector on `port` lists it; null when it does not.
json jobRow(uint16_t port, const std::string& job) {
  auto r = httpGet(port, "/api/v1/jobs", 5s);
  if (r.status != 200) return nullptr;
  const json body = json::parse(r.body, nullptr, false);
  if (body.is_discarded()) return nullptr;
  for (const auto& j : body["jobs"]) {
    if (j.value("job", "") == job) return j;
  }
  return nullptr;
}

json get(uint16_t port, const std::string& target) {
  auto r = httpGet(port, target, 30s);
  INFO(target << " -> " << r.status << " " << r.body.substr(0, 300));
  REQUIRE(r.status == 200);
  return r.json();
}

// A job name that the agents' hashing gives to collector `owner` of `collectors`.
std::string jobOwnedBy(size_t owner, const std::vector<std::string>& collectors) {
  for (int i = 0;; ++i) {
    std::string name = "mc-job-" + std::to_string(i);
    if (trainscope::agent::rendezvousOwner(name, collectors) == owner) return name;
  }
}

}  // namespace

TEST_CASE(
    "e2e: two collectors on a two-shard ClickHouse cluster share the jobs, fail over "
    "without loss, and answer alike") {
  trainscope::testing::ClickHouseServer::skipUnlessInstalled();
  for (const char* bin :
       {"TRAINSCOPE_COLLECTOR_BIN", "TRAINSCOPE_AGENT_BIN", "TRAINSCOPE_SIMTRAIN_BIN"}) {
    (void)binaryFromEnv(bin);
  }
  std::string error;
  auto servers = trainscope::testing::ClickHouseServer::startCluster(2, "two", &error);
  INFO(error);
  REQUIRE(servers.size() == 2);
  const std::string store =
      trainscope::testing::ClickHouseServer::clusterUrl(servers, "multi", "two");
  TempDir dir;

  // Two collectors on fixed ports (the first is started again later on the same ones).
  CollectorSpec specs[2];
  std::unique_ptr<Process> collectors[2];
  std::vector<std::string> ingests;
  for (int c = 0; c < 2; ++c) {
    specs[c].dataDir = dir / ("data-c" + std::to_string(c));
    specs[c].ingestPort = freePort();
    specs[c].httpPort = freePort();
    ingests.push_back(specs[c].ingest());
  }
  auto startCollectorN = [&](int c) {
    return startCollector(dir, specs[c], "collector-c" + std::to_string(c),
                          {"--store", store, "--name", "c" + std::to_string(c)});
  };
  for (int c = 0; c < 2; ++c) collectors[c] = startCollectorN(c);

  // Four agents, each listing both collectors; a collector silent for 2 s is taken as gone.
  std::vector<std::unique_ptr<Process>> agents;
  std::vector<std::string> agentArgs;
  for (int a = 0; a < 4; ++a) {
    const std::string node = "node" + std::to_string(a);
    AgentSpec spec{node, "ipc://" + (dir / (node + ".sock")), dir / ("spool-" + node),
                   ingests[0] + "," + ingests[1]};
    agents.push_back(
        startAgent(dir, spec, "agent-" + node,
                   {"--collector-timeout-ms", "2000", "--heartbeat-interval-ms", "250"}));
    agentArgs.push_back("--agent");
    agentArgs.push_back(spec.endpoint);
  }

  const std::string jobA = jobOwnedBy(0, ingests);  // collector c0's, until it is killed
  const std::string jobB = jobOwnedBy(1, ingests);
  std::vector<std::unique_ptr<Process>> sims;
  for (const std::string& job : {jobA, jobB}) {
    std::vector<std::string> args = agentArgs;
    for (const std::string& a :
         {std::string("--job"), job, std::string("--ranks"), std::to_string(kRanks),
          std::string("--steps"), std::to_string(kSteps), std::string("--step-ms"),
          std::string("40"), std::string("--seed"), std::string("11"), std::string("--quiet")}) {
      args.push_back(a);
    }
    if (job == jobA) {
      args.push_back("--inject");
      args.push_back("straggler:rank=" + std::to_string(kStragglerRank) +
                     ",from=" + std::to_string(kStragglerFrom) + ",factor=1.6");
    }
    sims.push_back(startSim(dir, args, "sim-" + job));
  }

  auto logs = [&] {
    std::string out;
    for (const auto& c : collectors) {
      if (c) out += c->name() + ":\n" + c->logTail(2000) + "\n";
    }
    for (const auto& a : agents) out += a->name() + ":\n" + a->logTail(800) + "\n";
    return out;
  };
  // Each job is stored by its owner, and both collectors list both jobs from the shared store.
  const bool owned = waitFor(
      [&] {
        for (int c = 0; c < 2; ++c) {
          const json a = jobRow(specs[c].httpPort, jobA);
          const json b = jobRow(specs[c].httpPort, jobB);
          if (a.is_null() || b.is_null() || a["latest_step"].get<int64_t>() < kKillAtStep) {
            return false;
          }
          if (a["collector"] != "c0" || b["collector"] != "c1") return false;
        }
        return true;
      },
      60s);
  {
    INFO(logs());
    REQUIRE(owned);
  }

  // SIGKILL the owner of jobA mid-run; its job must come to c1, with nothing lost.
  REQUIRE(sims[0]->running());
  const auto killedAt = std::chrono::steady_clock::now();
  collectors[0]->kill(SIGKILL);
  (void)collectors[0]->wait(10s);
  const bool moved = waitFor(
      [&] {
        const json j = jobRow(specs[1].httpPort, jobA);
        return j.is_object() && j["collector"] == "c1";
      },
      30s, 20ms);
  {
    INFO(logs());
    REQUIRE(moved);
  }
  const auto failoverMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now() - killedAt)
                              .count();
  std::printf(
      "failover: SIGKILL of c0 -> job %s's reports stored by c1 after %lld ms "
      "(agents' --collector-timeout-ms 2000, heartbeat 250 ms)\n",
      jobA.c_str(), static_cast<long long>(failoverMs));
  std::fflush(stdout);

  requireExitZero(sims, 120s);
  const int64_t rows = int64_t{kRanks} * kSteps;
  // Every step of both jobs served by c1 (from the store, through FINAL), every rank ended.
  for (const std::string& job : {jobA, jobB}) {
    const bool complete = waitFor(
        [&] {
          const json j = jobRow(specs[1].httpPort, job);
          return j.is_object() && j["ranks_ended"] == kRanks &&
                 static_cast<int64_t>(stepRows(specs[1].httpPort, job).size()) == rows;
        },
        60s, 200ms);
    INFO(job << ": " << jobRow(specs[1].httpPort, job).dump() << "\n" << logs());
    REQUIRE(complete);
  }
  // Exactly once in ClickHouse's tables, through the Distributed table: one row per key, none
  // missing.
  trainscope::storage::clickhouse::Endpoint e;
  e.port = std::to_string(servers[0]->port());
  e.database = "multi";
  trainscope::storage::clickhouse::HttpClient client(e, 10s);
  auto stored = client.query(
      "SELECT count(), uniqExact(job, step, rank) FROM steps FINAL FORMAT TabSeparated");
  REQUIRE(stored);
  CHECK(*stored == std::to_string(2 * rows) + '\t' + std::to_string(2 * rows) + '\n');
  int64_t local = 0;
  for (const auto& server : servers) {
    trainscope::storage::clickhouse::Endpoint se;
    se.port = std::to_string(server->port());
    se.database = "multi";
    trainscope::storage::clickhouse::HttpClient shard(se, 10s);
    auto n = shard.query("SELECT count() FROM steps_local FORMAT TabSeparated");
    REQUIRE(n);
    local += std::stoll(*n);
  }
  // Moves besides the kill: a collector stalled past the timeout on this loaded machine and
  // came back, and both stored some of its job's rows at the same moment. Then a row may lie
  // twice in the table until ClickHouse merges it (served once, through FINAL), and the jobs
  // list's step_rows may count it twice (docs/OPERATIONS.md, Several collectors: limits).
  size_t moves = 0;
  for (const auto& a : agents) {
    const std::string log = a->log();
    for (size_t at = 0; (at = log.find("collectors changed (", at)) != std::string::npos; ++at) {
      ++moves;
    }
  }
  std::printf(
      "collector set changes seen by the 4 agents: %zu (4: only the kill); rows in the "
      "shards' tables before merges: %lld of %lld\n",
      moves, static_cast<long long>(local), static_cast<long long>(rows) * 2);
  std::fflush(stdout);
  if (moves == agents.size()) {
    CHECK(local == 2 * rows);
    for (const std::string& job : {jobA, jobB}) {
      CHECK(jobRow(specs[1].httpPort, job)["step_rows"] == rows);
    }
  } else {
    WARN("a collector stalled past --collector-timeout-ms besides the kill (" << moves
                                                                              << " changes)");
  }

  // Detection went on at c1: the straggler injected after the kill is found there.
  const bool found = waitFor(
      [&] {
        auto r = httpGet(specs[1].httpPort, "/api/v1/jobs/" + jobA + "/anomalies", 5s);
        if (r.status != 200) return false;
        const json body = r.json();  // kept: a range over r.json()["anomalies"] would dangle
        for (const auto& a : body["anomalies"]) {
          if (a["kind"] == "straggler" && a["ranks"] == json::array({kStragglerRank})) {
            return a["onset_step"].get<int64_t>() >= kKillAtStep;
          }
        }
        return false;
      },
      30s);
  {
    INFO(get(specs[1].httpPort, "/api/v1/jobs/" + jobA + "/anomalies").dump() << "\n" << logs());
    REQUIRE(found);
  }

  // c0 again (same ports and name): both collectors now answer every request alike.
  collectors[0] = startCollectorN(0);
  for (const std::string& job : {jobA, jobB}) {
    for (const std::string& target :
         {std::string("/api/v1/jobs/") + job + "/steps?limit=100000&detail=1",
          "/api/v1/jobs/" + job + "/summary?limit=1000",
          "/api/v1/jobs/" + job + "/heatmap?from=0&to=" + std::to_string(kSteps - 1),
          "/api/v1/jobs/" + job + "/ranks", "/api/v1/jobs/" + job + "/anomalies"}) {
      INFO(target);
      CHECK(get(specs[0].httpPort, target) == get(specs[1].httpPort, target));
    }
  }
  json jobs0 = get(specs[0].httpPort, "/api/v1/jobs")["jobs"];
  json jobs1 = get(specs[1].httpPort, "/api/v1/jobs")["jobs"];
  CHECK(jobs0 == jobs1);
  CHECK(jobs0.size() == 2);
  for (const auto& c : collectors) CHECK(c->stop() == 0);
  for (auto& a : agents) CHECK(a->stop() == 0);
}
