// Whole-system topology: a simulated tp2 x pp2 x dp2 job (trainscope-simtrain --parallel)
// declares its groups through the probe, and the real agents and collector serve each rank's
// coordinates (GET /api/v1/jobs/{job}/topology and the ranks listing); its pipeline p2p
// reaches the stored step reports; a flat job through the same collector declares nothing and
// keeps today's listing.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/e2e/harness.h"

using namespace trainscope::e2e;
using nlohmann::json;

TEST_CASE("e2e: a tp2 x pp2 x dp2 simulated job's topology API returns every rank's coordinates") {
  TempDir dir;
  CollectorSpec spec;
  spec.dataDir = dir / "data";
  spec.ingestPort = freePort();
  spec.httpPort = freePort();
  auto collector = startCollector(dir, spec);
  std::vector<std::string> agentArgs;
  std::vector<std::unique_ptr<Process>> agents;
  for (int i = 0; i < 2; ++i) {
    const std::string node = "node" + std::to_string(i);
    AgentSpec a{node, "ipc://" + (dir / (node + ".sock")), dir / ("spool-" + node), spec.ingest()};
    agents.push_back(startAgent(dir, a, "agent-" + node));
    agentArgs.push_back("--agent");
    agentArgs.push_back(a.endpoint);
  }
  auto runSim = [&](const std::string& job, std::vector<std::string> extra) {
    std::vector<std::string> args = agentArgs;
    for (const char* x : {"--steps", "30", "--step-ms", "20", "--fast", "--quiet"}) {
      args.emplace_back(x);
    }
    args.push_back("--job");
    args.push_back(job);
    args.insert(args.end(), extra.begin(), extra.end());
    return startSim(dir, args, "sim-" + job);
  };
  auto sim3d = runSim("3d", {"--parallel", "tp=2,pp=2,dp=2", "--microbatches", "4"});
  auto simFlat = runSim("flat", {"--ranks", "4"});
  for (auto* s : {sim3d.get(), simFlat.get()}) {
    auto rc = s->wait(90s);
    INFO(s->name() << " log:\n" << s->logTail());
    REQUIRE(rc.has_value());
    CHECK(*rc == 0);
  }
  // Every report was acknowledged, so the hellos before them were stored too.
  REQUIRE(waitFor([&] { return jobStepRows(spec.httpPort, "3d") == 8 * 30; }, 20s));

  auto get = [&](const std::string& target) {
    auto r = httpGet(spec.httpPort, target);
    INFO(target << " -> " << r.status << " " << r.body);
    REQUIRE(r.status == 200);
    return r.json();
  };
  json t = get("/api/v1/jobs/3d/topology");
  INFO(t.dump());
  CHECK(t["declared"] == true);
  CHECK(t["ranks_declared"] == 8);
  CHECK(t["world_size"] == 8);
  CHECK(t["layout"] == json{{"pp", 2}, {"dp", 2}, {"tp", 2}});
  CHECK(t["problems"].empty());
  CHECK(t["groups"].size() == 12);  // 4 tp, 4 pp, 4 dp groups
  REQUIRE(t["ranks"].size() == 8);
  for (uint32_t r = 0; r < 8; ++r) {
    INFO("rank " << r);
    const json& e = t["ranks"][r];
    CHECK(e["rank"] == r);
    CHECK(e["node"] == "node" + std::to_string(r % 2));
    // Megatron's order, as simtrain lays the job out: rank = pp * 4 + dp * 2 + tp.
    CHECK(e["coords"] == json{{"pp", r / 4}, {"dp", (r / 2) % 2}, {"tp", r % 2}});
  }
  json ranks = get("/api/v1/jobs/3d/ranks");
  REQUIRE(ranks["ranks"].size() == 8);
  CHECK(ranks["ranks"][6]["coords"] == json{{"pp", 1}, {"dp", 1}, {"tp", 0}});

  // The pipeline's p2p reached the stored reports: a stage-1 rank receives activations from
  // stage 0 and waits for them (the bubble).
  json steps = get("/api/v1/jobs/3d/steps?rank=5&from=20&to=20&detail=1");
  REQUIRE(steps["steps"].size() == 1);
  const json& s = steps["steps"][0];
  INFO(s.dump());
  CHECK(s["p2p_ns"].get<int64_t>() > 0);
  CHECK(s["bubble_ns"].get<int64_t>() > 0);
  bool recvFromStage0 = false;
  for (const auto& x : s["p2p"]) {
    recvFromStage0 = recvFromStage0 || (x["op"] == "recv" && x["peer"] == 1 && x["count"] == 4);
  }
  CHECK(recvFromStage0);

  json flat = get("/api/v1/jobs/flat/topology");
  CHECK(flat["declared"] == false);
  CHECK(flat["layout"].empty());
  CHECK(flat["ranks"].size() == 4);
  json flatRanks = get("/api/v1/jobs/flat/ranks");
  REQUIRE(flatRanks["ranks"].size() == 4);
  CHECK_FALSE(flatRanks["ranks"][0].contains("coords"));
}
