// The capture manager's test harness: a seeded in-memory store (capture_fixture.h), a manual
// clock, a fake command sink that records what was sent (or refuses nodes marked offline), and
// helpers to start, store and upload. Test-only; single-threaded use.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "collector/capture/gzip_file.h"
#include "collector/capture/manager.h"
#include "collector/capture/request.h"
#include "common/byte_source.h"
#include "common/clock.h"
#include "tests/collector/capture/capture_fixture.h"

namespace trainscope::testing {

inline constexpr int64_t kStartNs = 1'700'000'000'000'000'000;

struct Harness {
  TempDir dir;
  std::unique_ptr<storage::Store> store = seededStore();
  ManualClock clock{kStartNs};
  std::vector<std::pair<std::string, wire::Command>> sent;
  std::set<std::string> offline;  // nodes whose agent is "not connected"
  std::unique_ptr<capture::CaptureManager> manager;

  explicit Harness(capture::CaptureManagerOptions o = {}) {
    o.dir = dir.sub("captures");
    manager = std::make_unique<capture::CaptureManager>(
        o, *store, clock, [this](const std::string& node, const wire::Command& cmd) {
          if (offline.count(node) != 0) {
            return Status::error("node " + node + " has no connected agent");
          }
          sent.emplace_back(node, cmd);
          return Status::ok();
        });
  }

  storage::CaptureRow start(const std::string& body) {
    auto req = capture::parseCaptureRequest(body);
    REQUIRE(req);
    auto r = manager->start("j", *req);
    INFO(r.message());
    REQUIRE(r);
    return *r;
  }

  // The capture as stored once the manager stored what changed (its tick does).
  storage::CaptureRow stored(const std::string& id) {
    if (manager) manager->flush();
    return inStore(id);
  }

  // The capture as stored now, without a flush.
  storage::CaptureRow inStore(const std::string& id) {
    auto row = store->capture(id);
    REQUIRE(row);
    REQUIRE(row->has_value());
    return **row;
  }

  const storage::CaptureRankRow& rank(const storage::CaptureRow& row, uint32_t r) {
    for (const auto& rs : row.rankStatus) {
      if (rs.rank == r) return rs;
    }
    FAIL("rank " << r << " not in capture");
    return row.rankStatus.front();
  }

  // Sends rank `r`'s whole file in chunks of `size` bytes.
  void upload(const std::string& id, uint32_t r, const std::string& bytes, size_t size = 100) {
    manager->onCommandItem("n", statusOf(id, r, "recording", "steps 12..16"));
    manager->onCommandItem("n", statusOf(id, r, "uploading"));
    for (const auto& c : chunksOf(id, r, bytes, size)) manager->onCommandItem("n", c);
  }

  std::string traceBytes(uint32_t r, double baseUs) {
    return gzipJson(dir.sub("src-" + std::to_string(r) + ".json.gz"), rankTrace(r, baseUs, 8, 7));
  }
};

// A file stream read to its end.
inline Result<std::string> readAllOf(Result<std::unique_ptr<ByteSource>> opened) {
  if (!opened) return opened.status();
  return readAll(**opened, 1ull << 30);
}

inline StatusCode refusal(Harness& h, const std::string& job, const std::string& body,
                          std::string* message) {
  auto req = capture::parseCaptureRequest(body);
  REQUIRE(req);
  auto r = h.manager->start(job, *req);
  *message = r.message();
  return r.code();
}

}  // namespace trainscope::testing
