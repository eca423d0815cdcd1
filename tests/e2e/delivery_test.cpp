// Whole-system delivery: a simulated 16-rank job through two agents into the collector must
// arrive exactly once, also when the collector or an agent is killed mid-run.
#include <csignal>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include <catch2/catch.hpp>

#include "tests/e2e/harness.h"

using namespace trainscope::e2e;
using nlohmann::json;

namespace {

constexpr int kRanks = 16;
constexpr int kSteps = 300;
constexpr int64_t kRows = int64_t{kRanks} * kSteps;

struct Stack {
  TempDir dir;
  CollectorSpec collectorSpec;
  std::unique_ptr<Process> collector;
  std::vector<AgentSpec> agentSpecs;
  std::vector<std::unique_ptr<Process>> agents;

  explicit Stack(int nAgents) {
    collectorSpec.dataDir = dir / "data";
    collectorSpec.ingestPort = freePort();
    collectorSpec.httpPort = freePort();
    collector = startCollector(dir, collectorSpec);
    for (int i = 0; i < nAgents; ++i) {
      const std::string node = "node" + std::to_string(i);
      agentSpecs.push_back({node, "ipc://" + (dir / (node + ".sock")), dir / ("spool-" + node),
                            collectorSpec.ingest()});
      agents.push_back(startAgent(dir, agentSpecs.back(), "agent-" + node));
    }
  }
  ~Stack() {
    // Children stop before the directory they write into is removed.
    agents.clear();
    collector.reset();
  }
  uint16_t http() const { return collectorSpec.httpPort; }
  std::vector<std::string> simArgs(const std::string& job) const {
    std::vector<std::string> a;
    for (const auto& s : agentSpecs) {
      a.push_back("--agent");
      a.push_back(s.endpoint);
    }
    for (const auto& x : {"--job", job.c_str(), "--ranks", "16", "--steps", "300", "--quiet"}) {
      a.emplace_back(x);
    }
    return a;
  }
};

// Every (rank, step) of the job exactly once, and each row's fields plausible.
void checkExactlyOnce(uint16_t http, const std::string& job, bool checkShares) {
  const bool all = waitFor([&] { return jobStepRows(http, job) >= kRows; }, 40s, 200ms);
  INFO("step_rows for " << job << ": " << jobStepRows(http, job));
  CHECK(all);
  const json rows = stepRows(http, job);
  REQUIRE(rows.is_array());
  CHECK(rows.size() == static_cast<size_t>(kRows));
  std::map<std::pair<int, int64_t>, int> seen;
  for (const auto& r : rows) seen[{r.at("rank").get<int>(), r.at("step").get<int64_t>()}]++;
  int doubled = 0, missing = 0;
  for (int rank = 0; rank < kRanks; ++rank) {
    for (int64_t step = 0; step < kSteps; ++step) {
      auto it = seen.find({rank, step});
      if (it == seen.end()) {
        ++missing;
      } else if (it->second != 1) {
        ++doubled;
      }
    }
  }
  CHECK(seen.size() == static_cast<size_t>(kRows));
  CHECK(missing == 0);
  CHECK(doubled == 0);

  int bad = 0;
  std::string firstBad;
  for (const auto& r : rows) {
    const double d = r.at("duration_ns").get<double>();
    const double compute = r.at("compute_ns").get<double>();
    const double comm = r.at("comm_ns").get<double>();
    const double exposed = r.at("exposed_comm_ns").get<double>();
    const double data = r.at("data_ns").get<double>();
    bool ok = d > 0 && compute > 0 && comm > 0 && data > 0 && exposed >= 0 && exposed <= comm &&
              compute <= d * 1.001 && data <= d * 1.001 &&
              r.at("end_ns").get<int64_t>() - r.at("start_ns").get<int64_t>() ==
                  r.at("duration_ns").get<int64_t>();
    if (checkShares) {
      // The model's healthy shares: data ~5 %, compute ~91 %, step 100 ms (200 in warm-up).
      ok = ok && d > 50e6 && d < 400e6 && compute / d > 0.6 && data / d > 0.01 && data / d < 0.2 &&
           (compute + data) / d < 1.01;
    }
    if (!ok && bad++ == 0) firstBad = r.dump();
  }
  INFO("first implausible row: " << firstBad);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("e2e: 16 ranks x 300 steps over 2 agents arrive exactly once") {
  Stack stack(2);
  const std::string job = "e2e-once";
  auto args = stack.simArgs(job);
  args.push_back("--fast");
  auto sim = startSim(stack.dir, args);
  const auto rc = sim->wait(90s);
  INFO("simtrain log:\n" << sim->logTail());
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
  checkExactlyOnce(stack.http(), job, true);

  // Both nodes, each with a clock offset estimate and host metrics.
  json nodes;
  const bool both = waitFor(
      [&] {
        auto r = httpGet(stack.http(), "/api/v1/nodes");
        if (r.status != 200) return false;
        nodes = r.json().at("nodes");
        int good = 0;
        for (const auto& n : nodes) {
          const std::string name = n.value("node", "");
          if ((name == "node0" || name == "node1") && n.contains("clock_offset_ns") &&
              n.value("rtt_ns", int64_t{0}) > 0 && n.contains("latest_host") &&
              n["latest_host"].is_object() &&
              n["latest_host"].value("mem_total_bytes", uint64_t{0}) > 0 &&
              n["latest_host"].value("cpu_count", 0) > 0) {
            ++good;
          }
        }
        return good == 2;
      },
      15s, 200ms);
  INFO("nodes: " << nodes.dump());
  CHECK(both);

  // Every step is complete across ranks in the summary.
  auto summary = httpGet(stack.http(), "/api/v1/jobs/" + job + "/summary?limit=1000");
  REQUIRE(summary.status == 200);
  const json steps = summary.json().at("steps");
  CHECK(steps.size() == static_cast<size_t>(kSteps));
  int partial = 0;
  for (const auto& st : steps) partial += st.value("ranks", 0) == kRanks ? 0 : 1;
  CHECK(partial == 0);

  // The CLI reads the same collector.
  auto cli = std::make_unique<Process>(
      "cli",
      std::vector<std::string>{binaryFromEnv("TRAINSCOPE_CLI_BIN"), "--server",
                               "http://127.0.0.1:" + std::to_string(stack.http()), "--json",
                               "jobs"},
      stack.dir / "cli.log");
  REQUIRE(cli->wait(20s) == 0);
  std::string out = cli->log();
  out = out.substr(out.find('\n') + 1);  // the harness's command line comes first
  const json cliJobs = json::parse(out, nullptr, false);
  INFO("cli output: " << out.substr(0, 2000));
  REQUIRE(!cliJobs.is_discarded());
  bool listed = false;
  for (const auto& j : cliJobs.at("jobs")) {
    listed |= j.value("job", "") == job && j.value("step_rows", int64_t{0}) == kRows;
  }
  CHECK(listed);

  // The ranks are where the simulator put them: rank r on node<r % 2>.
  auto ranks = httpGet(stack.http(), "/api/v1/jobs/" + job + "/ranks");
  REQUIRE(ranks.status == 200);
  const json list = ranks.json().at("ranks");
  CHECK(list.size() == static_cast<size_t>(kRanks));
  for (const auto& r : list) {
    CHECK(r.value("node", "") == "node" + std::to_string(r.at("rank").get<int>() % 2));
    CHECK(r.value("world_size", 0) == kRanks);
  }
}

TEST_CASE("e2e: collector killed with SIGKILL mid-run loses nothing") {
  Stack stack(2);
  const std::string job = "e2e-collector-kill";
  auto args = stack.simArgs(job);
  // Paced (20 ms steps, about 6 s) so the kill lands mid-run.
  for (const auto& x : {"--step-ms", "20", "--warmup", "0", "--flush-timeout-ms", "30000"}) {
    args.emplace_back(x);
  }
  auto sim = startSim(stack.dir, args);
  const bool third =
      waitFor([&] { return jobStepRows(stack.http(), job) >= kRows / 3; }, 30s, 20ms);
  REQUIRE(third);
  stack.collector->kill(SIGKILL);
  stack.collector->wait(5s);
  const int64_t beforeKill = kRows / 3;
  INFO("killed the collector after at least " << beforeKill << " rows were stored");
  CHECK(sim->running());  // the kill really was mid-run
  std::this_thread::sleep_for(1s);
  stack.collector = startCollector(stack.dir, stack.collectorSpec, "collector-restarted");
  const auto rc = sim->wait(60s);
  INFO("simtrain log:\n" << sim->logTail());
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
  checkExactlyOnce(stack.http(), job, false);
}

// The bound: while an agent is down each probe keeps up to 4,096 unacknowledged step reports
// (ts_probe_config.backlog_reports) and sends them again to the restarted agent; a restart
// within a few seconds at 50 steps/s stays far inside it.
TEST_CASE("e2e: agent restarted mid-run loses nothing within the probe backlog") {
  Stack stack(2);
  const std::string job = "e2e-agent-restart";
  auto args = stack.simArgs(job);
  for (const auto& x : {"--step-ms", "20", "--warmup", "0", "--flush-timeout-ms", "30000"}) {
    args.emplace_back(x);
  }
  auto sim = startSim(stack.dir, args);
  const bool third =
      waitFor([&] { return jobStepRows(stack.http(), job) >= kRows / 3; }, 30s, 20ms);
  REQUIRE(third);
  stack.agents[1]->kill(SIGKILL);
  stack.agents[1]->wait(5s);
  CHECK(sim->running());
  std::this_thread::sleep_for(2s);
  stack.agents[1] = startAgent(stack.dir, stack.agentSpecs[1], "agent-node1-restarted");
  const auto rc = sim->wait(60s);
  INFO("simtrain log:\n" << sim->logTail());
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
  checkExactlyOnce(stack.http(), job, false);
}
