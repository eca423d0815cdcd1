// The simulator's emission layer against the real probe: a fake agent (a ZeroMQ ROUTER that
// acknowledges every batch) receives the step reports of a small simulated run, and they must
// show what the model put in: every (rank, step) once, the phase shares, per-peer link totals,
// and the injects.
#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include <catch2/catch.hpp>
#include <zmq.hpp>

#include "schema/trainscope.pb.h"
#include "schema/wire.h"
#include "tests/e2e/harness.h"
#include "tools/simtrain/sim_runner.h"
#include "tools/simtrain/step_model.h"

using namespace trainscope;
using namespace trainscope::e2e;

namespace {

class FakeAgent {
 public:
  explicit FakeAgent(const std::string& endpoint) : router_(ctx_, zmq::socket_type::router) {
    router_.set(zmq::sockopt::linger, 0);
    router_.bind(endpoint);
    thread_ = std::thread([this] { loop(); });
  }
  ~FakeAgent() {
    stop_ = true;
    thread_.join();
  }
  std::map<std::pair<uint32_t, int64_t>, wire::StepReport> reports() {
    std::lock_guard<std::mutex> lock(mu_);
    return reports_;
  }

 private:
  void loop() {
    zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0}};
    while (!stop_) {
      if (zmq::poll(items, 1, std::chrono::milliseconds(50)) <= 0) continue;
      zmq::message_t id, frame;
      if (!router_.recv(id, zmq::recv_flags::dontwait)) continue;
      if (!router_.recv(frame, zmq::recv_flags::none)) continue;
      auto env = wire::decode(frame.data(), frame.size());
      if (!env || !env->has_batch()) continue;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto& item : env->batch().items()) {
          if (!item.has_step()) continue;
          const auto key = std::make_pair(item.step().rank(), item.step().step());
          // A resend after a lost ack is legal: keep the first copy.
          reports_.emplace(key, item.step());
        }
      }
      wire::Envelope ack;
      ack.mutable_ack()->set_seq(env->batch().seq());
      const std::string out = wire::encode(ack);
      router_.send(id, zmq::send_flags::sndmore);
      router_.send(zmq::buffer(out), zmq::send_flags::none);
    }
  }
  zmq::context_t ctx_;
  zmq::socket_t router_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::map<std::pair<uint32_t, int64_t>, wire::StepReport> reports_;  // guarded by mu_
};

double mean(const std::map<std::pair<uint32_t, int64_t>, wire::StepReport>& reports, uint32_t rank,
            int64_t from, int64_t to, int64_t (wire::StepReport::*field)() const) {
  double sum = 0;
  for (int64_t s = from; s < to; ++s) sum += static_cast<double>((reports.at({rank, s}).*field)());
  return sum / static_cast<double>(to - from);
}

}  // namespace

TEST_CASE("sim: the probe's step reports show the model's phases and injected faults") {
  TempDir dir;
  const std::string ep = "ipc://" + (dir / "agent.sock");
  FakeAgent agent(ep);
  sim::SimOptions o;
  o.agents = {ep};
  o.job = "sim-probe-test";
  o.ranks = 4;
  o.steps = 40;
  o.warmup = 0;
  o.fast = true;
  o.quiet = true;
  o.injects.push_back(*sim::parseInject("straggler:rank=2,from=20,factor=1.5"));
  o.injects.push_back(*sim::parseInject("comm:rank=1,from=30,factor=2"));
  REQUIRE(sim::run(o) == sim::kExitOk);

  const auto reports = agent.reports();
  REQUIRE(reports.size() == 160);
  for (const auto& [key, r] : reports) {
    INFO("rank " << key.first << " step " << key.second);
    CHECK(r.job() == "sim-probe-test");
    const double d = static_cast<double>(r.duration_ns());
    CHECK(d == Approx(100e6).epsilon(0.5));
    CHECK(static_cast<double>(r.data_ns()) / d == Approx(sim::kDataShare).epsilon(0.4));
    CHECK(static_cast<double>(r.compute_ns()) / d > 0.6);
    CHECK(r.comm_ns() > 0);
    CHECK(r.exposed_comm_ns() <= r.comm_ns());
    CHECK(r.ops_size() > 0);
    REQUIRE(r.collectives_size() == 1);
    CHECK(r.collectives(0).count() == 4);
    CHECK(r.collectives(0).group() == "dp");
    CHECK(r.dropped() == 0);
    // One link to the ring neighbour: the step's 4 bucket transfers (ts_link_transfer).
    REQUIRE(r.links_size() == 1);
    CHECK(r.links(0).peer() == (key.first + 1) % 4);
    CHECK(r.links(0).group() == "dp");
    CHECK(r.links(0).transfers() == 4);
    CHECK(r.links(0).bytes() == 4 * o.bucketBytes * 2 * 3 / 4);
    CHECK(r.links(0).wire_ns() > 0);
    CHECK(r.links(0).wire_ns() <= r.comm_ns());
  }
  auto wireNs = [&](uint32_t rank, int64_t from, int64_t to) {
    double sum = 0;
    for (int64_t s = from; s < to; ++s)
      sum += static_cast<double>(reports.at({rank, s}).links(0).wire_ns());
    return sum / static_cast<double>(to - from);
  };
  // The slow link shows on its sender only; the straggler moves no link.
  CHECK(wireNs(1, 30, 40) / wireNs(1, 0, 30) == Approx(2.0).epsilon(0.1));
  CHECK(wireNs(0, 30, 40) / wireNs(0, 0, 30) == Approx(1.0).epsilon(0.1));
  CHECK(wireNs(2, 30, 40) / wireNs(2, 0, 30) == Approx(1.0).epsilon(0.1));
  auto compute = &wire::StepReport::compute_ns;
  auto comm = &wire::StepReport::comm_ns;
  CHECK(mean(reports, 2, 20, 40, compute) / mean(reports, 2, 0, 20, compute) ==
        Approx(1.5).epsilon(0.1));
  CHECK(mean(reports, 0, 20, 40, compute) / mean(reports, 0, 0, 20, compute) ==
        Approx(1.0).epsilon(0.05));
  // The healthy ranks wait for the straggler inside their collectives.
  CHECK(mean(reports, 0, 20, 30, comm) > 2 * mean(reports, 0, 0, 20, comm));
}
