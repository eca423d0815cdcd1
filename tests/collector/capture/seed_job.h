// An in-memory SQLite store seeded with one job, for the capture tests and the fuzz targets
// (no test framework here, so a fuzzer can use it): job "j" of world size 4, ranks 0, 1 on
// node n0 and 2, 3 on n1, every rank with steps 0..latest of 100 ms, n1's clock 5 ms behind
// the collector's. Test-only; single-threaded use.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "collector/storage/store.h"
#include "common/status.h"

namespace trainscope::testing {

inline constexpr int64_t kN1OffsetNs = 5'000'000;  // collector clock - n1's clock

inline Result<std::unique_ptr<storage::Store>> openSeededStore(int64_t latest = 10,
                                                               uint32_t ranks = 4) {
  storage::SqliteOptions o;
  o.path = ":memory:";
  auto opened = storage::openSqliteStore(o);
  if (!opened) return opened.status();
  auto store = std::move(opened.value());
  storage::WriteBatch b;
  b.receivedNs = 1'000'000'000;
  for (uint32_t r = 0; r < ranks; ++r) {
    wire::RankInfo info;
    info.set_job("j");
    info.set_rank(r);
    info.set_world_size(4);
    info.set_host(r < 2 ? "h0" : "h1");
    info.set_node(r < 2 ? "n0" : "n1");
    info.set_pid(100 + r);
    b.ranks.push_back(info);
    for (int64_t s = 0; s <= latest; ++s) {
      wire::StepReport rep;
      rep.set_job("j");
      rep.set_rank(r);
      rep.set_step(s);
      rep.set_start_ns(s * 100'000'000);
      rep.set_end_ns(s * 100'000'000 + 100'000'000);
      rep.set_duration_ns(100'000'000);
      b.steps.push_back(rep);
    }
  }
  for (const char* n : {"n0", "n1"}) {
    storage::NodeUpdate u;
    u.node = n;
    u.seenNs = 1'000'000'000;
    u.offsetNs = std::string(n) == "n1" ? kN1OffsetNs : 0;
    u.hasClock = true;
    b.nodes.push_back(u);
  }
  if (auto st = store->write(b); !st) return st;
  return store;
}

}  // namespace trainscope::testing
