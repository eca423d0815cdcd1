// The relay tests' fakes: a fake probe (DEALER on ipc in a temp dir) and a fake collector
// (ROUTER on tcp://127.0.0.1:<free port>) that talk to a real Agent run on a thread by
// AgentRunner. Test-only; each object is used from the test's main thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>
#include <zmq.hpp>

#include "agent/agent.h"
#include "common/clock.h"
#include "schema/wire.h"
#include "tests/common/support.h"

namespace trainscope::agent::testing {

namespace wire = trainscope::wire;

inline constexpr int64_t kCollectorAheadNs = 5'000'000'000;  // the fake collector's clock skew

using trainscope::tests::TempDir;
using trainscope::tests::waitFor;

// A free loopback port below the kernel's ephemeral range. A port from that range (what
// binding port 0 gives) can be the very source port the agent's next dial picks while nothing
// listens: on loopback that connects to itself (TCP simultaneous open), a DEALER then
// handshakes with itself, and the agent counts itself connected to a collector.
inline std::string freeTcpEndpoint(zmq::context_t& ctx) {
  int ephemeralLow = 32768;
  if (std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d", &ephemeralLow) != 1) ephemeralLow = 32768;
    std::fclose(f);
  }
  const int high = std::min(ephemeralLow, 65536);
  const int low = std::max(1024, high - 12000);
  thread_local std::minstd_rand rng(static_cast<unsigned>(::getpid()) * 7919U +
                                    static_cast<unsigned>(monotonicNowNs() & 0xffff));
  for (int tries = 0; tries < 1000; ++tries) {
    const int port = low + static_cast<int>(rng() % static_cast<unsigned>(high - low));
    zmq::socket_t s(ctx, zmq::socket_type::router);
    s.set(zmq::sockopt::linger, 0);
    try {
      s.bind("tcp://127.0.0.1:" + std::to_string(port));
    } catch (const zmq::error_t&) {
      continue;  // taken
    }
    return s.get(zmq::sockopt::last_endpoint);
  }
  FAIL("no free loopback port in [" << low << ", " << high << ")");
  return "";
}

inline AgentOptions testOptions(const TempDir& tmp, const std::string& collector) {
  AgentOptions o;
  o.collectors = {collector};
  o.endpoint = "ipc://" + tmp.sub("agent.sock");
  o.node = "test-node";
  o.spoolDir = tmp.sub("spool");
  o.captureDir = tmp.sub("captures");
  o.sampleIntervalMs = 200;
  o.heartbeatIntervalMs = 100;
  o.batchLingerMs = 5;
  o.resendTimeoutMs = 1000;
  o.syncIntervalMs = 100;
  o.logLevel = trainscope::LogLevel::kWarn;
  return o;
}

// Runs an Agent's event loop on a thread for the life of the object.
class AgentRunner {
 public:
  explicit AgentRunner(const AgentOptions& o) : agent_(o) {
    trainscope::Status st = agent_.start();
    INFO(st.message());
    REQUIRE(st.isOk());
    thread_ = std::thread([this] { result_ = agent_.run(); });
  }
  ~AgentRunner() {
    agent_.stop();
    thread_.join();
  }
  AgentStats stats() const { return agent_.stats(); }

 private:
  Agent agent_;
  std::thread thread_;
  trainscope::Status result_;
};

inline wire::Envelope stepItem(int64_t step, const std::string& job = "jobA", uint32_t rank = 3) {
  wire::Envelope e;
  // The real probe stamps its items; odd steps go without, so the agent's re-encoding path
  // is exercised next to the one that stores the probe's bytes as they came.
  if (step % 2 == 0) e.set_schema_version(wire::kSchemaVersion);
  auto* s = e.mutable_step();
  s->set_job(job);
  s->set_rank(rank);
  s->set_step(step);
  s->set_duration_ns(100'000'000);
  auto* op = s->add_ops();
  op->set_name("aten::mm");
  op->set_count(4);
  op->set_total_ns(1000);
  return e;
}

class FakeProbe {
 public:
  FakeProbe(zmq::context_t& ctx, const std::string& endpoint)
      : sock_(ctx, zmq::socket_type::dealer) {
    sock_.set(zmq::sockopt::linger, 0);
    sock_.connect(endpoint);
  }
  void sendRaw(const std::string& data) { sock_.send(zmq::buffer(data), zmq::send_flags::none); }
  void send(wire::Envelope env) { sendRaw(wire::encode(env)); }
  void hello() {
    wire::Envelope e;
    auto* r = e.mutable_rank_hello()->mutable_rank();
    r->set_job("jobA");
    r->set_rank(3);
    r->set_world_size(8);
    r->set_pid(static_cast<uint32_t>(::getpid()));
    send(e);
  }
  // One batch holding `items` as they are.
  void sendItems(uint64_t seq, const std::vector<wire::Envelope>& items) {
    wire::Envelope e;
    e.mutable_batch()->set_seq(seq);
    for (const auto& item : items) *e.mutable_batch()->add_items() = item;
    send(e);
  }
  void sendSteps(uint64_t seq, int64_t from, int64_t to) {
    wire::Envelope e;
    e.mutable_batch()->set_seq(seq);
    for (int64_t s = from; s < to; ++s) *e.mutable_batch()->add_items() = stepItem(s);
    send(e);
  }
  // The next envelope from the agent, or nothing within the timeout.
  bool recv(wire::Envelope* out, int timeoutMs = 5000) {
    zmq::pollitem_t item{sock_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(timeoutMs)) <= 0) return false;
    zmq::message_t m;
    if (!sock_.recv(m, zmq::recv_flags::dontwait)) return false;
    auto r = wire::decode(m.data(), m.size());
    if (!r) return false;
    *out = *r;
    return true;
  }
  uint64_t awaitAck() {
    wire::Envelope e;
    while (recv(&e)) {
      if (e.has_ack()) return e.ack().seq();
    }
    return 0;
  }

 private:
  zmq::socket_t sock_;
};

class FakeCollector {
 public:
  FakeCollector(zmq::context_t& ctx, const std::string& endpoint, bool ack = true)
      : sock_(ctx, zmq::socket_type::router), ack_(ack) {
    sock_.set(zmq::sockopt::linger, 0);
    // A socket closed a moment ago releases its port on ZeroMQ's I/O thread, a little later.
    for (int attempt = 0;; ++attempt) {
      try {
        sock_.bind(endpoint);
        return;
      } catch (const zmq::error_t& e) {
        if (e.num() != EADDRINUSE || attempt >= 100) throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }
  // Handles what arrives for up to timeoutMs or until done() holds.
  bool pumpUntil(const std::function<bool()>& done, int timeoutMs = 10000) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
    while (!done()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      zmq::pollitem_t item{sock_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(std::min<int64_t>(left.count(), 50))) <= 0)
        continue;
      zmq::message_t rid, frame;
      if (!sock_.recv(rid, zmq::recv_flags::dontwait)) continue;
      if (!sock_.recv(frame, zmq::recv_flags::dontwait)) continue;
      rid_ = rid.to_string();
      auto r = wire::decode(frame.data(), frame.size());
      REQUIRE(r.isOk());
      handle(*r);
    }
    return true;
  }
  void sendToAgent(wire::Envelope env) {
    std::string data = wire::encode(env);
    sock_.send(zmq::buffer(rid_), zmq::send_flags::sndmore);
    sock_.send(zmq::buffer(data), zmq::send_flags::none);
  }
  bool seenStep(int64_t step) const {
    for (int64_t s : steps) {
      if (s == step) return true;
    }
    return false;
  }

  std::vector<int64_t> steps;  // step items, in arrival order (repeats included)
  std::vector<std::pair<std::string, int64_t>> jobSteps;  // the same with their jobs
  std::vector<wire::Envelope> others;                     // every non-step item
  int hellos = 0;
  int heartbeats = 0;
  int batches = 0;
  // Batches are acknowledged only when the next heartbeat arrives: what the agent ships past
  // its unacked bound then proves that it kept sending heartbeats meanwhile.
  bool ackOnHeartbeat = false;

 private:
  void handle(const wire::Envelope& env) {
    if (env.has_agent_hello()) {
      ++hellos;
    } else if (env.has_heartbeat()) {
      ++heartbeats;
      wire::Envelope reply;
      auto* r = reply.mutable_heartbeat_reply();
      r->set_t1_ns(env.heartbeat().t1_ns());
      r->set_t2_ns(trainscope::wallNowNs() + kCollectorAheadNs);
      r->set_t3_ns(trainscope::wallNowNs() + kCollectorAheadNs);
      sendToAgent(reply);
      for (uint64_t seq : heldAcks_) ackBatch(seq);
      heldAcks_.clear();
    } else if (env.has_batch()) {
      ++batches;
      for (const auto& item : env.batch().items()) {
        if (item.has_step()) {
          steps.push_back(item.step().step());
          jobSteps.emplace_back(item.step().job(), item.step().step());
        } else {
          others.push_back(item);
        }
      }
      if (ack_ && ackOnHeartbeat) {
        heldAcks_.push_back(env.batch().seq());
      } else if (ack_) {
        ackBatch(env.batch().seq());
      }
    }
  }
  void ackBatch(uint64_t seq) {
    wire::Envelope a;
    a.mutable_ack()->set_seq(seq);
    sendToAgent(a);
  }

  zmq::socket_t sock_;
  bool ack_;
  std::vector<uint64_t> heldAcks_;  // with ackOnHeartbeat, until the next heartbeat
  std::string rid_;
};

}  // namespace trainscope::agent::testing
