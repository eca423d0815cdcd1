// The probe -> agent hop against an in-test ROUTER on an ipc endpoint (schema/PROTOCOL.md).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "agent/probe/probe.h"
#include "agent/probe/runtime.h"
#include "agent/probe/transport.h"
#include "tests/agent/probe/fake_agent.h"

using namespace trainscope::probe;
using trainscope::probe::testing::FakeAgent;
using trainscope::probe::testing::TempDir;
using trainscope::tests::waitFor;
using Body = trainscope::wire::Envelope::BodyCase;

namespace {

ts_probe_config connected(const std::string& endpoint) {
  return testing::agentConfig(endpoint, "transport-test", 1, 2);
}

void recordSteps(Probe& p, int64_t from, int64_t to) {
  for (int64_t s = from; s < to; ++s) {
    const int64_t base = 1'000'000'000 + s * 1'000'000;
    p.stepBegin(s, base);
    p.op(Name("kernel"), base + 10, 100);
    p.stepEnd(s, base + 1000);
  }
}

}  // namespace

TEST_CASE("reports arrive in batches and acks drain the backlog") {
  TempDir dir;
  const std::string ep = "ipc://" + dir.path() + "/agent.sock";
  FakeAgent agent(ep);
  REQUIRE(agent.bound());
  Probe p(connected(ep));
  REQUIRE(p.ok());
  recordSteps(p, 0, 5);
  REQUIRE(p.flush(5000) == 0);
  CHECK(agent.steps() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(agent.count(Body::kRankHello) >= 1);
  const auto hello = agent.batches().front().batch.items(0);
  REQUIRE(hello.has_rank_hello());
  CHECK(hello.rank_hello().rank().job() == "transport-test");
  CHECK(hello.rank_hello().rank().rank() == 1);
  CHECK(hello.rank_hello().rank().world_size() == 2);
  const ts_probe_stats st = p.stats();
  CHECK(st.reports_sent == 5);
  CHECK(st.reports_acked == 5);
  CHECK(st.backlog == 0);
  CHECK(st.connected == 1);
  // Sequence numbers increase per instance.
  const auto batches = agent.batches();
  for (size_t i = 1; i < batches.size(); ++i) CHECK(batches[i].seq > batches[i - 1].seq);
}

TEST_CASE("a batch without an ack is sent again after a second") {
  TempDir dir;
  const std::string ep = "ipc://" + dir.path() + "/agent.sock";
  FakeAgent agent(ep);
  agent.setAutoAck(false);
  Probe p(connected(ep));
  REQUIRE(p.ok());
  recordSteps(p, 0, 1);
  REQUIRE(waitFor([&] { return agent.steps().size() == 1; }, 3000));
  CHECK(p.stats().backlog == 1);
  CHECK(p.flush(200) == 1);  // not acknowledged
  REQUIRE(waitFor([&] { return agent.steps().size() >= 2; }, 3000));
  const auto steps = agent.steps();
  CHECK(steps[0] == 0);
  CHECK(steps[1] == 0);                // the same report again
  CHECK(p.stats().reports_sent == 1);  // resends are not first sends
  agent.ackNow();
  REQUIRE(p.flush(3000) == 0);
  CHECK(p.stats().backlog == 0);
  CHECK(p.stats().reports_acked == 1);
}

TEST_CASE("an absent agent bounds the backlog; an agent that appears gets it in order") {
  TempDir dir;
  const std::string ep = "ipc://" + dir.path() + "/agent.sock";
  ts_probe_config c = connected(ep);
  c.backlog_reports = 8;
  Probe p(c);
  REQUIRE(p.ok());
  recordSteps(p, 0, 20);
  CHECK(p.flush(300) == 1);
  ts_probe_stats st = p.stats();
  CHECK(st.steps_folded == 20);
  CHECK(st.backlog == 8);
  CHECK(st.backlog_dropped == 12);
  CHECK(st.reports_sent == 0);
  CHECK(st.connected == 0);

  FakeAgent agent(ep);
  REQUIRE(agent.bound());
  REQUIRE(p.flush(5000) == 0);
  std::vector<int64_t> expect;
  for (int64_t s = 12; s < 20; ++s) expect.push_back(s);
  CHECK(agent.steps() == expect);
  st = p.stats();
  CHECK(st.backlog == 0);
  CHECK(st.reports_acked == 8);
  CHECK(st.connected == 1);
}

TEST_CASE("destroy folds what is left and sends a goodbye") {
  TempDir dir;
  const std::string ep = "ipc://" + dir.path() + "/agent.sock";
  FakeAgent agent(ep);
  {
    Probe p(connected(ep), 2000);
    REQUIRE(p.ok());
    recordSteps(p, 0, 3);
    // No flush: destruction itself must fold the ended steps.
  }
  CHECK(agent.steps() == std::vector<int64_t>{0, 1, 2});
  REQUIRE(agent.count(Body::kRankGoodbye) == 1);
  for (const auto& b : agent.batches()) {
    for (const auto& item : b.batch.items()) {
      if (item.has_rank_goodbye()) {
        CHECK(item.rank_goodbye().last_step() == 2);
        CHECK(item.rank_goodbye().rank() == 1);
        CHECK(item.rank_goodbye().job() == "transport-test");
      }
    }
  }
}

TEST_CASE("no hello follows the goodbye, even while the goodbye waits for its ack") {
  // Issue 10: a hello sent after the goodbye re-registered the ended rank at the agent.
  TempDir dir;
  const std::string ep = "ipc://" + dir.path() + "/agent.sock";
  FakeAgent agent(ep);
  agent.setAutoAck(false);
  {
    // Destroy waits up to 3 s for the goodbye's ack, past the 2 s hello period.
    Probe p(connected(ep), 3000);
    REQUIRE(p.ok());
    recordSteps(p, 0, 3);
    REQUIRE(waitFor([&] { return agent.steps().size() >= 3; }, 3000));
    agent.ackNow();  // the hello and the reports: the next hello may be queued
    REQUIRE(waitFor([&] { return p.stats().backlog == 0; }, 3000));
  }
  uint64_t byeSeq = 0;
  for (const auto& b : agent.batches()) {
    for (const auto& item : b.batch.items()) {
      if (item.has_rank_goodbye() && byeSeq == 0) byeSeq = b.seq;
    }
  }
  REQUIRE(byeSeq != 0);
  int hellosAfter = 0;
  for (const auto& b : agent.batches()) {
    for (const auto& item : b.batch.items()) {
      if (b.seq > byeSeq && item.has_rank_hello()) ++hellosAfter;
    }
  }
  CHECK(hellosAfter == 0);
}

// The test ends only if destroy returns: without an agent to acknowledge the reports it gives
// up after its timeout instead of waiting for one.
TEST_CASE("destroy with no agent returns, its reports unacknowledged") {
  TempDir dir;
  const std::string ep = "ipc://" + dir.path() + "/nobody.sock";
  {
    Probe p(connected(ep), 100);
    REQUIRE(p.ok());
    recordSteps(p, 0, 3);
    REQUIRE(waitFor([&] { return p.stats().steps_folded == 3; }, 3000));
    CHECK(p.stats().reports_acked == 0);
  }  // destroyed here, with 3 reports unacknowledged
}

TEST_CASE("commands from the agent reach the command hook; error replies do not break") {
  TempDir dir;
  const std::string ep = "ipc://" + dir.path() + "/agent.sock";
  FakeAgent agent(ep);
  Probe p(connected(ep));
  REQUIRE(p.ok());
  std::atomic<int> commands{0};
  std::string lastId;
  std::mutex mu;
  p.onCommand([&](const trainscope::wire::Command& cmd) {
    std::lock_guard<std::mutex> lock(mu);
    lastId = cmd.id();
    ++commands;
  });
  recordSteps(p, 0, 1);
  REQUIRE(p.flush(5000) == 0);  // the agent knows the peer now
  trainscope::wire::Envelope err = trainscope::wire::errorReply("version", "test");
  agent.sendToPeer(err);
  trainscope::wire::Envelope cmd;
  cmd.mutable_command()->set_id("cap-1");
  cmd.mutable_command()->mutable_capture()->set_start_step(10);
  agent.sendToPeer(cmd);
  REQUIRE(waitFor([&] { return commands.load() == 1; }, 3000));
  {
    std::lock_guard<std::mutex> lock(mu);
    CHECK(lastId == "cap-1");
  }
  recordSteps(p, 1, 2);  // still working after both
  REQUIRE(p.flush(5000) == 0);
  CHECK(agent.steps() == std::vector<int64_t>{0, 1});
}

namespace {

// Drives a Transport on a clock of its own (service every 10 ms) and adds a report of the next
// step every `gapMs`, its end time `gapMs` after the previous one's; returns the steps of each
// batch the agent received, in order. Resends are off, so each batch arrives once.
std::vector<std::vector<int64_t>> batchesFor(TransportOptions o, int reports, int64_t gapMs) {
  TempDir dir;
  const std::string ep = "ipc://" + dir.path() + "/agent.sock";
  FakeAgent agent(ep);
  REQUIRE(agent.bound());
  void* ctx = zmq_ctx_new();
  o.endpoint = ep;
  o.resendAfterNs = int64_t{1} << 60;
  trainscope::wire::RankInfo info;
  info.set_job("batching");
  info.set_world_size(1);
  std::vector<std::vector<int64_t>> out;
  {
    Transport t(ctx, o, info);
    REQUIRE(t.open().isOk());
    const int64_t ms = 1'000'000;
    int64_t now = 1'000 * ms;
    // The first hello leaves on its own before any report.
    for (int i = 0; i < 5; ++i, now += 10 * ms) t.service(now, false);
    const int64_t end = now + (reports * gapMs + 1000) * ms;
    int added = 0;
    int64_t nextAt = now;
    for (; now < end; now += 10 * ms) {
      if (added < reports && now >= nextAt) {
        trainscope::wire::StepReport r;
        r.set_job("batching");
        r.set_step(added);
        r.set_end_ns(5'000'000'000 + added * gapMs * ms);
        t.addReport(std::move(r), now);
        ++added;
        nextAt += gapMs * ms;
      }
      t.service(now, false);
    }
    // Every batch is cut by now; the sends wait for the connection (asynchronous), so keep
    // servicing in real time until the agent has them all.
    REQUIRE(waitFor(
        [&] {
          t.service(now += 10 * ms, false);
          return agent.steps().size() == size_t(reports);
        },
        5000));
    for (const auto& b : agent.batches()) {
      std::vector<int64_t> steps;
      for (const auto& item : b.batch.items()) {
        if (item.has_step()) steps.push_back(item.step().step());
      }
      if (!steps.empty()) out.push_back(steps);
    }
  }
  zmq_ctx_term(ctx);
  return out;
}

using Groups = std::vector<std::vector<int64_t>>;

}  // namespace

TEST_CASE("fast steps share a message within the latency bound; slow steps leave alone") {
  TransportOptions o;
  o.batchLatencyNs = 200'000'000;
  o.batchSteps = 16;
  o.helloIntervalNs = int64_t{1} << 60;
  // 100 ms steps under a 200 ms bound: a report waits for the next step, not for a third (it
  // would leave 200 ms late). The first report has no step time to judge by and leaves alone.
  CHECK(batchesFor(o, 8, 100) == Groups{{0}, {1, 2}, {3, 4}, {5, 6}, {7}});
  // 30 ms steps: as many as fit the bound (the oldest waits at most 200 ms).
  CHECK(batchesFor(o, 15, 30) == Groups{{0}, {1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14}});
  // ... or batchSteps, whichever comes first.
  o.batchSteps = 3;
  CHECK(batchesFor(o, 7, 30) == Groups{{0}, {1, 2, 3}, {4, 5, 6}});
  // Steps slower than the bound: no waiting for the next one.
  CHECK(batchesFor(o, 3, 300) == Groups{{0}, {1}, {2}});
  // A bound of 0: one message per report, as before batching.
  o.batchLatencyNs = 0;
  o.batchSteps = 16;
  CHECK(batchesFor(o, 3, 30) == Groups{{0}, {1}, {2}});
}

TEST_CASE(
    "at exit the probe waits for a live agent, and for one that never answered yet only "
    "when it recorded something") {
  ts_probe_stats st{};
  CHECK(exitWaitMs(st) == 0);  // nothing recorded, nobody heard from
  st.records = 10;
  st.backlog = 3;
  CHECK(exitWaitMs(st) == kExitWaitFirstAckMs);  // a job shorter than its first round trip
  st.connected = 1;
  CHECK(exitWaitMs(st) == kExitWaitConnectedMs);
  st.connected = 0;
  st.reports_acked = 5;
  CHECK(exitWaitMs(st) == 0);  // heard from once, gone now: exit at once

  // The C ABI's answer, for the process's default instance (what the exit hooks ask).
  CHECK(ts_exit_wait_ms() == 0);  // none
  ts_probe_config c;
  ts_config_init(&c);
  c.job = "exit-wait-test";
  c.connect_agent = 1;  // fold only: nothing is ever acknowledged
  REQUIRE(ts_init(&c) == 0);
  CHECK(ts_exit_wait_ms() == 0);  // nothing recorded
  ts_probe* d = ts_default();
  ts_step_begin(d, 0, 1'000'000);
  ts_op(d, ts_intern("fwd"), 1'000'100, 500);
  ts_step_end(d, 0, 1'002'000);
  REQUIRE(ts_probe_flush(d, 5000) == 0);
  CHECK(ts_exit_wait_ms() == kExitWaitFirstAckMs);
  ts_shutdown(0);
  CHECK(ts_exit_wait_ms() == 0);
}
