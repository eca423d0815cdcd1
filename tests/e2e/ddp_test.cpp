// Whole-system runs with real PyTorch: two CPU ranks of DistributedDataParallel (gloo) report
// through the probe's Python package (tests/e2e/ddp_train.py); and eight ranks of a tensor x
// pipeline x data parallel job written by hand (tests/e2e/par3d_train.py) declare their
// process groups, whose layout, coordinates, pipeline peers and all-reduces must arrive. Their step
// rows must separate compute from comm and carry the ATen operators the torch integration
// (libtrainscope_torch.so) recorded; and a capture asked of the collector's API must come back
// as one merged trace of both ranks, with aten:: operator events and the gradient all_reduce
// collectives inside each rank's ProfilerStep#N events (docs/CAPTURE.md).
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/e2e/harness.h"

using namespace trainscope::e2e;

namespace {

// libtrainscope_torch.so: $TRAINSCOPE_TORCH_LIB, else beside the probe in the build tree
// (agent/torch/ next to agent/probe/), where trainscope.torch looks too. "" when absent
// (built without libtorch-dev): the run then goes on without operators.
std::string torchLibPath(const std::string& probeLib) {
  const char* env = std::getenv("TRAINSCOPE_TORCH_LIB");
  std::string path = env != nullptr ? env
                                    : probeLib.substr(0, probeLib.rfind('/') + 1) +
                                          "../torch/libtrainscope_torch.so";
  return ::access(path.c_str(), R_OK) == 0 ? path : "";
}

// What both tests need: /usr/bin/python3 with torch (else exit 77), the probe library and the
// training script.
struct DdpSetup {
  std::string probeLib;
  std::string torchLib;  // "" when not built
  std::string pythonPath;
  std::string script;
  int world = 2;  // ranks to start
};

DdpSetup ddpSetup() {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    std::fprintf(stderr, "e2e: skipped: /usr/bin/python3 cannot import torch\n");
    std::exit(77);
  }
  DdpSetup s;
  s.probeLib = binaryFromEnv("TRAINSCOPE_PROBE_LIB");  // exists check only
  s.torchLib = torchLibPath(s.probeLib);
  const char* src = std::getenv("TRAINSCOPE_SOURCE_ROOT");
  REQUIRE(src != nullptr);
  s.pythonPath = std::string(src) + "/agent/probe/python";
  s.script = std::string(src) + "/tests/e2e/ddp_train.py";
  return s;
}

// Starts the s.world ranks of `job` with s.script `args`, reporting to the agent at
// `endpoint`; `extraEnv` is added to each rank's environment.
std::vector<std::unique_ptr<Process>> startDdpRanks(const TempDir& dir, const DdpSetup& s,
                                                    const std::string& job,
                                                    const std::string& endpoint,
                                                    const std::vector<std::string>& args,
                                                    const std::vector<std::string>& extraEnv = {}) {
  const std::string masterPort = std::to_string(freePort());
  std::vector<std::unique_ptr<Process>> ranks;
  const std::string stem =
      s.script.substr(s.script.rfind('/') + 1, s.script.rfind('.') - s.script.rfind('/') - 1);
  for (int r = 0; r < s.world; ++r) {
    std::vector<std::string> argv = pythonCommand();
    argv.push_back(s.script);
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env{"RANK=" + std::to_string(r),
                                 "LOCAL_RANK=" + std::to_string(r),
                                 "WORLD_SIZE=" + std::to_string(s.world),
                                 "MASTER_ADDR=127.0.0.1",
                                 "MASTER_PORT=" + masterPort,
                                 "TRAINSCOPE_JOB=" + job,
                                 "TRAINSCOPE_AGENT=" + endpoint,
                                 "TRAINSCOPE_PROBE_LIB=" + s.probeLib,
                                 "TRAINSCOPE_TORCH_LIB=" + s.torchLib,
                                 "PYTHONPATH=" + s.pythonPath,
                                 "OMP_NUM_THREADS=1"};
    env.insert(env.end(), extraEnv.begin(), extraEnv.end());
    const std::string name = stem + "-rank" + std::to_string(r);
    ranks.push_back(std::make_unique<Process>(name, argv, dir / (name + ".log"), env));
  }
  return ranks;
}

void expectCleanExits(std::vector<std::unique_ptr<Process>>& ranks,
                      std::chrono::milliseconds timeout) {
  for (auto& p : ranks) {
    const auto rc = p->wait(timeout);
    INFO(p->name() << " log:\n" << p->logTail());
    REQUIRE(rc.has_value());
    CHECK(*rc == 0);
  }
}

struct StepSpan {
  double ts = 0;
  double end = 0;
};

}  // namespace

TEST_CASE(
    "e2e: real 2-rank DDP training on CPU reports steps with compute and communication separated") {
  const DdpSetup setup = ddpSetup();
  const std::string& torchLib = setup.torchLib;

  TempDir dir;
  auto [cs, as, collector, agent] = startOneNode(dir);

  const std::string job = "e2e-ddp";
  auto ranks = startDdpRanks(dir, setup, job, as.endpoint,
                             {"--steps", "30", torchLib.empty() ? "--no-ops" : "--require-ops"});
  expectCleanExits(ranks, 90s);

  // Every step of both ranks, each with compute and communication time.
  const bool all =
      waitFor([&, port = cs.httpPort] { return jobStepRows(port, job) >= 60; }, 20s, 100ms);
  INFO("step_rows: " << jobStepRows(cs.httpPort, job));
  CHECK(all);
  const auto rows = stepRows(cs.httpPort, job);
  std::set<int> ranksSeen;
  int withBoth = 0;
  for (const auto& row : rows) {
    ranksSeen.insert(row.at("rank").get<int>());
    if (row.at("comm_ns").get<int64_t>() > 0 && row.at("compute_ns").get<int64_t>() > 0) {
      ++withBoth;
    }
  }
  INFO("rows: " << rows.dump().substr(0, 3000));
  CHECK(ranksSeen == std::set<int>{0, 1});
  CHECK(rows.size() == 60);
  CHECK(withBoth == static_cast<int>(rows.size()));

  if (torchLib.empty()) {
    WARN("libtrainscope_torch.so is not built: operators not checked");
    return;
  }
  // Every step's operators include the matrix products of the MLP's forward and backward.
  const auto detail = httpGet(
      cs.httpPort, "/api/v1/jobs/" + percentEncode(job) + "/steps?limit=100000&detail=true", 30s);
  REQUIRE(detail.status == 200);
  const auto detailRows = detail.json().at("steps");
  int withAten = 0;
  std::set<std::string> opNames;
  for (const auto& row : detailRows) {
    bool aten = false;
    for (const auto& op : row.at("ops")) {
      const auto name = op.at("name").get<std::string>();
      opNames.insert(name);
      if (name.rfind("aten::", 0) == 0 && op.at("count").get<int64_t>() > 0) aten = true;
    }
    if (aten) ++withAten;
  }
  std::string names;
  for (const auto& n : opNames) names += n + " ";
  INFO("operator names: " << names);
  CHECK(detailRows.size() == 60);
  CHECK(withAten == static_cast<int>(detailRows.size()));
  CHECK(opNames.count("aten::addmm") == 1);
}

TEST_CASE(
    "e2e: a capture of real 2-rank DDP training merges the aten operators and all_reduce of both "
    "ranks") {
  const DdpSetup setup = ddpSetup();
  if (setup.torchLib.empty()) {
    std::fprintf(stderr, "e2e: skipped: libtrainscope_torch.so is not built (no libtorch-dev)\n");
    std::exit(77);
  }
  const std::string agentBin = binaryFromEnv("TRAINSCOPE_AGENT_BIN");

  TempDir dir;
  CollectorSpec cs;
  cs.dataDir = dir / "data";
  cs.ingestPort = freePort();
  cs.httpPort = freePort();
  auto collector = startCollector(dir, cs);
  // The agent ships only from the probes' capture directory, so both are given the same one.
  const std::string captureDir = dir / "captures";
  const std::string endpoint = "ipc://" + (dir / "node0.sock");
  Process agent("agent-node0",
                {agentBin, "--collector", cs.ingest(), "--endpoint", endpoint, "--node", "node0",
                 "--spool-dir", dir / "spool-node0", "--capture-dir", captureDir},
                dir / "agent-node0.log");
  REQUIRE(waitFor([&] { return ::access((dir / "node0.sock").c_str(), F_OK) == 0; }, 10s));

  const std::string job = "e2e-torch-capture";
  auto ranks = startDdpRanks(dir, setup, job, endpoint,
                             {"--steps", "120", "--step-sleep-ms", "20", "--require-ops"},
                             {"TRAINSCOPE_CAPTURE_DIR=" + captureDir});
  auto logs = [&] {
    std::string out;
    for (auto& p : ranks) out += p->name() + ":\n" + p->logTail(1500) + "\n";
    return out + "agent:\n" + agent.logTail(1500) + "\ncollector:\n" + collector->logTail(1500);
  };

  // Both ranks under way, then the capture: 3 steps from latest + 2, with 2 steps of history.
  REQUIRE(waitFor([&] { return jobStepRows(cs.httpPort, job) >= 20; }, 60s, 100ms));
  const auto posted = httpPost(cs.httpPort, "/api/v1/jobs/" + percentEncode(job) + "/captures",
                               R"({"ranks": "all", "steps": 3, "history": 2, "reason": "e2e"})");
  INFO("POST captures: " << posted.status << " " << posted.body << "\n" << logs());
  REQUIRE(posted.status == 201);
  const auto capture = posted.json();
  const std::string id = capture.at("id").get<std::string>();
  CHECK(capture.at("ranks") == nlohmann::json::array({0, 1}));

  nlohmann::json last;
  const bool finished = waitFor(
      [&] {
        auto r = httpGet(cs.httpPort, "/api/v1/captures/" + percentEncode(id));
        if (r.status != 200) return false;
        last = r.json();
        return last.at("state").get<std::string>() != "running";
      },
      90s, 200ms);
  INFO("capture: " << last.dump() << "\n" << logs());
  REQUIRE(finished);
  REQUIRE(last.at("state") == "complete");

  const auto trace = httpGet(cs.httpPort, "/api/v1/captures/" + percentEncode(id) + "/trace", 30s);
  REQUIRE(trace.status == 200);
  const auto merged = trace.json();
  const auto& events = merged.at("traceEvents");

  // Each rank's steps, then every op and collective checked against them.
  std::map<int, std::vector<StepSpan>> steps;
  for (const auto& e : events) {
    if (e.value("ph", "") != "X" || e.value("cat", "") != "step") continue;
    const auto name = e.value("name", "");
    CHECK(name.rfind("ProfilerStep#", 0) == 0);
    const double ts = e.at("ts").get<double>();
    steps[e.at("pid").get<int>()].push_back({ts, ts + e.at("dur").get<double>()});
  }
  auto insideStep = [&](int pid, double ts, double dur) {
    for (const auto& s : steps[pid]) {
      if (ts >= s.ts && ts + dur <= s.end + 1.0) return true;  // 1 us of rounding
    }
    return false;
  };
  std::map<int, int> atenOps, allReduces, allReducesInside, atenInside;
  for (const auto& e : events) {
    if (e.value("ph", "") != "X") continue;
    const auto cat = e.value("cat", "");
    const auto name = e.value("name", "");
    const int pid = e.at("pid").get<int>();
    const double ts = e.at("ts").get<double>();
    const double dur = e.at("dur").get<double>();
    if (cat == "op" && name.rfind("aten::", 0) == 0) {
      ++atenOps[pid];
      if (insideStep(pid, ts, dur)) ++atenInside[pid];
    }
    if (cat == "collective" && name == "all_reduce") {
      ++allReduces[pid];
      if (insideStep(pid, ts, dur)) ++allReducesInside[pid];
    }
  }
  INFO("steps per rank: " << steps[0].size() << ", " << steps[1].size()
                          << "; aten ops: " << atenOps[0] << ", " << atenOps[1]
                          << "; all_reduce: " << allReduces[0] << ", " << allReduces[1]);
  for (int rank : {0, 1}) {
    CHECK(steps[rank].size() >= 3);  // N = 3 recorded steps (plus what history held)
    CHECK(atenOps[rank] > 0);
    CHECK(allReduces[rank] > 0);
    CHECK(allReducesInside[rank] == allReduces[rank]);
    CHECK(atenInside[rank] > 0);
  }
  std::set<int> named;
  for (const auto& e : events) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "process_name") {
      named.insert(e.at("pid").get<int>());
    }
  }
  CHECK(named == std::set<int>{0, 1});

  expectCleanExits(ranks, 120s);
}

TEST_CASE(
    "e2e: a real tp2 x pp2 x dp2 job of 8 CPU ranks trains like the unsharded model and its "
    "groups and coordinates and pipeline peers and all-reduces and bubble and MFU reach the "
    "collector") {
  DdpSetup setup = ddpSetup();
  setup.script = setup.script.substr(0, setup.script.rfind('/') + 1) + "par3d_train.py";
  setup.world = 8;
  TempDir dir;
  auto [cs, as, collector, agent] = startOneNode(dir);

  // The same model unsharded in one process: the job must train exactly like it.
  const int steps = 8;
  const std::vector<std::string> args{
      "--steps", std::to_string(steps), "--microbatches", "2", "--batch", "8"};
  std::vector<std::string> refArgv{"/usr/bin/python3", setup.script, "--reference"};
  refArgv.insert(refArgv.end(), args.begin(), args.end());
  Process reference("reference", refArgv, dir / "reference.log", {"OMP_NUM_THREADS=1"});
  const std::string job = "e2e-3d";
  auto ranks = startDdpRanks(dir, setup, job, as.endpoint, args);
  expectCleanExits(ranks, 240s);
  REQUIRE(reference.wait(60s) == std::optional<int>(0));
  const std::string refLog = reference.log();
  const auto lossAt = refLog.find("done, loss ");
  REQUIRE(lossAt != std::string::npos);
  const std::string refLoss = refLog.substr(lossAt + 11, refLog.find('\n', lossAt) - (lossAt + 11));
  for (int r = 4; r < 8; ++r) {  // stage 1 ranks hold the loss
    INFO(ranks[r]->log() << "\nreference: " << refLog);
    CHECK(ranks[r]->log().find(": done, loss " + refLoss) != std::string::npos);
  }

  const bool all = waitFor(
      [&, port = cs.httpPort] { return jobStepRows(port, job) >= int64_t{8} * steps; }, 30s, 100ms);
  INFO("step rows: " << jobStepRows(cs.httpPort, job));
  REQUIRE(all);

  // The layout and every rank's coordinates (rank = pp * 4 + dp * 2 + tp), from the groups
  // the ranks declared: 4 groups of each kind with the script's members.
  const auto t = httpGet(cs.httpPort, "/api/v1/jobs/" + job + "/topology", 10s).json();
  INFO("topology: " << t.dump());
  CHECK(t["declared"] == true);
  CHECK(t["ranks_declared"] == 8);
  CHECK(t["layout"] == nlohmann::json{{"pp", 2}, {"dp", 2}, {"tp", 2}});
  CHECK(t["problems"].empty());
  REQUIRE(t["ranks"].size() == 8);
  for (int r = 0; r < 8; ++r) {
    CHECK(t["ranks"][r]["coords"] ==
          nlohmann::json{{"pp", r / 4}, {"dp", (r / 2) % 2}, {"tp", r % 2}});
  }
  std::set<std::pair<std::string, std::vector<int>>> groups;
  std::map<std::pair<std::string, int>, std::string> nameOf;  // (kind, rank) -> group name
  for (const auto& g : t["groups"]) {
    const auto kind = g["kind"].get<std::string>();
    groups.insert({kind, g["ranks"].get<std::vector<int>>()});
    for (int r : g["ranks"]) nameOf[{kind, r}] = g["name"].get<std::string>();
  }
  const std::set<std::pair<std::string, std::vector<int>>> want{
      {"tp", {0, 1}}, {"tp", {2, 3}}, {"tp", {4, 5}}, {"tp", {6, 7}},
      {"dp", {0, 2}}, {"dp", {1, 3}}, {"dp", {4, 6}}, {"dp", {5, 7}},
      {"pp", {0, 4}}, {"pp", {1, 5}}, {"pp", {2, 6}}, {"pp", {3, 7}}};
  CHECK(groups == want);

  // Every step of every rank: both microbatches' activations (8 x 32 floats each) sent to the
  // other stage's rank of the same replica and tp index, gradients back, in its pp group; the
  // tp all-reduces (forward, and on stage 1 backward too) and one dp all-reduce; a bubble; MFU
  // from the FLOPs the script stated.
  const auto rows = stepRows(cs.httpPort, job, true);
  REQUIRE(rows.size() == size_t{8} * steps);
  int good = 0;
  for (const auto& row : rows) {
    const int rank = row.at("rank").get<int>();
    INFO("row: " << row.dump());
    const int peer = rank < 4 ? rank + 4 : rank - 4;
    std::set<std::string> ops;
    for (const auto& p : row.at("p2p")) {
      CHECK(p.at("peer") == peer);
      CHECK(p.at("group") == nameOf[{"pp", rank}]);
      CHECK(p.at("count") == 2);
      CHECK(p.at("bytes") == 2 * 8 * 32 * 4);
      ops.insert(p.at("op").get<std::string>());
    }
    CHECK(ops == std::set<std::string>{"send", "recv"});
    uint64_t tpCalls = 0;
    uint64_t dpCalls = 0;
    for (const auto& c : row.at("collectives")) {
      if (c.at("op") != "all_reduce") continue;
      if (c.at("group") == nameOf[{"tp", rank}]) tpCalls += c.at("count").get<uint64_t>();
      if (c.at("group") == nameOf[{"dp", rank}]) dpCalls += c.at("count").get<uint64_t>();
    }
    CHECK(tpCalls == (rank < 4 ? 2u : 4u));
    CHECK(dpCalls == 1u);
    REQUIRE(row.at("bubble_ratio").is_number());
    CHECK(row.at("bubble_ratio").get<double>() >= 0.0);
    CHECK(row.at("bubble_ratio").get<double>() <= 1.0);
    // 2 x 3 x (32 x 64 + 64 x 32) FLOPs per sample and stage, / tp 2, x 8 samples x 2
    // microbatches; the stated peak is 1e11 FLOP/s.
    const double flops = 2.0 * 3 * (32 * 64 + 64 * 32) / 2 * 8 * 2;
    REQUIRE(row.at("mfu").is_number());
    CHECK(row.at("mfu").get<double>() ==
          Approx(flops * 1e9 / (row.at("duration_ns").get<double>() * 1e11)));
    if (!row.at("p2p").empty() && tpCalls > 0 && dpCalls == 1) ++good;
  }
  CHECK(good == 8 * steps);

  // The stages as the /parallel route and /metrics give them.
  const auto p =
      httpGet(cs.httpPort,
              "/api/v1/jobs/" + job + "/parallel?from=0&to=" + std::to_string(steps - 1), 10s)
          .json();
  REQUIRE(p["stages"].size() == 2);
  CHECK(p["stages"][0]["ranks"] == nlohmann::json::array({0, 1, 2, 3}));
  CHECK(p["stages"][1]["ranks"] == nlohmann::json::array({4, 5, 6, 7}));
  for (const auto& stage : p["stages"]) {
    double sum = 0;
    for (const auto& v : stage["bubble_ratio"]) {
      CHECK(v.is_number());
      sum += v.is_number() ? v.get<double>() : 0.0;
    }
    std::fprintf(stderr, "e2e: stage %d bubble, mean over %d steps: %.3f\n",
                 stage["stage"].get<int>(), steps, sum / steps);
  }
  const std::string metrics = httpGet(cs.httpPort, "/metrics", 10s).body;
  for (int stage = 0; stage < 2; ++stage) {
    CHECK(metrics.find("trainscope_stage_bubble_ratio{training_job=\"" + job + "\",stage=\"" +
                       std::to_string(stage) + "\"}") != std::string::npos);
  }
  for (int r = 0; r < 8; ++r) {
    CHECK(metrics.find("trainscope_step_last_mfu{training_job=\"" + job + "\",rank=\"" +
                       std::to_string(r) + "\"}") != std::string::npos);
  }
}
