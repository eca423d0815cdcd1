// The trainscope CLI in-process: table formatting, each subcommand against a real HttpServer
// over a fake store, and its exit codes (1 for API errors, 2 for bad arguments, 4 for an
// unreachable collector).
#include "tools/cli/cli.h"

#include <sys/stat.h>
#include <zmq.h>

#include <array>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>

#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "collector/http/server.h"
#include "common/clock.h"
#include "common/curve_keys.h"
#include "tests/collector/http/fake_store.h"
#include "tests/common/support.h"
#include "tests/tools/cli_run.h"

using nlohmann::json;
using namespace trainscope::cli;
namespace storage = trainscope::storage;

namespace {

constexpr int64_t kSec = 1'000'000'000;
constexpr int64_t kMs = 1'000'000;

using trainscope::cli::testing::cli;
using trainscope::cli::testing::Run;

// A port nothing listens on: bind one, then close it.
uint16_t deadPort() {
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::acceptor a(
      ioc, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  uint16_t port = a.local_endpoint().port();
  a.close();
  return port;
}

// One connection on loopback answered with fixed bytes, the way a server that does not speak
// HTTP answers `trainscope --server`. `afterRequest`: the bytes go after the client's request,
// then the server stops sending; otherwise they go at once and the connection stays open (a
// ZeroMQ peer greets first and then waits for the client's greeting).
class FakeTcpServer {
 public:
  FakeTcpServer(std::string reply, bool afterRequest)
      : reply_(std::move(reply)),
        afterRequest_(afterRequest),
        acceptor_(ioc_,
                  boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0)) {
    acceptor_.async_accept([this](boost::system::error_code ec, boost::asio::ip::tcp::socket s) {
      if (ec) return;
      socket_ = std::move(s);
      if (!afterRequest_) return send();
      socket_.async_read_some(boost::asio::buffer(request_),
                              [this](boost::system::error_code e, size_t) {
                                if (!e) send();
                              });
    });
    thread_ = std::thread([this] { ioc_.run(); });
  }
  ~FakeTcpServer() {
    ioc_.stop();
    thread_.join();
  }
  FakeTcpServer(const FakeTcpServer&) = delete;
  FakeTcpServer& operator=(const FakeTcpServer&) = delete;

  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }

 private:
  void send() {
    boost::asio::async_write(
        socket_, boost::asio::buffer(reply_), [this](boost::system::error_code ec, size_t) {
          boost::system::error_code ignored;
          if (!ec && afterRequest_) {
            socket_.shutdown(boost::asio::ip::tcp::socket::shutdown_send, ignored);
          }
        });
  }

  std::string reply_;
  bool afterRequest_;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::ip::tcp::socket socket_{ioc_};
  std::array<char, 4096> request_{};
  std::thread thread_;
};

// ZMTP 3.0's greeting as libzmq sends it: signature (0xFF, 8 bytes, 0x7F), version 3.0,
// mechanism "NULL" padded to 20 bytes, as-server, 31 bytes of filler: 64 bytes.
std::string zmtpGreeting() {
  std::string g(64, '\0');
  g[0] = '\xFF';
  g[9] = '\x7F';
  g[10] = 3;
  g.replace(12, 4, "NULL");
  return g;
}

struct Collector {
  Collector() {
    int64_t now = trainscope::wallNowNs();
    storage::JobRow j;
    j.job = "train";
    j.worldSize = 2;
    j.ranksSeen = 2;
    j.firstSeenNs = now - 120 * kSec;
    j.lastSeenNs = now - 3 * kSec;
    j.latestStep = 2;
    j.stepRows = 6;
    store.jobRows = {j};
    storage::RankRow r;
    r.job = "train";
    r.rank = 0;
    r.worldSize = 2;
    r.host = "gpu-host-1";
    r.node = "node-a";
    r.pid = 4242;
    r.probeVersion = "0.1.0";
    r.lastSeenNs = now - 3 * kSec;
    r.latestStep = 2;
    storage::RankRow quiet = r;  // nothing from it for 45 s, past the collector's 30 s
    quiet.rank = 1;
    quiet.pid = 4243;
    quiet.lastSeenNs = now - 45 * kSec;
    quiet.latestStep = 1;
    store.rankRows = {r, quiet};
    for (int64_t step = 0; step < 3; ++step) {
      for (uint32_t rank = 0; rank < 2; ++rank) {
        storage::StepRow s;
        s.job = "train";
        s.rank = rank;
        s.step = step;
        s.durationNs = 123'456'789 + rank * kMs;
        s.computeNs = 100 * kMs;
        s.commNs = 20 * kMs;
        s.exposedCommNs = 5 * kMs;
        s.dataNs = 1'500'000;
        s.records = 40;
        for (int i = 0; i < 7; ++i) {  // more than --detail shows
          trainscope::wire::OpTotal op;
          op.set_name("aten::op" + std::to_string(i));
          op.set_count(i + 1);
          op.set_total_ns((i + 1) * kMs);
          op.set_max_ns(kMs);
          s.ops.push_back(op);
        }
        trainscope::wire::CollectiveTotal c;
        c.set_op(trainscope::wire::ALL_REDUCE);
        c.set_group("dp");
        c.set_bytes(uint64_t{64} << 20);
        c.set_count(2);
        c.set_total_ns(20 * kMs);
        c.set_max_ns(12 * kMs);
        c.set_bandwidth_bps(6.4e9);
        s.collectives.push_back(c);
        s.p2pNs = rank == 0 ? 4 * kMs : 0;  // rank 0 waits on a pipeline peer
        s.bubbleNs = s.p2pNs;
        store.stepRows.push_back(s);
      }
      store.summaryRows.push_back({step, 2, 100 * kMs, 110 * kMs, 220 * kMs, 1});
    }
    storage::NodeRow n;
    n.node = "node-a";
    n.host = "gpu-host-1";
    n.agentVersion = "0.1.0";
    n.lastSeenNs = now - 4 * kSec;
    n.rttNs = 250'000;
    n.spoolBytes = uint64_t{3} * 1024 * 1024;
    n.spoolDropped = 2;
    n.ranks = 2;
    trainscope::wire::HostSample h;
    h.set_cpu_percent(42.0);
    h.set_mem_total_bytes(16ull << 30);
    h.set_mem_available_bytes(12ull << 30);
    h.set_load1(3.5);
    n.latestHost = h;
    store.nodeRows = {n};

    trainscope::http::HttpOptions o;
    o.port = 0;
    server = std::make_unique<trainscope::http::HttpServer>(o, store);
    REQUIRE(server->start().isOk());
    url = "http://127.0.0.1:" + std::to_string(server->port());
  }

  trainscope::testing::FakeStore store;
  std::unique_ptr<trainscope::http::HttpServer> server;
  std::string url;
};

}  // namespace

TEST_CASE("cli: durations, bytes, ages and percents are formatted with units", "[cli]") {
  CHECK(formatDurationMs(123'456'789) == "123.46 ms");
  CHECK(formatDurationMs(0) == "0.00 ms");
  CHECK(formatDurationMs(-1'500'000) == "-1.50 ms");
  CHECK(formatSeconds(20.0) == "20 s");
  CHECK(formatSeconds(1.5) == "1.5 s");
  CHECK(formatSeconds(12.34) == "12.3 s");
  CHECK(formatSeconds(600.0) == "600 s");
  CHECK(formatSeconds(0.25) == "250 ms");
  CHECK(formatSeconds(0.0015) == "1.5 ms");
  CHECK(formatSeconds(0.99999) == "1 s");
  CHECK(formatSeconds(0.0) == "0 ms");
  CHECK(formatBytes(0) == "0 B");
  CHECK(formatBytes(1023) == "1023 B");
  CHECK(formatBytes(1536) == "1.5 KiB");
  CHECK(formatBytes(3ull << 20) == "3.0 MiB");
  CHECK(formatBytes(16ull << 30) == "16.0 GiB");
  CHECK(formatAge(0) == "just now");
  CHECK(formatAge(-5 * kSec) == "just now");
  CHECK(formatAge(3 * kSec + 999 * kMs) == "3s ago");
  CHECK(formatAge(125 * kSec) == "2m ago");
  CHECK(formatAge(7200 * kSec) == "2h ago");
  CHECK(formatAge(int64_t{3} * 86400 * kSec) == "3d ago");
  CHECK(formatPercent(37.46) == "37.5%");
}

TEST_CASE("cli: tables align text left and numbers right", "[cli]") {
  Table t({{"NAME"}, {"COUNT", true}, {"NOTE"}});
  t.addRow({"a", "1", "x"});
  t.addRow({"longer", "12345", "y"});
  std::ostringstream out;
  t.render(out);
  CHECK(out.str() ==
        "NAME    COUNT  NOTE\n"
        "a           1  x\n"
        "longer  12345  y\n");
}

TEST_CASE("cli: server URLs are parsed and bad ones refused", "[cli]") {
  auto u = parseServerUrl("http://127.0.0.1:7600");
  REQUIRE(u.isOk());
  CHECK(u->host == "127.0.0.1");
  CHECK(u->port == "7600");
  CHECK(u->basePath.empty());
  u = parseServerUrl("http://collector/prefix/");
  REQUIRE(u.isOk());
  CHECK(u->port == "80");
  CHECK(u->basePath == "/prefix");
  u = parseServerUrl("[::1]:81");
  REQUIRE(u.isOk());
  CHECK(u->host == "::1");
  CHECK(u->port == "81");
  CHECK_FALSE(parseServerUrl("https://x").isOk());
  CHECK_FALSE(parseServerUrl("http://x:99999").isOk());
  CHECK_FALSE(parseServerUrl("http://:80").isOk());
}

TEST_CASE("cli: jobs prints a table with state, rank counts and ages", "[cli]") {
  Collector c;
  Run r = cli({"--server", c.url, "jobs"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out ==
        "JOB    STATE    RANKS  ENDED  LATEST STEP  STEP ROWS  FIRST SEEN  LAST SEEN\n"
        "train  running    2/2      0            2          6  2m ago      3s ago\n");
  CHECK(r.err.empty());
}

TEST_CASE("cli: --json prints the API's JSON, also after the subcommand", "[cli]") {
  Collector c;
  Run r = cli({"--server", c.url, "--json", "jobs"});
  REQUIRE(r.code == 0);
  json j = json::parse(r.out);
  CHECK(j["jobs"][0]["job"] == "train");
  CHECK(r.out.find("\n  ") != std::string::npos);  // pretty
  r = cli({"--server", c.url, "nodes", "--json"});
  REQUIRE(r.code == 0);
  CHECK(json::parse(r.out)["nodes"][0]["node"] == "node-a");
}

TEST_CASE("cli: ranks, summary and nodes print their tables", "[cli]") {
  Collector c;
  Run r = cli({"--server", c.url, "ranks", "train"});
  REQUIRE(r.code == 0);
  CHECK(r.out.rfind("RANK  LOCAL  HOST        NODE    ", 0) == 0);
  CHECK(r.out.find("gpu-host-1") != std::string::npos);
  CHECK(r.out.find("  running  3s ago") != std::string::npos);
  CHECK(r.out.find("  silent   45s ago") != std::string::npos);
  CHECK(r.out.find("active") == std::string::npos);

  r = cli({"--server", c.url, "summary", "train", "--from", "1"});
  REQUIRE(r.code == 0);
  CHECK(r.out.find("MEDIAN") != std::string::npos);
  CHECK(r.out.find("110.00 ms") != std::string::npos);
  CHECK(r.out.find("2.00x") != std::string::npos);
  CHECK(r.out.find("\n   0 ") == std::string::npos);  // step 0 filtered out
  {
    auto lock = c.store.lock();
    CHECK(c.store.lastSummaryQuery->fromStep == std::optional<int64_t>(1));
  }

  r = cli({"--server", c.url, "nodes"});
  REQUIRE(r.code == 0);
  CHECK(r.out.find("42.0%") != std::string::npos);
  CHECK(r.out.find("4.0 GiB / 16.0 GiB") != std::string::npos);
  CHECK(r.out.find("3.0 MiB (2 dropped)") != std::string::npos);
  CHECK(r.out.find("0.25 ms") != std::string::npos);
  CHECK(r.out.find("4s ago") != std::string::npos);
}

TEST_CASE("cli: steps passes its filters and notes truncation", "[cli]") {
  Collector c;
  Run r = cli({"--server", c.url, "steps", "train", "--rank", "1", "--from", "1", "--to", "2"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.rfind("STEP  RANK   DURATION", 0) == 0);
  CHECK(r.out.find("124.46 ms") != std::string::npos);
  CHECK(r.out.find("1.50 ms") != std::string::npos);
  {
    auto lock = c.store.lock();
    CHECK(c.store.lastStepQuery->rank == std::optional<uint32_t>(1));
    CHECK(c.store.lastStepQuery->fromStep == std::optional<int64_t>(1));
    CHECK(c.store.lastStepQuery->toStep == std::optional<int64_t>(2));
  }
  r = cli({"--server", c.url, "steps", "train", "--limit", "2"});
  REQUIRE(r.code == 0);
  CHECK(r.out.find("more exist") != std::string::npos);
  r = cli({"--server", c.url, "steps", "train", "--limit", "6"});
  CHECK(r.out.find("more exist") == std::string::npos);
}

TEST_CASE("cli: steps --detail breaks each step down with its longest operators and collectives",
          "[cli]") {
  Collector c;
  Run plain = cli({"--server", c.url, "steps", "train", "--from", "1", "--to", "1"});
  Run r = cli({"--server", c.url, "steps", "train", "--from", "1", "--to", "1", "--detail"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out != plain.out);
  {
    auto lock = c.store.lock();
    CHECK(c.store.lastStepQuery->detail);
  }
  CHECK(r.out.rfind("step 1, rank 0: 123.46 ms\n"
                    "  compute 100.00 ms, communication 20.00 ms (5.00 ms exposed), data wait "
                    "1.50 ms; 40 records, 0 dropped\n",
                    0) == 0);
  CHECK(r.out.find("  pipeline bubble 4.00 ms (3.2%)\n") != std::string::npos);
  CHECK(r.out.find("\n\nstep 1, rank 1: 124.46 ms\n") != std::string::npos);
  CHECK(r.out.find("  operators (5 longest of 7):\n"
                   "    NAME       COUNT    TOTAL      MAX\n"
                   "    aten::op6      7  7.00 ms  1.00 ms\n") != std::string::npos);
  CHECK(r.out.find("aten::op1 ") == std::string::npos);  // not among the 5 longest
  CHECK(r.out.find("  collectives (longest first):\n"
                   "    OP          GROUP  COUNT      SIZE     TOTAL       MAX  BANDWIDTH\n"
                   "    all_reduce  dp         2  64.0 MiB  20.00 ms  12.00 ms  6.0 GiB/s\n") !=
        std::string::npos);
  // Only rank 0 did p2p: rank 1's block has no bubble.
  CHECK(r.out.find("pipeline bubble") == r.out.rfind("pipeline bubble"));
}

TEST_CASE("cli: an unknown job exits 1 with the API's message", "[cli]") {
  Collector c;
  for (const char* cmd : {"ranks", "steps", "summary"}) {
    Run r = cli({"--server", c.url, cmd, "nope"});
    CHECK(r.code == kExitApiError);
    CHECK(r.err == "trainscope: unknown job 'nope'\n");
    CHECK(r.out.empty());
  }
}

TEST_CASE("cli: an unreachable collector exits 4 with one line naming it", "[cli]") {
  std::string url = "http://127.0.0.1:" + std::to_string(deadPort());
  Run r = cli({"--server", url, "jobs"});
  CHECK(r.code == kExitUnreachable);
  CHECK(r.err.rfind("trainscope: cannot reach collector at " + url + ": ", 0) == 0);
  CHECK(r.err.find('\n') == r.err.size() - 1);
  CHECK(r.out.empty());

  // TRAINSCOPE_SERVER is used when --server is absent.
  ::setenv("TRAINSCOPE_SERVER", url.c_str(), 1);
  r = cli({"nodes"});
  ::unsetenv("TRAINSCOPE_SERVER");
  CHECK(r.code == kExitUnreachable);
  CHECK(r.err.find(url) != std::string::npos);
}

TEST_CASE("cli: a --server URL that does not parse is a usage error (exit 2)", "[cli]") {
  for (const char* url : {"ftp://x", "https://x", "http://x:99999", "http://:80"}) {
    Run r = cli({"--server", url, "jobs"});
    INFO(url);
    CHECK(r.code == kExitUsage);
    CHECK(r.err.rfind("trainscope: invalid --server URL '" + std::string(url) + "': ", 0) == 0);
    CHECK(r.out.empty());
  }
}

TEST_CASE("cli: --server at the ZeroMQ ingest port says so, not 'bad version'", "[cli]") {
  const std::string expected =
      " is not the collector's HTTP port (it looks like the ZeroMQ ingest port; the collector "
      "serves HTTP on its --http address, default 127.0.0.1:7600)\n";
  {
    // Greets at once and waits: the client reads the greeting, then times out.
    FakeTcpServer zmq(zmtpGreeting(), false);
    Run r = cli({"--server", zmq.url(), "--timeout-ms", "500", "jobs"});
    CHECK(r.code == kExitUnreachable);
    CHECK(r.err == "trainscope: --server " + zmq.url() + ": " + zmq.url().substr(7) + expected);
    CHECK(r.out.empty());
  }
  {
    // Answers the request with a greeting and stops: the client reads to the end.
    FakeTcpServer zmq(zmtpGreeting(), true);
    Run r = cli({"--server", zmq.url(), "steps", "train"});
    CHECK(r.code == kExitUnreachable);
    CHECK(r.err == "trainscope: --server " + zmq.url() + ": " + zmq.url().substr(7) + expected);
  }
  {
    FakeTcpServer ssh("SSH-2.0-OpenSSH_9.2\r\n\r\n", true);
    Run r = cli({"--server", ssh.url(), "jobs"});
    CHECK(r.code == kExitUnreachable);
    CHECK(r.err == "trainscope: --server " + ssh.url() + ": " + ssh.url().substr(7) +
                       " answered with something that is not HTTP\n");
  }
}

TEST_CASE("cli: a collector that never answers times out", "[cli]") {
  // Listening but never accepting: the connect succeeds (backlog), the reply never comes.
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::acceptor a(
      ioc, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  std::string url = "http://127.0.0.1:" + std::to_string(a.local_endpoint().port());
  Run r = cli({"--server", url, "--timeout-ms", "300", "jobs"});
  CHECK(r.code == kExitUnreachable);
  CHECK(r.err == "trainscope: cannot reach collector at " + url + ": timed out after 300 ms\n");
}

TEST_CASE("cli: usage errors and --help", "[cli]") {
  Run r = cli({});
  CHECK(r.code != 0);
  CHECK(r.err.find("subcommand") != std::string::npos);
  r = cli({"steps"});
  CHECK(r.code != 0);
  CHECK(r.err.find("job is required") != std::string::npos);
  r = cli({"steps", "train", "--rank", "-1"});
  CHECK(r.code != 0);
  CHECK(r.err.find("--rank") != std::string::npos);
  r = cli({"--help"});
  CHECK(r.code == 0);
  CHECK(r.out.find("--server") != std::string::npos);
  CHECK(r.out.find("TRAINSCOPE_SERVER") != std::string::npos);
  r = cli({"steps", "--help"});
  CHECK(r.code == 0);
  CHECK(r.out.find("--limit") != std::string::npos);
}

TEST_CASE("cli: an unknown command is named, with the nearest one when it is a likely typo",
          "[cli]") {
  Run r = cli({"jbos"});
  CHECK(r.code == kExitUsage);
  CHECK(r.err == "trainscope: unknown command 'jbos'; did you mean 'jobs'?\n");
  CHECK(r.out.empty());
  r = cli({"--server", "http://127.0.0.1:1", "stpes", "train", "--json"});
  CHECK(r.code == kExitUsage);
  CHECK(r.err == "trainscope: unknown command 'stpes'; did you mean 'steps'?\n");
  r = cli({"anomolies", "train"});
  CHECK(r.err == "trainscope: unknown command 'anomolies'; did you mean 'anomalies'?\n");
  r = cli({"captur"});
  CHECK(r.err == "trainscope: unknown command 'captur'; did you mean 'capture'?\n");
  // Nothing close: no guess.
  r = cli({"bogus"});
  CHECK(r.code == kExitUsage);
  CHECK(r.err == "trainscope: unknown command 'bogus'; `trainscope --help` lists the commands\n");
  r = cli({"x"});
  CHECK(r.code == kExitUsage);
  CHECK(r.err.find("did you mean") == std::string::npos);
  // A known command's own mistakes keep CLI11's messages.
  r = cli({"jobs", "extra"});
  CHECK(r.code == kExitUsage);
  CHECK(r.err.find("unknown command") == std::string::npos);
}

TEST_CASE("cli: keygen writes NAME.key 0600 and NAME.pub, keeps existing files without --force",
          "[cli]") {
  if (zmq_has("curve") == 0) {
    WARN("libzmq without CURVE: keygen not tested");  // the other CLI tests still run
    return;
  }
  trainscope::tests::TempDir dir;
  Run r = cli({"keygen", "--dir", dir.path(), "--name", "node7"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find(dir.sub("node7.key")) != std::string::npos);
  CHECK(r.out.find("--agent-key") != std::string::npos);
  struct stat sb {};
  REQUIRE(::stat(dir.sub("node7.key").c_str(), &sb) == 0);
  CHECK((sb.st_mode & 0777) == 0600);
  REQUIRE(::stat(dir.sub("node7.pub").c_str(), &sb) == 0);
  CHECK((sb.st_mode & 0777) == 0644);
  auto first = trainscope::readCurveSecretFile(dir.sub("node7.key"));
  REQUIRE(first.isOk());
  CHECK(r.out.find(first->publicKey) != std::string::npos);

  r = cli({"keygen", "--dir", dir.path(), "--name", "node7"});
  CHECK(r.code == kExitLocalError);
  CHECK(r.err.find("--force") != std::string::npos);
  CHECK(trainscope::readCurveSecretFile(dir.sub("node7.key"))->secretKey == first->secretKey);
  r = cli({"keygen", "--dir", dir.path(), "--name", "node7", "--force"});
  CHECK(r.code == 0);
  CHECK(trainscope::readCurveSecretFile(dir.sub("node7.key"))->secretKey != first->secretKey);

  r = cli({"keygen", "--dir", dir.path(), "--name", "../escape"});
  CHECK(r.code == kExitUsage);
  CHECK(r.err.find("--name") != std::string::npos);
  r = cli({"keygen", "--dir", dir.sub("missing"), "--name", "n"});
  CHECK(r.code == kExitLocalError);
  CHECK(r.err.find(dir.sub("missing")) != std::string::npos);
  r = cli({"keygen", "--help"});
  CHECK(r.code == 0);
  CHECK(r.out.find("0600") != std::string::npos);
}
