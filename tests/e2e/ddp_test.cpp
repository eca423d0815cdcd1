// Whole-system runs with real PyTorch: two CPU ranks of DistributedDataParallel (gloo) report
// through the probe's Python package (tests/e2e/ddp_train.py). Their step rows must separate
// compute from comm and carry the ATen operators the torch integration
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

// Starts the two ranks of `job` with ddp_train.py `args`, reporting to the agent at
// `endpoint`; `extraEnv` is added to each rank's environment.
std::vector<std::unique_ptr<Process>> startDdpRanks(const TempDir& dir, const DdpSetup& s,
                                                    const std::string& job,
                                                    const std::string& endpoint,
                                                    const std::vector<std::string>& args,
                                                    const std::vector<std::string>& extraEnv = {}) {
  const std::string masterPort = std::to_string(freePort());
  std::vector<std::unique_ptr<Process>> ranks;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> argv{"/usr/bin/python3", s.script};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env{"RANK=" + std::to_string(r),
                                 "LOCAL_RANK=" + std::to_string(r),
                                 "WORLD_SIZE=2",
                                 "MASTER_ADDR=127.0.0.1",
                                 "MASTER_PORT=" + masterPort,
                                 "TRAINSCOPE_JOB=" + job,
                                 "TRAINSCOPE_AGENT=" + endpoint,
                                 "TRAINSCOPE_PROBE_LIB=" + s.probeLib,
                                 "TRAINSCOPE_TORCH_LIB=" + s.torchLib,
                                 "PYTHONPATH=" + s.pythonPath,
                                 "OMP_NUM_THREADS=1"};
    env.insert(env.end(), extraEnv.begin(), extraEnv.end());
    // A sanitizer build's probe library needs the sanitizer runtime preloaded into python3.
    if (const char* preload = std::getenv("TRAINSCOPE_PYTHON_PRELOAD"); preload && *preload) {
      env.push_back(std::string("LD_PRELOAD=") + preload);
      env.push_back("ASAN_OPTIONS=detect_leaks=0");
    }
    ranks.push_back(std::make_unique<Process>("ddp-rank" + std::to_string(r), argv,
                                              dir / ("ddp-rank" + std::to_string(r) + ".log"),
                                              env));
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
  CollectorSpec cs;
  cs.dataDir = dir / "data";
  cs.ingestPort = freePort();
  cs.httpPort = freePort();
  auto collector = startCollector(dir, cs);
  const AgentSpec as{"node0", "ipc://" + (dir / "node0.sock"), dir / "spool-node0", cs.ingest()};
  auto agent = startAgent(dir, as, "agent-node0");

  const std::string job = "e2e-ddp";
  auto ranks = startDdpRanks(dir, setup, job, as.endpoint,
                             {"--steps", "30", torchLib.empty() ? "--no-ops" : "--require-ops"});
  expectCleanExits(ranks, 90s);

  // Every step of both ranks, each with compute and communication time.
  const bool all = waitFor([&] { return jobStepRows(cs.httpPort, job) >= 60; }, 20s, 100ms);
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
