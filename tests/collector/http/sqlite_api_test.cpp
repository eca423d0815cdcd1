// The HTTP API against the real SQLite store: what ingest writes comes out of every route with
// the documented shape.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "collector/http/server.h"
#include "collector/storage/store.h"
#include "common/clock.h"
#include "tests/collector/http/test_client.h"
#include "tests/collector/storage/memory_store.h"

using nlohmann::json;
namespace storage = trainscope::storage;
namespace wire = trainscope::wire;

namespace {

constexpr int64_t kMs = 1'000'000;

wire::StepReport report(uint32_t rank, int64_t step, int64_t durationMs) {
  wire::StepReport r;
  r.set_job("llm/run 1");
  r.set_rank(rank);
  r.set_step(step);
  r.set_start_ns(1'000'000 * kMs + step * 200 * kMs);
  r.set_duration_ns(durationMs * kMs);
  r.set_end_ns(r.start_ns() + r.duration_ns());
  r.set_compute_ns(durationMs * kMs / 2);
  r.set_comm_ns(durationMs * kMs / 4);
  r.set_exposed_comm_ns(durationMs * kMs / 8);
  r.set_data_ns(kMs);
  r.set_records(12);
  auto* op = r.add_ops();
  op->set_name("aten::matmul");
  op->set_count(4);
  op->set_total_ns(durationMs * kMs / 3);
  op->set_max_ns(kMs);
  auto* c = r.add_collectives();
  c->set_op(wire::ALL_GATHER);
  c->set_group("tp");
  c->set_bytes(4096);
  c->set_count(1);
  c->set_total_ns(kMs);
  c->set_max_ns(kMs);
  c->set_bandwidth_bps(4096e3);
  return r;
}

}  // namespace

TEST_CASE("API over the SQLite store returns what was written", "[http][sqlite]") {
  auto opened = storage::testing::memoryStore();
  storage::Store& store = *opened;

  int64_t now = trainscope::wallNowNs();
  storage::WriteBatch b;
  b.receivedNs = now;
  for (uint32_t rank = 0; rank < 2; ++rank) {
    wire::RankInfo info;
    info.set_job("llm/run 1");
    info.set_rank(rank);
    info.set_world_size(2);
    info.set_local_rank(rank);
    info.set_host("gpu-host");
    info.set_pid(100 + rank);
    info.set_probe_version("0.1.0");
    info.set_node("node-a");
    b.ranks.push_back(info);
    for (int64_t step = 0; step < 3; ++step) b.steps.push_back(report(rank, step, 100 + rank * 10));
  }
  wire::RankGoodbye bye;
  bye.set_job("llm/run 1");
  bye.set_rank(1);
  bye.set_last_step(2);
  b.goodbyes.push_back(bye);
  storage::NodeUpdate node;
  node.node = "node-a";
  node.host = "gpu-host";
  node.agentVersion = "0.1.0";
  node.pid = 7;
  node.seenNs = now;
  node.offsetNs = 1234;
  node.rttNs = 5678;
  node.ranks = 2;
  node.hasClock = true;
  b.nodes.push_back(node);
  wire::HostSample host;
  host.set_node("node-a");
  host.set_time_ns(now);
  host.set_cpu_percent(12.5);
  host.set_cpu_count(4);
  host.set_mem_total_bytes(1 << 30);
  host.set_mem_available_bytes(1 << 29);
  b.hosts.push_back(host);
  REQUIRE(store.write(b).isOk());

  trainscope::http::HttpOptions o;
  o.port = 0;
  trainscope::http::HttpServer server(o, store);
  REQUIRE(server.start().isOk());
  auto get = [&](const std::string& target) {
    auto r = trainscope::testing::httpGet(server.port(), target);
    INFO(target << " -> " << r.body);
    REQUIRE(r.status == 200);
    return json::parse(r.body);
  };

  json jobs = get("/api/v1/jobs");
  REQUIRE(jobs["jobs"].size() == 1);
  CHECK(jobs["jobs"][0]["job"] == "llm/run 1");
  CHECK(jobs["jobs"][0]["world_size"] == 2);
  CHECK(jobs["jobs"][0]["latest_step"] == 2);
  CHECK(jobs["jobs"][0]["step_rows"] == 6);
  CHECK(jobs["jobs"][0]["ranks_ended"] == 1);
  CHECK(jobs["jobs"][0]["state"] == "running");

  json ranks = get("/api/v1/jobs/llm%2Frun%201/ranks");
  REQUIRE(ranks["ranks"].size() == 2);
  CHECK(ranks["ranks"][1]["ended"] == true);
  CHECK(ranks["ranks"][1]["ended_step"] == 2);
  CHECK(ranks["ranks"][0]["node"] == "node-a");

  json steps = get("/api/v1/jobs/llm%2Frun%201/steps?rank=1&from=1&detail=1");
  REQUIRE(steps["steps"].size() == 2);
  CHECK(steps["steps"][0]["step"] == 1);
  CHECK(steps["steps"][0]["duration_ns"] == 110 * kMs);
  CHECK(steps["steps"][0]["ops"][0]["name"] == "aten::matmul");
  CHECK(steps["steps"][0]["collectives"][0]["op"] == "all_gather");
  CHECK(steps["truncated"] == false);
  CHECK(get("/api/v1/jobs/llm%2Frun%201/steps?limit=5")["truncated"] == true);

  json summary = get("/api/v1/jobs/llm%2Frun%201/summary");
  REQUIRE(summary["steps"].size() == 3);
  CHECK(summary["steps"][0]["ranks"] == 2);
  CHECK(summary["steps"][0]["min_ns"] == 100 * kMs);
  CHECK(summary["steps"][0]["max_ns"] == 110 * kMs);
  CHECK(summary["steps"][0]["slowest_rank"] == 1);

  json nodes = get("/api/v1/nodes");
  REQUIRE(nodes["nodes"].size() == 1);
  CHECK(nodes["nodes"][0]["clock_offset_ns"] == 1234);
  CHECK(nodes["nodes"][0]["latest_host"]["cpu_percent"] == 12.5);

  auto missing = trainscope::testing::httpGet(server.port(), "/api/v1/jobs/other/steps");
  CHECK(missing.status == 404);
  server.stop();
}

TEST_CASE("API over the SQLite store serves a node's GPUs, each rank's GPU and the GPU metrics",
          "[http][sqlite]") {
  auto opened = storage::testing::memoryStore();
  storage::Store& store = *opened;
  const std::string uuid = "GPU-11111111-2222-3333-4444-555555555555";
  const int64_t now = trainscope::wallNowNs();
  storage::WriteBatch b;
  b.receivedNs = now;
  for (uint32_t rank = 0; rank < 2; ++rank) {
    wire::RankInfo info;
    info.set_job("j");
    info.set_rank(rank);
    info.set_world_size(2);
    info.set_node("node-a");
    if (rank == 1) info.set_gpu_uuid(uuid);
    b.ranks.push_back(info);
  }
  b.steps.push_back(report(0, 0, 100));
  b.steps.back().set_job("j");
  for (int i = 0; i < 3; ++i) {
    wire::HostSample host;
    host.set_node("node-a");
    host.set_time_ns(now - static_cast<int64_t>(2 - i) * 1000 * kMs);
    auto* g = host.add_gpus();
    g->set_index(1);
    g->set_uuid(uuid);
    g->set_name("H200");
    g->set_present(wire::GPU_CLOCKS | wire::GPU_TEMPERATURE | wire::GPU_CLOCK_EVENTS |
                   wire::GPU_POWER | wire::GPU_THROTTLE_TIME);
    g->set_sm_clock_mhz(1100 + i);
    g->set_temperature_c(90);
    g->set_power_mw(450'500);
    g->set_clock_event_reasons(0x40 | 0x1);
    g->set_throttle_ns(2'500'000'000);
    if (i == 1) {
      auto* e = host.add_gpu_events();
      e->set_index(1);
      e->set_uuid(uuid);
      e->set_kind(wire::GPU_EVENT_XID);
      e->set_code(79);
      e->set_time_ns(host.time_ns());
    }
    b.hosts.push_back(host);
  }
  storage::NodeUpdate node;
  node.node = "node-a";
  node.seenNs = now;
  b.nodes.push_back(node);
  REQUIRE(store.write(b).isOk());

  trainscope::http::HttpOptions o;
  o.port = 0;
  trainscope::http::HttpServer server(o, store);
  REQUIRE(server.start().isOk());
  auto get = [&](const std::string& target) {
    auto r = trainscope::testing::httpGet(server.port(), target);
    INFO(target << " -> " << r.body);
    REQUIRE(r.status == 200);
    return json::parse(r.body);
  };

  json gpus = get("/api/v1/nodes/node-a/gpus");
  CHECK(gpus["node"] == "node-a");
  REQUIRE(gpus["samples"].size() == 3);
  const json& g = gpus["samples"][2]["gpus"][0];
  CHECK(g["uuid"] == uuid);
  CHECK(g["sm_clock_mhz"] == 1102);
  CHECK(g["power_watts"] == 450.5);
  CHECK(g["throttling"] == true);
  CHECK(g["clock_event_reasons"] == json::array({"gpu_idle", "hw_thermal_slowdown"}));
  CHECK(g["throttle_seconds"] == 2.5);
  CHECK(g["utilization_pct"].is_null());  // not in `present`: not given
  CHECK(g["ecc_uncorrected"].is_null());
  REQUIRE(gpus["events"].size() == 1);
  CHECK(gpus["events"][0]["kind"] == "xid");
  CHECK(gpus["events"][0]["code"] == 79);
  CHECK(get("/api/v1/nodes/node-a/gpus?limit=1")["samples"].size() == 1);
  CHECK(get("/api/v1/nodes/node-a/gpus?to=" + std::to_string(now - 1500 * kMs))["samples"].size() ==
        1);
  auto unknown = trainscope::testing::httpGet(server.port(), "/api/v1/nodes/nope/gpus");
  CHECK(unknown.status == 404);
  auto bad = trainscope::testing::httpGet(server.port(), "/api/v1/nodes/node-a/gpus?limit=0");
  CHECK(bad.status == 400);

  json ranks = get("/api/v1/jobs/j/ranks");
  REQUIRE(ranks["ranks"].size() == 2);
  CHECK(ranks["ranks"][0]["gpu_uuid"].is_null());
  CHECK(ranks["ranks"][0]["gpu"].is_null());
  CHECK(ranks["ranks"][1]["gpu_uuid"] == uuid);
  CHECK(ranks["ranks"][1]["gpu"]["sm_clock_mhz"] == 1102);
  CHECK(ranks["ranks"][1]["gpu"]["throttling"] == true);

  json nodes = get("/api/v1/nodes");
  CHECK(nodes["nodes"][0]["latest_host"]["gpus"][0]["temperature_c"] == 90);

  auto metrics = trainscope::testing::httpGet(server.port(), "/metrics");
  REQUIRE(metrics.status == 200);
  const std::string labels = "{node=\"node-a\",gpu=\"1\",uuid=\"" + uuid + "\"}";
  CHECK(metrics.body.find("trainscope_gpu_temperature_celsius" + labels + " 90") !=
        std::string::npos);
  CHECK(metrics.body.find("trainscope_gpu_sm_clock_hertz" + labels + " 1.102e+09") !=
        std::string::npos);
  CHECK(metrics.body.find("trainscope_gpu_throttled" + labels + " 1") != std::string::npos);
  CHECK(metrics.body.find("trainscope_gpu_throttle_seconds_total" + labels + " 2.5") !=
        std::string::npos);
  CHECK(metrics.body.find("trainscope_gpu_utilization_ratio{") == std::string::npos);
  CHECK(metrics.body.find("trainscope_gpu_lost" + labels + " 0") != std::string::npos);
  server.stop();
}
