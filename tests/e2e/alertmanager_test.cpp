// Anomalies reach Alertmanager: Debian's prometheus-alertmanager on a loopback port, a
// collector sending to it (--alertmanager), one agent and a simulated job with an injected
// straggler. The straggler's alert must show in Alertmanager's /api/v2/alerts with the
// anomaly's labels and a dashboard link, and leave once the anomaly ends with its job. Exits 77
// where the alertmanager binary is absent (tools/dev/deps.sh test installs it).
#include <unistd.h>

#include <cstdint>
#include <ctime>

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/e2e/harness.h"

using namespace trainscope::e2e;
using nlohmann::json;

namespace {

std::string alertmanagerBinary() {
  const char* env = std::getenv("TRAINSCOPE_ALERTMANAGER_BIN");
  std::string bin = env != nullptr && *env != '\0' ? env : "/usr/bin/prometheus-alertmanager";
  if (::access(bin.c_str(), X_OK) != 0) {
    trainscope::tests::skipTest(bin +
                                " is not installed (apt-get install prometheus-alertmanager)");
  }
  return bin;
}

// Alertmanager's alerts of `job` (active ones: a resolved alert is not listed), or null when
// the request failed.
json alertsOf(uint16_t port, const std::string& job) {
  auto r = httpGet(port, "/api/v2/alerts?filter=" + percentEncode("job=\"" + job + "\""), 5s);
  if (r.status != 200) return nullptr;
  json all = json::parse(r.body, nullptr, false);
  return all.is_array() ? all : json(nullptr);
}

// Seconds since the epoch of an RFC 3339 UTC time ("2026-01-02T03:04:05.678Z"), fraction cut.
int64_t unixSeconds(const json& text) {
  const std::string t = text.is_string() ? text.get<std::string>() : "";
  std::tm tm{};
  if (t.size() < 19 || strptime(t.substr(0, 19).c_str(), "%Y-%m-%dT%H:%M:%S", &tm) == nullptr) {
    return -1;
  }
  return static_cast<int64_t>(timegm(&tm));
}

json anomaliesOf(uint16_t http, const std::string& job) {
  auto r = httpGet(http, "/api/v1/jobs/" + percentEncode(job) + "/anomalies", 5s);
  if (r.status != 200) return json::array();
  json j = json::parse(r.body, nullptr, false);
  return j.is_discarded() ? json::array() : j["anomalies"];
}

}  // namespace

TEST_CASE(
    "e2e: an injected straggler reaches Alertmanager with its labels and leaves when it ends with "
    "its job") {
  const std::string amBin = alertmanagerBinary();
  TempDir dir;
  // No clustering (it would listen on every address): one Alertmanager on loopback, every
  // alert to a receiver that sends nothing.
  dir.write("alertmanager.yml", "route:\n  receiver: none\nreceivers:\n  - name: none\n");
  const uint16_t amPort = freePort();
  Process am(
      "alertmanager",
      {amBin, "--config.file=" + (dir / "alertmanager.yml"), "--storage.path=" + (dir / "am-data"),
       "--web.listen-address=127.0.0.1:" + std::to_string(amPort), "--cluster.listen-address="},
      dir / "alertmanager.log");
  const bool amUp = waitFor(
      [&] { return !am.running() || httpGet(amPort, "/-/ready", 1s).status == 200; }, 30s, 100ms);
  INFO("alertmanager log:\n" << am.logTail());
  REQUIRE(am.running());
  REQUIRE(amUp);

  CollectorSpec cs;
  cs.dataDir = dir / "data";
  cs.ingestPort = freePort();
  cs.httpPort = freePort();
  const std::string dashboard = "http://dash.example:7600";
  auto collector = startCollector(dir, cs, "collector",
                                  {"--alertmanager", "http://127.0.0.1:" + std::to_string(amPort),
                                   "--alertmanager-resend", "30", "--external-url", dashboard});
  AgentSpec as{"node0", "ipc://" + (dir / "node0.sock"), dir / "spool-node0", cs.ingest()};
  auto agent = startAgent(dir, as, "agent-node0");

  const std::string job = "am-straggler";
  // 4 ranks at 40 ms a step for 12 s; rank 2 computes 1.6x its peers from step 60.
  Process sim("sim",
              {binaryFromEnv("TRAINSCOPE_SIMTRAIN_BIN"), "--agent", as.endpoint, "--job", job,
               "--ranks", "4", "--steps", "300", "--step-ms", "40", "--noise", "0.01", "--seed",
               "5", "--inject", "straggler:rank=2,from=60,factor=1.6", "--quiet"},
              dir / "sim.log");

  json alert;
  const bool arrived = waitFor(
      [&] {
        json alerts = alertsOf(amPort, job);
        if (!alerts.is_array()) return false;
        for (const auto& a : alerts) {
          if (a["labels"].value("alertname", "") == "TrainscopeStraggler") {
            alert = a;
            return true;
          }
        }
        return false;
      },
      90s, 250ms);
  INFO("collector log:\n" << collector->logTail(4000));
  INFO("alertmanager alerts: " << alertsOf(amPort, job).dump());
  INFO("collector anomalies: " << anomaliesOf(cs.httpPort, job).dump());
  REQUIRE(arrived);

  // The anomaly as the collector's API serves it: the alert names it.
  json anomaly;
  for (const auto& a : anomaliesOf(cs.httpPort, job)) {
    if (a.value("kind", "") == "straggler") anomaly = a;
  }
  REQUIRE(anomaly.is_object());
  const json& labels = alert["labels"];
  CHECK(labels["anomaly"] == anomaly["id"]);
  CHECK(labels["job"] == job);
  CHECK(labels["kind"] == "straggler");
  CHECK(labels["ranks"] == "r2");
  CHECK(labels["nodes"] == "node0");
  const std::string severity = labels.value("severity", "");
  CHECK((severity == "info" || severity == "warning" || severity == "critical"));
  CHECK(alert["status"]["state"] == "active");
  const std::string link = dashboard + "/#/jobs/" + percentEncode(job) + "/anomalies/" +
                           percentEncode(anomaly["id"].get<std::string>());
  CHECK(alert["annotations"]["dashboard"] == link);
  CHECK(alert["generatorURL"] == link);
  CHECK(alert["annotations"]["summary"] == anomaly["summary"]);
  CHECK(alert["annotations"].contains("estimated_gain"));

  // Open, it ends 4 re-sends (2 minutes) ahead: only the resolution sent below can take it out
  // of the list within the wait that follows, not its expiry.
  CHECK(unixSeconds(alert["endsAt"]) >= unixSeconds(alert["updatedAt"]) + 60);

  // The job ends (every rank says goodbye), its open anomaly ends, and the alert is resolved:
  // Alertmanager lists only active alerts.
  REQUIRE(sim.wait(60s).value_or(-1) == 0);
  const bool left = waitFor(
      [&] {
        json alerts = alertsOf(amPort, job);
        return alerts.is_array() && alerts.empty();
      },
      60s, 250ms);
  INFO("alertmanager alerts at the end: " << alertsOf(amPort, job).dump());
  CHECK(left);
  bool ended = false;
  for (const auto& a : anomaliesOf(cs.httpPort, job)) {
    if (a["id"] == anomaly["id"]) ended = a.value("state", "") == "ended";
  }
  CHECK(ended);
  // Delivered, never failed: /metrics says so.
  const std::string metrics = httpGet(cs.httpPort, "/metrics").body;
  CHECK(metrics.find("trainscope_notify_failures_total{sink=\"alertmanager\",index=\"0\","
                     "receiver=\"http://127.0.0.1:" +
                     std::to_string(amPort) + "\"} 0") != std::string::npos);
  CHECK(metrics.find("trainscope_notify_sent_total{sink=\"alertmanager\"") != std::string::npos);
}
