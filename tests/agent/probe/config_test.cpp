#include "agent/probe/config.h"

#include <catch2/catch.hpp>

#include <cstdlib>

#include "agent/options.h"
#include "common/agent_endpoint.h"

using trainscope::probe::resolveConfig;

namespace {
// Sets (or with nullptr unsets) the probe's environment variables for one test.
void env(const char* name, const char* value) {
  if (value == nullptr) {
    unsetenv(name);
  } else {
    setenv(name, value, 1);
  }
}
void clearEnv() {
  for (const char* n : {"TRAINSCOPE_AGENT", "TRAINSCOPE_JOB", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID",
                        "RANK", "WORLD_SIZE", "LOCAL_RANK", "TRAINSCOPE_BATCH_MS",
                        "TRAINSCOPE_BATCH_STEPS", "TRAINSCOPE_DEVICE", "TRAINSCOPE_GPU_UUID"}) {
    env(n, nullptr);
  }
}
}  // namespace

TEST_CASE("identity comes from the environment in the documented order") {
  clearEnv();
  env("SLURM_JOB_ID", "slurm-7");
  env("TORCHELASTIC_RUN_ID", "elastic-1");
  env("RANK", "3");
  env("WORLD_SIZE", "8");
  env("TRAINSCOPE_AGENT", "ipc:///tmp/x.sock");
  auto c = resolveConfig(nullptr);
  REQUIRE(c.isOk());
  CHECK(c->job == "slurm-7");
  CHECK(c->rank == 3);
  CHECK(c->worldSize == 8);
  CHECK(c->localRank == 3);  // defaults to the rank
  CHECK(c->endpoint == "ipc:///tmp/x.sock");
  env("TRAINSCOPE_JOB", "mine");
  env("LOCAL_RANK", "1");
  c = resolveConfig(nullptr);
  REQUIRE(c.isOk());
  CHECK(c->job == "mine");
  CHECK(c->localRank == 1);
  clearEnv();
}

TEST_CASE("defaults without environment: generated job, rank 0 of 1, default endpoint") {
  clearEnv();
  auto c = resolveConfig(nullptr);
  REQUIRE(c.isOk());
  CHECK(c->rank == 0);
  CHECK(c->worldSize == 1);
  // The node agent's socket when there is one, else the user's own agent's default
  // (common/agent_endpoint.h), never a shared name in /tmp.
  CHECK(c->endpoint == trainscope::defaultProbeEndpoint());
  CHECK(c->endpoint == trainscope::agent::AgentOptions().endpoint);
  CHECK(c->endpoint.rfind("ipc:///tmp/trainscope-agent.sock", 0) != 0);
  CHECK(c->job.find(std::to_string(c->pid)) != std::string::npos);
  CHECK(c->ringRecords == 16384);
  CHECK(c->flightSteps == 256);
  CHECK(c->flightMaxBytes == 64u << 20);
  CHECK(c->backlogReports == 4096);
  CHECK(c->topOps == 32);
  CHECK(c->connectAgent);
}

TEST_CASE("explicit config fields win over the environment") {
  clearEnv();
  env("RANK", "5");
  env("WORLD_SIZE", "6");
  ts_probe_config cfg;
  ts_config_init(&cfg);
  cfg.rank = 1;
  cfg.world_size = 2;
  cfg.job = "explicit";
  auto c = resolveConfig(&cfg);
  REQUIRE(c.isOk());
  CHECK(c->rank == 1);
  CHECK(c->worldSize == 2);
  CHECK(c->job == "explicit");
  clearEnv();
}

TEST_CASE("bad environment values are refused naming the variable") {
  clearEnv();
  env("RANK", "two");
  auto c = resolveConfig(nullptr);
  REQUIRE_FALSE(c.isOk());
  CHECK(c.message().find("RANK") != std::string::npos);
  env("RANK", "4");
  env("WORLD_SIZE", "4");
  c = resolveConfig(nullptr);
  REQUIRE_FALSE(c.isOk());
  CHECK(c.message().find("rank 4 must be less than world_size 4") != std::string::npos);
  env("RANK", nullptr);
  env("WORLD_SIZE", "0");
  c = resolveConfig(nullptr);
  REQUIRE_FALSE(c.isOk());
  CHECK(c.message().find("WORLD_SIZE") != std::string::npos);
  clearEnv();
}

TEST_CASE("probe batching comes from TRAINSCOPE_BATCH_MS and _STEPS, bad values named") {
  clearEnv();
  auto c = resolveConfig(nullptr);
  REQUIRE(c.isOk());
  CHECK(c->batchLatencyMs == 200);
  CHECK(c->batchSteps == 16);
  env("TRAINSCOPE_BATCH_MS", "0");
  env("TRAINSCOPE_BATCH_STEPS", "4");
  c = resolveConfig(nullptr);
  REQUIRE(c.isOk());
  CHECK(c->batchLatencyMs == 0);
  CHECK(c->batchSteps == 4);
  for (const char* bad : {"fast", "-5", "10001"}) {
    env("TRAINSCOPE_BATCH_MS", bad);
    c = resolveConfig(nullptr);
    REQUIRE_FALSE(c.isOk());
    CHECK(c.message().find("TRAINSCOPE_BATCH_MS") != std::string::npos);
  }
  env("TRAINSCOPE_BATCH_MS", nullptr);
  for (const char* bad : {"0", "257"}) {
    env("TRAINSCOPE_BATCH_STEPS", bad);
    c = resolveConfig(nullptr);
    REQUIRE_FALSE(c.isOk());
    CHECK(c.message().find("TRAINSCOPE_BATCH_STEPS") != std::string::npos);
  }
  clearEnv();
}

TEST_CASE("the rank's GPU comes from TRAINSCOPE_GPU_UUID, as NVML spells it") {
  clearEnv();
  auto c = resolveConfig(nullptr);
  REQUIRE(c.isOk());
  CHECK(c->gpuUuid.empty());
  env("TRAINSCOPE_GPU_UUID", "GPU-11111111-2222-3333-4444-555555555555");
  c = resolveConfig(nullptr);
  REQUIRE(c.isOk());
  CHECK(c->gpuUuid == "GPU-11111111-2222-3333-4444-555555555555");
  const std::string tooLong(97, 'a');
  for (const char* bad : {"GPU 1", "GPU-1;rm", tooLong.c_str()}) {
    env("TRAINSCOPE_GPU_UUID", bad);
    c = resolveConfig(nullptr);
    REQUIRE_FALSE(c.isOk());
    CHECK(c.message().find("TRAINSCOPE_GPU_UUID") != std::string::npos);
  }
  clearEnv();
}

TEST_CASE("the device the operators run on comes from TRAINSCOPE_DEVICE, a plain name") {
  clearEnv();
  auto c = resolveConfig(nullptr);
  REQUIRE(c.isOk());
  CHECK(c->device.empty());  // the host
  env("TRAINSCOPE_DEVICE", "cuda");
  c = resolveConfig(nullptr);
  REQUIRE(c.isOk());
  CHECK(c->device == "cuda");
  for (const char* bad : {"CUDA", "cuda:0", "a-very-long-device-name", "gpu 0"}) {
    env("TRAINSCOPE_DEVICE", bad);
    c = resolveConfig(nullptr);
    REQUIRE_FALSE(c.isOk());
    CHECK(c.message().find("TRAINSCOPE_DEVICE") != std::string::npos);
  }
  clearEnv();
}
