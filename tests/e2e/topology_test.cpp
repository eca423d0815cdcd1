// Whole-system topology: a simulated tp2 x pp2 x dp2 job (trainscope-simtrain --parallel)
// declares its groups through the probe, and the real agents and collector serve each rank's
// coordinates (GET /api/v1/jobs/{job}/topology and the ranks listing); its pipeline p2p
// reaches the stored step reports; a flat job through the same collector declares nothing and
// keeps today's listing; interleaved and zb-v jobs get their schedule named.
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/e2e/harness.h"

using namespace trainscope::e2e;
using nlohmann::json;

namespace {

// A collector and two agents (node0, node1) in `dir` on free ports; agentArgs are the
// simulator's --agent flags for them.
struct Cluster {
  explicit Cluster(const TempDir& dir) {
    spec.dataDir = dir / "data";
    spec.ingestPort = freePort();
    spec.httpPort = freePort();
    collector = startCollector(dir, spec);
    for (int i = 0; i < 2; ++i) {
      const std::string node = "node" + std::to_string(i);
      AgentSpec a{node, "ipc://" + (dir / (node + ".sock")), dir / ("spool-" + node),
                  spec.ingest()};
      agents.push_back(startAgent(dir, a, "agent-" + node));
      agentArgs.push_back("--agent");
      agentArgs.push_back(a.endpoint);
    }
  }
  CollectorSpec spec;
  std::unique_ptr<Process> collector;
  std::vector<std::unique_ptr<Process>> agents;
  std::vector<std::string> agentArgs;
};

// Waits for each simulated job to end and checks it exited 0.
void finish(std::initializer_list<Process*> sims) {
  for (Process* s : sims) {
    auto rc = s->wait(90s);
    INFO(s->name() << " log:\n" << s->logTail());
    REQUIRE(rc.has_value());
    CHECK(*rc == 0);
  }
}

}  // namespace

TEST_CASE("e2e: a tp2 x pp2 x dp2 simulated job's topology API returns every rank's coordinates") {
  TempDir dir;
  Cluster cluster(dir);
  const CollectorSpec& spec = cluster.spec;
  const std::vector<std::string>& agentArgs = cluster.agentArgs;
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
  finish({sim3d.get(), simFlat.get()});
  // Every report was acknowledged, so the hellos before them were stored too.
  REQUIRE(waitFor([&] { return jobStepRows(spec.httpPort, "3d") == int64_t{8} * 30; }, 20s));

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

// Parallelism-aware detection through the real processes: a pipeline stage that computes 1.5x
// longer from the first step comes out as one stage_imbalance naming that stage's ranks, and a
// slow tensor-parallel group (a worker) from step 40 as one straggler naming both its ranks
// with its coordinates, each with an estimated gain; in the API and in the CLI.
TEST_CASE("e2e: a slow stage and a slow tp worker come out of the anomalies API and the CLI") {
  TempDir dir;
  Cluster cluster(dir);
  const CollectorSpec& spec = cluster.spec;
  const std::vector<std::string>& agentArgs = cluster.agentArgs;
  auto runSim = [&](const std::string& job, const std::string& inject) {
    std::vector<std::string> args = agentArgs;
    for (const char* x : {"--steps", "150", "--step-ms", "20", "--fast", "--quiet", "--parallel",
                          "tp=2,pp=2,dp=2", "--microbatches", "4", "--noise", "0.03"}) {
      args.emplace_back(x);
    }
    args.insert(args.end(), {"--job", job, "--inject", inject});
    return startSim(dir, args, "sim-" + job);
  };
  auto simStage = runSim("stage", "stage:pp=1,factor=1.5");
  auto simWorker = runSim("worker", "worker:dp=1,pp=0,factor=1.5,from=40");
  finish({simStage.get(), simWorker.get()});
  auto anomalies = [&](const std::string& job) {
    auto r = httpGet(spec.httpPort, "/api/v1/jobs/" + job + "/anomalies", 5s);
    return r.status == 200 ? r.json()["anomalies"] : json::array();
  };
  auto ofKind = [](const json& list, const std::string& kind) {
    std::vector<json> out;
    for (const auto& a : list) {
      if (a["kind"] == kind) out.push_back(a);
    }
    return out;
  };
  json stage, worker;
  REQUIRE(waitFor(
      [&] {
        stage = anomalies("stage");
        worker = anomalies("worker");
        return !ofKind(stage, "stage_imbalance").empty() && !ofKind(worker, "straggler").empty();
      },
      30s));
  INFO("stage job: " << stage.dump() << "\nworker job: " << worker.dump());

  auto st = ofKind(stage, "stage_imbalance");
  REQUIRE(st.size() == 1);
  CHECK(st[0]["ranks"] == json{4, 5, 6, 7});
  CHECK(st[0]["labels"]["stage"] == "1");
  CHECK(st[0]["labels"]["coords"] == json{{"pp", 1}});
  CHECK(st[0]["onset_step"].get<int64_t>() <= 1);
  CHECK(st[0]["evidence"]["estimated_gain"].get<double>() > 0.1);
  CHECK(ofKind(stage, "straggler").empty());  // every worker of the stage is slow alike

  auto wk = ofKind(worker, "straggler");
  REQUIRE(wk.size() == 1);  // once for the tp group, not once per rank
  CHECK(wk[0]["ranks"] == json{2, 3});
  CHECK(wk[0]["labels"]["coords"] == json{{"pp", 0}, {"dp", 1}});
  CHECK(wk[0]["onset_step"].get<int64_t>() >= 38);
  CHECK(wk[0]["onset_step"].get<int64_t>() <= 42);
  CHECK(wk[0]["evidence"]["estimated_gain"].get<double>() > 0.1);
  CHECK(ofKind(worker, "stage_imbalance").empty());

  // The CLI lists the same anomalies.
  const std::string log = dir / "cli-worker.log";
  Process cli(
      "cli-worker",
      {binaryFromEnv("TRAINSCOPE_CLI_BIN"), "--server",
       "http://127.0.0.1:" + std::to_string(spec.httpPort), "anomalies", "worker", "--json"},
      log);
  auto code = cli.wait(15s);
  INFO("cli output: " << readFile(log));
  REQUIRE(code == std::optional<int>(0));
  std::string text = readFile(log);
  if (text.rfind("$ ", 0) == 0) text = text.substr(text.find('\n') + 1);
  json out = json::parse(text);
  auto viaCli = ofKind(out["anomalies"], "straggler");
  REQUIRE(viaCli.size() == 1);
  CHECK(viaCli[0]["ranks"] == json{2, 3});
  CHECK(viaCli[0]["labels"]["coords"] == json{{"pp", 0}, {"dp", 1}});
}

// Pipeline schedules through the real processes: an interleaved:2 and a zb-v tp1 x pp4 x dp2
// job (rank = pp * 2 + dp). The topology API names each schedule with its microbatches, as
// inferred from the p2p the ranks reported; stage 0's rank exchanges with the last stage over
// the interleaved pipeline's wrap (8 = (V - 1) M transfers each way, 16 = V M with stage 1),
// while the V's last stage turns on itself and talks to stage 2 only.
TEST_CASE("e2e: interleaved and zb-v simulated jobs: the topology API names the schedule") {
  TempDir dir;
  Cluster cluster(dir);
  const CollectorSpec& spec = cluster.spec;
  auto runSim = [&](const std::string& job, const std::string& schedule) {
    std::vector<std::string> args = cluster.agentArgs;
    for (const char* x : {"--steps", "40", "--step-ms", "20", "--fast", "--quiet", "--parallel",
                          "tp=1,pp=4,dp=2", "--microbatches", "8"}) {
      args.emplace_back(x);
    }
    args.insert(args.end(), {"--job", job, "--schedule", schedule});
    return startSim(dir, args, "sim-" + job);
  };
  auto simIl = runSim("il", "interleaved:2");
  auto simV = runSim("zbv", "zb-v");
  finish({simIl.get(), simV.get()});
  REQUIRE(waitFor([&] { return jobStepRows(spec.httpPort, "il") == int64_t{8} * 40; }, 20s));
  REQUIRE(waitFor([&] { return jobStepRows(spec.httpPort, "zbv") == int64_t{8} * 40; }, 20s));
  auto get = [&](const std::string& target) {
    auto r = httpGet(spec.httpPort, target);
    INFO(target << " -> " << r.status << " " << r.body);
    REQUIRE(r.status == 200);
    return r.json();
  };
  // (peer, op) -> count of one rank's step.
  auto p2pOf = [&](const std::string& job, uint32_t rank) {
    json steps = get("/api/v1/jobs/" + job + "/steps?rank=" + std::to_string(rank) +
                     "&from=30&to=30&detail=1");
    REQUIRE(steps["steps"].size() == 1);
    std::map<std::pair<uint32_t, std::string>, uint64_t> out;
    for (const auto& x : steps["steps"][0]["p2p"]) {
      out[{x["peer"].get<uint32_t>(), x["op"].get<std::string>()}] += x["count"].get<uint64_t>();
    }
    return out;
  };
  using Counts = std::map<std::pair<uint32_t, std::string>, uint64_t>;

  json il = get("/api/v1/jobs/il/topology");
  INFO(il.dump());
  CHECK(il["layout"] == json{{"pp", 4}, {"dp", 2}, {"tp", 1}});
  CHECK(il["schedule"] == "interleaved:2");
  CHECK(il["microbatches"] == 8);
  CHECK(p2pOf("il", 0) ==
        Counts{{{2, "send"}, 16}, {{2, "recv"}, 16}, {{6, "send"}, 8}, {{6, "recv"}, 8}});
  CHECK(p2pOf("il", 6) ==
        Counts{{{4, "send"}, 16}, {{4, "recv"}, 16}, {{0, "send"}, 8}, {{0, "recv"}, 8}});

  json v = get("/api/v1/jobs/zbv/topology");
  INFO(v.dump());
  CHECK(v["schedule"] == "zb-v");
  CHECK(v["microbatches"] == 8);
  CHECK(p2pOf("zbv", 0) == Counts{{{2, "send"}, 16}, {{2, "recv"}, 16}});
  CHECK(p2pOf("zbv", 7) == Counts{{{5, "send"}, 16}, {{5, "recv"}, 16}});
}
