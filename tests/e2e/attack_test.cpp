// Hostile input to a running collector, as an attacker on the network sends it (issue 33):
// JSON nested 100,000 deep in a capture request and in one event of an imported rank file
// (which crashed the collector, and every restart after it), a read under a rebound DNS
// name, and a forged hello that shrank a running job's world size so that its ranks' reports
// were refused (and acked all the same). Each request is bounded and goes to 127.0.0.1 only. The
// collector must answer each with a refusal or a failed rank naming the reason, stay up, and come
// up again after a restart.
#include <zlib.h>

#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include <google/protobuf/util/delimited_message_util.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "schema/wire.h"
#include "tests/e2e/harness.h"

using namespace trainscope::e2e;
using nlohmann::json;

namespace {

const std::string kDeep = std::string(100000, '[') + std::string(100000, ']');

std::string gzipOf(const std::string& text) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, text.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

uint64_t crcOf(const std::string& bytes) {
  return crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size()));
}

// steps.pb naming rank 0 of a one-rank job.
std::string stepsFile(const std::string& job) {
  trainscope::wire::Envelope env;
  env.set_schema_version(trainscope::wire::kSchemaVersion);
  auto* info = env.mutable_rank_hello()->mutable_rank();
  info->set_job(job);
  info->set_rank(0);
  info->set_world_size(1);
  info->set_host("h");
  std::ostringstream out;
  REQUIRE(google::protobuf::util::SerializeDelimitedToOstream(env, &out));
  return out.str();
}

// Imports `job` with steps.pb and `rankFile` as rank 0's timeline: the capture's id.
std::string importWith(uint16_t port, const std::string& job, const std::string& rankFile) {
  auto begun = httpPost(port, "/api/v1/jobs/" + job + "/imports", "{}");
  REQUIRE(begun.status == 201);
  const std::string base = "/api/v1/imports/" + begun.json()["id"].get<std::string>();
  json files = json::array();
  for (const auto& [name, bytes] : {std::pair<std::string, std::string>{"steps.pb", stepsFile(job)},
                                    {"rank-0.json.gz", rankFile}}) {
    std::string target = base;
    target += "/files/";
    target += name;
    target += "?offset=0";
    auto put = httpRequest(port, "PUT", target, bytes);
    INFO(put.body);
    REQUIRE(put.status / 100 == 2);
    files.push_back({{"name", name}, {"bytes", bytes.size()}, {"crc32", crcOf(bytes)}});
  }
  auto committed = httpPost(port, base + "/commit", json{{"files", files}}.dump());
  INFO(committed.body);
  REQUIRE(committed.status == 201);
  return committed.json()["capture"].get<std::string>();
}

}  // namespace

TEST_CASE("e2e: hostile requests are refused and the collector stays up across a restart") {
  TempDir dir;
  CollectorSpec cs;
  cs.dataDir = dir / "data";
  cs.ingestPort = freePort();
  cs.httpPort = freePort();
  auto collector = startCollector(dir, cs);
  const uint16_t port = cs.httpPort;

  // 1. A capture request nested 100,000 deep, whole and in a field (no job needed).
  for (const std::string& body : {kDeep, "{\"kind\":" + kDeep + "}", "{\"ranks\":" + kDeep + "}"}) {
    auto r = httpPost(port, "/api/v1/jobs/nojob/captures", body);
    INFO(r.body.substr(0, 300));
    CHECK(r.status == 400);
    CHECK(r.body.find("nested deeper than") != std::string::npos);
  }
  REQUIRE(collector->running());

  // 2. An import whose rank file holds one event with a 100,000-deep value: its rank fails,
  // saying why; the collector merges on.
  const std::string hostile =
      gzipOf(R"({"traceEvents":[{"name":"x","ph":"i","ts":1,"pid":0,"tid":0,"args":{"v":)" + kDeep +
             "}}]}");
  const std::string cap = importWith(port, "deepjob", hostile);
  json row;
  REQUIRE(waitFor(
      [&] {
        auto r = httpGet(port, "/api/v1/captures/" + cap);
        if (r.status != 200) return false;
        row = r.json();
        return row["state"] != "running";
      },
      20s));
  CHECK(row["state"] == "failed");
  INFO(row.dump());
  REQUIRE(row["rank_status"].size() == 1);
  CHECK(row["rank_status"][0]["detail"].get<std::string>().find("nested deeper than 512") !=
        std::string::npos);
  REQUIRE(collector->running());

  // 3. DNS rebinding: a read under a name the collector does not answer to.
  auto rebound = httpRequest(port, "GET", "/api/v1/jobs", "",
                             {{"Host", "evil.example:" + std::to_string(port)}});
  CHECK(rebound.status == 403);
  CHECK(httpGet(port, "/api/v1/jobs").status == 200);

  // A restart finds nothing to crash on.
  CHECK(collector->stop() == 0);
  collector = startCollector(dir, cs, "collector-restarted");
  CHECK(waitFor([&] { return httpGet(port, "/healthz").status == 200; }, 5s));
  std::this_thread::sleep_for(2s);  // recovery and a tick or two
  CHECK(collector->running());
  CHECK(httpGet(port, "/api/v1/captures/" + cap).json()["state"] == "failed");
}

TEST_CASE("e2e: a forged hello flood cannot shrink a running job and its reports all arrive") {
  // Issue 33 item 2: a fake agent sending RankHello{job, rank 0, world_size 1} every 100 ms
  // made a 4-rank job lose 240 of 600 reports, while the simulator saw all 600 acked.
  TempDir dir;
  OneNode one = startOneNode(dir);
  auto sim = startSim(dir, {"--agent", one.as.endpoint, "--job", "victim", "--ranks", "4",
                            "--steps", "150", "--step-ms", "30", "--quiet"});
  REQUIRE(waitFor([&] { return jobStepRows(one.cs.httpPort, "victim") > 0; }, 30s, 50ms));
  {
    zmq::context_t ctx;
    zmq::socket_t forger(ctx, zmq::socket_type::dealer);
    forger.set(zmq::sockopt::linger, 0);
    forger.connect(one.cs.ingest());
    trainscope::wire::Envelope hello;
    hello.set_schema_version(trainscope::wire::kSchemaVersion);
    hello.mutable_agent_hello()->set_node("forger");
    forger.send(zmq::buffer(trainscope::wire::encode(hello)), zmq::send_flags::none);
    for (uint64_t seq = 1; seq <= 30 && sim->running(); ++seq) {
      trainscope::wire::Envelope env;
      env.set_schema_version(trainscope::wire::kSchemaVersion);
      env.mutable_batch()->set_seq(seq);
      auto* info = env.mutable_batch()->add_items()->mutable_rank_hello()->mutable_rank();
      info->set_job("victim");
      info->set_rank(0);
      info->set_world_size(1);
      info->set_node("forger");
      forger.send(zmq::buffer(trainscope::wire::encode(env)), zmq::send_flags::none);
      std::this_thread::sleep_for(100ms);
    }
  }
  const auto rc = sim->wait(60s);
  INFO("simtrain log:\n" << sim->logTail());
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
  waitFor([&] { return jobStepRows(one.cs.httpPort, "victim") == 600; }, 30s, 100ms);
  CHECK(jobStepRows(one.cs.httpPort, "victim") == 600);
  auto ranks = httpGet(one.cs.httpPort, "/api/v1/jobs/victim/ranks");
  REQUIRE(ranks.status == 200);
  const auto list = ranks.json().at("ranks");
  CHECK(list.size() == 4);
  for (const auto& r : list) CHECK(r.value("world_size", 0) == 4);
  auto metrics = httpGet(one.cs.httpPort, "/metrics");
  CHECK(metrics.body.find("world_size_conflict") != std::string::npos);
}
