// api_bench: JSON API latency with many step rows stored (default 10 million: 1,024 ranks x
// 9,766 steps). Fills a SQLite store (or with --store a ClickHouse database) straight through
// Store::write in big transactions (prints how long that took), starts the collector's HTTP
// server on it and times, over one keep-alive connection, GET /api/v1/jobs/{job}/summary the
// way its clients ask for it: the dashboard's step chart (latest 1,000 steps), the default
// page (first 1,000 steps), the jobs page's current step time (latest 2 steps); /api/v1/jobs;
// and the job page's heatmap (GET /heatmap over the latest window the dashboard asks for at
// this many ranks: 250 steps, fewer above 400 ranks). Prints p50, p99 and max per request.
// Prints numbers; asserts nothing.
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "collector/http/server.h"
#include "collector/storage/store.h"
#include "common/guarded_main.h"
#include "common/log.h"
#include "tools/bench/api_bench_common.h"

using namespace trainscope;

namespace {

struct Options {
  bench::FillOptions fill;
  std::string dataDir;  // "" = a temp dir, removed at exit
  std::string store;    // "" = SQLite in dataDir; clickhouse://HOST:PORT/DB
  bool reuse = false;   // keep the database found in dataDir
  int requests = 200;   // per kind of request
  int ioThreads = 4;
};

int run(const Options& o) {
  bench::BenchStore bs;
  if (auto s = bs.open(o.dataDir, o.reuse, o.fill, o.store); !s) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  const int64_t latest = bs.latestStep();
  std::printf("job %s: %llu step rows, latest step %lld\n", o.fill.job.c_str(),
              static_cast<unsigned long long>(bs.stepRows()), static_cast<long long>(latest));

  http::HttpOptions ho;
  ho.port = 0;
  ho.ioThreads = o.ioThreads;
  http::HttpServer server(ho, bs.store());
  if (auto s = server.start(); !s) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  const std::string base = "/api/v1/jobs/" + o.fill.job;
  auto from = [&](int64_t back) { return std::to_string(std::max<int64_t>(0, latest - back)); };
  struct Kind {
    const char* name;
    std::string target;
  };
  // The heatmap panel's first window (web/js/panels/heatmap_panel.js): 100,000 cells at most,
  // 10 to 250 steps.
  const int64_t heatmapSteps =
      std::min<int64_t>(250, std::max<int64_t>(10, 100000 / static_cast<int64_t>(o.fill.ranks)));
  std::vector<Kind> kinds = {
      {"summary, latest 1000 steps (step chart)", base + "/summary?from=" + from(999)},
      {"summary, default page (first 1000 steps)", base + "/summary"},
      {"summary, latest 2 steps (jobs page)", base + "/summary?from=" + from(1)},
      {"jobs list", "/api/v1/jobs"},
      {"heatmap, latest window (job page)",
       base + "/heatmap?from=" + from(heatmapSteps - 1) + "&to=" + std::to_string(latest)},
  };
  bench::HttpClient client(server.port());
  std::printf("\n%d requests each, one connection, ms:\n", o.requests);
  std::printf("  %-44s %8s %8s %8s %8s %10s\n", "request", "first", "p50", "p99", "max", "bytes");
  for (const auto& k : kinds) {
    std::vector<double> ms;
    size_t bytes = 0;
    double first = 0;
    for (int i = 0; i < o.requests; ++i) {
      auto t = client.get(k.target);
      if (t.status != 200) {
        std::fprintf(stderr, "%s answered %u\n", k.target.c_str(), t.status);
        return 1;
      }
      if (i == 0) first = t.ms;
      bytes = t.bytes;
      ms.push_back(t.ms);
    }
    std::printf("  %-44s %8.1f %8.1f %8.1f %8.1f %10zu\n", k.name, first, bench::percentile(ms, 50),
                bench::percentile(ms, 99), bench::percentile(ms, 100), bytes);
    std::fflush(stdout);
  }
  server.stop();
  return 0;
}

int benchMain(int argc, char** argv) {
  Options o;
  o.fill.ranks = 1024;
  o.fill.steps = 9766;  // 1,024 x 9,766 = 10,000,384 rows
  o.fill.ops = 4;
  o.fill.collectives = 1;
  o.fill.rowsPerTxn = 200000;
  CLI::App app{"JSON API p50/p99 of the job summary with millions of step rows stored."};
  app.add_option("--ranks", o.fill.ranks, "ranks of the synthetic job")->capture_default_str();
  app.add_option("--steps", o.fill.steps, "steps of the synthetic job (rows = ranks x steps)")
      ->capture_default_str();
  app.add_option("--ops", o.fill.ops, "operators per step report (in each row's detail)")
      ->capture_default_str();
  app.add_option("--rows-per-txn", o.fill.rowsPerTxn, "rows per fill transaction")
      ->capture_default_str();
  app.add_option("--job", o.fill.job, "job name")->capture_default_str();
  app.add_option("--data-dir", o.dataDir,
                 "directory for trainscope.db; default a temp dir removed at exit");
  app.add_option("--store", o.store,
                 "clickhouse://HOST:PORT/DB: fill and serve that ClickHouse database instead of "
                 "SQLite in --data-dir");
  app.add_flag("--reuse", o.reuse,
               "use the database already in --data-dir (or the job already in --store) instead "
               "of filling");
  app.add_option("--requests", o.requests, "requests timed per kind")->capture_default_str();
  app.add_option("--io-threads", o.ioThreads, "HTTP server I/O threads")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (o.fill.ranks == 0 || o.fill.steps <= 0 || o.requests < 1 || o.fill.rowsPerTxn == 0) {
    std::fprintf(stderr, "--ranks, --steps, --requests and --rows-per-txn must be at least 1\n");
    return 2;
  }
  setLogLevel(LogLevel::kWarn);
  return run(o);
}

}  // namespace

int main(int argc, char** argv) {
  return trainscope::guardedMain("api_bench", [&] { return benchMain(argc, argv); });
}
