// Whole-system automatic captures and the end of anomalies (issue 34), through a real collector
// with its default automatic-capture settings, an agent and trainscope-simtrain:
// (a) a job that first gets faster (a step_shift of gain 0, which used to take the job's one
// capture) and later gets a 1.5x straggler at 20 ms steps: the straggler's anomaly takes the
// automatic capture, the faster job's none, and the capture's history reaches back before the
// straggler's onset (4 steps of history used to end some 100 steps after it); when the job
// ends, its still-open anomaly ends with it (state "ended", ended_step = the job's last step)
// and /metrics counts no open anomaly of it. (b) A job that ends while the collector is down:
// at restart its open anomaly ends.
#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/e2e/harness.h"
#include "tools/cli/capture_cmd.h"

using namespace trainscope::e2e;
using nlohmann::json;

namespace {

json getJson(uint16_t port, const std::string& target) {
  auto r = httpGet(port, target, 10s);
  if (r.status != 200) return json();
  auto j = json::parse(r.body, nullptr, false);
  return j.is_discarded() ? json() : j;
}

json anomaliesOf(uint16_t port, const std::string& job) {
  json j = getJson(port, "/api/v1/jobs/" + percentEncode(job) + "/anomalies");
  return j.is_object() && j["anomalies"].is_array() ? j["anomalies"] : json::array();
}

const json* findKind(const json& anomalies, const std::string& kind) {
  for (const auto& a : anomalies) {
    if (a.value("kind", "") == kind) return &a;
  }
  return nullptr;
}

json waitFinished(uint16_t port, const std::string& id, std::chrono::milliseconds timeout) {
  json c;
  waitFor(
      [&] {
        c = getJson(port, "/api/v1/captures/" + percentEncode(id));
        return c.is_object() && c.value("state", "running") != "running";
      },
      timeout, 200ms);
  return c;
}

json parseMaybeGzip(const std::string& body) {
  if (body.size() >= 2 && static_cast<unsigned char>(body[0]) == 0x1f &&
      static_cast<unsigned char>(body[1]) == 0x8b) {
    auto plain = trainscope::cli::gunzip(body);
    REQUIRE(plain.isOk());
    return json::parse(*plain);
  }
  return json::parse(body);
}

// The steps of `rank` in a merged trace.
std::set<int64_t> stepsOf(const json& trace, uint32_t rank) {
  std::set<int64_t> out;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("ph", "") == "X" && e.value("cat", "") == "step" && e.contains("pid") &&
        e["pid"].get<uint32_t>() == rank) {
      out.insert(e["args"]["step"].get<int64_t>());
    }
  }
  return out;
}

// The open-anomaly gauge's samples for `job` in a /metrics body.
size_t openSamples(const std::string& metrics, const std::string& job) {
  size_t n = 0;
  const std::string prefix = "trainscope_anomalies_open{";
  for (size_t at = metrics.find(prefix); at != std::string::npos;
       at = metrics.find(prefix, at + 1)) {
    const size_t eol = metrics.find('\n', at);
    if (metrics.substr(at, eol - at).find("training_job=\"" + job + "\"") != std::string::npos) ++n;
  }
  return n;
}

std::unique_ptr<Process> startJob(const TempDir& dir, const AgentSpec& agent,
                                  const std::string& job, const std::vector<std::string>& extra) {
  std::vector<std::string> argv{binaryFromEnv("TRAINSCOPE_SIMTRAIN_BIN"),
                                "--agent",
                                agent.endpoint,
                                "--job",
                                job,
                                "--ranks",
                                "8",
                                "--noise",
                                "0.01",
                                "--quiet"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<Process>(
      "sim-" + job, argv, dir / ("sim-" + job + ".log"),
      std::vector<std::string>{"TRAINSCOPE_CAPTURE_DIR=" + (dir / "probe-captures")});
}

}  // namespace

TEST_CASE(
    "e2e: the automatic capture goes to the real fault with its onset in the history and not to "
    "a job getting faster - the open anomaly ends with its job") {
  TempDir dir;
  OneNode n = startOneNode(dir, {"--capture-dir", dir / "probe-captures"});
  const uint16_t http = n.cs.httpPort;
  const std::string job = "choice";
  // 20 ms steps; from step 150 every step is 0.8x (faster), from step 500 rank 3 computes 1.5x.
  auto sim =
      startJob(dir, n.as, job,
               {"--step-ms", "20", "--steps", "1100", "--inject", "shift:factor=0.8,from=150",
                "--inject", "straggler:rank=3,from=500,factor=1.5"});

  json straggler;
  const bool captured = waitFor(
      [&] {
        const json list = anomaliesOf(http, job);
        const json* s = findKind(list, "straggler");
        if (s == nullptr || !s->contains("capture_id") || !(*s)["capture_id"].is_string())
          return false;
        straggler = *s;
        return true;
      },
      90s, 500ms);
  INFO("anomalies: " << anomaliesOf(http, job).dump() << "\ncollector log:\n"
                     << n.collector->logTail(4000));
  REQUIRE(captured);
  CHECK(straggler["ranks"] == json::array({3}));
  const int64_t onset = straggler["onset_step"].get<int64_t>();
  CHECK(onset >= 495);
  CHECK(onset <= 510);
  // A faster job is no reason to trace it: its step_shift, if raised, took no capture.
  for (const auto& a : anomaliesOf(http, job)) {
    if (a.value("kind", "") == "step_shift" && a.value("magnitude", 1.0) < 1.0) {
      CHECK(a["capture_id"].is_null());
    }
  }

  const std::string cid = straggler["capture_id"].get<std::string>();
  json c = waitFinished(http, cid, 60s);
  INFO("capture: " << c.dump());
  CHECK(c["state"] == "complete");
  const int64_t start = c["start_step"].get<int64_t>();
  const int64_t history = c["history"].get<int64_t>();
  CHECK(history > 4);
  CHECK(start - history <= onset - 1);
  CHECK_THAT(c["reason"].get<std::string>(), Catch::Contains("covers the onset"));
  CHECK(c["summary"].get<std::string>().find("history short") == std::string::npos);
  auto t = httpGet(http, "/api/v1/captures/" + cid + "/trace", 30s);
  REQUIRE(t.status == 200);
  const json trace = parseMaybeGzip(t.body);
  for (uint32_t r : {0u, 3u}) {
    const auto steps = stepsOf(trace, r);
    INFO("rank " << r);
    REQUIRE_FALSE(steps.empty());
    // The healthy steps before the onset and the slow ones after it are both in the trace.
    CHECK(*steps.begin() <= onset - 1);
    CHECK(steps.count(onset) == 1);
    CHECK(*steps.rbegin() >= start);
  }

  // The job ends (every rank says goodbye): the straggler, still slow at its end, ends with it.
  auto rc = sim->wait(120s);
  INFO("simtrain log:\n" << sim->logTail());
  REQUIRE(rc == std::optional<int>(0));
  json ended;
  const bool over = waitFor(
      [&] {
        const json list = anomaliesOf(http, job);
        const json* s = findKind(list, "straggler");
        if (s == nullptr || s->value("state", "") != "ended") return false;
        ended = *s;
        return true;
      },
      30s, 500ms);
  INFO("anomalies: " << anomaliesOf(http, job).dump());
  REQUIRE(over);
  CHECK(ended["ended_step"] == 1099);
  CHECK(ended["resolved_step"].is_null());
  CHECK(ended["capture_id"] == cid);
  for (const auto& a : anomaliesOf(http, job)) CHECK(a.value("state", "") != "open");
  auto metrics = httpGet(http, "/metrics", 10s);
  REQUIRE(metrics.status == 200);
  CHECK(openSamples(metrics.body, job) == 0);
  CHECK(metrics.body.find("trainscope_detect_anomalies_ended_total 0") == std::string::npos);
  CHECK(metrics.body.find("trainscope_detect_anomalies_ended_total ") != std::string::npos);
}

TEST_CASE(
    "e2e: the open anomalies of a job that ended while the collector was down end at restart") {
  TempDir dir;
  OneNode n = startOneNode(dir);
  const uint16_t http = n.cs.httpPort;
  const std::string job = "ends-while-down";
  auto sim = startJob(
      dir, n.as, job,
      {"--step-ms", "40", "--steps", "450", "--inject", "straggler:rank=5,from=100,factor=1.5"});
  const bool open = waitFor(
      [&] {
        const json list = anomaliesOf(http, job);
        const json* s = findKind(list, "straggler");
        return s != nullptr && s->value("state", "") == "open";
      },
      60s, 500ms);
  INFO("collector log:\n" << n.collector->logTail(3000));
  REQUIRE(open);
  // The collector goes away; the job ends meanwhile and the agent spools its last steps and
  // goodbyes.
  REQUIRE(n.collector->stop() == 0);
  auto rc = sim->wait(120s);
  INFO("simtrain log:\n" << sim->logTail());
  REQUIRE(rc.has_value());
  n.collector = startCollector(dir, n.cs, "collector-restarted");
  const bool ended = waitFor(
      [&] {
        const json list = anomaliesOf(http, job);
        const json* s = findKind(list, "straggler");
        return s != nullptr && s->value("state", "") == "ended";
      },
      60s, 500ms);
  INFO("anomalies: " << anomaliesOf(http, job).dump() << "\ncollector log:\n"
                     << n.collector->logTail(3000));
  REQUIRE(ended);
  const json list = anomaliesOf(http, job);
  const json* s = findKind(list, "straggler");
  REQUIRE(s != nullptr);
  CHECK((*s)["ended_step"] == 449);
  auto metrics = httpGet(http, "/metrics", 10s);
  CHECK(openSamples(metrics.body, job) == 0);
}
