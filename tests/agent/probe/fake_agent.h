// A minimal in-test agent: a ROUTER socket on an ipc endpoint in a temp dir, served by its own
// thread, that records every batch it receives and acks them unless told not to.
#pragma once

#include <zmq.h>

#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/probe/trainscope_probe.h"
#include "schema/wire.h"
#include "tests/common/support.h"

namespace trainscope::probe::testing {

using trainscope::tests::TempDir;
using trainscope::tests::waitFor;

// A probe config that connects to `endpoint` as `rank` of `worldSize` in `job`. The strings
// must outlive the probe's creation.
inline ts_probe_config agentConfig(const std::string& endpoint, const char* job, int32_t rank,
                                   int32_t worldSize) {
  ts_probe_config c;
  ts_config_init(&c);
  c.agent_endpoint = endpoint.c_str();
  c.job = job;
  c.rank = rank;
  c.world_size = worldSize;
  return c;
}

struct ReceivedBatch {
  uint64_t seq;
  wire::Batch batch;
};

class FakeAgent {
 public:
  explicit FakeAgent(std::string endpoint) : endpoint_(std::move(endpoint)) {
    ctx_ = zmq_ctx_new();
    sock_ = zmq_socket(ctx_, ZMQ_ROUTER);
    const int zero = 0;
    zmq_setsockopt(sock_, ZMQ_LINGER, &zero, sizeof(zero));
    bound_ = zmq_bind(sock_, endpoint_.c_str()) == 0;
    thread_ = std::thread([this] { run(); });
  }
  ~FakeAgent() {
    stop_ = true;
    thread_.join();
    zmq_close(sock_);
    zmq_ctx_term(ctx_);
  }
  bool bound() const { return bound_; }
  void setAutoAck(bool on) { autoAck_ = on; }
  // Acks everything received so far (cumulative).
  void ackNow() { ackRequested_ = true; }
  // Sends `env` to the last peer heard from (from the agent's thread).
  void sendToPeer(const wire::Envelope& env) {
    std::lock_guard<std::mutex> lock(mu_);
    outbox_.push_back(env);
  }

  std::vector<ReceivedBatch> batches() {
    std::lock_guard<std::mutex> lock(mu_);
    return batches_;
  }
  // Step numbers of every StepReport received, in arrival order (repeats included).
  std::vector<int64_t> steps() {
    std::vector<int64_t> out;
    for (const auto& b : batches()) {
      for (const auto& item : b.batch.items()) {
        if (item.has_step()) out.push_back(item.step().step());
      }
    }
    return out;
  }
  size_t count(wire::Envelope::BodyCase body) {
    size_t n = 0;
    for (const auto& b : batches()) {
      for (const auto& item : b.batch.items()) n += item.body_case() == body ? 1 : 0;
    }
    return n;
  }

 private:
  void sendAck(const std::string& peer, uint64_t seq) {
    wire::Envelope env;
    env.mutable_ack()->set_seq(seq);
    const std::string frame = wire::encode(env);
    zmq_send(sock_, peer.data(), peer.size(), ZMQ_SNDMORE);
    zmq_send(sock_, frame.data(), frame.size(), 0);
  }

  void run() {
    std::string peer;
    uint64_t maxSeq = 0;
    while (!stop_) {
      zmq_pollitem_t item{sock_, 0, ZMQ_POLLIN, 0};
      zmq_poll(&item, 1, 10);
      if (ackRequested_.exchange(false) && !peer.empty()) sendAck(peer, maxSeq);
      if (!peer.empty()) {
        std::vector<wire::Envelope> out;
        {
          std::lock_guard<std::mutex> lock(mu_);
          out.swap(outbox_);
        }
        for (wire::Envelope& env : out) {
          const std::string frame = wire::encode(env);
          zmq_send(sock_, peer.data(), peer.size(), ZMQ_SNDMORE);
          zmq_send(sock_, frame.data(), frame.size(), 0);
        }
      }
      if ((item.revents & ZMQ_POLLIN) == 0) continue;
      zmq_msg_t id;
      zmq_msg_t body;
      zmq_msg_init(&id);
      zmq_msg_init(&body);
      zmq_msg_recv(&id, sock_, 0);
      zmq_msg_recv(&body, sock_, 0);
      peer.assign(static_cast<const char*>(zmq_msg_data(&id)), zmq_msg_size(&id));
      auto env = wire::decode(zmq_msg_data(&body), zmq_msg_size(&body));
      zmq_msg_close(&id);
      zmq_msg_close(&body);
      if (!env || !env->has_batch()) continue;
      {
        std::lock_guard<std::mutex> lock(mu_);
        batches_.push_back(ReceivedBatch{env->batch().seq(), env->batch()});
      }
      maxSeq = std::max(maxSeq, env->batch().seq());
      if (autoAck_) sendAck(peer, maxSeq);
    }
  }

  std::string endpoint_;
  void* ctx_ = nullptr;
  void* sock_ = nullptr;
  bool bound_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<bool> autoAck_{true};
  std::atomic<bool> ackRequested_{false};
  std::mutex mu_;
  std::vector<ReceivedBatch> batches_;  // guarded by mu_
  std::vector<wire::Envelope> outbox_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace trainscope::probe::testing
