// Commands from the collector to agents: sendCommand reaches the connection of the named node
// (any thread), an unknown or disconnected node is an error naming it, connectedNodes follows
// hellos and disconnects, and command results in batches reach onCommandItem with the node.
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <zmq.hpp>

#include "collector/ingest/ingest.h"
#include "collector/storage/store.h"
#include "schema/wire.h"
#include "tests/common/support.h"

using namespace trainscope;
using namespace std::chrono_literals;

namespace {

using trainscope::tests::waitFor;

void sendEnv(zmq::socket_t& s, wire::Envelope env) {
  const std::string frame = wire::encode(env);
  REQUIRE(s.send(zmq::buffer(frame), zmq::send_flags::none));
}

std::optional<wire::Envelope> recvEnv(zmq::socket_t& s, wire::Envelope::BodyCase want) {
  auto until = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < until) {
    zmq::message_t m;
    if (!s.recv(m, zmq::recv_flags::none)) continue;
    auto env = wire::decode(m.data(), m.size());
    if (env && env->body_case() == want) return *env;
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("a command reaches the agent of its node; results come back with the node name") {
  storage::SqliteOptions so;
  so.path = ":memory:";
  auto store = storage::openSqliteStore(so);
  REQUIRE(store);
  std::mutex mu;
  std::vector<std::pair<std::string, wire::Envelope>> results;
  ingest::IngestOptions o;
  o.endpoint = "tcp://127.0.0.1:*";
  o.onCommandItem = [&](const std::string& node, const wire::Envelope& item) {
    std::lock_guard lock(mu);
    results.emplace_back(node, item);
  };
  ingest::IngestServer server(o, **store);
  REQUIRE(server.start());
  CHECK(server.connectedNodes().empty());

  zmq::context_t ctx;
  zmq::socket_t agent(ctx, zmq::socket_type::dealer);
  agent.set(zmq::sockopt::linger, 0);
  agent.set(zmq::sockopt::rcvtimeo, 200);
  agent.connect(server.endpoint());
  wire::Envelope hello;
  hello.mutable_agent_hello()->set_node("n7");
  sendEnv(agent, hello);
  REQUIRE(waitFor([&] { return server.connectedNodes() == std::vector<std::string>{"n7"}; }));

  auto missing = server.sendCommand("n8", wire::Command());
  REQUIRE_FALSE(missing);
  CHECK(missing.message() == "node n8 has no connected agent");

  wire::Command cmd;
  cmd.set_id("cap-1-abcd");
  cmd.set_job("j");
  cmd.add_ranks(3);
  cmd.mutable_capture()->set_capture_id("cap-1-abcd");
  cmd.mutable_capture()->set_start_step(12);
  // From another thread, as the capture manager would.
  Status sent;
  std::thread([&] { sent = server.sendCommand("n7", cmd); }).join();
  REQUIRE(sent);
  auto got = recvEnv(agent, wire::Envelope::kCommand);
  REQUIRE(got);
  CHECK(got->command().id() == "cap-1-abcd");
  CHECK(got->command().ranks(0) == 3);
  CHECK(got->command().capture().start_step() == 12);

  wire::Envelope batch;
  batch.mutable_batch()->set_seq(1);
  auto* st = batch.mutable_batch()->add_items()->mutable_command_status();
  st->set_command_id("cap-1-abcd");
  st->set_rank(3);
  st->set_state("recording");
  auto* chunk = batch.mutable_batch()->add_items()->mutable_file_chunk();
  chunk->set_command_id("cap-1-abcd");
  chunk->set_data("xyz");
  sendEnv(agent, batch);
  auto ack = recvEnv(agent, wire::Envelope::kAck);
  REQUIRE(ack);
  CHECK(ack->ack().seq() == 1);
  {
    std::lock_guard lock(mu);
    REQUIRE(results.size() == 2);
    CHECK(results[0].first == "n7");
    CHECK(results[0].second.command_status().state() == "recording");
    CHECK(results[1].second.file_chunk().data() == "xyz");
  }

  agent.close();
  CHECK(waitFor([&] { return server.connectedNodes().empty(); }));
  CHECK_FALSE(server.sendCommand("n7", cmd));
  server.stop();
  CHECK_FALSE(server.sendCommand("n7", cmd));
}
