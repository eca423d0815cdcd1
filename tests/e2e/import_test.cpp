// Whole-system import (`trainscope import`, importer/ and collector/ingest/import_receiver.h):
// synthetic PyTorch-profiler (Kineto) traces written by tests/data/import/make_traces.py go
// through the real CLI into a real collector. (a) A 2-rank GPU job: both ranks' step rows in the
// API carry the generator's own compute, exposed communication and data figures, the top
// kernels and the all-reduces with their bytes, and the timelines become a merged capture of
// kind "import". (b) A 4-rank job whose rank 2 computes 1.5x slower from step 50: the
// detectors, run over the imported steps, report a straggler naming rank 2 (the straggler
// detector needs 3 ranks or more, so this job has 4). (c) A truncated file fails with its name
// and stores no job. Exits 77 without /usr/bin/python3 (the generator).
#include <unistd.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/e2e/harness.h"

using namespace trainscope::e2e;
using nlohmann::json;

namespace {

constexpr const char* kPython = "/usr/bin/python3";

std::string generator() {
  const char* root = std::getenv("TRAINSCOPE_SOURCE_ROOT");
  return std::string(root != nullptr ? root : ".") + "/tests/data/import/make_traces.py";
}

// Writes one GPU job's rank files (rank-R.json[.gz] and rank-R.expected.json) into `out`.
void generate(const TempDir& dir, const std::string& out, const std::vector<std::string>& extra,
              bool gzip = true) {
  std::vector<std::string> argv = {kPython, generator(), "--job", out};
  if (gzip) argv.emplace_back("--gzip");
  argv.insert(argv.end(), extra.begin(), extra.end());
  Process gen("make_traces", argv, dir / "make_traces.log");
  auto code = gen.wait(60s);
  INFO("generator log: " << gen.log());
  REQUIRE(code == std::optional<int>(0));
}

// Runs `trainscope --server ... import ARGS`; returns its exit code and output.
std::pair<std::optional<int>, std::string> runImport(const TempDir& dir, uint16_t http,
                                                     const std::vector<std::string>& args,
                                                     const std::string& name) {
  std::vector<std::string> argv = {binaryFromEnv("TRAINSCOPE_CLI_BIN"), "--server",
                                   "http://127.0.0.1:" + std::to_string(http), "import"};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string log = dir / (name + ".log");
  Process cli(name, argv, log);
  auto code = cli.wait(120s);
  return {code, readFile(log)};
}

std::string rankFile(const std::string& jobDir, uint32_t rank) {
  return jobDir + "/rank-" + std::to_string(rank) + ".json.gz";
}

json getJson(uint16_t http, const std::string& target) {
  auto r = httpGet(http, target, 10s);
  INFO("GET " << target << " -> " << r.status << " " << r.body.substr(0, 500));
  REQUIRE(r.status == 200);
  return r.json();
}

}  // namespace

TEST_CASE("e2e: imported Kineto traces are stored as steps, judged by the detectors and merged") {
  if (access(kPython, X_OK) != 0) {
    std::printf("no %s to run the trace generator: skipped\n", kPython);
    std::exit(77);
  }
  TempDir dir;
  CollectorSpec spec;
  spec.dataDir = dir / "data";
  spec.ingestPort = freePort();
  spec.httpPort = freePort();
  auto collector = startCollector(dir, spec);
  INFO("collector log:\n" << collector->logTail(4000));

  // (a) two ranks, 30 steps each (ProfilerStep#10..39), clocks skewed by 1 ms a rank.
  const std::string two = dir / "two";
  generate(dir, two, {"--ranks", "2", "--steps", "30"});
  {
    auto [code, out] = runImport(
        dir, spec.httpPort, {rankFile(two, 0), rankFile(two, 1), "--job", "imp-two"}, "import-two");
    INFO("import output:\n" << out);
    REQUIRE(code == std::optional<int>(0));
    CHECK(out.find("stored job imp-two") != std::string::npos);
  }
  json ranks = getJson(spec.httpPort, "/api/v1/jobs/imp-two/ranks");
  INFO(ranks.dump());
  REQUIRE(ranks["ranks"].size() == 2);
  for (const auto& r : ranks["ranks"]) CHECK(r["ended"] == true);

  json rows = getJson(spec.httpPort, "/api/v1/jobs/imp-two/steps?detail=true&limit=1000")["steps"];
  REQUIRE(rows.size() == 60);
  std::map<std::pair<uint32_t, int64_t>, json> byKey;
  for (const auto& s : rows) byKey[{s["rank"].get<uint32_t>(), s["step"].get<int64_t>()}] = s;
  for (uint32_t rank = 0; rank < 2; ++rank) {
    json expected = json::parse(readFile(two + "/rank-" + std::to_string(rank) + ".expected.json"));
    REQUIRE(expected["steps"].size() == 30);
    for (const auto& e : expected["steps"]) {
      const int64_t step = e["step"].get<int64_t>();
      INFO("rank " << rank << " step " << step);
      REQUIRE(byKey.count({rank, step}) == 1);
      const json& s = byKey[{rank, step}];
      CHECK(s["duration_ns"] == e["duration_ns"]);
      CHECK(s["compute_ns"] == e["compute_ns"]);
      CHECK(s["comm_ns"] == e["comm_ns"]);
      CHECK(s["exposed_comm_ns"] == e["exposed_comm_ns"]);
      CHECK(s["data_ns"] == e["data_ns"]);
      uint64_t calls = 0;
      uint64_t bytes = 0;
      for (const auto& c : s["collectives"]) {
        CHECK(c["op"] == "all_reduce");
        calls += c["count"].get<uint64_t>();
        bytes += c["count"].get<uint64_t>() * c["bytes"].get<uint64_t>();
        CHECK(c["bandwidth_bps"].get<double>() > 0);
      }
      CHECK(calls == e["collectives"].get<uint64_t>());
      CHECK(bytes == e["collective_bytes"].get<uint64_t>());
      REQUIRE_FALSE(s["ops"].empty());
      CHECK(s["ops"][0]["total_ns"].get<int64_t>() > 0);
    }
  }
  // Clocks aligned on the step boundaries: the 1 ms skew of rank 1 is gone.
  for (int64_t step = 10; step < 40; ++step) {
    const int64_t end0 = byKey[{0, step}]["end_ns"].get<int64_t>();
    const int64_t end1 = byKey[{1, step}]["end_ns"].get<int64_t>();
    CHECK(std::llabs(end0 - end1) < 100'000);
  }
  // The timelines: a capture of kind import that the collector merges.
  json merged;
  const bool complete = waitFor(
      [&] {
        auto r = httpGet(spec.httpPort, "/api/v1/jobs/imp-two/captures", 5s);
        if (r.status != 200) return false;
        json list = r.json()["captures"];
        if (list.size() != 1) return false;
        merged = list[0];
        return merged["state"] == "complete";
      },
      30s, 200ms);
  INFO(merged.dump());
  REQUIRE(complete);
  CHECK(merged["kind"] == "import");
  CHECK(merged["ranks"] == json::array({0, 1}));
  {
    auto r = httpGet(
        spec.httpPort,
        "/api/v1/captures/" + percentEncode(merged["id"].get<std::string>()) + "/trace", 10s);
    REQUIRE(r.status == 200);
    json trace = json::parse(r.body, nullptr, false);
    REQUIRE_FALSE(trace.is_discarded());
    std::set<int64_t> stepsSeen;
    for (const auto& e : trace["traceEvents"]) {
      const std::string name = e.value("name", "");
      if (name.rfind("ProfilerStep#", 0) == 0) stepsSeen.insert(std::stoll(name.substr(13)));
    }
    CHECK(stepsSeen.size() == 30);
  }

  // (b) four ranks, rank 2 a straggler from step 50 (steps 10..99).
  const std::string four = dir / "four";
  generate(
      dir, four,
      {"--ranks", "4", "--steps", "90", "--straggler", "2", "--factor", "1.5", "--onset", "50"});
  {
    std::vector<std::string> args;
    for (uint32_t r = 0; r < 4; ++r) args.push_back(rankFile(four, r));
    args.insert(args.end(), {"--job", "imp-straggler", "--no-timeline"});
    auto [code, out] = runImport(dir, spec.httpPort, args, "import-four");
    INFO("import output:\n" << out);
    REQUIRE(code == std::optional<int>(0));
  }
  json straggler;
  const bool found = waitFor(
      [&] {
        auto r = httpGet(spec.httpPort, "/api/v1/jobs/imp-straggler/anomalies", 5s);
        if (r.status != 200) return false;
        const json body = r.json();
        for (const auto& a : body["anomalies"]) {
          if (a.value("kind", "") == "straggler") straggler = a;
        }
        return straggler.is_object();
      },
      30s, 200ms);
  INFO("anomalies: " << httpGet(spec.httpPort, "/api/v1/jobs/imp-straggler/anomalies").body);
  REQUIRE(found);
  CHECK(straggler["ranks"] == json::array({2}));
  // Onset: the generator slows rank 2 from step 50; the detector needs a few steps to be sure.
  CHECK(straggler["onset_step"].get<int64_t>() >= 50);
  CHECK(straggler["onset_step"].get<int64_t>() <= 60);
  // No anomaly of the job's healthy part (its steps before the onset are steady).
  auto healthy = httpGet(spec.httpPort, "/api/v1/jobs/imp-two/anomalies").json()["anomalies"];
  CHECK(healthy.empty());

  // (c) a file cut short: the CLI names it, nothing is stored.
  {
    const std::string plain = dir / "plain";
    generate(dir, plain, {"--ranks", "1", "--steps", "5"}, /*gzip=*/false);
    const std::string full = readFile(plain + "/rank-0.json");
    REQUIRE(full.size() > 1000);
    const std::string cut = dir / "cut.json";
    FILE* f = std::fopen(cut.c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fwrite(full.data(), 1, full.size() / 2, f);
    std::fclose(f);
    auto [code, out] = runImport(dir, spec.httpPort, {cut, "--job", "imp-cut"}, "import-cut");
    INFO("import output:\n" << out);
    CHECK(code == std::optional<int>(6));  // an input that cannot be used
    CHECK(out.find("cut.json") != std::string::npos);
    CHECK(out.find("nothing was sent") != std::string::npos);
    const json jobs = getJson(spec.httpPort, "/api/v1/jobs");  // kept: the loop reads into it
    for (const auto& j : jobs["jobs"]) CHECK(j.value("job", "") != "imp-cut");
  }
}
