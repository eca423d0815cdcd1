// The live WebSocket (/api/v1/live) against the real SQLite store: a snapshot on connect, a
// delta after new data is stored, and a fresh snapshot after the server restarts. Also the
// access token: requests that change something need "Authorization: Bearer TOKEN".
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "collector/http/server.h"
#include "collector/http/token.h"
#include "collector/storage/store.h"
#include "common/clock.h"
#include "tests/collector/http/fake_store.h"
#include "tests/collector/http/test_client.h"

using nlohmann::json;
using trainscope::http::HttpOptions;
using trainscope::http::HttpServer;
namespace storage = trainscope::storage;
namespace wire = trainscope::wire;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;

namespace {

constexpr int64_t kMs = 1'000'000;
const char* const kJob = "live job";

// A WebSocket client whose reads give up after a timeout. Test thread only.
class WsClient {
 public:
  explicit WsClient(uint16_t port) : ws_(ioc_) {
    beast::get_lowest_layer(ws_).connect(
        asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    ws_.handshake("127.0.0.1", "/api/v1/live");
  }

  // The next message as JSON, or nothing if none came within `timeout` or the stream failed.
  std::optional<json> read(std::chrono::milliseconds timeout) {
    std::optional<json> out;
    bool done = false;
    ws_.async_read(buffer_, [&](beast::error_code ec, size_t) {
      done = true;
      if (ec) {
        error_ = ec;
        return;
      }
      out = json::parse(beast::buffers_to_string(buffer_.data()));
      buffer_.consume(buffer_.size());
    });
    ioc_.restart();
    ioc_.run_for(timeout);
    if (!done) {
      beast::get_lowest_layer(ws_).close();  // the stream is unusable after a cancelled read
      ioc_.restart();
      ioc_.run_for(std::chrono::milliseconds(200));
    }
    return out;
  }

  beast::error_code error() const { return error_; }

 private:
  asio::io_context ioc_;
  websocket::stream<beast::tcp_stream> ws_;
  beast::flat_buffer buffer_;
  beast::error_code error_;
};

storage::WriteBatch steps(int64_t from, int64_t to) {
  storage::WriteBatch b;
  b.receivedNs = trainscope::wallNowNs();
  for (uint32_t rank = 0; rank < 2; ++rank) {
    wire::RankInfo info;
    info.set_job(kJob);
    info.set_rank(rank);
    info.set_world_size(2);
    info.set_host("host-a");
    info.set_node("node-a");
    info.set_pid(100 + rank);
    b.ranks.push_back(info);
    for (int64_t s = from; s <= to; ++s) {
      wire::StepReport r;
      r.set_job(kJob);
      r.set_rank(rank);
      r.set_step(s);
      r.set_start_ns(1'000'000 * kMs + s * 200 * kMs);
      r.set_duration_ns((100 + rank * 50) * kMs);
      r.set_end_ns(r.start_ns() + r.duration_ns());
      r.set_compute_ns(r.duration_ns() / 2);
      b.steps.push_back(r);
    }
  }
  return b;
}

// Reads messages until one satisfies `pred` or `timeout` passes.
std::optional<json> readUntil(WsClient& c, const std::function<bool(const json&)>& pred,
                              std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto m = c.read(left);
    if (!m) return std::nullopt;
    if (pred(*m)) return m;
  }
  return std::nullopt;
}

// An in-memory SQLite store holding steps 0..2 of two ranks.
std::unique_ptr<storage::Store> storeWithSteps() {
  storage::SqliteOptions so;
  so.path = ":memory:";
  auto opened = storage::openSqliteStore(so);
  REQUIRE(opened.isOk());
  REQUIRE((*opened)->write(steps(0, 2)).isOk());
  return std::move(*opened);
}

}  // namespace

TEST_CASE("live: snapshot on connect, delta after a write, snapshot again after restart",
          "[http][live]") {
  auto opened = storeWithSteps();
  storage::Store& store = *opened;

  HttpOptions o;
  o.port = 0;
  o.liveIntervalMs = 50;
  auto server = std::make_unique<HttpServer>(o, store);
  REQUIRE(server->start().isOk());
  uint16_t port = server->port();

  WsClient client(port);
  auto snapshot = client.read(std::chrono::seconds(5));
  REQUIRE(snapshot);
  CHECK((*snapshot)["type"] == "snapshot");
  REQUIRE((*snapshot)["jobs"].size() == 1);
  CHECK((*snapshot)["jobs"][0]["job"] == kJob);
  CHECK((*snapshot)["jobs"][0]["latest_step"] == 2);
  CHECK((*snapshot)["jobs"][0]["state"] == "running");
  CHECK((*snapshot)["anomalies"].is_array());

  REQUIRE(store.write(steps(3, 4)).isOk());
  auto delta = readUntil(
      client,
      [](const json& m) {
        return m["type"] == "delta" && !m["jobs"].empty() && m["jobs"][0]["latest_step"] == 4;
      },
      std::chrono::seconds(5));
  REQUIRE(delta);
  const json& rows = (*delta)["summary"][kJob];
  REQUIRE(rows.is_array());
  std::vector<int64_t> stepsSent;
  for (const auto& r : rows) stepsSent.push_back(r["step"].get<int64_t>());
  // New steps, and the previous latest again (it may have been incomplete before).
  CHECK(stepsSent == std::vector<int64_t>{2, 3, 4});
  CHECK(rows.back()["max_ns"] == 150 * kMs);
  CHECK(rows.back()["slowest_rank"] == 1);

  // Nothing changed: no further message within a few intervals.
  CHECK_FALSE(client.read(std::chrono::milliseconds(400)));

  // A restart: the old connection ends, a new one on the same port gets a fresh snapshot.
  WsClient before(port);
  REQUIRE(before.read(std::chrono::seconds(5)));  // its snapshot
  server->stop();
  CHECK_FALSE(before.read(std::chrono::seconds(2)));
  CHECK(before.error());
  server.reset();
  REQUIRE(store.write(steps(5, 5)).isOk());
  o.port = port;
  HttpServer again(o, store);
  REQUIRE(again.start().isOk());
  WsClient after(port);
  auto fresh = after.read(std::chrono::seconds(5));
  REQUIRE(fresh);
  CHECK((*fresh)["type"] == "snapshot");
  CHECK((*fresh)["jobs"][0]["latest_step"] == 5);
}

TEST_CASE("live: a plain GET is told to upgrade", "[http][live]") {
  trainscope::testing::FakeStore store;
  HttpOptions o;
  o.port = 0;
  HttpServer server(o, store);
  REQUIRE(server.start().isOk());
  auto r = trainscope::testing::httpGet(server.port(), "/api/v1/live");
  CHECK(r.status == 426);
  CHECK(json::parse(r.body)["error"].get<std::string>().find("WebSocket") != std::string::npos);
}

TEST_CASE("token: requests that change something need the bearer token", "[http][auth]") {
  trainscope::testing::FakeStore store;
  HttpOptions o;
  o.port = 0;
  o.authToken = "s3cret";
  HttpServer server(o, store);
  REQUIRE(server.start().isOk());
  trainscope::testing::TestConnection c(server.port());

  auto none = c.request("POST", "/api/v1/jobs", {}, "{}");
  CHECK(none.status == 401);
  CHECK(none.headers["WWW-Authenticate"].rfind("Bearer", 0) == 0);
  CHECK(json::parse(none.body)["error"].get<std::string>().find("Authorization") !=
        std::string::npos);
  auto wrong = c.request("POST", "/api/v1/jobs", {{"Authorization", "Bearer s3creX"}}, "{}");
  CHECK(wrong.status == 401);
  auto prefix = c.request("DELETE", "/api/v1/jobs", {{"Authorization", "Bearer s3cret2"}});
  CHECK(prefix.status == 401);
  auto basic = c.request("POST", "/api/v1/jobs", {{"Authorization", "Basic s3cret"}}, "{}");
  CHECK(basic.status == 401);
  // The right token passes the check; the API then answers (no POST routes yet: 405).
  auto right = c.request("POST", "/api/v1/jobs", {{"Authorization", "Bearer s3cret"}}, "{}");
  CHECK(right.status == 405);
  // Reading needs no token.
  CHECK(c.request("GET", "/api/v1/jobs").status == 200);
  CHECK(c.request("GET", "/metrics").status == 200);
}

TEST_CASE("token: without one configured, nothing asks for it", "[http][auth]") {
  trainscope::testing::FakeStore store;
  HttpOptions o;
  o.port = 0;
  HttpServer server(o, store);
  REQUIRE(server.start().isOk());
  trainscope::testing::TestConnection c(server.port());
  CHECK(c.request("POST", "/api/v1/jobs", {}, "{}").status == 405);
}

TEST_CASE("token file: first line trimmed; empty, unreadable or spaced tokens name the flag",
          "[http][auth]") {
  std::string path =
      (std::filesystem::temp_directory_path() / ("trainscope-token-" + std::to_string(::getpid())))
          .string();
  auto write = [&](const std::string& text) { std::ofstream(path) << text; };
  write("  abc123\t\nsecond line\n");
  auto ok = trainscope::http::readTokenFile(path, "--http-token-file");
  REQUIRE(ok.isOk());
  CHECK(*ok == "abc123");
  write("\n");
  auto empty = trainscope::http::readTokenFile(path, "--http-token-file");
  REQUIRE_FALSE(empty.isOk());
  CHECK(empty.message().find("--http-token-file") != std::string::npos);
  write("two words\n");
  CHECK_FALSE(trainscope::http::readTokenFile(path, "--http-token-file").isOk());
  std::remove(path.c_str());
  auto missing = trainscope::http::readTokenFile(path, "--http-token-file");
  REQUIRE_FALSE(missing.isOk());
  CHECK(missing.message().find(path) != std::string::npos);
}

TEST_CASE("live: each capture change arrives as a capture message, and in the snapshot",
          "[http][live]") {
  auto opened = storeWithSteps();
  storage::Store& store = *opened;
  storage::CaptureRow cap;
  cap.id = "cap-1-abcd";
  cap.job = kJob;
  cap.reason = "on request";
  cap.ranks = {0, 1};
  cap.startStep = 4;
  cap.steps = 2;
  cap.history = 1;
  cap.createdNs = trainscope::wallNowNs();
  cap.updatedNs = cap.createdNs;
  cap.summary = "0 of 2 ranks done";
  for (uint32_t r : {0u, 1u}) {
    storage::CaptureRankRow rr;
    rr.rank = r;
    rr.node = "node-a";
    cap.rankStatus.push_back(rr);
  }
  REQUIRE(store.writeCapture(cap).isOk());

  HttpOptions o;
  o.port = 0;
  o.liveIntervalMs = 50;
  HttpServer server(o, store);
  REQUIRE(server.start().isOk());
  WsClient c(server.port());
  auto snap = c.read(std::chrono::seconds(5));
  REQUIRE(snap);
  REQUIRE((*snap)["type"] == "snapshot");
  REQUIRE((*snap)["captures"].size() == 1);
  CHECK((*snap)["captures"][0]["id"] == "cap-1-abcd");
  CHECK((*snap)["captures"][0]["state"] == "running");

  // A rank finishes, then the capture completes: each write is one capture message.
  cap.rankStatus[0].state = "done";
  cap.rankStatus[0].bytes = 1234;
  cap.summary = "1 of 2 ranks done";
  cap.updatedNs = trainscope::wallNowNs();
  REQUIRE(store.writeCapture(cap).isOk());
  auto m = readUntil(
      c, [](const json& j) { return j["type"] == "capture"; }, std::chrono::seconds(5));
  REQUIRE(m);
  CHECK((*m)["capture"]["id"] == "cap-1-abcd");
  CHECK((*m)["capture"]["rank_status"][0]["state"] == "done");
  CHECK((*m)["capture"]["summary"] == "1 of 2 ranks done");

  cap.rankStatus[1].state = "done";
  cap.state = "complete";
  cap.summary = "2 of 2 ranks done";
  cap.updatedNs = trainscope::wallNowNs() + 1;
  cap.finishedNs = cap.updatedNs;
  REQUIRE(store.writeCapture(cap).isOk());
  m = readUntil(
      c, [](const json& j) { return j["type"] == "capture"; }, std::chrono::seconds(5));
  REQUIRE(m);
  CHECK((*m)["capture"]["state"] == "complete");
  // Nothing is sent twice: no further capture message while nothing changes.
  CHECK_FALSE(readUntil(
      c, [](const json& j) { return j["type"] == "capture"; }, std::chrono::milliseconds(400)));
  server.stop();
}
