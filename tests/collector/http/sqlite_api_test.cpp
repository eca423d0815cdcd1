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
