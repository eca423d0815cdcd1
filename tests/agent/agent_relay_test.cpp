// In-process tests of the agent's relaying: a fake probe and a fake collector
// (tests/agent/relay_fakes.h) talk to a real Agent on a thread.
#include "agent/agent.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include <catch2/catch.hpp>
#include <zmq.hpp>

#include "schema/wire.h"
#include "tests/agent/relay_fakes.h"
#include "tests/common/support.h"

namespace wire = trainscope::wire;
using namespace trainscope::agent::testing;  // NOLINT(google-build-using-namespace): the fakes
using trainscope::agent::AgentOptions;
using trainscope::agent::AgentStats;

namespace {

std::vector<int64_t> firstOccurrences(const std::vector<int64_t>& v) {
  std::vector<int64_t> out;
  for (int64_t s : v) {
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

}  // namespace

TEST_CASE("agent acks probe batches, then delivers them in order once the collector appears") {
  TempDir tmp;
  zmq::context_t ctx;
  std::string collectorEp = freeTcpEndpoint(ctx);
  AgentOptions opts = testOptions(tmp, collectorEp);
  AgentRunner agent(opts);

  FakeProbe probe(ctx, opts.endpoint);
  probe.hello();
  probe.sendSteps(1, 0, 3);
  CHECK(probe.awaitAck() == 1);
  probe.sendSteps(2, 3, 6);
  CHECK(probe.awaitAck() == 2);
  // Stats are published after the loop turn that sent the ack; wait for them.
  REQUIRE(waitFor([&] { return agent.stats().ranks == 1 && agent.stats().probeItems == 6; }));
  AgentStats before = agent.stats();
  CHECK(before.spoolPending >= 7);  // 6 steps + the rank's hello (+ host samples)
  CHECK_FALSE(before.collectorConnected);

  FakeCollector collector(ctx, collectorEp);
  REQUIRE(collector.pumpUntil(
      [&] { return collector.seenStep(5) && agent.stats().spoolPending == 0; }));
  CHECK(collector.steps == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
  CHECK(collector.hellos >= 1);
  bool sawRank = false, sawHost = false;
  for (const auto& e : collector.others) {
    if (e.has_rank_hello()) {
      sawRank = true;
      CHECK(e.rank_hello().rank().node() == "test-node");
      CHECK(e.rank_hello().rank().job() == "jobA");
    }
    if (e.has_host()) {
      sawHost = true;
      CHECK(e.host().node() == "test-node");
    }
  }
  CHECK(sawRank);
  CHECK(sawHost);

  SECTION("heartbeat replies give a clock-offset estimate") {
    REQUIRE(collector.pumpUntil([&] { return agent.stats().haveOffset; }));
    AgentStats s = agent.stats();
    // The estimate is off by at most half its round trip (both clocks are this machine's).
    CHECK(s.rttNs >= 0);
    CHECK(std::llabs(s.offsetNs - kCollectorAheadNs) <= s.rttNs / 2 + 1000);
    CHECK(s.collectorConnected);
  }

  SECTION("a command reaches the probe of its rank; one for an unknown job is answered failed") {
    REQUIRE(collector.pumpUntil([&] { return collector.heartbeats > 0; }));
    wire::Envelope cmd;
    cmd.mutable_command()->set_id("cmd-1");
    cmd.mutable_command()->set_job("jobA");
    cmd.mutable_command()->add_ranks(3);
    cmd.mutable_command()->mutable_stacks()->set_capture_id("cap-1");
    collector.sendToAgent(cmd);
    wire::Envelope got;
    bool gotCommand = false;
    while (!gotCommand && probe.recv(&got)) gotCommand = got.has_command();
    REQUIRE(gotCommand);
    CHECK(got.command().id() == "cmd-1");
    CHECK(got.command().stacks().capture_id() == "cap-1");

    cmd.mutable_command()->set_id("cmd-2");
    cmd.mutable_command()->set_job("other-job");
    collector.sendToAgent(cmd);
    auto failedStatus = [&] {
      for (const auto& e : collector.others) {
        if (e.has_command_status() && e.command_status().command_id() == "cmd-2") {
          return e.command_status().state() == "failed";
        }
      }
      return false;
    };
    CHECK(collector.pumpUntil(failedStatus));
    CHECK(waitFor([&] { return agent.stats().commandsUnmatched == 1; }));
  }

  SECTION("a malformed probe frame is answered, counted and not fatal") {
    probe.sendRaw("this is not a protobuf envelope \xff\xff\xff");
    wire::Envelope got;
    bool gotError = false;
    while (!gotError && probe.recv(&got)) gotError = got.has_error();
    REQUIRE(gotError);
    CHECK(got.error().reason() == "malformed");
    CHECK(waitFor([&] { return agent.stats().rejects["malformed"] == 1; }));
    // The agent carries on.
    probe.sendSteps(3, 6, 7);
    CHECK(probe.awaitAck() == 3);
    CHECK(collector.pumpUntil([&] { return collector.seenStep(6); }));
  }

  SECTION("a batch's items are judged one by one; an item that does not parse refuses its frame") {
    // Step reports pass without being parsed; the heartbeat, a type probes may not send, is
    // refused alone and the batch is still acked.
    wire::Envelope heartbeat;
    heartbeat.mutable_heartbeat();
    wire::Envelope step6 = stepItem(6);
    probe.sendRaw(wire::encodeBatchFrame(3, {wire::encode(step6), wire::encode(heartbeat)}));
    CHECK(probe.awaitAck() == 3);
    CHECK(waitFor([&] { return agent.stats().rejects["bad_item"] == 1; }));
    CHECK(collector.pumpUntil([&] { return collector.seenStep(6); }));

    // A step report beside bytes that are no envelope: the frame is refused whole, not acked,
    // and its step report is not delivered.
    wire::Envelope step7 = stepItem(7);
    probe.sendRaw(wire::encodeBatchFrame(4, {wire::encode(step7), std::string("\xff\xff\xff")}));
    wire::Envelope got;
    bool gotError = false;
    while (!gotError && probe.recv(&got)) gotError = got.has_error();
    REQUIRE(gotError);
    CHECK(got.error().reason() == "malformed");
    probe.sendSteps(5, 8, 9);
    CHECK(probe.awaitAck() == 5);
    CHECK(collector.pumpUntil([&] { return collector.seenStep(8); }));
    CHECK_FALSE(collector.seenStep(7));
  }
}

TEST_CASE("agent resends what a killed collector had not acked to the next collector") {
  TempDir tmp;
  zmq::context_t ctx;
  std::string collectorEp = freeTcpEndpoint(ctx);
  AgentOptions opts = testOptions(tmp, collectorEp);
  AgentRunner agent(opts);
  FakeProbe probe(ctx, opts.endpoint);
  probe.hello();
  {
    FakeCollector dying(ctx, collectorEp, /*ack=*/false);
    probe.sendSteps(1, 0, 3);
    CHECK(probe.awaitAck() == 1);
    REQUIRE(dying.pumpUntil([&] { return dying.seenStep(2); }));
  }  // closed without acking: a crash mid-run
  probe.sendSteps(2, 3, 6);
  CHECK(probe.awaitAck() == 2);
  FakeCollector next(ctx, collectorEp);
  REQUIRE(next.pumpUntil([&] { return next.seenStep(5) && agent.stats().spoolPending == 0; }));
  CHECK(firstOccurrences(next.steps) == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("a restarted agent replays its spool in order") {
  TempDir tmp;
  zmq::context_t ctx;
  std::string collectorEp = freeTcpEndpoint(ctx);
  AgentOptions opts = testOptions(tmp, collectorEp);
  {
    AgentRunner agent(opts);
    FakeProbe probe(ctx, opts.endpoint);
    probe.hello();
    probe.sendSteps(1, 0, 4);
    CHECK(probe.awaitAck() == 1);
  }  // stopped while the collector was away
  AgentRunner agent(opts);
  FakeCollector collector(ctx, collectorEp);
  REQUIRE(collector.pumpUntil(
      [&] { return collector.seenStep(3) && agent.stats().spoolPending == 0; }));
  CHECK(collector.steps == std::vector<int64_t>{0, 1, 2, 3});
}

TEST_CASE(
    "a hello delivered after the rank's goodbye does not register it again; a new process does") {
  // Issue 10: a probe's hello that reached the agent after its goodbye re-registered the ended
  // rank, whose exited process the agent then reported gone (a hang after a clean end).
  TempDir tmp;
  zmq::context_t ctx;
  AgentOptions opts = testOptions(tmp, freeTcpEndpoint(ctx));
  AgentRunner agent(opts);
  FakeProbe probe(ctx, opts.endpoint);
  probe.hello();
  probe.sendSteps(1, 0, 3);
  CHECK(probe.awaitAck() == 1);
  REQUIRE(waitFor([&] { return agent.stats().ranks == 1; }));

  wire::Envelope bye;
  bye.mutable_rank_goodbye()->set_job("jobA");
  bye.mutable_rank_goodbye()->set_rank(3);
  bye.mutable_rank_goodbye()->set_last_step(2);
  probe.sendItems(2, {bye});
  CHECK(probe.awaitAck() == 2);
  REQUIRE(waitFor([&] { return agent.stats().ranks == 0; }));

  wire::Envelope hello;
  auto* r = hello.mutable_rank_hello()->mutable_rank();
  r->set_job("jobA");
  r->set_rank(3);
  r->set_world_size(8);
  r->set_pid(static_cast<uint32_t>(::getpid()));
  probe.sendItems(3, {hello});
  CHECK(probe.awaitAck() == 3);
  REQUIRE(waitFor([&] { return agent.stats().hellosAfterGoodbye == 1; }));
  CHECK(agent.stats().ranks == 0);

  // The rank runs again in a new process (a restart): registered.
  r->set_pid(static_cast<uint32_t>(::getpid()) + 1);
  probe.sendItems(4, {hello});
  CHECK(probe.awaitAck() == 4);
  CHECK(waitFor([&] { return agent.stats().ranks == 1; }));
  CHECK(agent.stats().hellosAfterGoodbye == 1);
}
