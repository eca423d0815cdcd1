// /metrics: the Prometheus text format is valid (HELP/TYPE before samples, families together,
// label escaping, cumulative histogram buckets ending in +Inf with _sum/_count), every rank of
// every job has its series, and the collector's extra text (ingest counters) is appended.
#include "collector/http/metrics.h"

#include <cmath>
#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <catch2/catch.hpp>

#include "collector/http/server.h"
#include "common/clock.h"
#include "tests/collector/http/fake_store.h"
#include "tests/collector/http/test_client.h"

using trainscope::http::escapeLabelValue;
using trainscope::http::HttpOptions;
using trainscope::http::HttpServer;
using trainscope::http::MetricsText;
using trainscope::testing::FakeStore;
namespace storage = trainscope::storage;
namespace wire = trainscope::wire;

namespace {

constexpr int64_t kMs = 1'000'000;

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;  // unescaped values
  double value = 0;
};

// A strict reader of the exposition format: fails the test on any line it cannot read, on a
// sample whose family was not announced with HELP then TYPE, and on a family split in two.
std::vector<Sample> parseExposition(const std::string& text) {
  static const std::regex kSample(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? ([-+0-9.eE]+|NaN|\+Inf|-Inf)$)");
  static const std::regex kLabel(R"re(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\\\|\\"|\\n)*)")re");
  std::vector<Sample> out;
  std::map<std::string, std::string> types;
  std::set<std::string> finished;
  std::string current, helpFor;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    INFO("line: " << line);
    if (line.empty()) continue;
    if (line.rfind("# HELP ", 0) == 0) {
      std::string name = line.substr(7, line.find(' ', 7) - 7);
      REQUIRE(finished.count(name) == 0);
      REQUIRE(types.count(name) == 0);
      if (!current.empty()) finished.insert(current);
      helpFor = name;
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream in(line.substr(7));
      std::string name, type;
      in >> name >> type;
      REQUIRE(name == helpFor);
      REQUIRE((type == "counter" || type == "gauge" || type == "histogram"));
      types[name] = type;
      current = name;
      continue;
    }
    if (line[0] == '#') continue;
    std::smatch m;
    REQUIRE(std::regex_match(line, m, kSample));
    Sample s;
    s.name = m[1];
    std::string family = s.name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      std::string base = s.name.size() > std::strlen(suffix)
                             ? s.name.substr(0, s.name.size() - std::strlen(suffix))
                             : "";
      if (s.name.ends_with(suffix) && types.count(base) && types[base] == "histogram") {
        family = base;
      }
    }
    REQUIRE(family == current);  // announced, and its family is the one being written
    std::string labels = m[3];
    auto it = std::sregex_iterator(labels.begin(), labels.end(), kLabel);
    size_t consumed = 0;
    for (; it != std::sregex_iterator(); ++it) {
      std::string raw = (*it)[2], value;
      for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] == '\\' && i + 1 < raw.size()) {
          char c = raw[++i];
          value += c == 'n' ? '\n' : c;
        } else {
          value += raw[i];
        }
      }
      s.labels[(*it)[1]] = value;
      consumed += static_cast<size_t>(it->length()) + 1;  // and its comma
    }
    REQUIRE(consumed == (labels.empty() ? 0 : labels.size() + 1));
    std::string v = m[4];
    s.value = v == "+Inf" ? INFINITY : v == "-Inf" ? -INFINITY : v == "NaN" ? NAN : std::stod(v);
    out.push_back(std::move(s));
  }
  return out;
}

storage::StepRow step(const std::string& job, uint32_t rank, int64_t n, int64_t ms) {
  storage::StepRow s;
  s.job = job;
  s.rank = rank;
  s.step = n;
  s.durationNs = ms * kMs;
  s.computeNs = ms * kMs * 6 / 10;
  s.exposedCommNs = ms * kMs / 10;
  s.dataNs = 2 * kMs;
  wire::CollectiveTotal c;
  c.set_op(wire::ALL_REDUCE);
  c.set_bytes(1'000'000);
  c.set_count(2);
  c.set_total_ns(10 * kMs);
  s.collectives.push_back(c);
  return s;
}

// Two jobs (one named with characters that need escaping), 3 and 2 ranks, 30 steps each.
void fill(FakeStore& store, int64_t now) {
  const std::vector<std::pair<std::string, uint32_t>> jobs = {{"llm \"big\"\\run\n1", 3},
                                                              {"small", 2}};
  for (const auto& [name, world] : jobs) {
    storage::JobRow j;
    j.job = name;
    j.worldSize = world;
    j.ranksSeen = world;
    j.latestStep = 29;
    j.lastSeenNs = now - 2'000 * kMs;
    store.jobRows.push_back(j);
  }
  for (int64_t n = 0; n < 30; ++n) {
    for (const auto& [name, world] : jobs) {
      for (uint32_t r = 0; r < world; ++r) {
        store.stepRows.push_back(step(name, r, n, r == 1 ? 250 : 100 + n));
      }
    }
  }
  storage::NodeRow node;
  node.node = "node-a";
  node.host = "host-a";
  node.lastSeenNs = now - 1'500 * kMs;
  store.nodeRows.push_back(node);
}

}  // namespace

TEST_CASE("label values escape backslash, quote and newline", "[metrics]") {
  CHECK(escapeLabelValue("plain") == "plain");
  CHECK(escapeLabelValue("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
}

TEST_CASE("histograms are cumulative, end in +Inf and carry _sum and _count", "[metrics]") {
  MetricsText m;
  m.family("x_seconds", "histogram", "help");
  m.histogram({{"rank", "0"}}, {0.1, 1, 10}, {0.05, 0.5, 0.5, 5, 50});
  auto samples = parseExposition(m.text());
  REQUIRE(samples.size() == 6);
  CHECK(samples[0].labels["le"] == "0.1");
  CHECK(samples[0].value == 1);
  CHECK(samples[1].value == 3);
  CHECK(samples[2].value == 4);
  CHECK(samples[3].labels["le"] == "+Inf");
  CHECK(samples[3].value == 5);
  CHECK(samples[4].name == "x_seconds_sum");
  CHECK(samples[4].value == Approx(56.05));
  CHECK(samples[5].name == "x_seconds_count");
  CHECK(samples[5].value == 5);
}

TEST_CASE("store metrics: valid text with every rank's series", "[metrics]") {
  FakeStore store;
  int64_t now = trainscope::wallNowNs();
  fill(store, now);
  std::string text = trainscope::http::renderStoreMetrics(store, now, {});
  INFO(text.substr(0, 4000));
  auto samples = parseExposition(text);

  const std::string weird = "llm \"big\"\\run\n1";
  std::map<std::pair<std::string, std::string>, double> last;
  std::map<std::pair<std::string, std::string>, std::vector<double>> buckets;
  std::map<std::pair<std::string, std::string>, double> counts;
  for (const auto& s : samples) {
    auto key = std::make_pair(s.labels.count("training_job") ? s.labels.at("training_job") : "",
                              s.labels.count("rank") ? s.labels.at("rank") : "");
    if (s.name == "trainscope_step_last_duration_seconds") last[key] = s.value;
    if (s.name == "trainscope_step_duration_seconds_bucket") buckets[key].push_back(s.value);
    if (s.name == "trainscope_step_duration_seconds_count") counts[key] = s.value;
  }
  REQUIRE(last.size() == 5);
  CHECK(last[{weird, "0"}] == Approx(0.129));
  CHECK(last[{weird, "1"}] == Approx(0.25));
  CHECK(last[{"small", "1"}] == Approx(0.25));
  for (const auto& [key, b] : buckets) {
    INFO(key.first << " rank " << key.second);
    REQUIRE(b.size() == trainscope::http::stepSecondsBuckets().size() + 1);
    for (size_t i = 1; i < b.size(); ++i) CHECK(b[i] >= b[i - 1]);
    CHECK(b.back() == 20);  // the window: the latest 20 steps
    CHECK(counts[key] == 20);
  }
  // The histogram is over the window: rank 0 ran 110..129 ms, all in (0.1, 0.25].
  auto& r0 = buckets[{weird, "0"}];
  CHECK(r0[5] == 0);   // le=0.05
  CHECK(r0[6] == 0);   // le=0.1
  CHECK(r0[7] == 20);  // le=0.25

  bool bandwidth = false, age = false, world = false;
  for (const auto& s : samples) {
    if (s.name == "trainscope_collective_bandwidth_bytes_per_second" &&
        s.labels.at("training_job") == "small") {
      bandwidth = true;
      CHECK(s.labels.at("op") == trainscope::wire::collectiveOpName(wire::ALL_REDUCE));
      CHECK(s.value == Approx(2e6 / 0.01));  // 2 calls x 1 MB in 10 ms, same on every rank
    }
    if (s.name == "trainscope_agent_last_seen_age_seconds") {
      age = true;
      CHECK(s.labels.at("node") == "node-a");
      CHECK(s.value == Approx(1.5));
    }
    if (s.name == "trainscope_job_world_size" && s.labels.at("training_job") == weird) {
      world = true;
      CHECK(s.value == 3);
    }
  }
  CHECK(bandwidth);
  CHECK(age);
  CHECK(world);
  // Cheap: the steps query starts near the latest step instead of reading the whole job.
  REQUIRE(store.lastStepQuery);
  CHECK(store.lastStepQuery->fromStep.value_or(0) >= 28);
}

TEST_CASE("store metrics: open anomalies counted by kind, resolved and ended ones not",
          "[metrics]") {
  FakeStore store;
  int64_t now = trainscope::wallNowNs();
  fill(store, now);
  // Ended ones (their job ended while they were open) are not open: an alert on the gauge
  // must not fire for a finished job.
  for (auto state : {storage::AnomalyState::kOpen, storage::AnomalyState::kOpen,
                     storage::AnomalyState::kResolved, storage::AnomalyState::kEnded,
                     storage::AnomalyState::kEnded}) {
    storage::AnomalyRow a;
    a.id = std::string("small/straggler/") + storage::toString(state) +
           std::to_string(store.anomalyRows.size());
    a.job = "small";
    a.kind = "straggler";
    a.state = state;
    store.anomalyRows.push_back(a);
  }
  auto samples = parseExposition(trainscope::http::renderStoreMetrics(store, now, {}));
  int found = 0;
  for (const auto& s : samples) {
    if (s.name != "trainscope_anomalies_open") continue;
    ++found;
    CHECK(s.labels.at("training_job") == "small");
    CHECK(s.labels.at("kind") == "straggler");
    CHECK(s.value == 2);
  }
  CHECK(found == 1);
}

TEST_CASE("store metrics: silent jobs and nodes age out, a cap keeps the newest, both counted",
          "[metrics]") {
  FakeStore store;
  const int64_t now = trainscope::wallNowNs();
  constexpr int64_t kSec = 1'000'000'000;
  auto job = [&](const std::string& name, int64_t ageS) {
    storage::JobRow j;
    j.job = name;
    j.worldSize = 1;
    j.ranksSeen = 1;
    j.ranksEnded = 1;
    j.latestStep = -1;  // no steps: only the job gauges
    j.lastSeenNs = now - ageS * kSec;
    store.jobRows.push_back(j);
  };
  job("ended-2-days-ago", int64_t{2} * 24 * 3600);
  job("ended-just-now", 5);
  job("running", 0);
  job("older", 60);
  for (const char* n : {"gone", "here"}) {
    storage::NodeRow node;
    node.node = n;
    node.lastSeenNs = std::string(n) == "gone" ? now - 7200 * kSec : now;
    store.nodeRows.push_back(node);
  }
  trainscope::http::MetricsLimits limits;
  limits.maxJobs = 2;
  auto samples = parseExposition(trainscope::http::renderStoreMetrics(store, now, limits));
  std::set<std::string> jobs, nodes;
  std::map<std::string, double> omitted;
  for (const auto& s : samples) {
    if (s.name == "trainscope_job_world_size") jobs.insert(s.labels.at("training_job"));
    if (s.name == "trainscope_agent_spool_bytes") nodes.insert(s.labels.at("node"));
    if (s.name == "trainscope_metrics_omitted") {
      omitted[s.labels.at("kind") + "/" + s.labels.at("reason")] = s.value;
    }
  }
  CHECK(jobs == std::set<std::string>{"running", "ended-just-now"});
  CHECK(nodes == std::set<std::string>{"here"});
  CHECK(omitted == std::map<std::string, double>{
                       {"job/aged_out", 1}, {"job/cap", 1}, {"node/aged_out", 1}, {"node/cap", 0}});
}

TEST_CASE("a failing store still gives valid text that says why", "[metrics]") {
  FakeStore store;
  store.failWith = "disk on fire";
  std::string text = trainscope::http::renderStoreMetrics(store, 0, {});
  CHECK(text.find("disk on fire") != std::string::npos);
  parseExposition(text);
}

TEST_CASE("ingest counters: totals and rejects by reason", "[metrics]") {
  trainscope::ingest::IngestStats stats;
  stats.frames = 7;
  stats.peers = 2;
  stats.rejects["malformed"] = 3;
  stats.rejects["version"] = 1;
  auto samples = parseExposition(trainscope::http::ingestMetricsText(stats));
  std::map<std::string, double> rejects;
  double frames = -1;
  double peers = -1;
  for (const auto& s : samples) {
    if (s.name == "trainscope_ingest_frames_total") frames = s.value;
    if (s.name == "trainscope_ingest_peers") peers = s.value;
    if (s.name == "trainscope_ingest_rejected_frames_total")
      rejects[s.labels.at("reason")] = s.value;
  }
  CHECK(frames == 7);
  CHECK(peers == 2);
  CHECK(rejects == std::map<std::string, double>{{"malformed", 3}, {"version", 1}});
}

TEST_CASE("GET /metrics over HTTP serves the store's and the extra metrics", "[metrics]") {
  FakeStore store;
  fill(store, trainscope::wallNowNs());
  HttpOptions o;
  o.port = 0;
  o.extraMetrics = [] {
    trainscope::ingest::IngestStats s;
    s.rejects["oversized"] = 2;
    return trainscope::http::ingestMetricsText(s);
  };
  HttpServer server(o, store);
  REQUIRE(server.start().isOk());
  auto r = trainscope::testing::httpGet(server.port(), "/metrics");
  CHECK(r.status == 200);
  CHECK(r.headers["Content-Type"].rfind("text/plain; version=0.0.4", 0) == 0);
  auto samples = parseExposition(r.body);
  bool oversized = false, perRank = false;
  for (const auto& s : samples) {
    if (s.name == "trainscope_ingest_rejected_frames_total" && s.labels.at("reason") == "oversized")
      oversized = s.value == 2;
    if (s.name == "trainscope_step_last_duration_seconds" && s.labels.at("training_job") == "small")
      perRank = true;
  }
  CHECK(oversized);
  CHECK(perRank);

  trainscope::testing::TestConnection c(server.port());
  auto post = c.request("POST", "/metrics");
  CHECK(post.status == 405);
  CHECK(post.headers["Allow"] == "GET");
}
