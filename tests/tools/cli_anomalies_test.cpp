// The `anomalies` and `detect` subcommands in-process: the anomaly table and --json against a
// real HttpServer over a fake store, and detect's change points, stdin, and its errors for
// empty, non-numeric, NaN and missing input (exit 1, naming the line or the file).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "collector/http/server.h"
#include "tests/collector/http/fake_store.h"
#include "tests/tools/cli_run.h"
#include "tools/cli/cli.h"

using nlohmann::json;
using namespace trainscope::cli;
namespace storage = trainscope::storage;

namespace {

using trainscope::cli::testing::cli;
using trainscope::cli::testing::Run;

struct Collector {
  Collector() {
    storage::JobRow j;
    j.job = "train";
    j.worldSize = 8;
    store.jobRows = {j};
    j.job = "calm";
    store.jobRows.push_back(j);
    storage::AnomalyRow a;
    a.id = "train/straggler/120/r5";
    a.job = "train";
    a.kind = "straggler";
    a.ranks = {5};
    a.nodes = {"node1"};
    a.onsetStep = 120;
    a.detectedStep = 131;
    a.detectedNs = 1000;
    a.magnitude = 1.8;
    a.summary = "rank 5 computes 1.8x slower than its peers";
    store.anomalyRows.push_back(a);
    a.id = "train/step_shift/60/all";
    a.kind = "step_shift";
    a.ranks = {0, 1, 2, 3, 4, 5, 6, 7};
    a.nodes = {"node0", "node1"};
    a.magnitude = 1.25;
    a.state = "resolved";
    a.resolvedStep = 90;
    a.summary = "job step time 1.25x";
    store.anomalyRows.push_back(a);
    trainscope::http::HttpOptions o;
    o.port = 0;
    server = std::make_unique<trainscope::http::HttpServer>(o, store);
    REQUIRE(server->start().isOk());
    url = "http://127.0.0.1:" + std::to_string(server->port());
  }
  trainscope::testing::FakeStore store;
  std::unique_ptr<trainscope::http::HttpServer> server;
  std::string url;
};

// A file under the temp dir, removed at scope exit.
struct TempFile {
  explicit TempFile(const std::string& content) {
    path = (std::filesystem::temp_directory_path() /
            ("cli_detect_test." + std::to_string(::getpid()) + "." + std::to_string(++counter)))
               .string();
    std::ofstream(path) << content;
  }
  ~TempFile() { std::remove(path.c_str()); }
  std::string path;
  static inline int counter = 0;
};

std::string series(int n, int shiftAt, double before, double after) {
  std::string text;
  for (int i = 0; i < n; ++i) {
    // A little deterministic noise so the detector sees a realistic spread.
    double v = (i < shiftAt ? before : after) * (1.0 + 0.004 * ((i * 7) % 5 - 2));
    text += std::to_string(v) + "\n";
  }
  return text;
}

}  // namespace

TEST_CASE("cli anomalies: table lists id, kind, ranks, nodes, steps, magnitude, state", "[cli]") {
  Collector c;
  auto r = cli({"--server", c.url, "anomalies", "train"});
  INFO(r.err);
  REQUIRE(r.code == kExitOk);
  CHECK(r.out.find("ID") != std::string::npos);
  CHECK(r.out.find("MAGNITUDE") != std::string::npos);
  CHECK(r.out.find("train/straggler/120/r5") != std::string::npos);
  CHECK(r.out.find("straggler") != std::string::npos);
  CHECK(r.out.find("1.80x") != std::string::npos);
  CHECK(r.out.find("0,1,2,3,4,5,6,7") != std::string::npos);
  CHECK(r.out.find("node0,node1") != std::string::npos);
  CHECK(r.out.find("resolved at 90") != std::string::npos);
  CHECK(r.out.find("rank 5 computes 1.8x slower") != std::string::npos);
  auto calm = cli({"--server", c.url, "anomalies", "calm"});
  CHECK(calm.code == kExitOk);
  CHECK(calm.out == "no anomalies for job 'calm'\n");
}

TEST_CASE("cli anomalies --json prints the API's anomalies; unknown job exits 1", "[cli]") {
  Collector c;
  auto r = cli({"--server", c.url, "anomalies", "train", "--json"});
  REQUIRE(r.code == kExitOk);
  json j = json::parse(r.out);
  REQUIRE(j["anomalies"].size() == 2);
  CHECK(j["anomalies"][0]["kind"] == "straggler");
  CHECK(j["anomalies"][0]["ranks"] == json{5});
  CHECK(j["anomalies"][0]["resolved_step"].is_null());
  CHECK(j["anomalies"][1]["resolved_step"] == 90);
  auto missing = cli({"--server", c.url, "anomalies", "nope"});
  CHECK(missing.code == kExitApiError);
  CHECK(missing.err.find("unknown job 'nope'") != std::string::npos);
}

TEST_CASE("cli detect: finds a level change in a file and from stdin", "[cli]") {
  TempFile f(series(200, 100, 100.0, 150.0));
  auto r = cli({"detect", "--input", f.path});
  INFO(r.err);
  REQUIRE(r.code == kExitOk);
  CHECK(r.out.find("INDEX") != std::string::npos);
  CHECK(r.out.find("RATIO") != std::string::npos);

  auto js = cli({"detect", "--input", f.path, "--json"});
  REQUIRE(js.code == kExitOk);
  json j = json::parse(js.out);
  CHECK(j["values"] == 200);
  REQUIRE(j["change_points"].size() >= 1);
  const json& p = j["change_points"][0];
  CHECK(p["index"].get<int>() >= 95);
  CHECK(p["index"].get<int>() <= 110);
  CHECK(p["ratio"].get<double>() == Approx(1.5).epsilon(0.05));
  CHECK(p["before"].get<double>() == Approx(100.0).epsilon(0.02));

  std::istringstream in("step,value\n" + [] {
    std::string csv;
    for (int i = 0; i < 200; ++i) {
      csv += std::to_string(i) + "," +
             std::to_string(i < 120 ? 50.0 + (i % 3) * 0.2 : 25.0 + (i % 3) * 0.1) + "\n";
    }
    return csv;
  }());
  std::ostringstream out, err;
  Context ctx{GlobalOptions{}, out, err, 0};
  ctx.global.json = true;
  DetectArgs args;
  args.input = "-";
  args.stdinStream = &in;
  REQUIRE(runDetect(ctx, args) == kExitOk);
  json s = json::parse(out.str());
  REQUIRE(s["change_points"].size() >= 1);
  CHECK(s["change_points"][0]["ratio"].get<double>() == Approx(0.5).epsilon(0.05));
}

TEST_CASE("cli detect: a steady series has no change points", "[cli]") {
  TempFile f(series(150, 1000, 100.0, 100.0));
  auto r = cli({"detect", "--input", f.path});
  REQUIRE(r.code == kExitOk);
  CHECK(r.out == "no change points in 150 values\n");
}

TEST_CASE("cli detect: bad input exits 1 naming the line; a missing file names the file", "[cli]") {
  TempFile empty("");
  auto e = cli({"detect", "--input", empty.path});
  CHECK(e.code == 1);
  CHECK_FALSE(e.err.empty());
  TempFile word("1.0\n2.0\nabc\n");
  auto w = cli({"detect", "--input", word.path});
  CHECK(w.code == 1);
  CHECK(w.err.find("3") != std::string::npos);
  TempFile nan("1.0\nnan\n");
  auto n = cli({"detect", "--input", nan.path});
  CHECK(n.code == 1);
  CHECK(n.err.find("2") != std::string::npos);
  auto m = cli({"detect", "--input", "/nonexistent/series.txt"});
  CHECK(m.code == 1);
  CHECK(m.err.find("/nonexistent/series.txt") != std::string::npos);
  auto noFlag = cli({"detect"});
  CHECK(noFlag.code != 0);
  CHECK(noFlag.err.find("--input") != std::string::npos);
}
