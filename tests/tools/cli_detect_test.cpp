// The `detect` subcommand in-process: change points and segments of a file or stdin as a table
// and as --json, its options (model, penalty, minimum segment, outliers, season) with the
// errors that name a bad flag, --help, and exit 6 naming the line or the file on bad input; and
// a stored job's step times fetched (over several pages) from a real HttpServer over a fake
// store.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "collector/http/server.h"
#include "tests/collector/http/fake_store.h"
#include "tests/tools/cli_run.h"
#include "tools/cli/cli.h"
#include "tools/cli/detect_cmd.h"

using nlohmann::json;
using namespace trainscope::cli;
namespace storage = trainscope::storage;

namespace {

using trainscope::cli::testing::cli;

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

// `n` values at `before` then `after` from `shiftAt`, with a little deterministic noise so the
// detector sees a realistic spread.
std::string series(int n, int shiftAt, double before, double after) {
  std::string text;
  for (int i = 0; i < n; ++i) {
    double v = (i < shiftAt ? before : after) * (1.0 + 0.004 * ((i * 7) % 5 - 2));
    text += std::to_string(v) + "\n";
  }
  return text;
}

json detectJson(const std::vector<std::string>& args) {
  auto r = cli(args);
  INFO(r.err);
  REQUIRE(r.code == kExitOk);
  return json::parse(r.out);
}

// A collector holding job "train": 2,500 steps (three of the API's 1,000-row pages) whose
// median step time rises from 100 to 130 ms at step 1,700, and rank 3's own step times, which
// rise to 180 ms at step 400, with 1 % noise. Steps start at 10 and skip 2,000, as a stored
// job's may.
struct Collector {
  Collector() {
    storage::JobRow j;
    j.job = "train";
    j.worldSize = 4;
    store.jobRows = {j};
    std::mt19937 rng(7);  // seeded: the same noise every run
    std::normal_distribution<double> noise(1.0, 0.01);
    for (int64_t step = 10; step < 2511; ++step) {
      if (step == 2000) continue;
      const double wobble = noise(rng);
      storage::StepSummaryRow s;
      s.step = step;
      s.ranks = 4;
      s.medianNs = static_cast<int64_t>((step < 1700 ? 100e6 : 130e6) * wobble);
      s.minNs = s.medianNs;
      s.maxNs = s.medianNs;
      store.summaryRows.push_back(s);
      storage::StepRow r;
      r.job = "train";
      r.rank = 3;
      r.step = step;
      r.durationNs = static_cast<int64_t>((step < 400 ? 100e6 : 180e6) * wobble);
      store.stepRows.push_back(r);
    }
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

}  // namespace

TEST_CASE("cli detect --job: a stored job's median step times, every page, change at its step",
          "[cli]") {
  Collector c;
  json j = detectJson({"--server", c.url, "detect", "--job", "train", "--json"});
  CHECK(j["values"] == 2500);  // all three pages, step 2,000 absent
  REQUIRE(j["change_points"].size() == 1);
  const json& p = j["change_points"][0];
  CHECK(p["step"] == 1700);
  CHECK(p["index"] == 1690);
  CHECK(p["before"].get<double>() == Approx(100.0).epsilon(0.01));  // in ms
  CHECK(p["after"].get<double>() == Approx(130.0).epsilon(0.01));
  REQUIRE(j["segments"].size() == 2);
  CHECK(j["segments"][0]["first_step"] == 10);
  CHECK(j["segments"][0]["last_step"] == 1699);
  CHECK(j["segments"][1]["first_step"] == 1700);
  CHECK(j["segments"][1]["last_step"] == 2510);

  auto r = cli({"--server", c.url, "detect", "--job", "train"});
  INFO(r.err);
  REQUIRE(r.code == kExitOk);
  CHECK(r.out.rfind("job train, median step time over ranks (ms), steps 10-2510\n", 0) == 0);
  CHECK(r.out.find("1 change point in 2500 values") != std::string::npos);
  for (const char* col : {"STEP", "FIRST STEP", "LAST STEP"})
    CHECK(r.out.find(col) != std::string::npos);
  CHECK(r.out.find(" 1700 ") != std::string::npos);

  // A range of steps: --from/--to reach the collector, so the change is not in it.
  json early = detectJson(
      {"--server", c.url, "detect", "--job", "train", "--from", "100", "--to", "1500", "--json"});
  CHECK(early["values"] == 1401);
  CHECK(early["change_points"].empty());
}

TEST_CASE("cli detect --job --rank: one rank's step times", "[cli]") {
  Collector c;
  json j = detectJson({"--server", c.url, "detect", "--job", "train", "--rank", "3", "--json"});
  CHECK(j["values"] == 2500);
  REQUIRE(j["change_points"].size() == 1);
  CHECK(j["change_points"][0]["step"] == 400);
  CHECK(j["change_points"][0]["after"].get<double>() == Approx(180.0).epsilon(0.01));
}

TEST_CASE("cli detect --job: unknown job exits 1, no steps 6, unreachable 4, bad usage 2",
          "[cli]") {
  Collector c;
  auto missing = cli({"--server", c.url, "detect", "--job", "nope"});
  CHECK(missing.code == kExitApiError);
  CHECK(missing.err.find("unknown job 'nope'") != std::string::npos);
  auto empty = cli({"--server", c.url, "detect", "--job", "train", "--rank", "2"});
  CHECK(empty.code == kExitLocalError);
  CHECK(empty.err.find("has no rank 2's step times") != std::string::npos);
  auto gone = cli({"--server", "http://127.0.0.1:1", "detect", "--job", "train"});
  CHECK(gone.code == kExitUnreachable);

  TempFile f(series(50, 25, 1.0, 2.0));
  struct Bad {
    std::vector<std::string> args;
    const char* says;
  };
  const std::vector<Bad> bad = {
      {{"detect"}, "--input"},
      {{"detect", "--input", f.path, "--job", "train"}, "excludes"},
      {{"detect", "--input", f.path, "--rank", "3"}, "--job"},
      {{"detect", "--job", "train", "--from", "9", "--to", "3"}, "--from"},
  };
  for (const auto& b : bad) {
    auto r = cli(b.args);
    INFO(r.err);
    CHECK(r.code == kExitUsage);
    CHECK(r.err.find(b.says) != std::string::npos);
  }
}

TEST_CASE("cli detect: finds a level change in a file and from stdin", "[cli]") {
  TempFile f(series(200, 100, 100.0, 150.0));
  auto r = cli({"detect", "--input", f.path});
  INFO(r.err);
  REQUIRE(r.code == kExitOk);
  CHECK(r.out.rfind("1 change point in 200 values\n", 0) == 0);
  for (const char* col : {"INDEX", "BEFORE", "AFTER", "JUMP", "RATIO", "SD BEFORE", "SD AFTER"}) {
    CHECK(r.out.find(col) != std::string::npos);
  }
  CHECK(r.out.find("segments [START, END):") != std::string::npos);
  CHECK(r.out.find("model meanvar, penalty") != std::string::npos);

  json j = detectJson({"detect", "--input", f.path, "--json"});
  CHECK(j["values"] == 200);
  CHECK(j["model"] == "meanvar");
  REQUIRE(j["change_points"].size() == 1);
  const json& p = j["change_points"][0];
  CHECK(p["index"] == 100);
  CHECK(p["before"].get<double>() == Approx(100.0).epsilon(0.01));
  CHECK(p["after"].get<double>() == Approx(150.0).epsilon(0.01));
  CHECK(p["jump"].get<double>() == Approx(50.0).epsilon(0.02));
  CHECK(p["ratio"].get<double>() == Approx(1.5).epsilon(0.01));
  CHECK(p["sd_before"].get<double>() == Approx(0.57).epsilon(0.1));
  REQUIRE(j["segments"].size() == 2);
  CHECK(j["segments"][0]["start"] == 0);
  CHECK(j["segments"][0]["end"] == 100);
  CHECK(j["segments"][1]["start"] == 100);
  CHECK(j["segments"][1]["end"] == 200);
  CHECK(j["segments"][1]["values"] == 100);
  CHECK(j["segments"][1]["mean"].get<double>() == Approx(150.0).epsilon(0.01));
  CHECK(j["segments"][1]["sd"].get<double>() == Approx(0.86).epsilon(0.1));
  for (const char* key : {"penalty", "noise_sd", "autocorrelation", "period", "outliers"}) {
    CHECK(j.contains(key));
  }

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
  REQUIRE(s["change_points"].size() == 1);
  CHECK(s["change_points"][0]["index"] == 120);
  CHECK(s["change_points"][0]["ratio"].get<double>() == Approx(0.5).epsilon(0.05));
}

TEST_CASE("cli detect: a steady series has no change points and one segment", "[cli]") {
  TempFile f(series(150, 1000, 100.0, 100.0));
  auto r = cli({"detect", "--input", f.path});
  REQUIRE(r.code == kExitOk);
  CHECK(r.out.rfind("no change points in 150 values\n", 0) == 0);
  CHECK(r.out.find("INDEX") == std::string::npos);
  CHECK(r.out.find("segments [START, END):") != std::string::npos);
  json j = detectJson({"detect", "--input", f.path, "--json"});
  CHECK(j["change_points"].empty());
  REQUIRE(j["segments"].size() == 1);
  CHECK(j["segments"][0]["end"] == 150);
}

TEST_CASE("cli detect: --model, --penalty, --min-segment, --outlier-sigmas, --no-seasonal",
          "[cli]") {
  // A line rising 0.5 per value with a jump of 40 at 120.
  std::string text;
  for (int i = 0; i < 240; ++i) {
    text += std::to_string(0.5 * i + (i >= 120 ? 40.0 : 0.0) + ((i * 7) % 5 - 2) * 0.3) + "\n";
  }
  TempFile f(text);
  json autoFit = detectJson({"detect", "--input", f.path, "--json"});
  CHECK(autoFit["model"] == "trend");
  REQUIRE(autoFit["change_points"].size() == 1);
  CHECK(autoFit["change_points"][0]["index"] == 120);
  CHECK(autoFit["change_points"][0]["jump"].get<double>() == Approx(40.0).epsilon(0.05));
  CHECK(autoFit["segments"][0]["slope"].get<double>() == Approx(0.5).epsilon(0.05));
  auto table = cli({"detect", "--input", f.path});
  CHECK(table.out.find("SLOPE") != std::string::npos);
  CHECK(detectJson({"detect", "--input", f.path, "--json", "--model", "meanvar"})["model"] ==
        "meanvar");
  CHECK(detectJson({"detect", "--input", f.path, "--json", "--model", "mean"})["model"] == "mean");

  json none = detectJson({"detect", "--input", f.path, "--json", "--penalty", "1e7"});
  CHECK(none["change_points"].empty());
  CHECK(none["penalty"] == 1e7);
  json scaled = detectJson({"detect", "--input", f.path, "--json", "--penalty-scale", "2"});
  CHECK(scaled["penalty"].get<double>() >= 2 * autoFit["penalty"].get<double>() * 0.99);

  json coarse = detectJson(
      {"detect", "--input", f.path, "--json", "--model", "meanvar", "--min-segment", "100"});
  for (const auto& seg : coarse["segments"]) CHECK(seg["values"].get<int>() >= 100);

  TempFile spiky(series(200, 1000, 100.0, 100.0) + "900\n" + series(50, 1000, 100.0, 100.0));
  CHECK(detectJson({"detect", "--input", spiky.path, "--json"})["outliers"] == 1);
  CHECK(detectJson(
            {"detect", "--input", spiky.path, "--json", "--outlier-sigmas", "0"})["outliers"] == 0);

  std::string seasonal;
  std::mt19937 rng(1);
  std::normal_distribution<double> noise(0.0, 1.0);
  for (int i = 0; i < 240; ++i) {
    seasonal += std::to_string(100 + 10 * std::sin(i * 2 * M_PI / 12) + noise(rng)) + "\n";
  }
  TempFile season(seasonal);
  json withSeason = detectJson({"detect", "--input", season.path, "--json"});
  CHECK(withSeason["period"] == 12);
  CHECK(withSeason["change_points"].empty());
  CHECK(detectJson({"detect", "--input", season.path, "--json", "--no-seasonal"})["period"] == 0);
}

TEST_CASE("cli detect: bad option values exit 2 naming the flag", "[cli]") {
  TempFile f(series(50, 25, 1.0, 2.0));
  struct Bad {
    std::vector<std::string> args;
    const char* flag;
  };
  const std::vector<Bad> bad = {
      {{"--model", "linear"}, "--model"},
      {{"--penalty", "-3"}, "--penalty"},
      {{"--penalty-scale", "0"}, "--penalty-scale"},
      {{"--min-segment", "1"}, "--min-segment"},
      {{"--outlier-sigmas", "-1"}, "--outlier-sigmas"},
      {{"--max-autocorr", "0.99"}, "--max-autocorr"},
      {{"--penalty", "10", "--penalty-scale", "2"}, "--penalty"},
  };
  for (const auto& b : bad) {
    std::vector<std::string> args{"detect", "--input", f.path};
    args.insert(args.end(), b.args.begin(), b.args.end());
    auto r = cli(args);
    INFO(b.args[0] << " " << b.args[1] << ": " << r.err);
    CHECK(r.code == kExitUsage);
    CHECK(r.err.find(b.flag) != std::string::npos);
  }
}

TEST_CASE("cli detect: --help explains the method, the input and every option", "[cli]") {
  auto r = cli({"detect", "--help"});
  CHECK(r.code == kExitOk);
  for (const char* text :
       {"--input", "--job", "--rank", "--from", "--to", "--model", "--penalty", "--penalty-scale",
        "--min-segment", "--outlier-sigmas", "--max-autocorr", "--no-seasonal", "PELT", "CSV",
        "meanvar", "trend", "outlier", "season"}) {
    INFO(text);
    CHECK(r.out.find(text) != std::string::npos);
  }
}

TEST_CASE("cli detect: bad input exits 6 naming the line; a missing file names the file", "[cli]") {
  TempFile empty("");
  auto e = cli({"detect", "--input", empty.path});
  CHECK(e.code == kExitLocalError);
  CHECK(e.err.find("no values") != std::string::npos);
  TempFile word("1.0\n2.0\nabc\n");
  auto w = cli({"detect", "--input", word.path});
  CHECK(w.code == kExitLocalError);
  CHECK(w.err.find("line 3") != std::string::npos);
  TempFile nan("1.0\nnan\n");
  auto n = cli({"detect", "--input", nan.path});
  CHECK(n.code == kExitLocalError);
  CHECK(n.err.find("line 2") != std::string::npos);
  auto m = cli({"detect", "--input", "/nonexistent/series.txt"});
  CHECK(m.code == kExitLocalError);
  CHECK(m.err.find("/nonexistent/series.txt") != std::string::npos);
  auto noFlag = cli({"detect"});
  CHECK(noFlag.code != 0);
  CHECK(noFlag.err.find("--input") != std::string::npos);
}

TEST_CASE("cli detect: the exit code of bad input is the one --help states", "[cli]") {
  auto help = cli({"detect", "--help"});
  std::smatch said;
  REQUIRE(std::regex_search(help.out, said, std::regex("Exit ([0-9]+) on bad input")));
  TempFile word("1.0\nabc\n");
  auto r = cli({"detect", "--input", word.path});
  CHECK(std::to_string(r.code) == said[1].str());
  // ... and the meaning the CLI's table gives that code.
  auto top = cli({"--help"});
  CHECK(top.out.find(said[1].str() + " an input that cannot be read or used") != std::string::npos);
}
