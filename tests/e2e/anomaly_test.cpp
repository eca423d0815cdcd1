// Whole-system detection: simulated jobs, one injected fault each (straggler, step-time shift,
// slow communication, operator regression, periodic spikes, hang), run at once through one
// collector and two agents; each anomaly must appear through the HTTP API and the CLI with
// the kind and the ranks the simulator's truth file names; `trainscope detect --job` then finds
// the shift and the straggler offline in what the collector stored. And healthy jobs that end
// cleanly, rank by rank, open none.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/e2e/harness.h"

using namespace trainscope::e2e;
using nlohmann::json;

namespace {

constexpr const char* kRanks = "8";
constexpr const char* kSteps = "250";  // 10 s at 40 ms a step

struct Fault {
  std::string kind;    // the anomaly kind the detectors should report
  std::string inject;  // the simulator's --inject spec
};

// The collector with a low hang floor (2 s), so a hang is reported within seconds, and the
// default step-assembly grace: an agent forwards each rank's reports in bursts (50 ms probe
// coalescing), so one rank can be several steps ahead of another when they arrive, and the
// assembler waits for a rank that is behind but still reporting.
std::unique_ptr<Process> startDetectingCollector(const TempDir& dir, const CollectorSpec& spec) {
  const std::string bin = binaryFromEnv("TRAINSCOPE_COLLECTOR_BIN");
  const std::string ready = dir / "collector.ready";
  auto p = std::make_unique<Process>(
      "collector",
      std::vector<std::string>{bin, "--data-dir", spec.dataDir, "--ingest", spec.ingest(), "--http",
                               "127.0.0.1:" + std::to_string(spec.httpPort), "--ready-file", ready,
                               "--hang-floor-ms", "2000"},
      dir / "collector.log");
  const bool up = waitFor(
      [&] {
        return !p->running() ||
               (!readFile(ready).empty() && httpGet(spec.httpPort, "/healthz", 1s).status == 200);
      },
      15s, 50ms);
  INFO("collector log:\n" << p->logTail());
  REQUIRE(p->running());
  REQUIRE(up);
  return p;
}

// A collector in `dir` on free ports.
CollectorSpec freshSpec(const TempDir& dir) {
  CollectorSpec spec;
  spec.dataDir = dir / "data";
  spec.ingestPort = freePort();
  spec.httpPort = freePort();
  return spec;
}

// Agents node0 and node1 sending to the collector; their specs go to `specs`.
std::vector<std::unique_ptr<Process>> startTwoAgents(const TempDir& dir, const CollectorSpec& spec,
                                                     std::vector<AgentSpec>* specs) {
  std::vector<std::unique_ptr<Process>> agents;
  for (int i = 0; i < 2; ++i) {
    const std::string node = "node" + std::to_string(i);
    specs->push_back(
        {node, "ipc://" + (dir / (node + ".sock")), dir / ("spool-" + node), spec.ingest()});
    agents.push_back(startAgent(dir, specs->back(), "agent-" + node));
  }
  return agents;
}

std::set<uint32_t> rankSet(const json& list) {
  std::set<uint32_t> out;
  for (const auto& r : list) out.insert(r.get<uint32_t>());
  return out;
}

// Kinds whose anomaly names more ranks than the fault touched: slow_comm names the
// collective's group (the slow link is in its labels). A hang names the stuck rank only: its
// peers block in the step's first collective, which their probes' progress (RankHello) shows.
bool namesGroup(const std::string& kind) {
  return kind == "slow_comm";
}

// A slow link (comm:rank=R) is named by its sender and the peer it sends to in the ring,
// R -> R+1, with their nodes (rank r runs on node<r % 2> in this test): the ranks are exactly
// those two and labels.link reads "rank R (nodeA) -> rank R+1 (nodeB)". The per-peer link
// totals tell it; the collective alone slows on every rank alike.
bool namesSlowLink(const json& a, const std::set<uint32_t>& ranks) {
  if (ranks.size() != 1 || !a.contains("labels")) return false;
  const uint32_t r = *ranks.begin();
  const uint32_t peer = (r + 1) % 8;
  const std::string want = "rank " + std::to_string(r) + " (node" + std::to_string(r % 2) +
                           ") -> rank " + std::to_string(peer) + " (node" +
                           std::to_string(peer % 2) + ")";
  return rankSet(a["ranks"]) == std::set<uint32_t>{r, peer} &&
         a["labels"].value("link", "") == want && a["labels"].value("scope", "") == "link";
}

// The anomaly of `kind` in `anomalies` with the injected `ranks` (exactly, or among the
// ranks it names for namesGroup kinds; slow_comm: the slow link, see namesSlowLink), or null.
const json* findAnomaly(const json& anomalies, const std::string& kind,
                        const std::set<uint32_t>& ranks) {
  for (const auto& a : anomalies) {
    if (a.value("kind", "") != kind) continue;
    const auto named = rankSet(a["ranks"]);
    bool match = kind == "slow_comm" ? namesSlowLink(a, ranks)
                 : namesGroup(kind)
                     ? std::includes(named.begin(), named.end(), ranks.begin(), ranks.end())
                     : named == ranks;
    if (match) return &a;
  }
  return nullptr;
}

json jobAnomalies(uint16_t http, const std::string& job) {
  auto r = httpGet(http, "/api/v1/jobs/" + percentEncode(job) + "/anomalies", 5s);
  if (r.status != 200) return json::array();
  auto j = json::parse(r.body, nullptr, false);
  return j.is_discarded() ? json::array() : j["anomalies"];
}

}  // namespace

TEST_CASE("e2e: every injected fault kind is detected and served by the API and the CLI") {
  TempDir dir;
  const CollectorSpec spec = freshSpec(dir);
  auto collector = startDetectingCollector(dir, spec);
  std::vector<AgentSpec> agentSpecs;
  auto agents = startTwoAgents(dir, spec, &agentSpecs);

  const std::vector<Fault> faults = {
      {"straggler", "straggler:rank=3,from=100,factor=1.5"},
      {"step_shift", "shift:from=100,factor=1.4"},
      {"slow_comm", "comm:rank=5,from=100,factor=3"},
      {"op_regression", "op:name=aten::gelu,from=100,factor=3"},
      {"spike", "spike:every=20,factor=3"},
      {"hang", "hang:rank=2,at=80"},
  };
  std::vector<std::unique_ptr<Process>> sims;
  for (size_t i = 0; i < faults.size(); ++i) {
    const auto& f = faults[i];
    std::vector<std::string> args;
    for (const auto& a : agentSpecs) {
      args.push_back("--agent");
      args.push_back(a.endpoint);
    }
    for (const std::string& x :
         {std::string("--job"), "anom-" + f.kind, std::string("--ranks"), std::string(kRanks),
          std::string("--steps"), std::string(kSteps), std::string("--seed"),
          std::to_string(11 + i), std::string("--inject"), f.inject, std::string("--truth"),
          dir / (f.kind + ".truth.json"), std::string("--quiet")}) {
      args.push_back(x);
    }
    // Paced in real time (not --fast): ranks then report in step, as in a real job, and the
    // hung one stays alive (--hang-hold-s 0) while wall time passes.
    for (const char* x : {"--step-ms", "40", "--hang-hold-s", "0"}) args.emplace_back(x);
    sims.push_back(startSim(dir, args, "sim-" + f.kind));
  }

  // Truth: the ranks each fault was injected on (every rank for job-wide faults).
  std::map<std::string, std::set<uint32_t>> expectedRanks;
  for (const auto& f : faults) {
    const bool written =
        waitFor([&] { return !readFile(dir / (f.kind + ".truth.json")).empty(); }, 10s);
    REQUIRE(written);
    json truth = json::parse(readFile(dir / (f.kind + ".truth.json")));
    REQUIRE(truth.is_array());
    REQUIRE(truth.size() == 1);
    expectedRanks[f.kind] = rankSet(truth[0]["ranks"]);
    if (expectedRanks[f.kind].empty()) {
      for (uint32_t r = 0; r < 8; ++r) expectedRanks[f.kind].insert(r);
    }
  }

  // Through the API: each job's anomaly of the injected kind on the injected ranks.
  std::map<std::string, json> found;
  waitFor(
      [&] {
        for (const auto& f : faults) {
          if (found.count(f.kind) != 0) continue;
          json list = jobAnomalies(spec.httpPort, "anom-" + f.kind);
          if (const json* a = findAnomaly(list, f.kind, expectedRanks[f.kind])) found[f.kind] = *a;
        }
        return found.size() == faults.size();
      },
      75s, 500ms);
  for (const auto& f : faults) {
    INFO("fault " << f.kind << " (" << f.inject << "): anomalies of its job: "
                  << jobAnomalies(spec.httpPort, "anom-" + f.kind).dump());
    INFO("collector log:\n" << collector->logTail(4000));
    CHECK(found.count(f.kind) == 1);
  }
  // The hang names the stuck rank alone and says why: its peers wait in a collective.
  if (found.count("hang") != 0) {
    const json& h = found["hang"];
    INFO(h.dump());
    CHECK(rankSet(h["ranks"]) == expectedRanks["hang"]);
    CHECK(h["labels"]
              .value("culprit", "")
              .rfind("not in a collective while 7 peers wait in one", 0) == 0);
    CHECK(h["evidence"].value("ranks_waiting", 0.0) == 7.0);
  }
  for (const auto& [kind, a] : found) {
    INFO(a.dump());
    CHECK(a["job"] == "anom-" + kind);
    CHECK(a["id"].get<std::string>().rfind("anom-" + kind + "/", 0) == 0);
    CHECK(a["detected_ns"].get<int64_t>() > 0);
    CHECK_FALSE(a["summary"].get<std::string>().empty());
    CHECK(a["nodes"].size() >= 1);
  }

  // The polling route sees them all.
  auto since = httpGet(spec.httpPort, "/api/v1/anomalies?since=0", 5s);
  REQUIRE(since.status == 200);
  INFO("GET /api/v1/anomalies?since=0: " << since.body);
  std::set<std::string> sinceIds;
  const json sinceBody = since.json();  // kept: a range-for over a temporary's member dangles
  for (const auto& a : sinceBody["anomalies"]) sinceIds.insert(a["id"].get<std::string>());
  for (const auto& [kind, a] : found) CHECK(sinceIds.count(a["id"].get<std::string>()) == 1);

  // /metrics carries the detectors' counters.
  auto metrics = httpGet(spec.httpPort, "/metrics", 5s);
  REQUIRE(metrics.status == 200);
  CHECK(metrics.body.find("trainscope_detect_anomalies_opened_total") != std::string::npos);
  // And the collector's own memory: the resident set and malloc's heap in use and free.
  CHECK(metrics.body.find("\ntrainscope_process_resident_bytes ") != std::string::npos);
  CHECK(metrics.body.find("\ntrainscope_process_heap_bytes{state=\"in_use\"} ") !=
        std::string::npos);

  // Through the CLI: `trainscope anomalies JOB --json` shows the same anomaly.
  const std::string cliBin = binaryFromEnv("TRAINSCOPE_CLI_BIN");
  for (const auto& [kind, a] : found) {
    const std::string log = dir / ("cli-" + kind + ".log");
    Process cli("cli-" + kind,
                {cliBin, "--server", "http://127.0.0.1:" + std::to_string(spec.httpPort),
                 "anomalies", "anom-" + kind, "--json"},
                log);
    auto code = cli.wait(15s);
    INFO("cli output: " << readFile(log));
    REQUIRE(code == std::optional<int>(0));
    // The log starts with the command line ("$ ..."); the JSON follows it.
    std::string text = readFile(log);
    if (text.rfind("$ ", 0) == 0) text = text.substr(text.find('\n') + 1);
    json out = json::parse(text);
    const json* same = findAnomaly(out["anomalies"], kind, expectedRanks[kind]);
    REQUIRE(same != nullptr);
    CHECK((*same)["id"] == a["id"]);
    if (kind == "hang") CHECK(rankSet((*same)["ranks"]) == expectedRanks["hang"]);
  }

  // The hung simulator stays up until killed; the others finish.
  for (auto& s : sims) {
    if (s->name() == "sim-hang") continue;
    INFO(s->name() << " log:\n" << s->logTail());
    CHECK(s->wait(30s).has_value());
  }

  // Offline, from what the collector stored: `trainscope detect --job` finds the job-wide
  // shift in the median step time, and `--rank 3` the straggler's own rise, at step 100 (within
  // the change-point benchmark's margin of 5), in steps up to 200 once all 8 ranks stored them.
  constexpr int kUpTo = 200;
  for (const std::string job : {"anom-step_shift", "anom-straggler"}) {
    const bool stored = waitFor(
        [&] {
          auto r = httpGet(spec.httpPort,
                           "/api/v1/jobs/" + job + "/summary?from=" + std::to_string(kUpTo) +
                               "&to=" + std::to_string(kUpTo),
                           2s);
          if (r.status != 200) return false;
          const json steps = r.json()["steps"];
          return !steps.empty() && steps[0].value("ranks", 0) == 8;
        },
        60s, 200ms);
    INFO(job << " has stored step " << kUpTo << " of all 8 ranks");
    CHECK(stored);
  }
  struct OfflineCase {
    std::string job;
    std::vector<std::string> extra;
    double ratio;  // the injected factor
  };
  for (const auto& c : {OfflineCase{"anom-step_shift", {}, 1.4},
                        OfflineCase{"anom-straggler", {"--rank", "3"}, 1.5}}) {
    const std::string log = dir / ("cli-detect-" + c.job + ".log");
    std::vector<std::string> args{cliBin,
                                  "--server",
                                  "http://127.0.0.1:" + std::to_string(spec.httpPort),
                                  "detect",
                                  "--job",
                                  c.job,
                                  "--to",
                                  std::to_string(kUpTo),
                                  "--json"};
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    Process cli("cli-detect-" + c.job, args, log);
    auto code = cli.wait(30s);
    std::string text = readFile(log);
    INFO("cli output: " << text);
    REQUIRE(code == std::optional<int>(0));
    if (text.rfind("$ ", 0) == 0) text = text.substr(text.find('\n') + 1);
    const json out = json::parse(text);
    CHECK(out["values"].get<int>() >= kUpTo - 5);
    const json* shift = nullptr;
    for (const auto& p : out["change_points"]) {
      if (std::abs(p["step"].get<int>() - 100) <= 5) shift = &p;
    }
    REQUIRE(shift != nullptr);
    CHECK((*shift)["ratio"].get<double>() == Approx(c.ratio).epsilon(0.15));
  }
  sims.clear();
  agents.clear();
  collector.reset();
}

TEST_CASE("e2e: healthy jobs ending cleanly one rank at a time open no anomaly") {
  // A clean end must not read as a hang: a late hello must not re-register an ended rank as
  // "process exited without a goodbye", and the ranks of a large job still saying goodbye are
  // not hung. Here: a 16-rank job run as 16 single-rank processes (as a real job's ranks are),
  // and an 8-rank process whose ranks end 400 ms apart (3.2 s, past the 2 s hang floor), both
  // with checkpoints.
  TempDir dir;
  const CollectorSpec spec = freshSpec(dir);
  auto collector = startDetectingCollector(dir, spec);
  std::vector<AgentSpec> agentSpecs;
  auto agents = startTwoAgents(dir, spec, &agentSpecs);
  auto simArgs = [&](const std::string& job, std::vector<std::string> extra) {
    std::vector<std::string> args;
    for (const auto& a : agentSpecs) {
      args.push_back("--agent");
      args.push_back(a.endpoint);
    }
    for (const char* x : {"--steps", "150", "--step-ms", "40", "--noise", "0.05", "--inject",
                          "spike:every=50,factor=3", "--quiet", "--job"}) {
      args.emplace_back(x);
    }
    args.push_back(job);
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  std::vector<std::unique_ptr<Process>> sims;
  sims.reserve(16);
  for (int r = 0; r < 16; ++r) {
    sims.push_back(startSim(dir,
                            simArgs("clean-procs", {"--ranks", "1", "--first-rank",
                                                    std::to_string(r), "--world-size", "16"}),
                            "sim-procs-" + std::to_string(r)));
  }
  sims.push_back(startSim(
      dir, simArgs("clean-stagger", {"--ranks", "8", "--end-stagger-ms", "400"}), "sim-stagger"));
  for (auto& s : sims) {
    INFO(s->name() << " log:\n" << s->logTail());
    REQUIRE(s->wait(90s) == std::optional<int>(0));
  }
  // Every step stored. Then the proof that the collector got past where a clean end could
  // raise a false hang (late hellos, exits seen by the agents' process watch, resends, the 2 s
  // hang floor passed twice over): a sentinel job started now, through the same agents, hangs
  // after 100 steps (4 s) and its hang is reported (the floor later) by the same detector
  // ticks that judge the ended jobs.
  REQUIRE(
      waitFor([&] { return jobStepRows(spec.httpPort, "clean-procs") == int64_t{16} * 150; }, 30s));
  REQUIRE(waitFor([&] { return jobStepRows(spec.httpPort, "clean-stagger") == int64_t{8} * 150; },
                  30s));
  std::vector<std::string> sentinelArgs = simArgs("sentinel", {"--ranks", "2"});
  for (std::string& a : sentinelArgs) {
    if (a == "spike:every=50,factor=3") a = "hang:rank=1,at=100";
  }
  for (const char* x : {"--hang-hold-s", "0"}) sentinelArgs.emplace_back(x);
  sims.push_back(startSim(dir, sentinelArgs, "sim-sentinel"));
  const bool sentinelHang = waitFor(
      [&] {
        for (const auto& a : jobAnomalies(spec.httpPort, "sentinel")) {
          if (a.value("kind", "") == "hang") return true;
        }
        return false;
      },
      60s, 200ms);
  INFO("collector log:\n" << collector->logTail(4000));
  REQUIRE(sentinelHang);
  for (const std::string job : {"clean-procs", "clean-stagger"}) {
    const json list = jobAnomalies(spec.httpPort, job);
    INFO(job << ": " << list.dump());
    INFO("collector log:\n" << collector->logTail(4000));
    for (const auto& a : list) CHECK(a.value("kind", "") == "spike");  // checkpoint notices only
  }
  sims.clear();
  agents.clear();
  collector.reset();
}
