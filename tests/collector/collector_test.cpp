// Starts the real trainscope-collector binary (path from TRAINSCOPE_COLLECTOR_BIN) on free
// ports and checks its ready file, ingest path and clean shutdown.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "collector/storage/store.h"
#include "schema/wire.h"
#include "tests/common/support.h"

using namespace trainscope;
using namespace std::chrono_literals;

namespace {

using trainscope::tests::TempDir;

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

pid_t spawn(const std::vector<std::string>& args, const std::string& logPath) {
  pid_t pid = fork();
  if (pid == 0) {
    FILE* log = std::fopen(logPath.c_str(), "w");
    if (log != nullptr) {
      dup2(fileno(log), 1);
      dup2(fileno(log), 2);
    }
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

int waitExit(pid_t pid, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(20ms);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

const char* binary() {
  const char* bin = std::getenv("TRAINSCOPE_COLLECTOR_BIN");
  return bin != nullptr && access(bin, X_OK) == 0 ? bin : nullptr;
}

}  // namespace

TEST_CASE("collector: ready file names the bound ports; stores, acks and stops on SIGTERM") {
  if (binary() == nullptr) {
    WARN("TRAINSCOPE_COLLECTOR_BIN not set or not executable; skipping");
    std::exit(77);
  }
  TempDir dir;
  const std::string ready = dir.path() + "/ready.json";
  const std::string data = dir.path() + "/data";
  pid_t pid = spawn({binary(), "--data-dir", data, "--ingest", "tcp://127.0.0.1:0", "--http",
                     "127.0.0.1:0", "--retention-hours", "0", "--ready-file", ready},
                    dir.path() + "/collector.log");
  REQUIRE(pid > 0);
  auto deadline = std::chrono::steady_clock::now() + 15s;
  while (!std::filesystem::exists(ready) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  INFO("log:\n" << readFile(dir.path() + "/collector.log"));
  REQUIRE(std::filesystem::exists(ready));
  auto doc = nlohmann::json::parse(readFile(ready));
  const std::string ingest = doc.at("ingest");
  const std::string http = doc.at("http");
  CHECK(doc.at("pid") == pid);
  CHECK(ingest.rfind("tcp://127.0.0.1:", 0) == 0);
  CHECK(ingest != "tcp://127.0.0.1:0");
  CHECK(http.rfind("127.0.0.1:", 0) == 0);
  CHECK(http != "127.0.0.1:0");
  // The same endpoints appear in one log line.
  CHECK(readFile(dir.path() + "/collector.log").find("ingest " + ingest + ", http " + http) !=
        std::string::npos);

  {
    zmq::context_t ctx(1);
    zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.connect(ingest);
    wire::Envelope env;
    env.mutable_batch()->set_seq(5);
    auto* step = env.mutable_batch()->add_items()->mutable_step();
    step->set_job("daemon");
    step->set_rank(0);
    step->set_step(1);
    step->set_start_ns(1000);
    step->set_end_ns(2000);
    step->set_duration_ns(1000);
    dealer.send(zmq::buffer(wire::encode(env)), zmq::send_flags::none);
    zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
    REQUIRE(zmq::poll(&item, 1, 5000ms) == 1);
    zmq::message_t reply;
    REQUIRE(dealer.recv(reply, zmq::recv_flags::none));
    auto ack = wire::decode(reply.data(), reply.size());
    REQUIRE(ack.isOk());
    REQUIRE(ack->has_ack());
    CHECK(ack->ack().seq() == 5);
  }

  kill(pid, SIGTERM);
  CHECK(waitExit(pid, 10s) == 0);

  storage::SqliteOptions so;
  so.path = data + "/trainscope.db";
  auto store = storage::openSqliteStore(so);
  REQUIRE(store.isOk());
  storage::StepQuery q;
  q.job = "daemon";
  auto rows = (*store)->steps(q);
  REQUIRE(rows.isOk());
  CHECK(rows->size() == 1);
}

TEST_CASE("collector: a bad flag value fails with a message naming the flag") {
  if (binary() == nullptr) std::exit(77);
  TempDir dir;
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  for (const Case& c :
       {Case{{"--http", "localhost"}, "--http"}, Case{{"--http", "127.0.0.1:99999"}, "--http"},
        Case{{"--retention-hours", "-2"}, "--retention-hours"},
        Case{{"--ingest", "localhost:7601"}, "--ingest"},
        Case{{"--alertmanager", "https://am.example:9093"},
             "--alertmanager: 'https://am.example:9093': https is not supported"},
        Case{{"--webhook", "hooks.example/x"}, "--webhook: 'hooks.example/x': expected http://"},
        Case{{"--slack-webhook", "http://h:0/x"}, "--slack-webhook"},
        Case{{"--webhook-header", "NoColon"}, "--webhook-header"},
        Case{{"--webhook-kinds", "straggler,nope"}, "unknown anomaly kind 'nope'"}}) {
    std::vector<std::string> args = {binary(), "--data-dir", dir.path() + "/d"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const std::string log = dir.path() + "/bad.log";
    pid_t pid = spawn(args, log);
    int rc = waitExit(pid, 10s);
    INFO(c.expect << ": " << readFile(log));
    CHECK(rc != 0);
    CHECK(readFile(log).find(c.expect) != std::string::npos);
  }
}
