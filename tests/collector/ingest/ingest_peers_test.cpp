// Ingest's table of connected peers: connections forgotten when they close, however their
// close and their messages interleave, and when they fall silent.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <zmq.hpp>

#include "collector/ingest/ingest.h"
#include "schema/wire.h"
#include "tests/collector/ingest/ingest_fixture.h"

using namespace trainscope;
using namespace std::chrono_literals;
using namespace trainscope::ingest::testing;  // NOLINT(google-build-using-namespace): the fixture

TEST_CASE("ingest: connections that close are forgotten, however fast they come and go") {
  // Connections silent for 5 s are forgotten too: the backstop for closes seen out of order.
  Fixture f(nullptr, 20ms, {}, 0ms, 5s);
  auto heartbeat = [](const std::string& node) {
    wire::Envelope beat;
    beat.mutable_heartbeat()->set_node(node);
    beat.mutable_heartbeat()->set_t1_ns(1);
    return beat;
  };
  Client stays(f.ctx, f.server->endpoint());
  auto beatStays = [&] {
    stays.sendEnv(heartbeat("stays"));
    return stays.recvKind(wire::Envelope::kHeartbeatReply).has_value();
  };
  // Waits for `want` peers while "stays" keeps speaking, so only the others can go idle.
  auto waitPeers = [&](uint64_t want) {
    auto deadline = std::chrono::steady_clock::now() + 20s;
    while (f.server->stats().peers != want && std::chrono::steady_clock::now() < deadline) {
      REQUIRE(beatStays());
      std::this_thread::sleep_for(50ms);
    }
    return f.server->stats().peers;
  };

  // A heartbeat is answered before its node is routed: wait for the route.
  auto nodesBecome = [&](const std::vector<std::string>& want) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (f.server->connectedNodes() != want && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    return f.server->connectedNodes();
  };

  REQUIRE(beatStays());
  {
    Client a(f.ctx, f.server->endpoint());
    Client b(f.ctx, f.server->endpoint());
    a.sendEnv(heartbeat("a"));
    b.sendEnv(heartbeat("b"));
    REQUIRE(a.recvKind(wire::Envelope::kHeartbeatReply).has_value());
    REQUIRE(b.recvKind(wire::Envelope::kHeartbeatReply).has_value());
    CHECK(f.server->stats().peers == 3);
    CHECK(nodesBecome({"a", "b", "stays"}) == std::vector<std::string>{"a", "b", "stays"});
  }
  CHECK(waitPeers(1) == 1);

  // Churn: each connection sends one message and closes at once, so the kernel hands the next
  // one the descriptor the last just freed. A flood on another connection keeps ingest reading
  // messages in long bursts, so it often reads a connection's message only after its close (it
  // then knows the connection again), or the next one's message before the close.
  std::atomic<bool> flooding{true};
  std::thread flood([&] {
    Client c(f.ctx, f.server->endpoint());
    auto beat = heartbeat("flood");
    const std::string frame = wire::encode(beat);
    while (flooding) {
      for (int i = 0; i < 64; ++i) c.send(frame);
      zmq::message_t drop;
      while (c.sock.recv(drop, zmq::recv_flags::dontwait)) {
      }
    }
  });
  for (int i = 0; i < 300; ++i) {
    Client c(f.ctx, f.server->endpoint());
    c.sendEnv(heartbeat("churn-" + std::to_string(i)));
    if (i % 3 == 0) (void)c.recvKind(wire::Envelope::kHeartbeatReply, 1000ms);
  }
  flooding = false;
  flood.join();
  CHECK(waitPeers(1) == 1);
  CHECK(nodesBecome({"stays"}) == std::vector<std::string>{"stays"});

  // Silent past the timeout, "stays" is forgotten too; speaking again, it is known again.
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (f.server->stats().peers != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(100ms);
  }
  CHECK(f.server->stats().peers == 0);
  CHECK(f.server->connectedNodes().empty());
  REQUIRE(beatStays());
  CHECK(nodesBecome({"stays"}) == std::vector<std::string>{"stays"});
}

TEST_CASE("ingest: a peer speaking raw ZMTP 1.0 framing is forgotten once its message is read") {
  Fixture f;
  // Bytes not starting with 0xff read as ZMTP 1.0: a length-prefixed routing id the peer
  // chooses, then frames. libzmq gives such a connection no descriptor, so its close would
  // never be matched.
  const std::string endpoint = f.server->endpoint();
  const int port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(s >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  auto frame = [](const std::string& body) {
    return std::string(1, static_cast<char>(body.size() + 1)) + '\0' + body;
  };
  const std::string bytes = frame("chosen-id") + frame("not a frame") + frame("nor this");
  REQUIRE(::send(s, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (f.rejects("malformed") < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  CHECK(f.rejects("malformed") == 2);
  CHECK(f.server->stats().peers == 0);  // with its connection still open
  ::close(s);
}
