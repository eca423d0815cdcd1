// Whole-system captures (docs/CAPTURE.md): simulated jobs through real agents and collectors.
// (a) a requested trace of two of 8 ranks holds exactly those ranks, every step of the window
// and each operator and collective inside its step; (b) a straggler triggers an automatic
// capture of it and a healthy rank, linked from the anomaly; (c) a rank whose process is
// SIGKILLed mid-capture fails while the other rank's file stays whole (capture partial);
// (d) a hang triggers a stack dump of every thread of the hung process, one of them in
// simulatedCollectiveWait; (e) bad requests get 404/400/409 with a message; (f) the CLI's
// `capture --wait --out` writes a trace that parses. All jobs run at once to stay short.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/str_cat.h"
#include "tests/e2e/harness.h"
#include "tools/cli/capture_cmd.h"

using namespace trainscope::e2e;
using nlohmann::json;
using trainscope::strCat;

namespace {

// Requested captures name their start step kLeadSteps ahead of the collector's latest step:
// the collector's default (latest + 2) races the ranks at fast steps, since a rank's report
// reaches the collector some 150-250 ms after the rank ended the step (probe coalescing, agent
// batching). The straggler job, whose automatic capture takes that default, steps at 200 ms.
constexpr int64_t kLeadSteps = 10;
constexpr const char* kSlowStepMs = "200";
constexpr const char* kFastStepMs = "40";
constexpr uint32_t kWorld = 8;
// The simulator's model: 4 gradient buckets of 25 MiB all-reduced in group "dp" per step, and
// 105 operators (embedding, 4 blocks of 12, head of 3, the same backward, the optimizer).
constexpr uint64_t kBucketBytes = 25ull << 20;
constexpr size_t kCollectivesPerStep = 4;
constexpr size_t kOpsPerStep = 105;

struct Cluster {
  CollectorSpec spec;
  std::unique_ptr<Process> collector;
  std::vector<AgentSpec> agents;
  std::vector<std::unique_ptr<Process>> agentProcs;
};

// A collector (with `extra` flags) and two agents node0/node1 under `name`.
Cluster startCluster(const TempDir& dir, const std::string& name,
                     const std::vector<std::string>& extra) {
  Cluster c;
  c.spec.dataDir = dir / (name + "-data");
  c.spec.ingestPort = freePort();
  c.spec.httpPort = freePort();
  const std::string ready = dir / (name + ".ready");
  std::vector<std::string> argv{binaryFromEnv("TRAINSCOPE_COLLECTOR_BIN"),
                                "--data-dir",
                                c.spec.dataDir,
                                "--ingest",
                                c.spec.ingest(),
                                "--http",
                                "127.0.0.1:" + std::to_string(c.spec.httpPort),
                                "--ready-file",
                                ready};
  argv.insert(argv.end(), extra.begin(), extra.end());
  c.collector = std::make_unique<Process>(name, argv, dir / (name + ".log"));
  Process& p = *c.collector;
  const bool up = waitFor(
      [&] {
        return !p.running() ||
               (!readFile(ready).empty() && httpGet(c.spec.httpPort, "/healthz", 1s).status == 200);
      },
      15s, 50ms);
  INFO(name << " log:\n" << p.logTail());
  REQUIRE(p.running());
  REQUIRE(up);
  for (int i = 0; i < 2; ++i) {
    const std::string node = "node" + std::to_string(i);
    c.agents.push_back({node, "ipc://" + (dir / strCat(name, "-", node, ".sock")),
                        dir / strCat(name, "-spool-", node), c.spec.ingest()});
    // The agent ships only files under its --capture-dir: where the simulators write them.
    const AgentSpec& as = c.agents.back();
    const std::string agentName = strCat(name, "-agent-", node);
    c.agentProcs.push_back(std::make_unique<Process>(
        agentName,
        std::vector<std::string>{binaryFromEnv("TRAINSCOPE_AGENT_BIN"), "--collector", as.collector,
                                 "--endpoint", as.endpoint, "--node", as.node, "--spool-dir",
                                 as.spoolDir, "--capture-dir", dir / "probe-captures"},
        dir / (agentName + ".log")));
    Process& ap = *c.agentProcs.back();
    const std::string sock = as.endpoint.substr(6);
    const bool agentUp =
        waitFor([&] { return !ap.running() || ::access(sock.c_str(), F_OK) == 0; }, 10s);
    INFO(agentName << " log:\n" << ap.logTail());
    REQUIRE(ap.running());
    REQUIRE(agentUp);
  }
  return c;
}

// A simtrain process of `job` hosting ranks first..first+ranks-1 of an 8-rank job, reporting to
// both agents of `c` (rank r to node<r % 2>), writing capture files under the test's dir.
std::unique_ptr<Process> startSimPart(const TempDir& dir, const Cluster& c, const std::string& job,
                                      uint32_t first, uint32_t ranks, const char* stepMs,
                                      const std::vector<std::string>& extra) {
  std::vector<std::string> argv{binaryFromEnv("TRAINSCOPE_SIMTRAIN_BIN")};
  for (const auto& a : c.agents) {
    argv.push_back("--agent");
    argv.push_back(a.endpoint);
  }
  for (const std::string& x :
       {std::string("--job"), job, std::string("--first-rank"), std::to_string(first),
        std::string("--ranks"), std::to_string(ranks), std::string("--world-size"),
        std::to_string(kWorld), std::string("--step-ms"), std::string(stepMs),
        std::string("--steps"), std::string("1500"), std::string("--noise"), std::string("0.01"),
        std::string("--quiet")}) {
    argv.push_back(x);
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  const std::string name = "sim-" + job + "-" + std::to_string(first);
  return std::make_unique<Process>(
      name, argv, dir / (name + ".log"),
      std::vector<std::string>{"TRAINSCOPE_CAPTURE_DIR=" + (dir / "probe-captures")});
}

int64_t latestStep(uint16_t port, const std::string& job) {
  auto r = httpGet(port, "/api/v1/jobs", 5s);
  if (r.status != 200) return -1;
  auto j = json::parse(r.body, nullptr, false);
  if (j.is_discarded()) return -1;
  for (const auto& row : j["jobs"]) {
    if (row.value("job", "") == job) return row.value("latest_step", int64_t{-1});
  }
  return -1;
}

json getJson(uint16_t port, const std::string& target) {
  auto r = httpGet(port, target, 10s);
  if (r.status != 200) return json();
  auto j = json::parse(r.body, nullptr, false);
  return j.is_discarded() ? json() : j;
}

json getCapture(uint16_t port, const std::string& id) {
  return getJson(port, "/api/v1/captures/" + percentEncode(id));
}

// Polls the capture until it leaves `running`; returns its last JSON.
json waitFinished(uint16_t port, const std::string& id, std::chrono::milliseconds timeout) {
  json c;
  waitFor(
      [&] {
        c = getCapture(port, id);
        return c.is_object() && c.value("state", "running") != "running";
      },
      timeout, 200ms);
  return c;
}

const json* rankStatus(const json& capture, uint32_t rank) {
  for (const auto& rs : capture["rank_status"]) {
    if (rs.value("rank", -1) == static_cast<int>(rank)) return &rs;
  }
  return nullptr;
}

// A body that may be gzip (a rank file as stored) as JSON.
json parseMaybeGzip(const std::string& body) {
  if (body.size() >= 2 && static_cast<unsigned char>(body[0]) == 0x1f &&
      static_cast<unsigned char>(body[1]) == 0x8b) {
    auto plain = trainscope::cli::gunzip(body);
    REQUIRE(plain.isOk());
    return json::parse(*plain);
  }
  return json::parse(body);
}

std::set<uint32_t> rankSet(const json& list) {
  std::set<uint32_t> out;
  if (!list.is_array()) return out;
  for (const auto& r : list) out.insert(r.get<uint32_t>());
  return out;
}

// Waits for an anomaly of `kind` in `job` (naming `rank`, when given) that links a capture;
// true with it in *out.
bool waitAnomalyWithCapture(uint16_t port, const std::string& job, const std::string& kind,
                            std::optional<uint32_t> rank, std::chrono::milliseconds timeout,
                            json* out) {
  return waitFor(
      [&] {
        json list = getJson(port, "/api/v1/jobs/" + percentEncode(job) + "/anomalies");
        if (!list.is_object()) return false;
        for (const auto& an : list["anomalies"]) {
          if (an.value("kind", "") == kind && (!rank || rankSet(an["ranks"]).count(*rank) == 1) &&
              an.contains("capture_id") && an["capture_id"].is_string()) {
            *out = an;
            return true;
          }
        }
        return false;
      },
      timeout, 250ms);
}

// Checks a merged trace against the capture: exactly `ranks` (process_name "rank R (nodeX)"),
// every step of [first, last] once per rank, each op, range and collective inside its step.
void checkMergedTrace(const json& trace, const std::set<uint32_t>& ranks, int64_t first,
                      int64_t last) {
  REQUIRE(trace.contains("traceEvents"));
  struct Span {
    double ts = 0, dur = 0;
  };
  std::map<uint32_t, std::map<int64_t, Span>> steps;
  std::map<uint32_t, std::string> names;
  std::set<uint32_t> pids;
  for (const auto& e : trace["traceEvents"]) {
    if (!e.contains("pid")) continue;  // global markers
    const uint32_t pid = e["pid"].get<uint32_t>();
    pids.insert(pid);
    if (e.value("ph", "") == "M" && e.value("name", "") == "process_name") {
      names[pid] = e["args"].value("name", "");
    }
    if (e.value("ph", "") == "X" && e.value("cat", "") == "step") {
      const int64_t s = e["args"]["step"].get<int64_t>();
      CHECK(e["name"] == "ProfilerStep#" + std::to_string(s));
      CHECK(steps[pid].count(s) == 0);
      steps[pid][s] = {e["ts"].get<double>(), e["dur"].get<double>()};
    }
  }
  CHECK(pids == ranks);
  for (uint32_t r : ranks) {
    CHECK(names[r] == "rank " + std::to_string(r) + " (node" + std::to_string(r % 2) + ")");
    std::set<int64_t> want;
    for (int64_t s = first; s <= last; ++s) want.insert(s);
    std::set<int64_t> got;
    for (const auto& [s, span] : steps[r]) got.insert(s);
    INFO("rank " << r);
    CHECK(got == want);
  }
  // Per rank and step: operators and collectives, each inside its step's interval.
  std::map<std::pair<uint32_t, int64_t>, size_t> ops;
  std::map<std::pair<uint32_t, int64_t>, size_t> colls;
  size_t outside = 0;
  for (const auto& e : trace["traceEvents"]) {
    const std::string cat = e.value("cat", "");
    if (e.value("ph", "") != "X" || (cat != "op" && cat != "collective" && cat != "range")) {
      continue;
    }
    const uint32_t pid = e["pid"].get<uint32_t>();
    const int64_t s = e["args"]["step"].get<int64_t>();
    auto it = steps[pid].find(s);
    if (it == steps[pid].end()) {
      ++outside;
      continue;
    }
    const double ts = e["ts"].get<double>();
    const double end = ts + e["dur"].get<double>();
    constexpr double kEps = 1.0;  // µs: float rounding of ns timestamps
    if (ts + kEps < it->second.ts || end > it->second.ts + it->second.dur + kEps) {
      ++outside;
      UNSCOPED_INFO("outside its step: " << e.dump());
    }
    if (cat == "op") ++ops[{pid, s}];
    if (cat == "collective") {
      ++colls[{pid, s}];
      CHECK(e["args"]["bytes"].get<uint64_t>() == kBucketBytes);
      CHECK(e["args"]["op"] == "all_reduce");
      CHECK(e["args"]["group"] == "dp");
      CHECK(e["name"] == "all_reduce");
    }
  }
  CHECK(outside == 0);
  for (uint32_t r : ranks) {
    for (int64_t s = first; s <= last; ++s) {
      INFO("rank " << r << " step " << s);
      CHECK(ops[{r, s}] == kOpsPerStep);
      CHECK(colls[{r, s}] == kCollectivesPerStep);
    }
  }
}

// The process's thread ids, from /proc.
std::set<int64_t> threadIds(pid_t pid) {
  std::set<int64_t> out;
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') out.insert(std::stoll(e->d_name));
  }
  ::closedir(d);
  return out;
}

std::string errorOf(const HttpResponse& r) {
  auto j = json::parse(r.body, nullptr, false);
  return !j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_string()
             ? j["error"].get<std::string>()
             : "";
}

}  // namespace

TEST_CASE(
    "e2e: captures end to end: requested, automatic, rank killed, hang stacks, bad "
    "requests, CLI") {
  TempDir dir;
  ::mkdir((dir / "probe-captures").c_str(), 0755);
  // A: no automatic captures, so requested ones never meet a running one. B: detection with a
  // short hang floor and automatic captures at most once a second per job.
  Cluster a = startCluster(dir, "collector-a", {"--auto-capture-interval", "0"});
  Cluster b = startCluster(dir, "collector-b",
                           {"--auto-capture-interval", "1", "--hang-floor-ms", "2000",
                            "--detect-grace-steps", "16", "--detect-warmup-steps", "4"});
  const uint16_t httpA = a.spec.httpPort;
  const uint16_t httpB = b.spec.httpPort;

  auto basic = startSimPart(dir, a, "cap-basic", 0, 8, kFastStepMs, {});
  auto killLow = startSimPart(dir, a, "cap-kill", 0, 4, kFastStepMs, {});
  auto killHigh = startSimPart(dir, a, "cap-kill", 4, 4, kFastStepMs, {});
  auto straggler = startSimPart(dir, b, "cap-straggler", 0, 8, kSlowStepMs,
                                {"--inject", "straggler:rank=3,from=40,factor=1.6"});
  auto hangLow =
      startSimPart(dir, b, "cap-hang", 0, 4, kFastStepMs, {"--inject", "hang:rank=6,at=70"});
  auto hangHigh =
      startSimPart(dir, b, "cap-hang", 4, 4, kFastStepMs, {"--inject", "hang:rank=6,at=70"});

  REQUIRE(waitFor([&] { return latestStep(httpA, "cap-basic") >= 6; }, 20s, 100ms));

  {
    // (e) Bad requests: each refused with its status and a message.
    {
      auto r = httpPost(httpA, "/api/v1/jobs/no-such-job/captures", "{}");
      CHECK(r.status == 404);
      CHECK_FALSE(errorOf(r).empty());
      r = httpPost(httpA, "/api/v1/jobs/cap-basic/captures", R"({"ranks":[0,8]})");
      CHECK(r.status == 400);
      CHECK_THAT(errorOf(r), Catch::Contains("8"));
      r = httpPost(httpA, "/api/v1/jobs/cap-basic/captures", R"({"steps":0})");
      CHECK(r.status == 400);
      CHECK_FALSE(errorOf(r).empty());
      r = httpPost(httpA, "/api/v1/jobs/cap-basic/captures", R"({"start_step":1})");
      CHECK(r.status == 409);
      CHECK_THAT(errorOf(r), Catch::Contains("already passed"));
    }

    // (a) Ranks 0 and 5 for 3 steps with 2 of history.
    auto created = httpPost(httpA, "/api/v1/jobs/cap-basic/captures",
                            R"({"ranks":[0,5],"steps":3,"history":2,"start_step":)" +
                                std::to_string(latestStep(httpA, "cap-basic") + kLeadSteps) + "}");
    INFO("POST: " << created.status << " " << created.body);
    REQUIRE(created.status == 201);
    const json cap = created.json();
    const std::string id = cap["id"].get<std::string>();
    CHECK(id.rfind("cap-", 0) == 0);
    CHECK(rankSet(cap["ranks"]) == std::set<uint32_t>{0, 5});
    const int64_t s = cap["start_step"].get<int64_t>();
    json done = waitFinished(httpA, id, 20s);
    INFO("capture: " << done.dump() << "\ncollector log:\n" << a.collector->logTail(3000));
    REQUIRE(done.value("state", "") == "complete");
    for (uint32_t r : {0u, 5u}) {
      const json* rs = rankStatus(done, r);
      REQUIRE(rs != nullptr);
      CHECK((*rs)["state"] == "done");
      CHECK((*rs)["first_step"] == s - 2);
      CHECK((*rs)["last_step"] == s + 2);
    }
    auto trace = httpGet(httpA, "/api/v1/captures/" + id + "/trace", 20s);
    REQUIRE(trace.status == 200);
    checkMergedTrace(parseMaybeGzip(trace.body), {0, 5}, s - 2, s + 2);

    // (f) The CLI: capture rank 0 for 2 steps, wait, write the merged trace.
    {
      const std::string out = dir / "cli-trace.json";
      const std::string log = dir / "cli-capture.log";
      Process cli(
          "cli-capture",
          {binaryFromEnv("TRAINSCOPE_CLI_BIN"), "--server",
           "http://127.0.0.1:" + std::to_string(httpA), "capture", "cap-basic", "--ranks", "0",
           "--steps", "2", "--start-step",
           std::to_string(latestStep(httpA, "cap-basic") + kLeadSteps), "--wait", "--out", out},
          log);
      auto code = cli.wait(30s);
      INFO("cli output: " << readFile(log));
      CHECK(code == std::optional<int>(0));
      json f = json::parse(readFile(out), nullptr, false);
      REQUIRE_FALSE(f.is_discarded());
      size_t profilerSteps = 0;
      for (const auto& e : f["traceEvents"]) profilerSteps += e.value("cat", "") == "step";
      CHECK(profilerSteps >= 2);
      CHECK(readFile(log).find("rank 0 (node0): done") != std::string::npos);
    }

    // (c) Ranks 1 and 5 of cap-kill for 40 steps; SIGKILL the process of ranks 4-7 once both
    // record: rank 5 fails with a reason, rank 1 completes and its file downloads whole.
    {
      REQUIRE(waitFor([&] { return latestStep(httpA, "cap-kill") >= 5; }, 10s, 100ms));
      const int64_t at = latestStep(httpA, "cap-kill") + kLeadSteps;
      auto r = httpPost(
          httpA, "/api/v1/jobs/cap-kill/captures",
          R"({"ranks":[1,5],"steps":40,"history":2,"start_step":)" + std::to_string(at) + "}");
      INFO("POST: " << r.status << " " << r.body);
      REQUIRE(r.status == 201);
      const std::string kid = r.json()["id"].get<std::string>();
      const int64_t ks = r.json()["start_step"].get<int64_t>();
      json c;
      const bool recording = waitFor(
          [&] {
            c = getCapture(httpA, kid);
            const json* r1 = rankStatus(c, 1);
            const json* r5 = rankStatus(c, 5);
            return r1 && r5 && (*r1)["state"] == "recording" && (*r5)["state"] == "recording" &&
                   latestStep(httpA, "cap-kill") >= ks + 5;
          },
          15s, 100ms);
      INFO("capture before the kill: " << c.dump());
      REQUIRE(recording);
      killHigh->kill(SIGKILL);
      killHigh->wait(5s);
      json k = waitFinished(httpA, kid, 25s);
      INFO("capture after the kill: " << k.dump() << "\ncollector log:\n"
                                      << a.collector->logTail(3000));
      CHECK(k.value("state", "") == "partial");
      const json* r1 = rankStatus(k, 1);
      const json* r5 = rankStatus(k, 5);
      REQUIRE(r1 != nullptr);
      REQUIRE(r5 != nullptr);
      CHECK((*r1)["state"] == "done");
      CHECK((*r5)["state"] == "failed");
      CHECK_FALSE((*r5)["detail"].get<std::string>().empty());
      auto file = httpGet(httpA, "/api/v1/captures/" + kid + "/ranks/1", 20s);
      REQUIRE(file.status == 200);
      json rank1 = parseMaybeGzip(file.body);
      CHECK(rank1["trainscope"]["rank"] == 1);
      CHECK(rank1["trainscope"]["first_step"] == ks - 2);
      CHECK(rank1["trainscope"]["last_step"] == ks + 39);
      CHECK(ks == at);
      CHECK(rank1["trainscope"]["truncated"] == false);
      size_t stepsInFile = 0;
      for (const auto& e : rank1["traceEvents"]) stepsInFile += e.value("cat", "") == "step";
      CHECK(stepsInFile == 42);
      CHECK(httpGet(httpA, "/api/v1/captures/" + kid + "/trace", 20s).status == 200);
    }

    // (b) The straggler's anomaly names an automatic capture of rank 3 and a healthy rank.
    {
      json anomaly;
      const bool linked =
          waitAnomalyWithCapture(httpB, "cap-straggler", "straggler", 3, 25s, &anomaly);
      INFO("anomalies: " << getJson(httpB, "/api/v1/jobs/cap-straggler/anomalies").dump()
                         << "\ncollector log:\n"
                         << b.collector->logTail(3000));
      REQUIRE(linked);
      const std::string cid = anomaly["capture_id"].get<std::string>();
      json c = waitFinished(httpB, cid, 20s);
      INFO("capture: " << c.dump());
      CHECK(c["anomaly_id"] == anomaly["id"]);
      CHECK(c["kind"] == "trace");
      CHECK_THAT(c["reason"].get<std::string>(), Catch::StartsWith("anomaly "));
      const auto ranks = rankSet(c["ranks"]);
      CHECK(ranks.count(3) == 1);
      CHECK(ranks.size() >= 2);  // plus a healthy reference rank
      CHECK(c["state"] == "complete");
      auto t = httpGet(httpB, "/api/v1/captures/" + cid + "/trace", 20s);
      REQUIRE(t.status == 200);
      const int64_t cs = c["start_step"].get<int64_t>();
      checkMergedTrace(parseMaybeGzip(t.body), ranks, cs - c["history"].get<int64_t>(),
                       cs + c["steps"].get<int64_t>() - 1);
    }

    // (d) The hang's anomaly names an automatic stack dump; the hung process's dump lists
    // every thread it has, one of them waiting in simulatedCollectiveWait.
    {
      json anomaly;
      const bool linked =
          waitAnomalyWithCapture(httpB, "cap-hang", "hang", std::nullopt, 20s, &anomaly);
      INFO("anomalies: " << getJson(httpB, "/api/v1/jobs/cap-hang/anomalies").dump()
                         << "\ncollector log:\n"
                         << b.collector->logTail(3000));
      REQUIRE(linked);
      std::string cid = anomaly["capture_id"].get<std::string>();
      json c = waitFinished(httpB, cid, 20s);
      INFO("capture: " << c.dump());
      CHECK(c["kind"] == "stacks");
      CHECK(c["anomaly_id"] == anomaly["id"]);
      // The hung rank 6 runs in the second process; use a rank of it from the automatic
      // capture, or request one for rank 6 when the anomaly named none of them.
      auto ranks = rankSet(c["ranks"]);
      if (std::none_of(ranks.begin(), ranks.end(), [](uint32_t r) { return r >= 4; })) {
        auto r =
            httpPost(httpB, "/api/v1/jobs/cap-hang/captures", R"({"kind":"stacks","ranks":[6]})");
        REQUIRE(r.status == 201);
        cid = r.json()["id"].get<std::string>();
        c = waitFinished(httpB, cid, 20s);
      }
      REQUIRE(c["state"] != "failed");
      auto t = httpGet(httpB, "/api/v1/captures/" + cid + "/trace", 20s);
      REQUIRE(t.status == 200);
      json merged = parseMaybeGzip(t.body);
      CHECK(merged["kind"] == "stacks");
      const std::set<int64_t> live = threadIds(hangHigh->pid());
      bool checked = false;
      for (const auto& rank : merged["ranks"]) {
        if (rank["rank"].get<uint32_t>() < 4) continue;
        INFO("rank " << rank["rank"] << " stacks: " << rank.dump());
        std::set<int64_t> tids;
        bool waiting = false;
        for (const auto& th : rank["threads"]) {
          tids.insert(th["tid"].get<int64_t>());
          for (const auto& f : th["native"]) {
            waiting |= f.value("function", "").find("simulatedCollectiveWait") != std::string::npos;
          }
        }
        // Every thread the process has is in the dump. The dump may list a few more: threads
        // that existed only while it was taken (the probes of this process dump at once).
        CHECK(std::includes(tids.begin(), tids.end(), live.begin(), live.end()));
        CHECK(tids.count(hangHigh->pid()) == 1);  // the main thread, in simulatedCollectiveWait
        CHECK(waiting);
        checked = true;
      }
      CHECK(checked);
    }
  }

  basic.reset();
  killLow.reset();
  killHigh.reset();
  straggler.reset();
  hangLow.reset();
  hangHigh.reset();
}
