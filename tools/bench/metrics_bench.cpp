// metrics_bench: the cost of GET /metrics on a collector that has seen many jobs (default
// 20,000: most ended two days ago, --running of them reporting now). Fills a SQLite store
// straight through Store::write, starts the collector's HTTP server on it and times scrapes
// over one keep-alive connection: first, p50 and max in ms, the body's bytes and series, and
// how much the process's peak RSS grew while scraping. Prints numbers; asserts nothing.
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "collector/http/server.h"
#include "collector/storage/store.h"
#include "common/clock.h"
#include "common/guarded_main.h"
#include "common/log.h"
#include "tools/bench/api_bench_common.h"

using namespace trainscope;

namespace {

struct Options {
  int jobs = 20000;
  int running = 100;  // jobs whose last report is now; the rest ended two days ago
  uint32_t ranks = 4;
  int steps = 5;
  int scrapes = 10;
  // Every job a 2-stage pipeline (pp groups declared, p2p, bubble and FLOPs in every step), so
  // the scrape also writes the parallel figures and reads each running job's groups.
  bool pipeline = false;
  std::string keepDir;  // "" = a temp dir removed at exit; else the database is left there
};

// Peak resident set (VmHWM) in KiB, from /proc/self/status.
long peakRssKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

Status fill(storage::Store& store, const Options& o) {
  const int64_t now = SystemClock().nowNs();
  const int64_t longAgo = now - int64_t{2} * 24 * 3600 * 1'000'000'000LL;
  bench::FillOptions f;
  f.ops = 4;
  f.collectives = 1;
  storage::WriteBatch batch;
  for (int j = 0; j < o.jobs; ++j) {
    const bool running = j < o.running;
    f.job = "job-" + std::to_string(j);
    const int64_t at = running ? now : longAgo;
    for (uint32_t r = 0; r < o.ranks; ++r) {
      wire::RankInfo info;
      info.set_job(f.job);
      info.set_rank(r);
      info.set_world_size(o.ranks);
      info.set_node("node-" + std::to_string(j % 64));
      batch.ranks.push_back(info);
      for (int s = 0; s < o.steps; ++s) {
        auto report = bench::syntheticReport(f, r, s, at - (o.steps - s) * 100'000'000LL);
        if (o.pipeline) {
          report.set_p2p_ns(report.duration_ns() / 4);
          report.set_bubble_ns(report.duration_ns() / (8 + r % 3));
          report.set_model_flops(1e12);
          report.set_peak_flops(1e15);
        }
        batch.stepDetails.push_back(report.SerializeAsString());
        batch.steps.push_back(std::move(report));
      }
      if (o.pipeline) {
        // rank = stage * (ranks / 2) + replica: stage 0 the first half.
        const uint32_t half = std::max(1u, o.ranks / 2);
        storage::GroupsUpdate u;
        u.job = f.job;
        u.groups.rank = r;
        u.groups.declaredNs = at;
        wire::ProcessGroup g;
        g.set_name("pp");
        g.set_kind(wire::GROUP_PP);
        for (uint32_t m = r % half; m < o.ranks; m += half) g.add_ranks(m);
        u.groups.groups.push_back(g);
        batch.groups.push_back(u);
      }
      if (!running) {
        wire::RankGoodbye bye;
        bye.set_job(f.job);
        bye.set_rank(r);
        bye.set_last_step(o.steps - 1);
        batch.goodbyes.push_back(bye);
      }
    }
    if (batch.steps.size() >= 20000 || j + 1 == o.jobs || j + 1 == o.running) {
      batch.receivedNs = at;
      if (auto s = store.write(batch); !s) return s;
      batch = storage::WriteBatch{};
    }
  }
  return Status::ok();
}

int run(const Options& o) {
  char tmpl[] = "/tmp/trainscope-metrics-bench-XXXXXX";
  std::string dir = o.keepDir;
  if (dir.empty()) {
    if (mkdtemp(tmpl) == nullptr) return 1;
    dir = tmpl;
  } else {
    std::filesystem::create_directories(dir);
  }
  int rc = 0;
  {
    storage::SqliteOptions so;
    so.path = dir + "/trainscope.db";
    so.retentionNs = 0;
    auto opened = storage::openSqliteStore(so);
    if (!opened) {
      std::fprintf(stderr, "%s\n", opened.message().c_str());
      return 1;
    }
    auto& store = **opened;
    const auto t0 = std::chrono::steady_clock::now();
    if (auto s = fill(store, o); !s) {
      std::fprintf(stderr, "fill: %s\n", s.message().c_str());
      return 1;
    }
    std::printf("filled %d %sjobs (%d running) x %u ranks x %d steps in %.1f s\n", o.jobs,
                o.pipeline ? "pipeline " : "", o.running, o.ranks, o.steps,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    http::HttpOptions ho;
    ho.port = 0;
    http::HttpServer server(ho, store);
    if (auto s = server.start(); !s) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 1;
    }
    bench::HttpClient client(server.port());
    const long rssBefore = peakRssKb();
    std::vector<double> ms;
    size_t bytes = 0;
    for (int i = 0; i < o.scrapes; ++i) {
      auto t = client.get("/metrics");
      if (t.status != 200) {
        std::fprintf(stderr, "/metrics answered %u\n", t.status);
        rc = 1;
        break;
      }
      ms.push_back(t.ms);
      bytes = t.bytes;
    }
    if (rc == 0) {
      const double first = ms.front();
      std::sort(ms.begin(), ms.end());
      std::printf("GET /metrics x %d: first %.1f ms, p50 %.1f ms, max %.1f ms, %zu bytes\n",
                  o.scrapes, first, ms[ms.size() / 2], ms.back(), bytes);
      std::printf("peak RSS grew by %.1f MB while scraping\n",
                  static_cast<double>(peakRssKb() - rssBefore) / 1024.0);
    }
    server.stop();
  }
  std::error_code ec;
  if (o.keepDir.empty()) std::filesystem::remove_all(dir, ec);
  return rc;
}

int benchMain(int argc, char** argv) {
  Options o;
  CLI::App app{"metrics_bench: GET /metrics on a store that has seen many jobs"};
  app.add_option("--jobs", o.jobs, "jobs in the store")->capture_default_str();
  app.add_option("--running", o.running, "of which reporting now (the rest ended 2 days ago)")
      ->capture_default_str();
  app.add_option("--ranks", o.ranks, "ranks per job")->capture_default_str();
  app.add_option("--steps", o.steps, "steps per rank")->capture_default_str();
  app.add_option("--scrapes", o.scrapes, "scrapes timed")->capture_default_str();
  app.add_flag("--pipeline", o.pipeline,
               "every job a 2-stage pipeline with p2p, bubble and FLOPs (default: data parallel)");
  app.add_option("--keep-dir", o.keepDir,
                 "fill DIR/trainscope.db and leave it there (e.g. to start a collector on it); "
                 "default: a temp dir, removed");
  CLI11_PARSE(app, argc, argv);
  setLogLevel(LogLevel::kWarn);
  return run(o);
}

}  // namespace

int main(int argc, char** argv) {
  return trainscope::guardedMain("metrics_bench", [&] { return benchMain(argc, argv); });
}
