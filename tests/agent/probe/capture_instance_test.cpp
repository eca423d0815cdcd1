// A real probe instance answering capture and stack commands from an in-test agent: statuses
// ride in the acked batches, and the files they name are readable gzip JSON.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "agent/probe/probe.h"
#include "tests/agent/probe/capture_files.h"
#include "tests/agent/probe/fake_agent.h"

using namespace trainscope::probe;
using trainscope::probe::testing::FakeAgent;
using trainscope::probe::testing::readJsonGz;
using trainscope::probe::testing::TempDir;
using trainscope::tests::waitFor;

namespace {

ts_probe_config connected(const std::string& endpoint) {
  return testing::agentConfig(endpoint, "capture-test", 1, 2);
}

void recordSteps(Probe& p, int64_t from, int64_t to) {
  static const Name kMm("aten::mm");
  static const Name kWorld("world");
  static const Name kFwd("forward");
  static int64_t lastEnd = 0;
  for (int64_t s = from; s < to; ++s) {
    // Steps must not overlap in time, or records fold into the earlier step.
    const int64_t base = std::max(ts_now_ns(), lastEnd + 1);
    lastEnd = base + 10'000;
    p.stepBegin(s, base);
    p.range(kFwd, TS_RANGE_COMPUTE, base + 100, base + 5000);
    p.op(kMm, base + 200, 1000);
    p.collective(TS_COLL_ALL_REDUCE, kWorld, 1024, base + 6000, base + 9000);
    p.stepEnd(s, base + 10'000);
  }
}

// Statuses of `id` received by the agent, in order.
std::vector<trainscope::wire::CommandStatus> statusesOf(FakeAgent& agent, const std::string& id) {
  std::vector<trainscope::wire::CommandStatus> out;
  for (const auto& b : agent.batches()) {
    for (const auto& item : b.batch.items()) {
      if (item.has_command_status() && item.command_status().command_id() == id) {
        out.push_back(item.command_status());
      }
    }
  }
  return out;
}

bool hasState(FakeAgent& agent, const std::string& id, const std::string& state) {
  for (const auto& st : statusesOf(agent, id)) {
    if (st.state() == state) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a probe answers a capture command with recording, then uploading and a trace file") {
  TempDir dir;
  setenv("TRAINSCOPE_CAPTURE_DIR", (dir.path() + "/captures").c_str(), 1);
  const std::string ep = "ipc://" + dir.path() + "/agent.sock";
  FakeAgent agent(ep);
  REQUIRE(agent.bound());
  Probe p(connected(ep));
  REQUIRE(p.ok());
  recordSteps(p, 0, 5);
  REQUIRE(p.flush(5000) == 0);

  trainscope::wire::Envelope env;
  auto* cmd = env.mutable_command();
  cmd->set_id("cap-100-beef");
  cmd->set_job("capture-test");
  cmd->add_ranks(1);
  cmd->mutable_capture()->set_capture_id("cap-100-beef");
  cmd->mutable_capture()->set_start_step(6);
  cmd->mutable_capture()->set_steps(3);
  cmd->mutable_capture()->set_history(2);
  agent.sendToPeer(env);
  REQUIRE(waitFor([&] { return hasState(agent, "cap-100-beef", "recording"); }, 5000));
  CHECK(statusesOf(agent, "cap-100-beef").front().detail() == "steps 6..8, history from 4");

  recordSteps(p, 5, 12);
  REQUIRE(p.flush(5000) == 0);
  REQUIRE(waitFor([&] { return hasState(agent, "cap-100-beef", "uploading"); }, 5000));
  trainscope::wire::CommandStatus up;
  for (const auto& st : statusesOf(agent, "cap-100-beef")) {
    if (st.state() == "uploading") up = st;
  }
  CHECK(up.job() == "capture-test");
  CHECK(up.rank() == 1);
  CHECK(up.first_step() == 4);
  CHECK(up.last_step() == 8);
  CHECK_FALSE(up.truncated());
  CHECK(up.file_path() == dir.path() + "/captures/cap-100-beef/rank-1.json.gz");
  CHECK(up.file_bytes() > 0);
  const nlohmann::json doc = readJsonGz(up.file_path());
  REQUIRE(doc.is_object());
  CHECK(doc["trainscope"]["job"] == "capture-test");
  int steps = 0;
  int ops = 0;
  int colls = 0;
  for (const auto& e : doc["traceEvents"]) {
    const int64_t s = e["args"]["step"].get<int64_t>();
    CHECK(s >= 4);
    CHECK(s <= 8);
    CHECK(e["pid"] == 1);
    if (e["cat"] == "step") ++steps;
    if (e["cat"] == "op" && e["name"] == "aten::mm") ++ops;
    if (e["cat"] == "collective" && e["args"]["group"] == "world") ++colls;
  }
  CHECK(steps == 5);
  CHECK(ops == 5);
  CHECK(colls == 5);
  // Everything the probe sent was acknowledged: the statuses rode in acked batches.
  CHECK(p.stats().backlog == 0);
  unsetenv("TRAINSCOPE_CAPTURE_DIR");
}

TEST_CASE("a probe closed mid-capture uploads what it has before its goodbye") {
  TempDir dir;
  const std::string ep = "ipc://" + dir.path() + "/agent.sock";
  FakeAgent agent(ep);
  std::vector<trainscope::wire::CommandStatus> seen;
  {
    setenv("TRAINSCOPE_CAPTURE_DIR", (dir.path() + "/c").c_str(), 1);
    Probe p(connected(ep), 2000);
    unsetenv("TRAINSCOPE_CAPTURE_DIR");
    REQUIRE(p.ok());
    std::mutex mu;
    p.onStatus([&](const trainscope::wire::CommandStatus& st) {
      std::lock_guard<std::mutex> lock(mu);
      seen.push_back(st);
    });
    recordSteps(p, 0, 3);
    REQUIRE(p.flush(5000) == 0);
    trainscope::wire::Command cmd;
    cmd.set_id("cap-close");
    cmd.mutable_capture()->set_capture_id("cap-close");
    cmd.mutable_capture()->set_start_step(4);
    cmd.mutable_capture()->set_steps(10);
    cmd.mutable_capture()->set_history(1);
    p.submitCommand(cmd);  // the same path a command from the agent takes
    REQUIRE(waitFor([&] { return hasState(agent, "cap-close", "recording"); }, 5000));
    recordSteps(p, 3, 6);
  }  // destroyed at step 5, before the capture's last step (13)
  const auto sts = statusesOf(agent, "cap-close");
  REQUIRE(sts.size() == 2);
  CHECK(sts[1].state() == "uploading");
  CHECK(sts[1].detail() == "rank ended at step 5");
  CHECK(sts[1].last_step() == 5);
  CHECK(seen.size() == 2);
  // The goodbye comes after the status.
  bool statusSeen = false;
  bool goodbyeAfter = false;
  for (const auto& b : agent.batches()) {
    for (const auto& item : b.batch.items()) {
      if (item.has_command_status() && item.command_status().state() == "uploading") {
        statusSeen = true;
      }
      if (item.has_rank_goodbye()) goodbyeAfter = statusSeen;
    }
  }
  CHECK(goodbyeAfter);
  CHECK(readJsonGz(sts[1].file_path())["trainscope"]["last_step"] == 5);
}

TEST_CASE("a probe answers a stacks command with a stacks file, or says why it cannot") {
  TempDir dir;
  setenv("TRAINSCOPE_CAPTURE_DIR", dir.path().c_str(), 1);
  ts_probe_config c;
  ts_config_init(&c);
  c.job = "stacks-test";
  c.rank = 0;
  c.world_size = 1;
  c.connect_agent = 1;  // fold only: statuses are seen through the hook
  Probe p(c);
  unsetenv("TRAINSCOPE_CAPTURE_DIR");
  REQUIRE(p.ok());
  std::mutex mu;
  std::vector<trainscope::wire::CommandStatus> seen;
  p.onStatus([&](const trainscope::wire::CommandStatus& st) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(st);
  });
  trainscope::wire::Command cmd;
  cmd.set_id("cap-stacks");
  cmd.mutable_stacks()->set_capture_id("cap-stacks");
  p.submitCommand(cmd);
  auto last = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return seen.empty() ? std::string() : seen.back().state();
  };
  REQUIRE(waitFor([&] { return last() == "uploading" || last() == "failed"; }, 10000));
  std::lock_guard<std::mutex> lock(mu);
#ifdef TRAINSCOPE_HAVE_UNWIND
  REQUIRE(seen.size() == 2);
  CHECK(seen[0].state() == "recording");
  CHECK(seen[1].state() == "uploading");
  const nlohmann::json doc = readJsonGz(seen[1].file_path());
  REQUIRE(doc.is_object());
  CHECK(doc["trainscope"]["kind"] == "stacks");
  CHECK(doc["trainscope"]["python"] == false);
  bool mainFound = false;
  for (const auto& t : doc["threads"]) {
    if (t["tid"] == static_cast<int>(getpid())) mainFound = !t["native"].empty();
  }
  CHECK(mainFound);
#else
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].state() == "failed");
  CHECK(seen[0].detail() == "built without libunwind");
#endif
}
