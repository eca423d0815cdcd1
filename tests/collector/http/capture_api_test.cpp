// The capture routes of the JSON API through Api::handle, backed by a real CaptureManager over
// an in-memory SQLite store: POST answers 201 with Location and the capture JSON, refusals keep
// their status, a running capture's trace is 409, a failed one's 404, a finished trace comes as
// gzip when the client takes it and plain JSON otherwise; no capture service means 503.
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "collector/capture/manager.h"
#include "collector/collector.h"
#include "collector/http/api.h"
#include "tests/collector/capture/capture_fixture.h"

using namespace trainscope;
using nlohmann::json;

namespace {

std::string header(const http::ApiResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "";
}

struct ApiHarness {
  testing::TempDir dir;
  std::unique_ptr<storage::Store> store = testing::seededStore();
  ManualClock clock{1'700'000'000'000'000'000};
  std::unique_ptr<capture::CaptureManager> manager;
  std::unique_ptr<http::Api> api;

  ApiHarness() {
    capture::CaptureManagerOptions o;
    o.dir = dir.sub("captures");
    o.describe = http::captureJson;
    manager = std::make_unique<capture::CaptureManager>(
        o, *store, clock, [](const std::string&, const wire::Command&) { return Status::ok(); });
    http::HttpOptions ho;
    ho.captures = collector::captureService(*manager);
    api = std::make_unique<http::Api>(ho, *store, clock);
  }
};

// A file response's bytes: files come as a stream, read here to the end.
std::string content(const http::ApiResponse& r) {
  if (!r.stream) return r.body;
  auto all = readAll(*r.stream, 1ull << 30);
  REQUIRE(all);
  return *all;
}

}  // namespace

TEST_CASE("POST starts a capture: 201, Location, the capture JSON") {
  ApiHarness h;
  auto r = h.api->handle("POST", "/api/v1/jobs/j/captures",
                         R"({"ranks":"0,2","steps":3,"history":2,"reason":"look"})");
  INFO(r.body);
  REQUIRE(r.status == 201);
  json c = json::parse(r.body);
  const std::string id = c["id"];
  CHECK(header(r, "Location") == "/api/v1/captures/" + id);
  CHECK(c["job"] == "j");
  CHECK(c["kind"] == "trace");
  CHECK(c["state"] == "running");
  CHECK(c["reason"] == "look");
  CHECK(c["anomaly_id"].is_null());
  CHECK(c["ranks"] == json::array({0, 2}));
  CHECK(c["start_step"] == 21);  // latest 10 + 1 s of 100 ms steps + 1
  CHECK(c["steps"] == 3);
  CHECK(c["history"] == 2);
  CHECK(c["max_bytes"] == 64ull << 20);
  CHECK(c["finished_ns"].is_null());
  CHECK(c["trace_bytes"].is_null());
  CHECK(c["summary"] == "0 of 2 ranks done");
  REQUIRE(c["rank_status"].size() == 2);
  CHECK(c["rank_status"][1] == json{{"rank", 2},
                                    {"node", "n1"},
                                    {"state", "pending"},
                                    {"detail", ""},
                                    {"bytes", 0},
                                    {"truncated", false},
                                    {"first_step", -1},
                                    {"last_step", -1},
                                    {"updated_ns", 1'700'000'000'000'000'000}});

  auto one = h.api->handle("GET", "/api/v1/captures/" + id);
  CHECK(one.status == 200);
  CHECK(json::parse(one.body)["id"] == id);
  auto list = h.api->handle("GET", "/api/v1/jobs/j/captures");
  CHECK(list.status == 200);
  CHECK(json::parse(list.body)["captures"].size() == 1);
}

TEST_CASE("refusals keep their status and message") {
  ApiHarness h;
  auto bad = h.api->handle("POST", "/api/v1/jobs/j/captures", "[1]");
  CHECK(bad.status == 400);
  CHECK(json::parse(bad.body)["error"] == "body: expected a JSON object, got array");
  CHECK(h.api->handle("POST", "/api/v1/jobs/j/captures", R"({"steps":0})").status == 400);
  CHECK(h.api->handle("POST", "/api/v1/jobs/j/captures", R"({"ranks":[9]})").status == 400);
  auto unknown = h.api->handle("POST", "/api/v1/jobs/nope/captures", "{}");
  CHECK(unknown.status == 404);
  auto passed = h.api->handle("POST", "/api/v1/jobs/j/captures", R"({"start_step":3})");
  CHECK(passed.status == 409);
  CHECK(json::parse(passed.body)["error"] == "start step 3 already passed: rank 0 is at step 10");
  REQUIRE(h.api->handle("POST", "/api/v1/jobs/j/captures", R"({"ranks":[1]})").status == 201);
  CHECK(h.api->handle("POST", "/api/v1/jobs/j/captures", R"({"ranks":"all"})").status == 409);
  CHECK(h.api->handle("GET", "/api/v1/captures/cap-0-0000").status == 404);
  CHECK(h.api->handle("GET", "/api/v1/jobs/nope/captures").status == 404);
  auto del = h.api->handle("DELETE", "/api/v1/jobs/j/captures");
  CHECK(del.status == 405);
  CHECK(header(del, "Allow") == "GET, POST");
  CHECK(h.api->handle("GET", "/api/v1/jobs/j/captures?x=1").status == 400);
}

TEST_CASE("trace: 409 while running, then gzip as stored or plain JSON; rank files likewise") {
  ApiHarness h;
  auto r = h.api->handle("POST", "/api/v1/jobs/j/captures", R"({"ranks":[0]})");
  REQUIRE(r.status == 201);
  const std::string id = json::parse(r.body)["id"];
  CHECK(h.api->handle("GET", "/api/v1/captures/" + id + "/trace").status == 409);
  CHECK(h.api->handle("GET", "/api/v1/captures/" + id + "/ranks/0").status == 409);
  CHECK(h.api->handle("GET", "/api/v1/captures/" + id + "/ranks/3").status == 404);

  const std::string file =
      testing::gzipJson(h.dir.sub("r0.json.gz"), testing::rankTrace(0, 5000.0, 8, 2));
  for (const auto& c : testing::chunksOf(id, 0, file, 1000)) h.manager->onCommandItem("n0", c);
  h.manager->tick(h.clock.nowNs());

  auto gz = h.api->handle("GET", "/api/v1/captures/" + id + "/trace", {}, true);
  REQUIRE(gz.status == 200);
  CHECK(header(gz, "Content-Encoding") == "gzip");
  REQUIRE(gz.stream);
  REQUIRE(gz.stream->size());  // stored bytes: a Content-Length
  const std::string gzBytes = content(gz);
  REQUIRE(gzBytes.size() > 2);
  CHECK(*gz.stream->size() == gzBytes.size());
  CHECK(static_cast<unsigned char>(gzBytes[0]) == 0x1f);
  CHECK(static_cast<unsigned char>(gzBytes[1]) == 0x8b);
  auto plain = h.api->handle("GET", "/api/v1/captures/" + id + "/trace", {}, false);
  REQUIRE(plain.status == 200);
  CHECK(header(plain, "Content-Encoding").empty());
  REQUIRE(plain.stream);
  CHECK_FALSE(plain.stream->size());  // decompressed on the fly: chunked
  json trace = json::parse(content(plain));
  CHECK(trace["trainscope"]["id"] == id);
  CHECK(trace["trainscope"]["state"] == "complete");
  CHECK(trace["traceEvents"].size() == 2 + 4);

  auto rank = h.api->handle("GET", "/api/v1/captures/" + id + "/ranks/0", {}, true);
  REQUIRE(rank.status == 200);
  CHECK(content(rank) == file);
  auto rankPlain = h.api->handle("GET", "/api/v1/captures/" + id + "/ranks/0");
  CHECK(json::parse(content(rankPlain))["traceEvents"].size() == 4);
  auto stored = json::parse(h.api->handle("GET", "/api/v1/captures/" + id).body);
  CHECK(stored["state"] == "complete");
  CHECK(stored["trace_bytes"] == gzBytes.size());
}

TEST_CASE("a gzip bomb from a probe fails its rank in the merge; the other rank is kept") {
  ApiHarness h;
  auto r = h.api->handle("POST", "/api/v1/jobs/j/captures", R"({"ranks":[0,1]})");
  REQUIRE(r.status == 201);
  const std::string id = json::parse(r.body)["id"];
  // Valid JSON of 48 MiB that gzip packs ~1,000x: a forged agent's "trace".
  std::string bomb = "{\"traceEvents\":[" + std::string(48u << 20, ' ') + "]}";
  const std::string bombGz = testing::gzipText(h.dir.sub("bomb.json.gz"), bomb);
  INFO("bomb: " << bombGz.size() << " bytes compressed");
  REQUIRE(bombGz.size() < (48u << 20) / 500);
  const std::string good =
      testing::gzipJson(h.dir.sub("r1.json.gz"), testing::rankTrace(1, 5000.0, 8, 2));
  for (const auto& c : testing::chunksOf(id, 0, bombGz, 1u << 20))
    h.manager->onCommandItem("n0", c);
  for (const auto& c : testing::chunksOf(id, 1, good, 1000)) h.manager->onCommandItem("n0", c);
  h.manager->tick(h.clock.nowNs());

  auto stored = json::parse(h.api->handle("GET", "/api/v1/captures/" + id).body);
  CHECK(stored["state"] == "partial");
  CHECK(stored["rank_status"][0]["state"] == "failed");
  CHECK_THAT(stored["rank_status"][0]["detail"].get<std::string>(),
             Catch::Matchers::Contains("refused as a likely gzip bomb"));
  CHECK(stored["rank_status"][1]["state"] == "done");
  json trace = json::parse(content(h.api->handle("GET", "/api/v1/captures/" + id + "/trace")));
  CHECK(trace["traceEvents"].size() == 2 + 4);
}

TEST_CASE("a failed capture's trace is 404") {
  ApiHarness h;
  auto r = h.api->handle("POST", "/api/v1/jobs/j/captures", R"({"kind":"stacks","ranks":[3]})");
  REQUIRE(r.status == 201);
  const std::string id = json::parse(r.body)["id"];
  h.manager->onCommandItem("n1", testing::statusOf(id, 3, "failed", "no python"));
  h.manager->tick(h.clock.nowNs());
  auto t = h.api->handle("GET", "/api/v1/captures/" + id + "/trace");
  CHECK(t.status == 404);
  auto rank = h.api->handle("GET", "/api/v1/captures/" + id + "/ranks/3");
  CHECK(rank.status == 404);
  CHECK_THAT(json::parse(rank.body)["error"].get<std::string>(),
             Catch::Matchers::Contains("no python"));
}

TEST_CASE("without a capture service POST is 503 and stored captures still list") {
  testing::TempDir dir;
  auto store = testing::seededStore();
  ManualClock clock{1};
  http::Api api(http::HttpOptions{}, *store, clock);
  auto r = api.handle("POST", "/api/v1/jobs/j/captures", "{}");
  CHECK(r.status == 503);
  CHECK(json::parse(r.body)["error"] == "captures are off");
  CHECK(api.handle("GET", "/api/v1/jobs/j/captures").status == 200);
}
