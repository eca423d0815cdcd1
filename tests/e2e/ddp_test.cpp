// Whole-system run with real PyTorch: two CPU ranks of DistributedDataParallel (gloo) report
// through the probe's Python package; their step rows must separate compute from comm.
#include <cstdlib>
#include <set>

#include <catch2/catch.hpp>

#include "tests/e2e/harness.h"

using namespace trainscope::e2e;

TEST_CASE(
    "e2e: real 2-rank DDP training on CPU reports steps with compute and communication separated") {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    std::fprintf(stderr, "e2e: skipped: /usr/bin/python3 cannot import torch\n");
    std::exit(77);
  }
  const std::string lib = binaryFromEnv("TRAINSCOPE_PROBE_LIB");  // exists check only
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
        std::vector<std::string>{"/usr/bin/python3", script, "--steps", "30"},
        dir / ("ddp-rank" + std::to_string(r) + ".log"),
        std::vector<std::string>{"RANK=" + std::to_string(r), "LOCAL_RANK=" + std::to_string(r),
                                 "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                                 "MASTER_PORT=" + masterPort, "TRAINSCOPE_JOB=" + job,
                                 "TRAINSCOPE_AGENT=" + as.endpoint, "TRAINSCOPE_PROBE_LIB=" + lib,
                                 "PYTHONPATH=" + pythonPath, "OMP_NUM_THREADS=1"}));
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
}
