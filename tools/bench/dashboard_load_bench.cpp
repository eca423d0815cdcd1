// dashboard_load_bench: the dashboard's first load of a job page with RANKS x STEPS stored
// (default 64 x 10,000). Fills a SQLite store straight through Store::write, starts the
// collector's HTTP server on it (the same HttpServer the collector runs), then replays the
// requests web/js/app.js makes on first load, in the same order and with the same parallelism
// (the browser keeps up to 6 connections), and prints each request's time and the time until
// the page is usable (#app[data-ready]: ranks table, recent step chart, heatmap). With
// --browser it then runs tests/e2e/browser/measure.mjs against the same server for a headless
// chromium timing. Prints numbers; asserts nothing.
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <future>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "collector/http/request_target.h"
#include "collector/http/server.h"
#include "collector/storage/store.h"
#include "common/guarded_main.h"
#include "common/log.h"
#include "common/percent_encode.h"
#include "tools/bench/api_bench_common.h"

using namespace trainscope;

namespace {

struct Options {
  bench::FillOptions fill;
  std::string dataDir;  // "" = a temp dir, removed at exit
  bool reuse = false;   // keep the database found in dataDir
  int ioThreads = 4;
  int runs = 5;
  std::string webRoot;  // "" skips the static files
  std::string browser;  // measure.mjs to run with node, "" skips it
};

struct Request {
  std::string name;
  std::string target;
};

// One phase: its requests spread over `conns` connections the way a browser would.
std::vector<bench::Timed> runPhase(uint16_t port, const std::vector<Request>& reqs, size_t conns) {
  std::vector<bench::Timed> out(reqs.size());
  std::vector<std::thread> threads;
  for (size_t c = 0; c < std::min(conns, reqs.size()); ++c) {
    threads.emplace_back([&, c] {
      bench::HttpClient client(port);
      for (size_t i = c; i < reqs.size(); i += conns) out[i] = client.get(reqs[i].target);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

int run(const Options& o) {
  bench::BenchStore bs;
  if (auto s = bs.open(o.dataDir, o.reuse, o.fill); !s) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  const std::string& job = o.fill.job;
  const int64_t latest = bs.latestStep();
  storage::Store& store = bs.store();

  http::HttpOptions ho;
  ho.port = 0;
  ho.webRoot = o.webRoot;
  ho.ioThreads = o.ioThreads;
  http::HttpServer server(ho, store);
  if (auto s = server.start(); !s) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  const uint16_t port = server.port();
  const std::string base = "/api/v1/jobs/" + percentEncode(job);
  auto from = [&](int64_t back) { return std::to_string(std::max<int64_t>(0, latest - back)); };

  // The requests of web/js/app.js's first load of #/jobs/JOB, phase by phase.
  std::vector<Request> page;
  if (!o.webRoot.empty()) {
    for (const char* f :
         {"/", "/style.css", "/vendor/uPlot.min.css", "/vendor/uPlot.iife.min.js", "/js/app.js",
          "/js/api.js", "/js/live.js", "/js/heatmap.js", "/js/timeline.js"}) {
      page.push_back({f, f});
    }
  }
  page.push_back({"jobs", "/api/v1/jobs"});
  page.push_back({"nodes", "/api/v1/nodes"});
  page.push_back({"anomalies", base + "/anomalies"});
  std::vector<Request> rankList = {
      {"rank list", base + "/ranks"},
      {"jobs-page step time", base + "/summary?from=" + from(1)},
      {"step chart (latest 1000)", base + "/summary?from=" + from(999) + "&limit=100000"}};
  std::vector<Request> usable = {
      {"ranks table (2 steps, detail)", base + "/steps?from=" + from(1) + "&detail=1&limit=100000"},
      {"heatmap (latest 250, compact)",
       base + "/heatmap?from=" + from(249) + "&to=" + std::to_string(latest)},
  };
  std::vector<Request> after = {
      {"bandwidth (rank 0, 2000 steps, detail)",
       base + "/steps?rank=0&from=" + from(1999) + "&detail=1&limit=2000"},
      {"step chart (older steps)", base + "/summary?from=0&to=" + from(1000) + "&limit=100000"},
  };

  std::map<std::string, std::vector<double>> perRequest;
  std::vector<double> toUsable, toWhole;
  auto note = [&](const std::vector<Request>& reqs, const std::vector<bench::Timed>& t) {
    for (size_t i = 0; i < reqs.size(); ++i) {
      perRequest[reqs[i].name].push_back(t[i].ms);
      if (t[i].status != 200) {
        std::fprintf(stderr, "warning: %s answered %u\n", reqs[i].target.c_str(), t[i].status);
      }
    }
  };
  std::map<std::string, size_t> bytes;
  for (int r = 0; r < o.runs; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    auto a = runPhase(port, page, 6);
    auto b = runPhase(port, rankList, 6);
    auto c = runPhase(port, usable, 6);
    double u =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    auto d = runPhase(port, after, 1);  // the page reads these one after another
    double w =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    note(page, a);
    note(rankList, b);
    note(usable, c);
    note(after, d);
    for (size_t i = 0; i < usable.size(); ++i) bytes[usable[i].name] = c[i].bytes;
    for (size_t i = 0; i < after.size(); ++i) bytes[after[i].name] = d[i].bytes;
    toUsable.push_back(u);
    toWhole.push_back(w);
  }
  std::printf("\nrequests of the first load (%d runs, %d I/O threads), median / max ms:\n", o.runs,
              o.ioThreads);
  for (const auto* list : {&page, &rankList, &usable, &after}) {
    for (const auto& req : *list) {
      const auto& v = perRequest[req.name];
      std::printf("  %-42s %8.1f %8.1f", req.name.c_str(), bench::percentile(v, 50),
                  bench::percentile(v, 100));
      if (bytes.count(req.name) != 0) std::printf("   %zu bytes", bytes[req.name]);
      std::printf("\n");
    }
  }
  std::printf("to usable (HTTP only, no rendering): median %.1f ms, max %.1f ms\n",
              bench::percentile(toUsable, 50), bench::percentile(toUsable, 100));
  std::printf("whole run charted (HTTP only):       median %.1f ms, max %.1f ms\n",
              bench::percentile(toWhole, 50), bench::percentile(toWhole, 100));
  std::fflush(stdout);

  int rc = 0;
  if (!o.browser.empty()) {
    std::string cmd = "TRAINSCOPE_BENCH_URL=http://127.0.0.1:" + std::to_string(port) +
                      " TRAINSCOPE_BENCH_JOB=" + job + " node '" + o.browser + "' " +
                      std::to_string(o.fill.ranks) + " " + std::to_string(o.fill.steps);
    std::printf("\nheadless chromium: %s\n", cmd.c_str());
    std::fflush(stdout);
    rc = std::system(cmd.c_str()) == 0 ? 0 : 1;
  }
  server.stop();
  return rc;
}

int benchMain(int argc, char** argv) {
  Options o;
  CLI::App app{"Times the dashboard's first load of a job page with RANKS x STEPS stored."};
  app.add_option("--ranks", o.fill.ranks, "ranks of the synthetic job")->capture_default_str();
  app.add_option("--steps", o.fill.steps, "steps of the synthetic job")->capture_default_str();
  app.add_option("--ops", o.fill.ops, "operators per step report (in each row's detail)")
      ->capture_default_str();
  app.add_option("--job", o.fill.job, "job name")->capture_default_str();
  app.add_option("--data-dir", o.dataDir,
                 "directory for trainscope.db; default a temp dir removed at exit");
  app.add_flag("--reuse", o.reuse, "use the database already in --data-dir instead of filling");
  app.add_option("--io-threads", o.ioThreads, "HTTP server I/O threads")->capture_default_str();
  app.add_option("--runs", o.runs, "page loads to time")->capture_default_str();
  app.add_option("--web-root", o.webRoot,
                 "dashboard files (web/) to serve and fetch too; default: API requests only");
  app.add_option("--browser", o.browser,
                 "path of tests/e2e/browser/measure.mjs: also time the page in headless "
                 "chromium (needs node, chromium, playwright-core and --web-root)");
  CLI11_PARSE(app, argc, argv);
  if (o.fill.ranks == 0 || o.fill.steps <= 0) {
    std::fprintf(stderr, "--ranks and --steps must be at least 1\n");
    return 2;
  }
  if (o.runs < 1) {
    std::fprintf(stderr, "--runs must be at least 1\n");
    return 2;
  }
  if (!o.browser.empty() && o.webRoot.empty()) {
    std::fprintf(stderr, "--browser needs --web-root (the page must be served)\n");
    return 2;
  }
  o.fill.progress = true;
  setLogLevel(LogLevel::kWarn);
  return run(o);
}

}  // namespace

int main(int argc, char** argv) {
  return trainscope::guardedMain("dashboard_load_bench", [&] { return benchMain(argc, argv); });
}
