// The ingest server under test: a SQLite store in a temporary directory, a server on a free
// loopback port, DEALER clients that speak the wire protocol, and step reports to send.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <zmq.hpp>

#include "collector/ingest/ingest.h"
#include "collector/storage/store.h"
#include "schema/wire.h"
#include "tests/common/support.h"

namespace trainscope::ingest::testing {

using namespace std::chrono_literals;

using tests::TempDir;

inline wire::StepReport report(const std::string& job, uint32_t rank, int64_t step) {
  wire::StepReport r;
  r.set_job(job);
  r.set_rank(rank);
  r.set_step(step);
  r.set_start_ns(1'000'000'000'000 + step * 1'000'000);
  r.set_end_ns(r.start_ns() + 500'000);
  r.set_duration_ns(500'000);
  r.set_compute_ns(300'000);
  r.set_comm_ns(100'000);
  r.set_exposed_comm_ns(50'000);
  auto* op = r.add_ops();
  op->set_name("aten::mm");
  op->set_count(1);
  op->set_total_ns(1000);
  return r;
}

inline std::string batchFrame(uint64_t seq, const std::vector<wire::StepReport>& steps) {
  wire::Envelope env;
  env.mutable_batch()->set_seq(seq);
  for (const auto& s : steps) *env.mutable_batch()->add_items()->mutable_step() = s;
  return wire::encode(env);
}

struct Client {
  // `configure` sets options that must precede the connect (CURVE keys).
  Client(zmq::context_t& ctx, const std::string& endpoint,
         const std::function<void(zmq::socket_t&)>& configure = {})
      : sock(ctx, zmq::socket_type::dealer) {
    sock.set(zmq::sockopt::linger, 0);
    if (configure) configure(sock);
    sock.connect(endpoint);
  }
  void send(const std::string& frame) { sock.send(zmq::buffer(frame), zmq::send_flags::none); }
  void sendEnv(wire::Envelope env) { send(wire::encode(env)); }
  std::optional<wire::Envelope> recv(std::chrono::milliseconds timeout = 5000ms) {
    zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0) return std::nullopt;
    zmq::message_t msg;
    (void)sock.recv(msg, zmq::recv_flags::none);
    auto env = wire::decode(msg.data(), msg.size());
    if (!env) return std::nullopt;
    return *env;
  }
  // The next reply of the given kind, skipping others (error replies arrive before acks).
  std::optional<wire::Envelope> recvKind(wire::Envelope::BodyCase kind,
                                         std::chrono::milliseconds timeout = 5000ms) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      auto env = recv(std::max(left, 1ms));
      if (env && env->body_case() == kind) return env;
    }
    return std::nullopt;
  }
  zmq::socket_t sock;
};

struct Fixture {
  explicit Fixture(storage::Store* storeOverride = nullptr,
                   std::chrono::milliseconds interval = 20ms,
                   std::function<void(const ingest::RankProgressUpdate&)> onProgress = {},
                   std::chrono::milliseconds commitGap = 0ms,
                   std::chrono::milliseconds peerIdleTimeout = 2min) {
    storage::SqliteOptions so;
    so.path = dir.path() + "/ingest.db";
    auto opened = storage::openSqliteStore(so);
    REQUIRE(opened.isOk());
    store = std::move(opened.value());
    ingest::IngestOptions io;
    io.endpoint = "tcp://127.0.0.1:0";
    io.commitInterval = interval;
    io.onRankProgress = std::move(onProgress);
    io.minCommitGap = commitGap;
    io.peerIdleTimeout = peerIdleTimeout;
    server = std::make_unique<ingest::IngestServer>(io, storeOverride ? *storeOverride : *store);
    REQUIRE(server->start().isOk());
  }
  ~Fixture() { server->stop(); }
  uint64_t rejects(const std::string& reason) {
    auto s = server->stats();
    auto it = s.rejects.find(reason);
    return it == s.rejects.end() ? 0 : it->second;
  }
  size_t rows(const std::string& job) {
    storage::StepQuery q;
    q.job = job;
    q.limit = 100000;
    auto r = store->steps(q);
    REQUIRE(r.isOk());
    return r->size();
  }
  TempDir dir;
  std::unique_ptr<storage::Store> store;
  std::unique_ptr<ingest::IngestServer> server;
  zmq::context_t ctx{1};
};

}  // namespace trainscope::ingest::testing
