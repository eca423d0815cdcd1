// The live WebSocket (/api/v1/live) against the real SQLite store: a snapshot on connect, a
// delta after new data is stored, and a fresh snapshot after the server restarts. Also the
// access token: requests that change something need "Authorization: Bearer TOKEN"; the Origin
// and Host checks (origin.h) on those and on the live feed; a client that never reads is dropped.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
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
#include "tests/collector/storage/memory_store.h"

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

// The value of an unlabelled sample in the server's /metrics, or -1 if it is not there.
double metricValue(uint16_t port, const std::string& name) {
  auto r = trainscope::testing::httpGet(port, "/metrics");
  const std::string key = "\n" + name + " ";
  auto at = r.body.find(key);
  if (at == std::string::npos) return -1;
  return std::stod(r.body.substr(at + key.size()));
}

// Polls /metrics until `name` reaches `want` or `timeout` passes; returns the last value.
double waitForMetric(uint16_t port, const std::string& name, double want,
                     std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  double v = metricValue(port, name);
  while (v != want && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    v = metricValue(port, name);
  }
  return v;
}

// A WebSocket client whose reads give up after a timeout. Test thread only.
class WsClient {
 public:
  explicit WsClient(uint16_t port) : ws_(ioc_) {
    beast::get_lowest_layer(ws_).connect(
        asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    ws_.handshake("127.0.0.1", "/api/v1/live");
  }

  // Handshakes as a browser would: with an Origin and the given Host. handshakeError() says
  // whether the server upgraded the connection.
  WsClient(uint16_t port, const std::string& host, const std::string& origin) : ws_(ioc_) {
    beast::get_lowest_layer(ws_).connect(
        asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    ws_.set_option(websocket::stream_base::decorator(
        [origin](websocket::request_type& req) { req.set(beast::http::field::origin, origin); }));
    ws_.handshake(host, "/api/v1/live", handshakeError_);
  }

  beast::error_code handshakeError() const { return handshakeError_; }

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
  beast::error_code handshakeError_;
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
  auto store = storage::testing::memoryStore();
  REQUIRE(store->write(steps(0, 2)).isOk());
  return store;
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
  cap.rankStatus[0].state = wire::RankState::kDone;
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

  cap.rankStatus[1].state = wire::RankState::kDone;
  cap.state = wire::CaptureState::kComplete;
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

TEST_CASE("live: a client that never reads is disconnected and its snapshot freed",
          "[http][live]") {
  // A snapshot far larger than the socket buffers can hold (job names of 2 MiB), so the
  // server's write of it stays pending while the client does not read; no deltas follow (the
  // store does not change), so only the write deadline can drop the client.
  trainscope::testing::FakeStore store;
  for (int i = 0; i < 6; ++i) {  // 12 MiB: past the buffers, under a client's 16 MiB limit
    storage::JobRow job;
    job.job = std::string(2 << 20, static_cast<char>('a' + i));
    store.jobRows.push_back(job);
  }
  HttpOptions o;
  o.port = 0;
  o.liveIntervalMs = 50;
  o.liveWriteTimeoutMs = 1000;
  HttpServer server(o, store);
  REQUIRE(server.start().isOk());

  asio::io_context ioc;
  websocket::stream<beast::tcp_stream> ws(ioc);
  auto& socket = beast::get_lowest_layer(ws).socket();
  socket.open(asio::ip::tcp::v4());
  socket.set_option(asio::socket_base::receive_buffer_size(4096));  // fills at once
  socket.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), server.port()));
  ws.handshake("127.0.0.1", "/api/v1/live");
  CHECK(waitForMetric(server.port(), "trainscope_http_live_clients", 1, std::chrono::seconds(10)) ==
        1);

  // Never read: the server gives up on the pending write and drops the client.
  CHECK(waitForMetric(server.port(), "trainscope_http_live_slow_disconnects_total", 1,
                      std::chrono::seconds(30)) == 1);
  CHECK(waitForMetric(server.port(), "trainscope_http_live_clients", 0, std::chrono::seconds(10)) ==
        0);

  // A client that does read gets the whole snapshot, and is not dropped.
  WsClient reader(server.port());
  auto snapshot = reader.read(std::chrono::seconds(30));
  REQUIRE(snapshot);
  CHECK((*snapshot)["jobs"].size() == 6);
  CHECK(metricValue(server.port(), "trainscope_http_live_slow_disconnects_total") == 1);
  server.stop();
}

TEST_CASE("origin: a foreign web page can neither change anything nor open the live feed",
          "[http][origin]") {
  trainscope::testing::FakeStore store;
  storage::JobRow job;
  job.job = kJob;
  store.jobRows.push_back(job);
  HttpOptions o;
  o.port = 0;
  o.liveIntervalMs = 50;
  o.allowedOrigins = {"https://dash.example.com/"};
  HttpServer server(o, store);
  REQUIRE(server.start().isOk());
  const std::string port = std::to_string(server.port());
  const std::string self = "127.0.0.1:" + port;
  trainscope::testing::TestConnection c(server.port());
  auto post = [&](const std::vector<std::pair<std::string, std::string>>& headers) {
    return c.request("POST", "/api/v1/jobs", headers, "{}");
  };

  // Cross-site request forgery: a page elsewhere posts to the collector.
  auto foreign = post({{"Host", self}, {"Origin", "http://evil.example"}});
  CHECK(foreign.status == 403);
  CHECK(json::parse(foreign.body)["error"].get<std::string>().find("--http-allow-origin") !=
        std::string::npos);
  CHECK(post({{"Origin", "null"}}).status == 403);
  CHECK(post({{"Host", self}, {"Origin", "http://127.0.0.1:1"}}).status == 403);  // other port
  // DNS rebinding: the page's own name now points at 127.0.0.1, so it is same-origin, but the
  // collector does not answer to that name.
  auto rebound =
      post({{"Host", "evil.example:" + port}, {"Origin", "http://evil.example:" + port}});
  CHECK(rebound.status == 403);
  CHECK(json::parse(rebound.body)["error"].get<std::string>().find("--http-allowed-host") !=
        std::string::npos);

  // Passed on to the API (which has no POST route there: 405): the dashboard itself, under an
  // IP literal or localhost, a listed origin, and clients that are not browsers.
  CHECK(post({{"Host", self}, {"Origin", "http://" + self}}).status == 405);
  CHECK(post({{"Host", "localhost:" + port}, {"Origin", "http://localhost:" + port}}).status ==
        405);
  CHECK(post({{"Origin", "https://dash.example.com"}}).status == 405);
  CHECK(post({}).status == 405);
  // Reading is not refused: a GET from anywhere is answered (the browser keeps it from the
  // foreign page, which gets no CORS header).
  CHECK(c.request("GET", "/api/v1/jobs", {{"Origin", "http://evil.example"}}).status == 200);
  // But a read under a rebound name is: that page is same-origin with what it reads.
  auto reboundRead = c.request("GET", "/api/v1/jobs", {{"Host", "evil.example:" + port}});
  CHECK(reboundRead.status == 403);
  CHECK(json::parse(reboundRead.body)["error"].get<std::string>().find("--http-allowed-host") !=
        std::string::npos);
  CHECK(c.request("GET", "/", {{"Host", "evil.example:" + port}}).status == 403);
  CHECK(c.request("GET", "/api/v1/jobs", {{"Host", "localhost:" + port}}).status == 200);
  CHECK(metricValue(server.port(), "trainscope_http_origin_refused_total") == 6);

  // The live feed: a foreign page's handshake is refused with 403, the dashboard's accepted.
  auto handshake = [&](const std::string& host, const std::string& origin) {
    trainscope::testing::TestConnection ws(server.port());
    return ws
        .request("GET", "/api/v1/live",
                 {{"Host", host},
                  {"Origin", origin},
                  {"Upgrade", "websocket"},
                  {"Connection", "Upgrade"},
                  {"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="},
                  {"Sec-WebSocket-Version", "13"}})
        .status;
  };
  CHECK(handshake(self, "http://evil.example") == 403);
  CHECK(handshake("evil.example:" + port, "http://evil.example:" + port) == 403);
  CHECK(handshake(self, "http://" + self) == 101);
  WsClient dashboard(server.port(), self, "http://" + self);
  REQUIRE_FALSE(dashboard.handshakeError());
  auto snapshot = dashboard.read(std::chrono::seconds(10));
  REQUIRE(snapshot);
  CHECK((*snapshot)["type"] == "snapshot");
  CHECK(metricValue(server.port(), "trainscope_http_origin_refused_total") == 8);
  server.stop();
}

TEST_CASE("origin: bad allowed origins and hosts fail start-up naming them", "[http][origin]") {
  trainscope::testing::FakeStore store;
  HttpOptions o;
  o.port = 0;
  o.allowedOrigins = {"dash.example.com"};
  HttpServer badOrigin(o, store);
  auto s = badOrigin.start();
  REQUIRE_FALSE(s.isOk());
  CHECK(s.message().find("dash.example.com") != std::string::npos);
  o.allowedOrigins.clear();
  o.allowedHosts = {"proxy.example:8080"};
  HttpServer badHost(o, store);
  s = badHost.start();
  REQUIRE_FALSE(s.isOk());
  CHECK(s.message().find("proxy.example:8080") != std::string::npos);
}

TEST_CASE("origin: a listed host name is accepted for changes", "[http][origin]") {
  trainscope::testing::FakeStore store;
  HttpOptions o;
  o.port = 0;
  o.allowedHosts = {"Proxy.Example."};
  HttpServer server(o, store);
  REQUIRE(server.start().isOk());
  trainscope::testing::TestConnection c(server.port());
  CHECK(c.request("POST", "/api/v1/jobs", {{"Host", "proxy.example"}}, "{}").status == 405);
  CHECK(c.request("POST", "/api/v1/jobs", {{"Host", "other.example"}}, "{}").status == 403);
}
