// GPU health end to end, against a fake NVML (tests/agent/fake_nvml/, fixture e2e_gpus.txt): an
// agent whose node has four GPUs, GPU 3 throttling from its third second and raising Xid 79 at
// its eighth; a simulated 4-rank job, one rank per GPU (each rank a simtrain process of its own
// with TRAINSCOPE_GPU_UUID naming its GPU), rank 3 slowed from step 150. The collector must
// serve the GPU samples and the Xid (GET /api/v1/nodes/node0/gpus), each rank's GPU with its
// throttling (GET .../ranks), the GPU gauges on /metrics, a gpu_fault naming rank 3 only, and
// rank 3's straggler with its GPU as the cause.
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/e2e/harness.h"

using namespace trainscope::e2e;
using nlohmann::json;

namespace {

std::string uuidOf(int gpu) {
  return "GPU-e2e00000-0000-0000-0000-00000000000" + std::to_string(gpu);
}

json get(uint16_t port, const std::string& target) {
  auto r = httpGet(port, target, 5s);
  if (r.status != 200) return json();
  auto j = json::parse(r.body, nullptr, false);
  return j.is_discarded() ? json() : j;
}

}  // namespace

TEST_CASE(
    "e2e: GPU samples from a fake NVML reach the API and /metrics; a gpu_fault and a "
    "throttle-caused straggler name the rank on the faulty GPU") {
  const char* fake = std::getenv("TRAINSCOPE_FAKE_NVML_LIB");
  const char* fixtures = std::getenv("TRAINSCOPE_FAKE_NVML_FIXTURES");
  REQUIRE(fake != nullptr);
  REQUIRE(fixtures != nullptr);
  // The agent (started below) inherits these; the collector and the ranks ignore them.
  ::setenv("TRAINSCOPE_NVML_LIB", fake, 1);
  ::setenv("TRAINSCOPE_FAKE_NVML", (std::string(fixtures) + "/e2e_gpus.txt").c_str(), 1);
  TempDir dir;
  OneNode n = startOneNode(dir);
  ::unsetenv("TRAINSCOPE_NVML_LIB");
  ::unsetenv("TRAINSCOPE_FAKE_NVML");
  const uint16_t http = n.cs.httpPort;

  const std::string job = "gpu-job";
  std::vector<std::unique_ptr<Process>> sims;
  for (int r = 0; r < 4; ++r) {
    std::vector<std::string> argv{binaryFromEnv("TRAINSCOPE_SIMTRAIN_BIN"),
                                  "--agent",
                                  n.as.endpoint,
                                  "--job",
                                  job,
                                  "--first-rank",
                                  std::to_string(r),
                                  "--ranks",
                                  "1",
                                  "--world-size",
                                  "4",
                                  "--steps",
                                  "400",
                                  "--step-ms",
                                  "40",
                                  "--seed",
                                  "7",
                                  "--inject",
                                  "straggler:rank=3,from=150,factor=1.5",
                                  "--quiet"};
    const std::string name = "sim-rank" + std::to_string(r);
    sims.push_back(
        std::make_unique<Process>(name, argv, dir / (name + ".log"),
                                  std::vector<std::string>{"TRAINSCOPE_GPU_UUID=" + uuidOf(r)}));
  }

  // The node's GPU samples: four GPUs, GPU 3 throttling at 1100 MHz, and the Xid.
  json gpus;
  const bool sampled = waitFor(
      [&] {
        gpus = get(http, "/api/v1/nodes/node0/gpus");
        if (!gpus.is_object() || gpus["samples"].empty() || gpus["events"].empty()) return false;
        const json& last = gpus["samples"].back()["gpus"];
        return last.size() == 4 && last[3]["throttling"] == true;
      },
      40s, 250ms);
  INFO("gpus: " << gpus.dump().substr(0, 3000));
  INFO("agent log:\n" << n.agent->logTail());
  REQUIRE(sampled);
  const json& last = gpus["samples"].back()["gpus"];
  CHECK(last[0]["uuid"] == uuidOf(0));
  CHECK(last[0]["throttling"] == false);
  CHECK(last[0]["sm_clock_mhz"] == 1980);
  CHECK(last[0]["power_watts"] == 600.0);
  CHECK(last[3]["sm_clock_mhz"] == 1100);
  CHECK(last[3]["temperature_c"] == 91);
  CHECK(last[3]["clock_event_reasons"] == json::array({"hw_thermal_slowdown"}));
  CHECK(last[3]["throttle_seconds"].get<double>() > 0);
  CHECK(gpus["events"][0]["kind"] == "xid");
  CHECK(gpus["events"][0]["code"] == 79);
  CHECK(gpus["events"][0]["uuid"] == uuidOf(3));

  // The anomalies: a gpu_fault naming rank 3 alone, and rank 3's straggler caused by its GPU.
  json anomalies;
  json fault;
  json straggler;
  const bool detected = waitFor(
      [&] {
        anomalies = get(http, "/api/v1/jobs/" + job + "/anomalies");
        if (!anomalies.is_object()) return false;
        for (const auto& a : anomalies["anomalies"]) {
          if (a["kind"] == "gpu_fault" && fault.is_null()) fault = a;
          if (a["kind"] == "straggler" && straggler.is_null()) straggler = a;
        }
        return !fault.is_null() && !straggler.is_null();
      },
      40s, 250ms);
  INFO("anomalies: " << anomalies.dump());
  INFO("collector log:\n" << n.collector->logTail());
  REQUIRE(detected);
  for (const auto& a : anomalies["anomalies"]) {
    if (a["kind"] != "gpu_fault") continue;
    CHECK(a["ranks"] == json::array({3}));
    CHECK(a["labels"]["gpu_uuid"] == uuidOf(3));
    CHECK(std::set<std::string>{"throttle", "xid"}.count(a["labels"]["cause"].get<std::string>()) ==
          1);
  }
  CHECK(straggler["ranks"] == json::array({3}));
  CHECK(std::set<std::string>{"gpu_throttle", "gpu_fault"}.count(
            straggler["labels"]["cause"].get<std::string>()) == 1);
  CHECK(straggler["labels"]["gpu_uuid"] == uuidOf(3));
  CHECK(straggler["evidence"]["gpu_sm_clock_mhz"] == 1100);

  // Each rank's GPU in the ranks listing, with its latest clock and throttling.
  json ranks = get(http, "/api/v1/jobs/" + job + "/ranks");
  INFO("ranks: " << ranks.dump());
  REQUIRE(ranks.is_object());
  REQUIRE(ranks["ranks"].size() == 4);
  for (const auto& r : ranks["ranks"]) {
    const int rank = r["rank"].get<int>();
    CHECK(r["gpu_uuid"] == uuidOf(rank));
    REQUIRE(r["gpu"].is_object());
    CHECK(r["gpu"]["throttling"] == (rank == 3));
  }

  // /metrics: the GPU gauges, labelled node, gpu and uuid.
  auto metrics = httpGet(http, "/metrics", 5s);
  REQUIRE(metrics.status == 200);
  const std::string labels3 = "{node=\"node0\",gpu=\"3\",uuid=\"" + uuidOf(3) + "\"}";
  CHECK(metrics.body.find("trainscope_gpu_temperature_celsius" + labels3 + " 91") !=
        std::string::npos);
  CHECK(metrics.body.find("trainscope_gpu_throttled" + labels3 + " 1") != std::string::npos);
  CHECK(metrics.body.find("trainscope_gpu_power_watts{node=\"node0\",gpu=\"0\"") !=
        std::string::npos);
  CHECK(metrics.body.find("trainscope_gpu_throttle_seconds_total" + labels3) != std::string::npos);

  for (auto& s : sims) s->stop(5s);
}
