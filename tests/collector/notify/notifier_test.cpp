// The notify stage against a real HTTP receiver on 127.0.0.1: Alertmanager's alerts (labels,
// annotations, re-sends, resolution), webhook and Slack bodies, the secret header, filters,
// retries with backoff, refusals, the bounded queue, and a receiver that never answers.
#include "collector/notify/notifier.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "collector/notify/http_post.h"
#include "collector/notify/payload.h"
#include "common/clock.h"
#include "common/percent_encode.h"
#include "tests/collector/notify/receiver.h"
#include "tests/common/support.h"

using trainscope::SystemClock;
using trainscope::notify::Notifier;
using trainscope::notify::NotifyOptions;
using trainscope::storage::AnomalyRow;
using trainscope::storage::AnomalyState;
using trainscope::tests::HttpReceiver;
using trainscope::tests::waitFor;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr const char* kDashboard = "http://dash.example:7600";

AnomalyRow straggler(const std::string& job = "job-1", double gain = 0.25) {
  AnomalyRow row;
  row.job = job;
  row.kind = "straggler";
  row.ranks = {3};
  row.nodes = {"node1"};
  row.onsetStep = 100;
  row.detectedStep = 104;
  row.detectedNs = 1'767'225'600'000'000'000;  // 2026-01-01T00:00:00Z
  row.id = job + "/straggler/100/r3";
  row.magnitude = 1.5;
  row.confidence = 0.9;
  row.evidence = {{"estimated_gain", gain}};
  row.labels = {{"stage", "1"}, {"coords", "pp1"}};
  row.summary = "rank 3 computes 1.50x its peers";
  return row;
}

AnomalyRow resolved(AnomalyRow row, int64_t atNs, AnomalyState state = AnomalyState::kResolved) {
  row.state = state;
  row.resolvedStep = 180;
  row.resolvedNs = atNs;
  return row;
}

NotifyOptions quickOptions() {
  NotifyOptions o;
  o.dashboardUrl = kDashboard;
  o.retryInitial = 20ms;
  o.retryMax = 200ms;
  o.alertmanagerResend = 1h;  // no re-send unless a test asks for one
  return o;
}

std::unique_ptr<Notifier> start(const NotifyOptions& o, const SystemClock& clock) {
  auto n = Notifier::start(o, clock);
  REQUIRE(n);
  return std::move(*n);
}

trainscope::notify::ReceiverStats only(const Notifier& n) {
  auto all = n.stats();
  REQUIRE(all.size() == 1);
  return all[0];
}

int64_t parsedMs(const std::string& rfc3339) {
  // "YYYY-MM-DDTHH:MM:SS.mmmZ" -> ms since the epoch
  std::tm tm{};
  REQUIRE(rfc3339.size() == 24);
  tm.tm_year = std::stoi(rfc3339.substr(0, 4)) - 1900;
  tm.tm_mon = std::stoi(rfc3339.substr(5, 2)) - 1;
  tm.tm_mday = std::stoi(rfc3339.substr(8, 2));
  tm.tm_hour = std::stoi(rfc3339.substr(11, 2));
  tm.tm_min = std::stoi(rfc3339.substr(14, 2));
  tm.tm_sec = std::stoi(rfc3339.substr(17, 2));
  return static_cast<int64_t>(timegm(&tm)) * 1000 + std::stoi(rfc3339.substr(20, 3));
}

}  // namespace

TEST_CASE("notify: URLs are http:// only, https is refused saying so, headers are Name: value") {
  using trainscope::notify::parseHeader;
  using trainscope::notify::parseHttpUrl;
  auto u = parseHttpUrl("http://am.example:9093/base/?x=1");
  REQUIRE(u);
  CHECK(u->host == "am.example");
  CHECK(u->port == "9093");
  CHECK(u->target == "/base/?x=1");
  CHECK(u->origin() == "http://am.example:9093");
  auto v6 = parseHttpUrl("http://[::1]/hook");
  REQUIRE(v6);
  CHECK(v6->host == "::1");
  CHECK(v6->port == "80");
  CHECK(v6->origin() == "http://[::1]:80");
  auto https = parseHttpUrl("https://hooks.slack.com/services/x");
  REQUIRE_FALSE(https);
  CHECK(https.message().find("https is not supported") != std::string::npos);
  CHECK_FALSE(parseHttpUrl("am.example:9093"));
  CHECK_FALSE(parseHttpUrl("http://:9093/"));
  CHECK_FALSE(parseHttpUrl("http://h:0/"));
  CHECK_FALSE(parseHttpUrl("http://h:65536/"));
  CHECK_FALSE(parseHttpUrl("http://h:x/"));
  CHECK_FALSE(parseHttpUrl("http://user:pw@h/"));
  CHECK_FALSE(parseHttpUrl("http://h/a b"));

  auto h = parseHeader(" X-Secret :  s3 cret ");
  REQUIRE(h);
  CHECK(h->first == "X-Secret");
  CHECK(h->second == "s3 cret");
  auto bad = parseHeader("X Secret: hidden-value");
  REQUIRE_FALSE(bad);
  CHECK(bad.message().find("hidden-value") == std::string::npos);
  CHECK_FALSE(parseHeader("X-Secret"));
  CHECK_FALSE(parseHeader("X-Secret:   "));

  NotifyOptions o;
  o.webhooks = {"http://ok:1/"};
  o.slackWebhooks = {"https://hooks.slack.com/x"};
  auto s = trainscope::notify::checkNotifyOptions(o);
  REQUIRE_FALSE(s);
  CHECK(s.message().rfind("--slack-webhook: ", 0) == 0);
}

TEST_CASE("notify: severity from kind and estimated gain, alert names from kinds") {
  using trainscope::notify::Severity;
  using trainscope::notify::severityOf;
  trainscope::notify::SeverityThresholds t;  // 0.20 and 0.05
  CHECK(severityOf(straggler("j", 0.25), t) == Severity::kCritical);
  CHECK(severityOf(straggler("j", 0.10), t) == Severity::kWarning);
  CHECK(severityOf(straggler("j", 0.01), t) == Severity::kInfo);
  AnomalyRow noGain = straggler();
  noGain.evidence.clear();
  noGain.magnitude = 1.08;  // magnitude - 1 stands in for the gain
  CHECK(severityOf(noGain, t) == Severity::kWarning);
  AnomalyRow hang = straggler("j", 0.0);
  hang.kind = "hang";
  CHECK(severityOf(hang, t) == Severity::kCritical);
  CHECK(trainscope::notify::alertName("straggler") == "TrainscopeStraggler");
  CHECK(trainscope::notify::alertName("step_shift") == "TrainscopeStepShift");
  CHECK(trainscope::notify::rfc3339(1'767'225'600'123'000'000) == "2026-01-01T00:00:00.123Z");
}

TEST_CASE(
    "notify: Alertmanager gets the opening, the update and the resolution as API v2 alerts with "
    "fixed labels") {
  HttpReceiver am;
  SystemClock clock;
  NotifyOptions o = quickOptions();
  o.alertmanagers = {am.url("/")};
  auto n = start(o, clock);

  const AnomalyRow open = straggler();
  const int64_t beforeNs = clock.nowNs();
  n->offer(open);
  REQUIRE(waitFor([&] { return am.count() >= 1; }));
  auto r0 = am.requests()[0];
  CHECK(r0.method == "POST");
  CHECK(r0.target == "/api/v2/alerts");
  CHECK(r0.headers["content-type"] == "application/json");
  json alerts = r0.json();
  REQUIRE(alerts.is_array());
  REQUIRE(alerts.size() == 1);
  const json& a = alerts[0];
  const json wantLabels = {{"alertname", "TrainscopeStraggler"},
                           {"anomaly", open.id},
                           {"job", "job-1"},
                           {"kind", "straggler"},
                           {"severity", "critical"},
                           {"ranks", "r3"},
                           {"nodes", "node1"},
                           {"stage", "1"}};
  CHECK(a["labels"] == wantLabels);
  const std::string link =
      std::string(kDashboard) + "/#/jobs/job-1/anomalies/" + trainscope::percentEncode(open.id);
  CHECK(a["annotations"]["summary"] == open.summary);
  CHECK(a["annotations"]["estimated_gain"] == "25.0%");
  CHECK(a["annotations"]["dashboard"] == link);
  CHECK_FALSE(a["annotations"].contains("capture"));
  CHECK(a["generatorURL"] == link);
  CHECK(a["startsAt"] == "2026-01-01T00:00:00.000Z");
  // Open: it ends endsAfterResends (4) re-send intervals (1 h) from the send.
  CHECK(parsedMs(a["endsAt"]) >= beforeNs / 1'000'000 + int64_t{4} * 3600 * 1000);

  // An update: its gain fell under the critical threshold and it took a capture. The labels
  // stay those of the opening (a new severity would be a second alert there).
  AnomalyRow update = straggler("job-1", 0.03);
  update.captureId = "cap-1";
  n->offer(update);
  REQUIRE(waitFor([&] { return am.count() >= 2; }));
  json a1 = am.requests()[1].json().at(0);
  CHECK(a1["labels"] == wantLabels);
  CHECK(a1["annotations"]["estimated_gain"] == "3.0%");
  CHECK(a1["annotations"]["capture"] == std::string(kDashboard) + "/#/jobs/job-1/captures/cap-1");

  // Resolved: endsAt is when it resolved, and the alert is no longer held.
  const int64_t endNs = clock.nowNs() - 5'000'000'000;
  n->offer(resolved(update, endNs));
  REQUIRE(waitFor([&] { return am.count() >= 3 && only(*n).queued == 0; }));
  json a2 = am.requests()[2].json().at(0);
  CHECK(a2["labels"] == wantLabels);
  CHECK(a2["endsAt"] == trainscope::notify::rfc3339(endNs));
  CHECK(only(*n).sent == 3);
  CHECK(only(*n).failures == 0);
}

TEST_CASE(
    "notify: open alerts are re-sent every interval, ending a few intervals ahead, until they "
    "end") {
  HttpReceiver am;
  SystemClock clock;
  NotifyOptions o = quickOptions();
  o.alertmanagers = {am.url()};
  o.alertmanagerResend = 100ms;
  auto n = start(o, clock);
  const AnomalyRow a = straggler("job-a");
  const int64_t startMs = clock.nowNs() / 1'000'000;
  n->offer(a);
  // Three sends without another offer: the opening and two re-sends.
  REQUIRE(waitFor([&] { return am.count() >= 3; }));
  for (const auto& r : am.requests()) {
    json alerts = r.json();
    REQUIRE(alerts.size() == 1);
    CHECK(alerts[0]["labels"]["anomaly"] == a.id);
  }
  // Each says it ends 4 intervals after it was sent, which was after the test began.
  for (const auto& r : am.requests()) CHECK(parsedMs(r.json()[0]["endsAt"]) >= startMs + 400);

  // Ended with its job: sent once with endsAt, then no more. Proof: a second alert opened
  // afterwards is re-sent twice and the first one is in none of those requests.
  n->offer(resolved(a, clock.nowNs(), AnomalyState::kEnded));
  REQUIRE(waitFor([&] { return only(*n).queued == 0; }));
  const AnomalyRow b = straggler("job-b");
  n->offer(b);
  size_t withB = 0;
  REQUIRE(waitFor([&] {
    withB = 0;
    for (const auto& r : am.requests()) {
      if (r.body.find(b.id) != std::string::npos) ++withB;
    }
    return withB >= 3;
  }));
  bool seenB = false;
  for (const auto& r : am.requests()) {
    if (r.body.find(b.id) != std::string::npos) seenB = true;
    if (seenB) CHECK(r.body.find(a.id) == std::string::npos);
  }
}

TEST_CASE(
    "notify: an Alertmanager that is down gets every held alert once it is up; past the bound new "
    "ones are dropped and counted") {
  uint16_t port = 0;
  {
    HttpReceiver probe;  // a port that was free; nothing listens there until `am` below
    port = probe.port();
  }
  SystemClock clock;
  NotifyOptions o = quickOptions();
  o.alertmanagers = {"http://127.0.0.1:" + std::to_string(port)};
  o.queueSize = 2;
  auto n = start(o, clock);
  n->offer(straggler("job-a"));
  n->offer(straggler("job-b"));
  n->offer(straggler("job-c"));  // over the bound of 2
  CHECK(only(*n).droppedQueueFull == 1);
  REQUIRE(waitFor([&] { return only(*n).failures >= 2; }));
  CHECK(only(*n).sent == 0);
  HttpReceiver am(port);
  REQUIRE(waitFor([&] { return only(*n).sent >= 2; }, 20s));
  json alerts = am.requests().back().json();
  REQUIRE(alerts.size() == 2);
  CHECK(alerts[0]["labels"]["job"] == "job-a");
  CHECK(alerts[1]["labels"]["job"] == "job-b");
}

TEST_CASE(
    "notify: a webhook gets JSON for the opening and the end (not updates), with the secret "
    "header") {
  HttpReceiver hook;
  SystemClock clock;
  NotifyOptions o = quickOptions();
  o.webhooks = {hook.url("/hook?team=ml")};
  o.webhookHeaders = {{"X-Trainscope-Secret", "s3cret"}};
  auto n = start(o, clock);
  AnomalyRow open = straggler();
  n->offer(open);
  AnomalyRow update = straggler("job-1", 0.3);
  update.captureId = "cap-9";
  n->offer(update);
  n->offer(resolved(update, clock.nowNs()));
  REQUIRE(waitFor([&] { return only(*n).sent == 2 && only(*n).queued == 0; }));
  auto reqs = hook.requests();
  REQUIRE(reqs.size() == 2);
  for (auto& r : reqs) {
    CHECK(r.target == "/hook?team=ml");
    CHECK(r.headers.at("x-trainscope-secret") == "s3cret");
    CHECK(r.headers.at("content-type") == "application/json");
  }
  json first = reqs[0].json();
  CHECK(first["event"] == "opened");
  CHECK(first["severity"] == "critical");
  CHECK(first["anomaly"]["id"] == open.id);
  CHECK(first["anomaly"]["kind"] == "straggler");
  CHECK(first["anomaly"]["ranks"] == json::array({3}));
  CHECK(first["anomaly"]["state"] == "open");
  CHECK(first["dashboard_url"] ==
        std::string(kDashboard) + "/#/jobs/job-1/anomalies/" + trainscope::percentEncode(open.id));
  CHECK(first["capture_url"].is_null());
  json second = reqs[1].json();
  CHECK(second["event"] == "resolved");
  CHECK(second["anomaly"]["state"] == "resolved");
  CHECK(second["anomaly"]["resolved_step"] == 180);
  CHECK(second["capture_url"] == std::string(kDashboard) + "/#/jobs/job-1/captures/cap-9");
}

TEST_CASE("notify: a Slack webhook gets one mrkdwn text line with severity, summary and links") {
  HttpReceiver slack;
  SystemClock clock;
  NotifyOptions o = quickOptions();
  o.slackWebhooks = {slack.url("/services/T0/B0/x")};
  auto n = start(o, clock);
  AnomalyRow a = straggler("job<1>", 0.10);
  a.id = "job<1>/straggler/100/r3";
  n->offer(a);
  n->offer(resolved(a, clock.nowNs(), AnomalyState::kEnded));
  REQUIRE(waitFor([&] { return only(*n).sent == 2; }));
  auto reqs = slack.requests();
  json open = reqs[0].json();
  REQUIRE(open.size() == 1);
  const std::string text = open["text"];
  CHECK(text.rfind(":warning: *warning* straggler in job `job&lt;1&gt;`: rank 3 computes", 0) == 0);
  CHECK(text.find("(estimated gain 10.0%)") != std::string::npos);
  CHECK(text.find("<" + std::string(kDashboard) + "/#/jobs/job%3C1%3E/anomalies/" +
                  trainscope::percentEncode(a.id) + "|dashboard>") != std::string::npos);
  const std::string end = reqs[1].json()["text"];
  CHECK(end.rfind(":white_check_mark: *ended* straggler", 0) == 0);
}

TEST_CASE("notify: webhooks hear only the kinds and severities asked for") {
  HttpReceiver hook;
  SystemClock clock;
  NotifyOptions o = quickOptions();
  o.webhooks = {hook.url()};
  o.webhookKinds = {"straggler", "hang"};
  o.webhookMinSeverity = trainscope::notify::Severity::kWarning;
  auto n = start(o, clock);
  AnomalyRow shift = straggler("job-shift", 0.5);
  shift.kind = "step_shift";
  n->offer(shift);                         // kind not asked for
  n->offer(straggler("job-small", 0.01));  // info
  n->offer(straggler("job-mid", 0.10));    // warning
  AnomalyRow hang = straggler("job-hang", 0.0);
  hang.kind = "hang";  // critical whatever its gain
  n->offer(hang);
  // Filters act in offer(): once two are sent and none wait, no third can come.
  REQUIRE(waitFor([&] { return only(*n).sent == 2 && only(*n).queued == 0; }));
  auto reqs = hook.requests();
  REQUIRE(reqs.size() == 2);
  CHECK(reqs[0].json()["anomaly"]["job"] == "job-mid");
  CHECK(reqs[0].json()["severity"] == "warning");
  CHECK(reqs[1].json()["anomaly"]["job"] == "job-hang");
  CHECK(reqs[1].json()["severity"] == "critical");
}

TEST_CASE(
    "notify: a webhook answering 500 is retried with exponential backoff until it takes the "
    "event") {
  HttpReceiver hook;
  hook.script({500, 503, 500});
  SystemClock clock;
  NotifyOptions o = quickOptions();
  o.webhooks = {hook.url()};
  o.retryInitial = 50ms;
  o.retryMax = 10s;
  auto n = start(o, clock);
  n->offer(straggler());
  REQUIRE(waitFor([&] { return only(*n).sent == 1; }));
  auto reqs = hook.requests();
  REQUIRE(reqs.size() == 4);
  CHECK(only(*n).failures == 3);
  for (const auto& r : reqs) CHECK(r.body == reqs[0].body);
  // Waits of at least 50, 100 and 200 ms between the attempts.
  CHECK(reqs[1].at - reqs[0].at >= 50ms);
  CHECK(reqs[2].at - reqs[1].at >= 100ms);
  CHECK(reqs[3].at - reqs[2].at >= 200ms);
}

TEST_CASE("notify: a webhook refusing with 400 is not retried; the event is dropped and counted") {
  HttpReceiver hook;
  hook.script({400});
  SystemClock clock;
  NotifyOptions o = quickOptions();
  o.webhooks = {hook.url()};
  auto n = start(o, clock);
  n->offer(straggler("job-a"));
  n->offer(straggler("job-b"));
  REQUIRE(waitFor([&] { return only(*n).sent == 1; }));
  auto reqs = hook.requests();
  REQUIRE(reqs.size() == 2);
  CHECK(reqs[1].json()["anomaly"]["job"] == "job-b");
  CHECK(only(*n).droppedRefused == 1);
  CHECK(only(*n).failures == 1);
}

TEST_CASE(
    "notify: a webhook that never answers does not block offer(); the full queue drops the oldest "
    "and counts it; nothing it holds is lost") {
  HttpReceiver hook;
  hook.script({0});  // the first request is held unanswered
  SystemClock clock;
  NotifyOptions o = quickOptions();
  o.webhooks = {hook.url()};
  o.queueSize = 3;
  o.requestTimeout = 1h;
  auto n = start(o, clock);
  n->offer(straggler("job-0"));
  REQUIRE(waitFor([&] { return hook.count() == 1; }));  // job-0 in flight, unanswered
  for (int i = 1; i <= 5; ++i) n->offer(straggler("job-" + std::to_string(i)));
  // The offers returned while the request hangs: job-0 (in flight) stays, job-1..3 were the
  // oldest waiting when the queue was full.
  auto s = only(*n);
  CHECK(s.droppedQueueFull == 3);
  CHECK(s.queued == 3);
  CHECK(s.sent == 0);
  const std::string dropped =
      "trainscope_notify_dropped_total{sink=\"webhook\",index=\"0\",receiver=\"" + hook.url() +
      "\",reason=\"queue_full\"} 3";
  CHECK(n->metricsText().find(dropped) != std::string::npos);
  hook.release();  // the held connection ends (a failure, retried) and all is answered
  REQUIRE(waitFor([&] { return only(*n).sent == 3; }));
  auto reqs = hook.requests();
  std::vector<std::string> jobs;
  for (size_t i = 1; i < reqs.size(); ++i) jobs.push_back(reqs[i].json()["anomaly"]["job"]);
  CHECK(jobs == std::vector<std::string>{"job-0", "job-4", "job-5"});
}

TEST_CASE("notify: a notifier whose receiver never answers stops at once") {
  HttpReceiver hook;
  hook.script({0});
  SystemClock clock;
  NotifyOptions o = quickOptions();
  o.alertmanagers = {hook.url()};
  o.requestTimeout = 1h;
  auto n = start(o, clock);
  n->offer(straggler());
  REQUIRE(waitFor([&] { return hook.count() == 1; }));
  n.reset();  // cancels the request in flight; the test would hang here otherwise
  CHECK(hook.count() == 1);
}
