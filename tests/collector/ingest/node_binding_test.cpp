// With CURVE, a node's key acts only for the ranks that live on its node: step reports, hellos,
// goodbyes, command statuses and file chunks about another node's rank are refused as
// "node_mismatch"; a rank moves only after its node's goodbye; the binding survives a restart.
// Exits 77 when this libzmq has no CURVE.
#include <zmq.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <zmq.hpp>

#include "collector/ingest/ingest.h"
#include "collector/storage/store.h"
#include "common/curve_keys.h"
#include "schema/capture_state.h"
#include "schema/wire.h"
#include "tests/collector/ingest/ingest_fixture.h"

using namespace trainscope;
using namespace std::chrono_literals;
using namespace trainscope::ingest::testing;  // NOLINT(google-build-using-namespace): the fixture

namespace {

constexpr const char* kJob = "bind";

struct Keys {
  CurveKeyPair server, node1, node2;
};

Keys makeKeys() {
  auto gen = [] {
    auto k = generateCurveKeyPair();
    REQUIRE(k.isOk());
    return *k;
  };
  return Keys{gen(), gen(), gen()};
}

// An ingest server with CURVE and the allow-list {node1, node2} on `store`, recording what
// reaches onCommandItem.
struct CurveServer {
  CurveServer(const Keys& keys, storage::Store& store) {
    ingest::IngestOptions io;
    io.endpoint = "tcp://127.0.0.1:0";
    CurveServerKeys ck;
    ck.server = keys.server;
    ck.agents = {{keys.node1.publicKey, "node1"}, {keys.node2.publicKey, "node2"}};
    io.curve = ck;
    io.onCommandItem = [this](const std::string& node, const wire::Envelope& item) {
      std::lock_guard lock(mu);
      commandItems.emplace_back(node, item);
    };
    server = std::make_unique<ingest::IngestServer>(io, store);
    REQUIRE(server->start().isOk());
  }
  ~CurveServer() { server->stop(); }
  size_t commandItemCount() {
    std::lock_guard lock(mu);
    return commandItems.size();
  }
  uint64_t rejects(const std::string& reason) {
    auto s = server->stats();
    auto it = s.rejects.find(reason);
    return it == s.rejects.end() ? 0 : it->second;
  }
  std::unique_ptr<ingest::IngestServer> server;
  std::mutex mu;
  std::vector<std::pair<std::string, wire::Envelope>> commandItems;
};

// An agent of `node` with its key, said hello (so its node is connected).
struct Agent {
  Agent(zmq::context_t& ctx, const std::string& endpoint, const CurveKeyPair& server,
        const CurveKeyPair& own, const std::string& node)
      : client(ctx, endpoint, [&](zmq::socket_t& sock) {
          sock.set(zmq::sockopt::curve_serverkey, server.publicKey);
          sock.set(zmq::sockopt::curve_publickey, own.publicKey);
          sock.set(zmq::sockopt::curve_secretkey, own.secretKey);
        }) {
    wire::Envelope hello;
    hello.mutable_agent_hello()->set_node(node);
    client.sendEnv(hello);
  }
  // Sends a batch of `items` and returns the reason of its ErrorReply ("" when none) once the
  // batch is acked.
  std::string send(const std::vector<wire::Envelope>& items) {
    wire::Envelope env;
    env.mutable_batch()->set_seq(++seq);
    for (const auto& i : items) *env.mutable_batch()->add_items() = i;
    client.sendEnv(env);
    std::string reason;
    for (;;) {
      auto reply = client.recv(5000ms);
      REQUIRE(reply);
      if (reply->body_case() == wire::Envelope::kError) reason = reply->error().reason();
      if (reply->body_case() == wire::Envelope::kAck && reply->ack().seq() == seq) return reason;
    }
  }
  Client client;
  uint64_t seq = 0;
};

wire::Envelope helloItem(uint32_t rank, const std::string& node, uint32_t pid = 100) {
  wire::Envelope e;
  auto* info = e.mutable_rank_hello()->mutable_rank();
  info->set_job(kJob);
  info->set_rank(rank);
  info->set_world_size(2);
  info->set_node(node);
  info->set_pid(pid);
  return e;
}

wire::Envelope stepItem(uint32_t rank, int64_t step) {
  wire::Envelope e;
  *e.mutable_step() = report(kJob, rank, step);
  return e;
}

wire::Envelope goodbyeItem(uint32_t rank) {
  wire::Envelope e;
  e.mutable_rank_goodbye()->set_job(kJob);
  e.mutable_rank_goodbye()->set_rank(rank);
  e.mutable_rank_goodbye()->set_last_step(3);
  return e;
}

wire::Envelope statusItem(uint32_t rank) {
  wire::Envelope e;
  auto* st = e.mutable_command_status();
  st->set_command_id("cap-1-abcd");
  st->set_job(kJob);
  st->set_rank(rank);
  wire::setCommandState(st, wire::RankState::kFailed);
  st->set_detail("forged");
  return e;
}

wire::Envelope chunkItem(uint32_t rank) {
  wire::Envelope e;
  auto* c = e.mutable_file_chunk();
  c->set_command_id("cap-1-abcd");
  c->set_job(kJob);
  c->set_rank(rank);
  c->set_data("{\"traceEvents\":[]}");
  c->set_last(true);
  return e;
}

// The stored (step -> duration) of a rank.
std::map<int64_t, int64_t> stepsOf(storage::Store& store, uint32_t rank) {
  storage::StepQuery q;
  q.job = kJob;
  q.limit = 1000;
  auto rows = store.steps(q);
  REQUIRE(rows.isOk());
  std::map<int64_t, int64_t> out;
  for (const auto& r : *rows) {
    if (r.rank == rank) out[r.step] = r.durationNs;
  }
  return out;
}

std::string nodeOf(storage::Store& store, uint32_t rank) {
  auto ranks = store.ranks(kJob);
  REQUIRE(ranks.isOk());
  for (const auto& r : *ranks) {
    if (r.rank == rank) return r.node;
  }
  return "";
}

bool skipWithoutCurve() {
  if (zmq_has("curve") != 0) return false;
  WARN("libzmq without CURVE: skipped");
  std::exit(77);
}

}  // namespace

TEST_CASE(
    "ingest with CURVE: another node's key cannot report, re-home, end, fail or ship a rank; "
    "the rank's own node can") {
  skipWithoutCurve();
  const Keys keys = makeKeys();
  Fixture f;  // for its store
  CurveServer s(keys, *f.store);
  Agent node1(f.ctx, s.server->endpoint(), keys.server, keys.node1, "node1");
  Agent node2(f.ctx, s.server->endpoint(), keys.server, keys.node2, "node2");
  REQUIRE(node1.send({helloItem(0, "node1"), stepItem(0, 1)}).empty());
  CHECK(node2.send({stepItem(1, 1)}) == "node_mismatch");  // rank 1: no hello yet

  // node2 sends steps ahead for node1's rank 0, tries to move it to itself, to end it, to fail
  // its capture and to ship its trace: each refused.
  auto forged = stepItem(0, 2);
  forged.mutable_step()->set_duration_ns(400'000);
  CHECK(node2.send({forged}) == "node_mismatch");
  CHECK(node2.send({helloItem(0, "node2")}) == "node_mismatch");
  CHECK(node2.send({goodbyeItem(0)}) == "node_mismatch");
  CHECK(node2.send({statusItem(0)}) == "node_mismatch");
  CHECK(node2.send({chunkItem(0)}) == "node_mismatch");
  CHECK(s.rejects("node_mismatch") == 6);
  CHECK(s.commandItemCount() == 0);

  // The genuine items of node1 are all taken.
  CHECK(node1.send({stepItem(0, 2), statusItem(0), chunkItem(0)}).empty());
  CHECK(s.commandItemCount() == 2);
  const auto steps = stepsOf(*f.store, 0);
  CHECK(steps.size() == 2);
  CHECK(steps.at(2) == 500'000);  // node1's report, not the forged one
  CHECK(stepsOf(*f.store, 1).empty());
  CHECK(nodeOf(*f.store, 0) == "node1");
  auto ranks = f.store->ranks(kJob);
  REQUIRE(ranks.isOk());
  for (const auto& r : *ranks) CHECK_FALSE(r.ended);
}

TEST_CASE(
    "ingest with CURVE: a rank moves to another node only after its node's goodbye, and its "
    "node is remembered across a restart") {
  skipWithoutCurve();
  const Keys keys = makeKeys();
  Fixture f;
  {
    CurveServer s(keys, *f.store);
    Agent node1(f.ctx, s.server->endpoint(), keys.server, keys.node1, "node1");
    Agent node2(f.ctx, s.server->endpoint(), keys.server, keys.node2, "node2");
    REQUIRE(node1.send({helloItem(0, "node1"), stepItem(0, 1)}).empty());
    CHECK(node2.send({helloItem(0, "node2")}) == "node_mismatch");
    // Its node ends it; then it starts again on node2, which now speaks for it alone.
    REQUIRE(node1.send({goodbyeItem(0)}).empty());
    REQUIRE(node2.send({helloItem(0, "node2", 200), stepItem(0, 2)}).empty());
    CHECK(node1.send({stepItem(0, 3)}) == "node_mismatch");
    CHECK(nodeOf(*f.store, 0) == "node2");
  }
  // A new server reads where the rank lives from the store.
  CurveServer s(keys, *f.store);
  Agent node1(f.ctx, s.server->endpoint(), keys.server, keys.node1, "node1");
  Agent node2(f.ctx, s.server->endpoint(), keys.server, keys.node2, "node2");
  CHECK(node1.send({stepItem(0, 4)}) == "node_mismatch");
  CHECK(node2.send({stepItem(0, 5)}).empty());
  const auto steps = stepsOf(*f.store, 0);
  CHECK(steps.size() == 3);
  CHECK(steps.count(1) == 1);
  CHECK(steps.count(2) == 1);
  CHECK(steps.count(5) == 1);
}
