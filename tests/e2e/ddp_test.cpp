// Whole-system run with real PyTorch: two CPU ranks of DistributedDataParallel (gloo) report
// through the probe's Python package; their step rows must separate compute from comm, and
// carry the ATen operators the torch integration (libtrainscope_torch.so) recorded.
#include <cstdlib>
#include <set>
#include <string>

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

}  // namespace

TEST_CASE(
    "e2e: real 2-rank DDP training on CPU reports steps with compute and communication separated") {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    std::fprintf(stderr, "e2e: skipped: /usr/bin/python3 cannot import torch\n");
    std::exit(77);
  }
  const std::string lib = binaryFromEnv("TRAINSCOPE_PROBE_LIB");  // exists check only
  const std::string torchLib = torchLibPath(lib);
  const char* src = std::getenv("TRAINSCOPE_SOURCE_ROOT");
  REQUIRE(src != nullptr);
  const std::string pythonPath = std::string(src) + "/agent/probe/python";
  const std::string script = std::string(src) + "/tests/e2e/ddp_train.py";

  TempDir dir;
  CollectorSpec cs;
  cs.dataDir = dir / "data";
  cs.ingestPort = freePort();
  cs.httpPort = freePort();
  auto collector = startCollector(dir, cs);
  const AgentSpec as{"node0", "ipc://" + (dir / "node0.sock"), dir / "spool-node0", cs.ingest()};
  auto agent = startAgent(dir, as, "agent-node0");

  const std::string job = "e2e-ddp";
  const std::string masterPort = std::to_string(freePort());
  std::vector<std::unique_ptr<Process>> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(std::make_unique<Process>(
        "ddp-rank" + std::to_string(r),
        std::vector<std::string>{"/usr/bin/python3", script, "--steps", "30",
                                 torchLib.empty() ? "--no-ops" : "--require-ops"},
        dir / ("ddp-rank" + std::to_string(r) + ".log"),
        std::vector<std::string>{"RANK=" + std::to_string(r), "LOCAL_RANK=" + std::to_string(r),
                                 "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                                 "MASTER_PORT=" + masterPort, "TRAINSCOPE_JOB=" + job,
                                 "TRAINSCOPE_AGENT=" + as.endpoint, "TRAINSCOPE_PROBE_LIB=" + lib,
                                 "TRAINSCOPE_TORCH_LIB=" + torchLib, "PYTHONPATH=" + pythonPath,
                                 "OMP_NUM_THREADS=1"}));
  }
  for (auto& p : ranks) {
    const auto rc = p->wait(90s);
    INFO(p->name() << " log:\n" << p->logTail());
    REQUIRE(rc.has_value());
    CHECK(*rc == 0);
  }

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
  const auto detail = httpGet(cs.httpPort, "/api/v1/jobs/" + urlEncode(job) +
                                               "/steps?limit=100000&detail=true", 30s);
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
