// Zero-code monitoring end to end: the unchanged training scripts tests/e2e/ddp_train_plain.py
// and fsdp_train_plain.py (no trainscope in them) run as two CPU ranks (gloo) under
// `trainscope run`, launched as a launcher would (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
// torchrun is broken in Debian's torch 1.13). Their steps must reach the collector with
// compute, data wait and communication separated and the collectives named with their bytes;
// training must print the same loss and parameters as without monitoring, also when no agent
// runs (one log line); and a capture of a monitored job must merge both ranks' steps,
// operators and collectives. A two-stage pipeline script (pp_train_plain.py) must have its
// process group declared and its send/recv stored as p2p transfers with their peer. Exits 77
// without /usr/bin/python3 torch; the FSDP case also where this torch cannot run FSDP on gloo.
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/e2e/harness.h"

using namespace trainscope::e2e;

namespace {

// The line rank 0 prints when monitoring starts, all parts on (ATen operators depend on the
// build: libtrainscope_torch.so exists only where libtorch's headers were found).
constexpr const char* kAllSources =
    "trainscope: sources: steps yes (optimizer.step()), data wait yes, collectives yes, DDP hook "
    "yes, ATen operators ";

struct Script {
  std::string cli;     // the trainscope CLI
  std::string script;  // the training script
};

Script scriptSetup(const std::string& name) {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    std::fprintf(stderr, "e2e: skipped: /usr/bin/python3 cannot import torch\n");
    std::exit(77);
  }
  const char* src = std::getenv("TRAINSCOPE_SOURCE_ROOT");
  REQUIRE(src != nullptr);
  return {binaryFromEnv("TRAINSCOPE_CLI_BIN"), std::string(src) + "/tests/e2e/" + name};
}

// Two ranks of `script` with `args`; under `trainscope run RUNARGS --` when `runArgs` is given
// (else plain /usr/bin/python3). The logs are <dir>/<tag>-rankN.log.
std::vector<std::unique_ptr<Process>> startRanks(
    const TempDir& dir, const Script& s, const std::string& tag,
    const std::optional<std::vector<std::string>>& runArgs, const std::vector<std::string>& args) {
  const std::string masterPort = std::to_string(freePort());
  std::vector<std::unique_ptr<Process>> ranks;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> argv;
    if (runArgs) {
      argv = {s.cli, "run"};
      argv.insert(argv.end(), runArgs->begin(), runArgs->end());
      argv.emplace_back("--");
    }
    const auto python = pythonCommand();
    argv.insert(argv.end(), python.begin(), python.end());
    argv.push_back(s.script);
    argv.insert(argv.end(), args.begin(), args.end());
    // No PYTHONPATH to the package: the script cannot import trainscope by itself.
    std::vector<std::string> env{
        "RANK=" + std::to_string(r), "LOCAL_RANK=" + std::to_string(r), "WORLD_SIZE=2",
        "MASTER_ADDR=127.0.0.1",     "MASTER_PORT=" + masterPort,       "PYTHONPATH=",
        "OMP_NUM_THREADS=1"};
    const std::string name = tag + "-rank" + std::to_string(r);
    ranks.push_back(std::make_unique<Process>(name, argv, dir / (name + ".log"), env));
  }
  return ranks;
}

// Waits for both ranks to exit 0; returns each rank's "rank N: done, ..." line.
std::vector<std::string> expectDone(std::vector<std::unique_ptr<Process>>& ranks,
                                    std::chrono::milliseconds timeout) {
  std::vector<std::string> lines;
  for (auto& p : ranks) {
    const auto rc = p->wait(timeout);
    INFO(p->name() << " log:\n" << p->logTail());
    REQUIRE(rc.has_value());
    CHECK(*rc == 0);
    const std::string log = p->log();
    const auto at = log.find("rank ");
    const auto done = log.find(": done", at);
    REQUIRE(done != std::string::npos);
    const auto start = log.rfind('\n', done);
    lines.push_back(log.substr(start + 1, log.find('\n', done) - start - 1));
  }
  return lines;
}

size_t countOf(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

struct Daemons {
  CollectorSpec cs;
  std::unique_ptr<Process> collector;
  std::unique_ptr<Process> agent;
  std::string endpoint;
  std::string captureDir;
};

Daemons startDaemons(const TempDir& dir) {
  Daemons d;
  d.captureDir = dir / "captures";
  OneNode node = startOneNode(dir, {"--capture-dir", d.captureDir});
  d.cs = node.cs;
  d.endpoint = node.as.endpoint;
  d.collector = std::move(node.collector);
  d.agent = std::move(node.agent);
  return d;
}

}  // namespace

TEST_CASE(
    "e2e: an unchanged 2-rank DDP script under trainscope run reports steps with compute and data "
    "wait and all_reduce and trains exactly as without it (agent or not)") {
  const Script s = scriptSetup("ddp_train_plain.py");
  TempDir dir;
  const int steps = 12;
  const std::vector<std::string> args{"--steps", std::to_string(steps), "--width", "256"};

  auto plain = startRanks(dir, s, "plain", std::nullopt, args);
  const auto expected = expectDone(plain, 120s);
  INFO("without trainscope: " << expected[0] << " / " << expected[1]);

  // No agent: the same training and exit status, one line from rank 0 saying so.
  auto noAgent = startRanks(
      dir, s, "no-agent",
      std::vector<std::string>{"--job", "e2e-run-none", "--agent", "ipc://" + (dir / "none.sock")},
      args);
  CHECK(expectDone(noAgent, 120s) == expected);
  const std::string noAgentLog = noAgent[0]->log() + noAgent[1]->log();
  INFO("no-agent logs:\n" << noAgentLog);
  CHECK(countOf(noAgentLog, "trainscope: no agent at ipc://") == 1);
  CHECK(countOf(noAgentLog, "Traceback") == 0);

  Daemons d = startDaemons(dir);
  const std::string job = "e2e-run-ddp";
  auto ranks = startRanks(dir, s, "run",
                          std::vector<std::string>{"--job", job, "--agent", d.endpoint}, args);
  CHECK(expectDone(ranks, 120s) == expected);
  const std::string runLog = ranks[0]->log() + ranks[1]->log();
  INFO("run logs:\n" << runLog);
  // Nothing to say when all is well but what is recorded: one line, from rank 0 (LOCAL_RANK 0).
  CHECK(countOf(runLog, "trainscope:") == 1);
  CHECK(countOf(ranks[0]->log(), kAllSources) == 1);

  // One step per optimizer step() on each rank, each with compute, data wait and the
  // gradient all_reduce (DDP's buckets, through the automatic comm hook).
  const int want = 2 * steps;
  const bool all = waitFor([&] { return jobStepRows(d.cs.httpPort, job) >= want; }, 30s, 100ms);
  INFO("step rows: " << jobStepRows(d.cs.httpPort, job));
  CHECK(all);
  const auto rows = stepRows(d.cs.httpPort, job, true);
  std::set<int> ranksSeen;
  std::set<int64_t> stepsSeen;
  int complete = 0;
  std::set<std::string> ops;
  for (const auto& row : rows) {
    ranksSeen.insert(row.at("rank").get<int>());
    stepsSeen.insert(row.at("step").get<int64_t>());
    int64_t allReduceBytes = 0;
    for (const auto& c : row.at("collectives")) {
      if (c.at("op") == "all_reduce") allReduceBytes += c.at("bytes").get<int64_t>();
    }
    for (const auto& op : row.at("ops")) ops.insert(op.at("name").get<std::string>());
    const auto comm = row.at("comm_ns").get<int64_t>();
    if (row.at("compute_ns").get<int64_t>() > 0 && row.at("data_ns").get<int64_t>() > 0 &&
        comm > 0 && row.at("exposed_comm_ns").get<int64_t>() <= comm && allReduceBytes > 0) {
      ++complete;
    }
  }
  INFO("rows: " << rows.dump().substr(0, 4000));
  CHECK(ranksSeen == std::set<int>{0, 1});
  CHECK(static_cast<int>(rows.size()) == want);
  CHECK(static_cast<int>(stepsSeen.size()) == steps);
  CHECK(complete == want);
  // The process group's own record_function scopes are ranges, not operators: an operator
  // "gloo:all_reduce" would count communication as compute.
  CHECK(ops.count("gloo:all_reduce") == 0);
}

TEST_CASE("e2e: a capture of an unchanged DDP script under trainscope run merges both ranks") {
  const Script s = scriptSetup("ddp_train_plain.py");
  TempDir dir;
  Daemons d = startDaemons(dir);
  const std::string job = "e2e-run-capture";
  auto ranks = startRanks(
      dir, s, "run",
      std::vector<std::string>{"--job", job, "--agent", d.endpoint, "--capture-dir", d.captureDir},
      {"--steps", "100", "--width", "256", "--step-sleep-ms", "20"});
  auto logs = [&] {
    std::string out;
    for (auto& p : ranks) out += p->name() + ":\n" + p->logTail(1500) + "\n";
    return out + "agent:\n" + d.agent->logTail(1500) + "\ncollector:\n" +
           d.collector->logTail(1500);
  };
  REQUIRE(waitFor([&] { return jobStepRows(d.cs.httpPort, job) >= 20; }, 90s, 100ms));
  const auto posted = httpPost(d.cs.httpPort, "/api/v1/jobs/" + percentEncode(job) + "/captures",
                               R"({"ranks": "all", "steps": 3, "history": 2, "reason": "e2e"})");
  INFO("POST captures: " << posted.status << " " << posted.body << "\n" << logs());
  REQUIRE(posted.status == 201);
  const std::string id = posted.json().at("id").get<std::string>();
  nlohmann::json last;
  const bool finished = waitFor(
      [&] {
        auto r = httpGet(d.cs.httpPort, "/api/v1/captures/" + percentEncode(id));
        if (r.status != 200) return false;
        last = r.json();
        return last.at("state").get<std::string>() != "running";
      },
      90s, 200ms);
  INFO("capture: " << last.dump() << "\n" << logs());
  REQUIRE(finished);
  REQUIRE(last.at("state") == "complete");

  const auto trace =
      httpGet(d.cs.httpPort, "/api/v1/captures/" + percentEncode(id) + "/trace", 30s);
  REQUIRE(trace.status == 200);
  std::map<int, int> stepEvents, allReduces, dataRanges;
  const auto merged = trace.json();  // kept: a range-for over a temporary's member dangles
  for (const auto& e : merged.at("traceEvents")) {
    if (e.value("ph", "") != "X") continue;
    const int pid = e.at("pid").get<int>();
    const auto cat = e.value("cat", "");
    const auto name = e.value("name", "");
    if (cat == "step" && name.rfind("ProfilerStep#", 0) == 0) ++stepEvents[pid];
    if (cat == "collective" && name == "all_reduce") ++allReduces[pid];
    if (name == "data") ++dataRanges[pid];
  }
  INFO("steps: " << stepEvents[0] << ", " << stepEvents[1] << "; all_reduce: " << allReduces[0]
                 << ", " << allReduces[1] << "; data: " << dataRanges[0] << ", " << dataRanges[1]);
  for (int rank : {0, 1}) {
    CHECK(stepEvents[rank] >= 3);
    CHECK(allReduces[rank] > 0);
    CHECK(dataRanges[rank] > 0);
  }
  expectDone(ranks, 180s);
}

TEST_CASE(
    "e2e: an unchanged 2-rank FSDP script under trainscope run reports all_gather and "
    "reduce_scatter and trains exactly as without it") {
  const Script s = scriptSetup("fsdp_train_plain.py");
  // Debian 12's torch 1.13 cannot import FSDP under Python 3.11 (a dataclass in
  // torch.distributed._shard is refused), and its gloo has no reduce_scatter: FSDP on CPU needs
  // a newer torch.
  if (std::system("/usr/bin/python3 -c 'import torch.distributed.fsdp' >/dev/null 2>&1") != 0) {
    std::fprintf(stderr, "e2e: skipped: /usr/bin/python3 cannot import torch.distributed.fsdp\n");
    std::exit(77);
  }
  TempDir dir;
  const int steps = 8;
  const std::vector<std::string> args{"--steps", std::to_string(steps)};
  auto plain = startRanks(dir, s, "plain", std::nullopt, args);
  for (auto& p : plain) {
    const auto rc = p->wait(180s);
    const std::string log = p->log();
    if (rc && *rc != 0 && log.find("does not support") != std::string::npos) {
      std::fprintf(stderr, "e2e: skipped: this torch's gloo cannot run FSDP:\n%s\n",
                   p->logTail(600).c_str());
      std::exit(77);
    }
  }
  const auto expected = expectDone(plain, 10s);

  Daemons d = startDaemons(dir);
  const std::string job = "e2e-run-fsdp";
  auto ranks = startRanks(dir, s, "run",
                          std::vector<std::string>{"--job", job, "--agent", d.endpoint}, args);
  CHECK(expectDone(ranks, 180s) == expected);

  const int want = 2 * steps;
  const bool all = waitFor([&] { return jobStepRows(d.cs.httpPort, job) >= want; }, 30s, 100ms);
  INFO("step rows: " << jobStepRows(d.cs.httpPort, job));
  CHECK(all);
  const auto rows = stepRows(d.cs.httpPort, job, true);
  INFO("rows: " << rows.dump().substr(0, 4000));
  CHECK(static_cast<int>(rows.size()) == want);
  int both = 0;
  for (const auto& row : rows) {
    int64_t gathered = 0;
    int64_t scattered = 0;
    for (const auto& c : row.at("collectives")) {
      if (c.at("op") == "all_gather") gathered += c.at("bytes").get<int64_t>();
      if (c.at("op") == "reduce_scatter") scattered += c.at("bytes").get<int64_t>();
    }
    if (gathered > 0 && scattered > 0 && row.at("compute_ns").get<int64_t>() > 0) ++both;
  }
  CHECK(both == want);
}

TEST_CASE(
    "e2e: an unchanged 2-stage pipeline script under trainscope run declares its process group and "
    "reports its send/recv as p2p with the peer") {
  const Script s = scriptSetup("pp_train_plain.py");
  TempDir dir;
  const int steps = 10;
  const std::vector<std::string> args{"--steps", std::to_string(steps)};

  auto plain = startRanks(dir, s, "plain", std::nullopt, args);
  const auto expected = expectDone(plain, 120s);

  Daemons d = startDaemons(dir);
  const std::string job = "e2e-run-pp";
  auto ranks = startRanks(dir, s, "run",
                          std::vector<std::string>{"--job", job, "--agent", d.endpoint}, args);
  CHECK(expectDone(ranks, 120s) == expected);  // the same training as without monitoring
  const std::string runLog = ranks[0]->log() + ranks[1]->log();
  INFO("run logs:\n" << runLog);
  CHECK(countOf(runLog, "trainscope:") == 1);
  CHECK(countOf(ranks[0]->log(), kAllSources) == 1);

  const int want = 2 * steps;
  const bool all = waitFor([&] { return jobStepRows(d.cs.httpPort, job) >= want; }, 30s, 100ms);
  INFO("step rows: " << jobStepRows(d.cs.httpPort, job));
  REQUIRE(all);

  // The group made with new_group([0, 1]) was declared by both ranks, before their first step.
  const auto topo = httpGet(d.cs.httpPort, "/api/v1/jobs/" + job + "/topology", 10s);
  REQUIRE(topo.status == 200);
  const auto t = topo.json();
  INFO("topology: " << t.dump());
  CHECK(t["declared"] == true);
  CHECK(t["ranks_declared"] == 2);
  bool pipeGroup = false;
  for (const auto& g : t["groups"]) {
    pipeGroup = pipeGroup || g["ranks"] == nlohmann::json::array({0, 1});
  }
  CHECK(pipeGroup);

  // Every step of each rank carries its transfers with the other stage: rank 0 sends the
  // activations (32 x 128 floats) to rank 1 and receives their gradient from it.
  const auto rows = stepRows(d.cs.httpPort, job, true);
  int withP2p = 0;
  for (const auto& row : rows) {
    const int rank = row.at("rank").get<int>();
    bool send = false;
    bool recv = false;
    for (const auto& p : row.at("p2p")) {
      if (p.at("peer").get<int>() != 1 - rank ||
          p.at("bytes").get<int64_t>() != int64_t{32} * 128 * 4) {
        continue;
      }
      send = send || p.at("op") == "send";
      recv = recv || p.at("op") == "recv";
    }
    if (send && recv && row.at("p2p_ns").get<int64_t>() > 0) ++withP2p;
  }
  INFO("rows: " << rows.dump().substr(0, 4000));
  CHECK(withP2p == want);
}
