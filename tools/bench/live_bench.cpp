// live_bench: what the first client of the live feed (GET /api/v1/live, WebSocket) costs on a
// collector that has seen many jobs: the baseline poll the server takes (one step summary per
// job) and the snapshot it sends, and one summary read of every job through the store alone
// (the store's share: its summary cache). Fills a SQLite store with --jobs jobs of --ranks ranks
// and
// --steps steps each (straight through Store::write), then times LiveFeed::poll() and
// LiveFeed::snapshot() on it, as collector/http/server.cpp runs them when a client connects,
// and a second poll (nothing new). Prints numbers; asserts nothing.
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "collector/http/live.h"
#include "collector/storage/store.h"
#include "common/clock.h"
#include "common/guarded_main.h"
#include "common/log.h"

using namespace trainscope;

namespace {

struct Options {
  std::vector<int> jobs{5000, 20000};  // one run per count
  uint32_t ranks = 1;
  int steps = 3;
};

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int runOne(int jobs, const Options& o) {
  char tmpl[] = "/tmp/trainscope-live-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 1;
  const std::string dir = tmpl;
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
    const int64_t now = SystemClock().nowNs();
    auto start = std::chrono::steady_clock::now();
    storage::WriteBatch batch;
    for (int j = 0; j < jobs; ++j) {
      const std::string job = "job-" + std::to_string(j);
      for (uint32_t r = 0; r < o.ranks; ++r) {
        wire::RankInfo info;
        info.set_job(job);
        info.set_rank(r);
        info.set_world_size(o.ranks);
        info.set_node("node-" + std::to_string(j % 64));
        batch.ranks.push_back(info);
        for (int s = 0; s < o.steps; ++s) {
          wire::StepReport report;
          report.set_job(job);
          report.set_rank(r);
          report.set_step(s);
          report.set_start_ns(now - (o.steps - s) * 100'000'000LL);
          report.set_duration_ns(90'000'000 + r * 1000);
          report.set_end_ns(report.start_ns() + report.duration_ns());
          batch.steps.push_back(std::move(report));
        }
      }
      if (batch.steps.size() >= 20000 || j + 1 == jobs) {
        batch.receivedNs = now;
        if (auto s = store.write(batch); !s) {
          std::fprintf(stderr, "%s\n", s.message().c_str());
          return 1;
        }
        batch = storage::WriteBatch{};
      }
    }
    std::printf("%d jobs x %u ranks x %d steps: filled in %.2f s\n", jobs, o.ranks, o.steps,
                secondsSince(start));
    // What the feed's first poll did per job before it followed only the newest: one step
    // summary read for every job (the summary cache's cost per read grew with the jobs held).
    start = std::chrono::steady_clock::now();
    auto listed = store.jobs();
    if (!listed) return 1;
    for (const auto& row : *listed) {
      storage::SummaryQuery q;
      q.job = row.job;
      q.fromStep = 0;
      q.limit = 5000;
      if (auto rows = store.summary(q); !rows) {
        std::fprintf(stderr, "%s\n", rows.message().c_str());
        return 1;
      }
    }
    std::printf("  one summary read per job, all %zu jobs: %.3f s\n", listed->size(),
                secondsSince(start));
    SystemClock clock;
    http::LiveFeed feed(store, clock);
    start = std::chrono::steady_clock::now();
    auto baseline = feed.poll();
    const double pollS = secondsSince(start);
    start = std::chrono::steady_clock::now();
    auto snapshot = feed.snapshot();
    const double snapshotS = secondsSince(start);
    start = std::chrono::steady_clock::now();
    auto second = feed.poll();
    const double againS = secondsSince(start);
    if (!baseline || !snapshot || !second) {
      std::fprintf(stderr, "live feed failed\n");
      rc = 1;
    } else {
      std::printf(
          "  first client: baseline poll %.3f s + snapshot %.3f s = %.3f s (snapshot %zu bytes);"
          " next poll %.3f s\n",
          pollS, snapshotS, pollS + snapshotS, snapshot->size(), againS);
    }
  }
  std::filesystem::remove_all(dir);
  return rc;
}

int benchMain(int argc, char** argv) {
  Options o;
  CLI::App app{"live_bench: the live feed's first client on a store that has seen many jobs"};
  app.add_option("--jobs", o.jobs, "job counts, one run each")->capture_default_str();
  app.add_option("--ranks", o.ranks, "ranks per job")->capture_default_str();
  app.add_option("--steps", o.steps, "steps per rank")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  setLogLevel(LogLevel::kWarn);
  for (int jobs : o.jobs) {
    if (int rc = runOne(jobs, o); rc != 0) return rc;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return trainscope::guardedMain("live_bench", [&] { return benchMain(argc, argv); });
}
