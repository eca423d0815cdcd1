// The job summary behind GET /api/v1/jobs/{job}/summary, from the SQLite store, stays exact
// while rows keep arriving: new steps, late rows for steps read before, several jobs, ranges
// read in any order, and retention deleting old rows. Compared with a brute-force summary of
// every row written (the store keeps computed steps between queries, so this is what could go
// stale).
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "collector/storage/store.h"
#include "tests/collector/storage/memory_store.h"

namespace storage = trainscope::storage;
namespace wire = trainscope::wire;

namespace {

struct Reference {
  // job -> step -> rank -> duration
  std::map<std::string, std::map<int64_t, std::map<uint32_t, int64_t>>> rows;

  std::vector<storage::StepSummaryRow> summary(const storage::SummaryQuery& q) const {
    std::vector<storage::StepSummaryRow> out;
    auto job = rows.find(q.job);
    if (job == rows.end()) return out;
    for (const auto& [step, ranks] : job->second) {
      if (q.fromStep && step < *q.fromStep) continue;
      if (q.toStep && step > *q.toStep) break;
      if (out.size() >= q.limit) break;
      std::vector<std::pair<int64_t, uint32_t>> d;
      for (const auto& [rank, dur] : ranks) d.emplace_back(dur, rank);
      std::sort(d.begin(), d.end());
      storage::StepSummaryRow r;
      r.step = step;
      r.ranks = static_cast<uint32_t>(d.size());
      r.minNs = d.front().first;
      r.maxNs = d.back().first;
      size_t n = d.size();
      r.medianNs = n % 2 == 1 ? d[n / 2].first
                              : d[n / 2 - 1].first + (d[n / 2].first - d[n / 2 - 1].first) / 2;
      r.slowestRank = std::lower_bound(d.begin(), d.end(), std::make_pair(r.maxNs, 0u))->second;
      out.push_back(r);
    }
    return out;
  }
};

wire::StepReport report(const std::string& job, uint32_t rank, int64_t step, int64_t dur) {
  wire::StepReport r;
  r.set_job(job);
  r.set_rank(rank);
  r.set_step(step);
  r.set_start_ns(step * 1'000'000);
  r.set_duration_ns(dur);
  r.set_end_ns(r.start_ns() + dur);
  return r;
}

void requireSame(const std::vector<storage::StepSummaryRow>& got,
                 const std::vector<storage::StepSummaryRow>& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("row " << i << " step " << want[i].step);
    REQUIRE(got[i].step == want[i].step);
    REQUIRE(got[i].ranks == want[i].ranks);
    REQUIRE(got[i].minNs == want[i].minNs);
    REQUIRE(got[i].medianNs == want[i].medianNs);
    REQUIRE(got[i].maxNs == want[i].maxNs);
    REQUIRE(got[i].slowestRank == want[i].slowestRank);
  }
}

void runScenario(const std::string& path) {
  storage::SqliteOptions so;
  so.path = path;
  so.retentionNs = 1'000'000'000;  // 1 s: rows received at t=0 expire at t=2 s
  auto opened = storage::openSqliteStore(so);
  REQUIRE(opened.isOk());
  storage::Store& store = **opened;
  Reference ref;
  std::mt19937_64 rng(42);
  const std::vector<std::string> jobs = {"a", "b"};
  std::map<std::string, int64_t> latest = {{"a", -1}, {"b", -1}};

  auto check = [&](int round) {
    for (const auto& job : jobs) {
      for (int i = 0; i < 6; ++i) {
        storage::SummaryQuery q;
        q.job = job;
        int64_t top = std::max<int64_t>(latest[job], 0);
        switch (rng() % 5) {
          case 0:  // the step chart: the latest steps
            q.fromStep = std::max<int64_t>(0, top - static_cast<int64_t>(rng() % 40));
            break;
          case 1:  // a zoomed range
            q.fromStep = static_cast<int64_t>(rng() % static_cast<uint64_t>(top + 1));
            q.toStep = *q.fromStep + static_cast<int64_t>(rng() % 30);
            break;
          case 2:  // the older part of the run
            q.toStep = static_cast<int64_t>(rng() % static_cast<uint64_t>(top + 1));
            break;
          case 3:  // the default page
            break;
          default:  // the jobs page and the live feed: the latest two steps
            q.fromStep = std::max<int64_t>(0, top - 1);
            break;
        }
        q.limit = 1 + rng() % 60;
        auto got = store.summary(q);
        REQUIRE(got.isOk());
        requireSame(*got, ref.summary(q),
                    "round " + std::to_string(round) + " job " + job + " from " +
                        (q.fromStep ? std::to_string(*q.fromStep) : "-") + " to " +
                        (q.toStep ? std::to_string(*q.toStep) : "-") + " limit " +
                        std::to_string(q.limit));
      }
    }
  };

  for (int round = 0; round < 60; ++round) {
    storage::WriteBatch b;
    b.receivedNs = round < 10 ? 1 : 10'000'000'000;  // the first rounds expire at t=2 s
    for (const auto& job : jobs) {
      // Each round the job moves on a step or two, with every rank or only some of them; a
      // few late rows land in older steps (an agent's spool replayed).
      int64_t next = latest[job] + 1 + static_cast<int64_t>(rng() % 2);
      for (int64_t step = std::max<int64_t>(0, latest[job]); step <= next; ++step) {
        for (uint32_t rank = 0; rank < 8; ++rank) {
          if (rng() % 4 == 0) continue;
          if (ref.rows[job][step].count(rank) != 0) continue;
          int64_t dur = 1000 + static_cast<int64_t>(rng() % 500);
          b.steps.push_back(report(job, rank, step, dur));
          ref.rows[job][step][rank] = dur;
        }
      }
      latest[job] = next;
      for (int late = 0; late < 2; ++late) {
        int64_t step = static_cast<int64_t>(rng() % static_cast<uint64_t>(next + 1));
        uint32_t rank = static_cast<uint32_t>(rng() % 8);
        if (ref.rows[job][step].count(rank) != 0) continue;
        int64_t dur = 5000 + static_cast<int64_t>(rng() % 500);
        b.steps.push_back(report(job, rank, step, dur));
        ref.rows[job][step][rank] = dur;
      }
    }
    REQUIRE(store.write(b).isOk());
    check(round);
    if (round == 30) {
      // Retention drops the rows received at t=0 (rounds 0..9).
      auto deleted = store.applyRetention(2'000'000'000);
      REQUIRE(deleted.isOk());
      REQUIRE(*deleted > 0);
      // Rebuild the reference from what is left: re-read every step with the store's own
      // step query (rows, not summaries), so the reference holds exactly the kept rows.
      ref.rows.clear();
      for (const auto& job : jobs) {
        storage::StepQuery sq;
        sq.job = job;
        sq.limit = 1'000'000;
        auto kept = store.steps(sq);
        REQUIRE(kept.isOk());
        for (const auto& row : *kept) ref.rows[job][row.step][row.rank] = row.durationNs;
      }
      check(round);
    }
  }
}

}  // namespace

TEST_CASE("summary stays exact as rows arrive, late rows land and retention deletes (file)",
          "[http][summary]") {
  char tmpl[] = "/tmp/trainscope-summary-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  runScenario(dir + "/t.db");
  std::filesystem::remove_all(dir);
}

TEST_CASE("summary stays exact as rows arrive, late rows land and retention deletes (memory)",
          "[http][summary]") {
  runScenario(":memory:");
}

TEST_CASE("a new store never sees an old store's summaries", "[http][summary]") {
  for (int64_t dur : {1000, 2000, 3000}) {
    auto opened = storage::testing::memoryStore();
    storage::WriteBatch b;
    b.receivedNs = 1;
    b.steps.push_back(report("j", 0, 0, dur));
    REQUIRE(opened->write(b).isOk());
    storage::SummaryQuery q;
    q.job = "j";
    auto got = opened->summary(q);
    REQUIRE(got.isOk());
    REQUIRE(got->size() == 1);
    CHECK((*got)[0].medianNs == dur);
  }
}
