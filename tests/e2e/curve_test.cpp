// Whole-system CurveZMQ: keys made by `trainscope keygen`, a collector with --curve-keys that
// stores only what agents on its allow-list send, refused agents that keep their reports
// spooled until they are allowed, a valid key that cannot act for another node's ranks (a
// forged hello and reports sent ahead are refused), and plain text still working where no
// keys are set.
// Exits 77 when this libzmq has no CURVE.
#include <zmq.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>

#include <sys/stat.h>
#include <catch2/catch.hpp>
#include <zmq.hpp>

#include "common/clock.h"
#include "schema/wire.h"
#include "tests/e2e/harness.h"

using namespace trainscope;
using namespace trainscope::e2e;

namespace {

// `trainscope keygen --dir DIR --name NAME`, run as the real CLI.
void keygen(const TempDir& dir, const std::string& keyDir, const std::string& name) {
  std::filesystem::create_directories(keyDir);
  Process p("keygen-" + name,
            {binaryFromEnv("TRAINSCOPE_CLI_BIN"), "keygen", "--dir", keyDir, "--name", name},
            dir / ("keygen-" + name + ".log"));
  const auto rc = p.wait(20s);
  INFO("keygen log:\n" << p.logTail());
  REQUIRE(rc.has_value());
  REQUIRE(*rc == 0);
  struct stat sb {};
  REQUIRE(::stat((keyDir + "/" + name + ".key").c_str(), &sb) == 0);
  CHECK((sb.st_mode & 0777) == 0600);
  REQUIRE(::stat((keyDir + "/" + name + ".pub").c_str(), &sb) == 0);
  CHECK((sb.st_mode & 0777) == 0644);
}

// Starts a 4-rank x 25-step simulated job through `endpoint` and waits for it to end: the
// probe hands its reports to the agent whether or not the agent can reach the collector.
void runSim(const TempDir& dir, const std::string& endpoint, const std::string& job) {
  auto sim = startSim(
      dir,
      {"--agent", endpoint, "--job", job, "--ranks", "4", "--steps", "25", "--fast", "--quiet"},
      "simtrain-" + job);
  const auto rc = sim->wait(60s);
  INFO("simtrain log:\n" << sim->logTail());
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
}

// The collector's count of ingest rejects for `reason` from /metrics (0 when absent).
double rejects(uint16_t http, const std::string& reason) {
  auto r = httpGet(http, "/metrics");
  std::istringstream lines(r.body);
  std::string line;
  double n = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("trainscope_ingest_rejected_frames_total{", 0) == 0 &&
        line.find("\"" + reason + "\"") != std::string::npos) {
      n += std::stod(line.substr(line.find_last_of(' ') + 1));
    }
  }
  return n;
}

// A key from a file `trainscope keygen` wrote: the quoted value of `field` ("public-key",
// "secret-key").
std::string keyField(const std::string& path, const std::string& field) {
  const std::string text = readFile(path);
  const size_t at = text.find(field + " = \"");
  REQUIRE(at != std::string::npos);
  const size_t from = at + field.size() + 4;
  const size_t to = text.find('"', from);
  REQUIRE(to != std::string::npos);
  return text.substr(from, to - from);
}

// The step time of the reports a forger sends, so a stored one is recognised.
constexpr int64_t kForgedNs = 7'000'000'000;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE(
    "e2e: with --curve-keys only agents on the allow-list deliver and plain text works without "
    "keys") {
  if (zmq_has("curve") == 0) {
    WARN("libzmq without CURVE: skipped");
    std::exit(77);
  }
  TempDir dir;
  const std::string keys = dir / "keys";
  const std::string nodes = dir / "nodes";
  keygen(dir, keys, "server");
  keygen(dir, nodes, "node0");
  keygen(dir, nodes, "stranger");
  std::filesystem::create_directories(keys + "/agents");
  std::filesystem::copy_file(nodes + "/node0.pub", keys + "/agents/node0.pub");

  CollectorSpec cs;
  cs.dataDir = dir / "data";
  cs.ingestPort = freePort();
  cs.httpPort = freePort();
  auto collector = startCollector(dir, cs, "collector", {"--curve-keys", keys});
  CHECK(has(collector->log(), "1 agent keys allowed"));
  CHECK_FALSE(has(collector->log(), "UNAUTHENTICATED"));

  auto agentWith = [&](const std::string& node, const std::string& keyName) {
    const AgentSpec spec{node, "ipc://" + (dir / (node + ".sock")), dir / ("spool-" + node),
                         cs.ingest()};
    std::vector<std::string> extra;
    if (!keyName.empty()) {
      extra = {"--agent-key", nodes + "/" + keyName + ".key", "--collector-key",
               keys + "/server.pub"};
    }
    return std::make_pair(spec, startAgent(dir, spec, "agent-" + node, extra));
  };
  auto [allowedSpec, allowed] = agentWith("node0", "node0");
  auto [strangerSpec, stranger] = agentWith("stranger", "stranger");
  auto [plainSpec, plain] = agentWith("plain", "");
  // An allowed key used for another node's name.
  auto [imposterSpec, imposter] = agentWith("imposter", "node0");

  runSim(dir, allowedSpec.endpoint, "curve-allowed");
  runSim(dir, strangerSpec.endpoint, "curve-stranger");
  runSim(dir, plainSpec.endpoint, "curve-plain");
  runSim(dir, imposterSpec.endpoint, "curve-imposter");

  CHECK(waitFor([&] { return jobStepRows(cs.httpPort, "curve-allowed") == 100; }, 30s, 100ms));
  // Each refusal is counted and logged by the collector, and the agents say why too.
  CHECK(waitFor(
      [&] {
        return rejects(cs.httpPort, "unknown_key") > 0 &&
               rejects(cs.httpPort, "handshake_failed") > 0 &&
               rejects(cs.httpPort, "node_mismatch") > 0;
      },
      30s, 200ms));
  const std::string log = collector->log();
  INFO("collector log:\n" << log.substr(0, 8000));
  CHECK(has(log, "is not in --curve-keys' agents/"));
  CHECK(has(log, "failed the CURVE handshake"));
  CHECK(has(log, "the key of node 'node0' may not speak for node 'imposter'"));
  INFO("stranger agent log:\n" << stranger->logTail());
  CHECK(has(stranger->log(), "refused this agent's key"));

  // Nothing of the refused agents was stored; the allowed one's job is whole.
  CHECK(jobStepRows(cs.httpPort, "curve-stranger") <= 0);
  CHECK(jobStepRows(cs.httpPort, "curve-plain") <= 0);
  CHECK(jobStepRows(cs.httpPort, "curve-allowed") == 100);
  auto nodesSeen = httpGet(cs.httpPort, "/api/v1/nodes");
  INFO("/api/v1/nodes: " << nodesSeen.body);
  CHECK(has(nodesSeen.body, "\"node0\""));
  for (const char* refused : {"\"stranger\"", "\"plain\"", "\"imposter\""}) {
    CHECK_FALSE(has(nodesSeen.body, refused));
  }

  // The refused agent kept its reports spooled: once its key is on the allow-list (read at
  // start), the collector gets all of them.
  std::filesystem::copy_file(nodes + "/stranger.pub", keys + "/agents/stranger.pub");
  collector->stop();
  collector = startCollector(dir, cs, "collector-2", {"--curve-keys", keys});
  CHECK(has(collector->log(), "2 agent keys allowed"));
  CHECK(waitFor([&] { return jobStepRows(cs.httpPort, "curve-stranger") == 100; }, 40s, 200ms));
  CHECK(jobStepRows(cs.httpPort, "curve-allowed") == 100);
  CHECK(jobStepRows(cs.httpPort, "curve-plain") <= 0);

  // A valid key acts only for its own node's ranks: while a job runs on node0, a sender with
  // stranger's key claims its rank 0 (world size 1) and sends its ranks' later steps ahead,
  // every 100 ms. None of it is taken; the job is whole, with its own figures.
  const double mismatchBefore = rejects(cs.httpPort, "node_mismatch");
  auto victim = startSim(dir,
                         {"--agent", allowedSpec.endpoint, "--job", "curve-victim", "--ranks", "4",
                          "--steps", "40", "--step-ms", "100", "--quiet"},
                         "simtrain-curve-victim");
  // Its ranks said hello (their first reports are stored) before the forger starts.
  REQUIRE(waitFor([&] { return jobStepRows(cs.httpPort, "curve-victim") > 0; }, 30s, 50ms));
  {
    zmq::context_t ctx;
    zmq::socket_t forger(ctx, zmq::socket_type::dealer);
    forger.set(zmq::sockopt::linger, 0);
    forger.set(zmq::sockopt::curve_serverkey, keyField(keys + "/server.pub", "public-key"));
    forger.set(zmq::sockopt::curve_publickey, keyField(nodes + "/stranger.key", "public-key"));
    forger.set(zmq::sockopt::curve_secretkey, keyField(nodes + "/stranger.key", "secret-key"));
    forger.connect(cs.ingest());
    wire::Envelope hello;
    hello.mutable_agent_hello()->set_node("stranger");
    forger.send(zmq::buffer(wire::encode(hello)), zmq::send_flags::none);
    const int64_t nowNs = wallNowNs();
    for (uint64_t seq = 1; seq <= 40; ++seq) {
      wire::Envelope env;
      env.mutable_batch()->set_seq(seq);
      auto* info = env.mutable_batch()->add_items()->mutable_rank_hello()->mutable_rank();
      info->set_job("curve-victim");
      info->set_rank(0);
      info->set_world_size(1);
      info->set_node("stranger");
      for (uint32_t rank = 0; rank < 4; ++rank) {
        for (int64_t step = 20; step < 40; ++step) {
          auto* st = env.mutable_batch()->add_items()->mutable_step();
          st->set_job("curve-victim");
          st->set_rank(rank);
          st->set_step(step);
          st->set_start_ns(nowNs);
          st->set_duration_ns(kForgedNs);
          st->set_end_ns(nowNs + kForgedNs);
        }
      }
      forger.send(zmq::buffer(wire::encode(env)), zmq::send_flags::none);
      std::this_thread::sleep_for(100ms);
    }
  }
  const auto victimRc = victim->wait(60s);
  INFO("simtrain log:\n" << victim->logTail());
  REQUIRE(victimRc.has_value());
  CHECK(*victimRc == 0);
  waitFor([&] { return jobStepRows(cs.httpPort, "curve-victim") == 160; }, 30s, 100ms);
  CHECK(jobStepRows(cs.httpPort, "curve-victim") == 160);
  CHECK(rejects(cs.httpPort, "node_mismatch") - mismatchBefore >= 40 * 80);
  CHECK(rejects(cs.httpPort, "world_size_conflict") > 0);
  size_t forgedRows = 0;
  for (const auto& row : stepRows(cs.httpPort, "curve-victim")) {
    if (row.value("duration_ns", int64_t{0}) == kForgedNs) ++forgedRows;
  }
  CHECK(forgedRows == 0);
  auto victimRanks = httpGet(cs.httpPort, "/api/v1/jobs/curve-victim/ranks");
  REQUIRE(victimRanks.status == 200);
  INFO("/api/v1/jobs/curve-victim/ranks: " << victimRanks.body);
  const auto victimList = victimRanks.json().at("ranks");  // a copy: json() is a temporary
  CHECK(victimList.size() == 4);
  for (const auto& r : victimList) {
    CHECK(r.value("node", "") == "node0");
    CHECK(r.value("world_size", 0) == 4);
  }

  imposter.reset();
  plain.reset();
  stranger.reset();
  allowed.reset();
  collector.reset();

  // Without --curve-keys: plain agents deliver as before, and the collector says loudly that
  // ingest is open.
  CollectorSpec open;
  open.dataDir = dir / "data-open";
  open.ingestPort = freePort();
  open.httpPort = freePort();
  auto openCollector = startCollector(dir, open, "collector-open");
  CHECK(has(openCollector->log(), "UNAUTHENTICATED"));
  const AgentSpec spec{"plain2", "ipc://" + (dir / "plain2.sock"), dir / "spool-plain2",
                       open.ingest()};
  auto agent = startAgent(dir, spec, "agent-plain2");
  runSim(dir, spec.endpoint, "open-plain");
  CHECK(waitFor([&] { return jobStepRows(open.httpPort, "open-plain") == 100; }, 30s, 100ms));
  agent.reset();
  openCollector.reset();
}

TEST_CASE("e2e: collector and agent refuse bad key files at start naming the flag and file") {
  if (zmq_has("curve") == 0) {
    WARN("libzmq without CURVE: skipped");
    std::exit(77);
  }
  TempDir dir;
  const std::string keys = dir / "keys";
  keygen(dir, keys, "server");
  keygen(dir, dir / "nodes", "node0");

  auto exitsWith = [&](const std::string& name, std::vector<std::string> argv,
                       const std::string& expected) {
    Process p(name, std::move(argv), dir / (name + ".log"));
    const auto rc = p.wait(20s);
    INFO(name << " log:\n" << p.logTail());
    REQUIRE(rc.has_value());
    CHECK(*rc != 0);
    CHECK(has(p.log(), expected));
  };
  const std::string collectorBin = binaryFromEnv("TRAINSCOPE_COLLECTOR_BIN");
  const std::vector<std::string> collectorArgs{collectorBin, "--data-dir",        dir / "data",
                                               "--ingest",   "tcp://127.0.0.1:0", "--http",
                                               "127.0.0.1:0"};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& more) {
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  // No agents/ yet: nobody could connect.
  exitsWith("collector-no-agents", with(collectorArgs, {"--curve-keys", keys}),
            "--curve-keys: " + keys + "/agents");
  std::filesystem::create_directories(keys + "/agents");
  std::filesystem::copy_file(dir / "nodes/node0.pub", keys + "/agents/node0.pub");
  ::chmod((keys + "/server.key").c_str(), 0644);
  exitsWith("collector-open-secret", with(collectorArgs, {"--curve-keys", keys}), "chmod 600");
  exitsWith("collector-missing", with(collectorArgs, {"--curve-keys", dir / "nowhere"}),
            dir / "nowhere/server.key");

  const std::vector<std::string> agentArgs{binaryFromEnv("TRAINSCOPE_AGENT_BIN"),
                                           "--collector",
                                           "tcp://127.0.0.1:1",
                                           "--endpoint",
                                           "ipc://" + (dir / "a.sock"),
                                           "--node",
                                           "node0",
                                           "--spool-dir",
                                           dir / "spool"};
  exitsWith("agent-half", with(agentArgs, {"--agent-key", dir / "nodes/node0.key"}),
            "needs both --collector-key and --agent-key");
  exitsWith("agent-missing",
            with(agentArgs,
                 {"--agent-key", dir / "nodes/none.key", "--collector-key", keys + "/server.pub"}),
            "--agent-key: " + (dir / "nodes/none.key"));
  ::chmod((dir / "nodes/node0.key").c_str(), 0640);
  exitsWith("agent-open-secret",
            with(agentArgs,
                 {"--agent-key", dir / "nodes/node0.key", "--collector-key", keys + "/server.pub"}),
            "chmod 600");
  ::chmod((dir / "nodes/node0.key").c_str(), 0600);
  {
    std::FILE* f = std::fopen((dir / "nodes/bad.pub").c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("public-key = \"not a key\"\n", f);
    std::fclose(f);
  }
  exitsWith("agent-bad-pub",
            with(agentArgs, {"--agent-key", dir / "nodes/node0.key", "--collector-key",
                             dir / "nodes/bad.pub"}),
            "--collector-key: " + (dir / "nodes/bad.pub"));
}
