// Endpoint squatting (issue 13 item 6): a probe must send nothing to an agent endpoint bound
// by a process of another user. As root, a child forked here becomes `nobody` and binds the
// endpoint first; the probe's transport must refuse it before its first message, while a
// listener of its own user gets the reports. Not root: skipped (exit 77), the pure rule is
// still checked by the first case.
#include <catch2/catch.hpp>

#include <zmq.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "agent/probe/peer_check.h"
#include "agent/probe/transport.h"
#include "common/clock.h"
#include "schema/wire.h"
#include "tests/agent/probe/fake_agent.h"
#include "tests/common/support.h"

using trainscope::probe::PeerCheck;
using trainscope::probe::Transport;
using trainscope::probe::TransportOptions;
using trainscope::probe::testing::TempDir;
namespace wire = trainscope::wire;

namespace {

constexpr uint32_t kNobody = 65534;

wire::RankInfo rankInfo() {
  wire::RankInfo info;
  info.set_job("peer-test");
  info.set_rank(0);
  info.set_world_size(1);
  return info;
}

wire::StepReport report(int64_t step) {
  wire::StepReport r;
  r.set_job("peer-test");
  r.set_step(step);
  r.set_duration_ns(1000);
  return r;
}

// Runs a transport to `endpoint` for about `ms`, adding a report every 50 ms; `onTurn` runs
// after each service pass.
void drive(
    Transport& t, int ms, const std::function<void()>& onTurn = [] {}) {
  const int64_t end = trainscope::monotonicNowNs() + int64_t{ms} * 1'000'000;
  int64_t step = 0;
  while (trainscope::monotonicNowNs() < end) {
    t.addReport(report(step++), trainscope::monotonicNowNs());
    for (int i = 0; i < 5; ++i) {
      t.service(trainscope::monotonicNowNs(), false);
      onTurn();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

}  // namespace

TEST_CASE("the peer rule: our own uid or root, never another user or an unidentified peer") {
  uint32_t uid = 0, pid = 0;
  CHECK(PeerCheck::allowed("localhost:1000:1000:42", 1000, &uid, &pid));
  CHECK(uid == 1000);
  CHECK(pid == 42);
  CHECK(PeerCheck::allowed("localhost:0:0:7", 1000, &uid, &pid));  // a root agent
  CHECK_FALSE(PeerCheck::allowed("localhost:65534:65534:9", 0, &uid, &pid));
  CHECK(uid == 65534);
  CHECK_FALSE(PeerCheck::allowed("localhost:1001:1001:9", 1000, &uid, &pid));
  CHECK_FALSE(PeerCheck::allowed("", 0, &uid, &pid));
  CHECK(uid == UINT32_MAX);
  CHECK_FALSE(PeerCheck::allowed("::1", 0, &uid, &pid));
  CHECK_FALSE(PeerCheck::allowed("localhost:x:0:1", 0, &uid, &pid));
}

TEST_CASE("a probe sends nothing to an endpoint another user bound first, and reports to its own",
          "[root]") {
  trainscope::tests::requireRoot("cannot run a squatter as another user");
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0777) == 0);  // the squatter may bind in it
  const std::string endpoint = "ipc://" + dir.path() + "/agent.sock";

  // The squatter: forked before this process has a ZeroMQ context, it drops to nobody,
  // binds the endpoint and counts what arrives for 4 s.
  int ready[2], result[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(result) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) ::_exit(3);
    void* ctx = zmq_ctx_new();
    void* router = zmq_socket(ctx, ZMQ_ROUTER);
    if (zmq_bind(router, endpoint.c_str()) != 0) ::_exit(4);
    if (::write(ready[1], "1", 1) != 1) ::_exit(5);
    int received = 0;
    const int64_t end = trainscope::monotonicNowNs() + 4'000'000'000;
    while (trainscope::monotonicNowNs() < end) {
      zmq_pollitem_t item{router, 0, ZMQ_POLLIN, 0};
      if (zmq_poll(&item, 1, 50) > 0) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        while (zmq_msg_recv(&m, router, ZMQ_DONTWAIT) >= 0) ++received;
        zmq_msg_close(&m);
      }
    }
    const std::string n = std::to_string(received);
    if (::write(result[1], n.data(), n.size()) < 0) ::_exit(6);
    ::_exit(0);
  }
  ::close(ready[1]);
  ::close(result[1]);
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);

  void* ctx = zmq_ctx_new();
  {
    TransportOptions o;
    o.endpoint = endpoint;
    Transport t(ctx, o, rankInfo());
    REQUIRE(t.open().isOk());
    drive(t, 2000);
    CHECK(t.reportsSent.load() == 0);
    CHECK(t.batchesSent.load() == 0);
    CHECK_FALSE(t.connected(trainscope::monotonicNowNs()));
  }
  char buf[32] = {};
  const ssize_t n = ::read(result[0], buf, sizeof buf - 1);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  REQUIRE(n > 0);
  CHECK(std::string(buf) == "0");  // frames the squatter received, hellos and ZMTP aside

  // The same endpoint bound by our own user: the reports flow and are acked.
  ::unlink((dir.path() + "/agent.sock").c_str());
  void* router = zmq_socket(ctx, ZMQ_ROUTER);
  REQUIRE(zmq_bind(router, endpoint.c_str()) == 0);
  {
    TransportOptions o;
    o.endpoint = endpoint;
    Transport t(ctx, o, rankInfo());
    REQUIRE(t.open().isOk());
    drive(t, 1500, [&] {
      // Ack every batch.
      for (;;) {
        zmq_msg_t id, frame;
        zmq_msg_init(&id);
        if (zmq_msg_recv(&id, router, ZMQ_DONTWAIT) < 0) {
          zmq_msg_close(&id);
          break;
        }
        zmq_msg_init(&frame);
        zmq_msg_recv(&frame, router, 0);
        auto env = wire::decode(zmq_msg_data(&frame), zmq_msg_size(&frame));
        if (env.isOk() && env->has_batch()) {
          wire::Envelope ack;
          ack.mutable_ack()->set_seq(env->batch().seq());
          const std::string data = wire::encode(ack);
          zmq_send(router, zmq_msg_data(&id), zmq_msg_size(&id), ZMQ_SNDMORE);
          zmq_send(router, data.data(), data.size(), 0);
        }
        zmq_msg_close(&id);
        zmq_msg_close(&frame);
      }
    });
    CHECK(t.reportsAcked.load() > 0);
    CHECK(t.connected(trainscope::monotonicNowNs()));
  }
  zmq_close(router);
  zmq_ctx_term(ctx);
}
