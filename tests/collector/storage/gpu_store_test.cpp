// GPU health in storage (issue 35): a node's GPU samples and events ride in its host samples and
// come back whole, per node and time range, newest `limit` oldest first; a rank's GPU UUID is
// kept with its registration; a version-6 SQLite database gains the column.
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "collector/storage/sqlite_store.h"
#include "tests/collector/storage/sqlite_file.h"
#include "tests/collector/storage/test_store.h"
#include "tests/common/support.h"

using namespace trainscope;
using namespace trainscope::storage;
using trainscope::storage::testing::createAtVersion;
using trainscope::storage::testing::userVersion;
using trainscope::tests::TempDir;

namespace {

constexpr int64_t kT0 = 1'700'000'000'000'000'000;
constexpr int64_t kSec = 1'000'000'000;
const char* kUuid = "GPU-11111111-2222-3333-4444-555555555555";

wire::HostSample host(const std::string& node, int64_t t, uint32_t smMhz) {
  wire::HostSample h;
  h.set_node(node);
  h.set_time_ns(t);
  auto* g = h.add_gpus();
  g->set_index(0);
  g->set_uuid(kUuid);
  g->set_sm_clock_mhz(smMhz);
  g->set_clock_event_reasons(0x40);
  g->set_throttle_ns(3 * kSec);
  g->set_present(wire::GPU_CLOCKS | wire::GPU_CLOCK_EVENTS | wire::GPU_THROTTLE_TIME);
  return h;
}

}  // namespace

TEST_CASE("storage serves a node's GPU samples and events back whole, by time range") {
  TempDir dir;
  auto store = trainscope::storage::testing::openTestStore(dir.sub("gpu.db"));
  WriteBatch b;
  for (int i = 0; i < 5; ++i) b.hosts.push_back(host("n0", kT0 + i * kSec, 1000 + i));
  b.hosts.push_back(host("n1", kT0, 1980));
  auto* ev = b.hosts[2].add_gpu_events();
  ev->set_uuid(kUuid);
  ev->set_kind(wire::GPU_EVENT_XID);
  ev->set_code(79);
  ev->set_time_ns(kT0 + 2 * kSec);
  auto written = store->write(b);
  INFO(written.message());
  REQUIRE(written);
  REQUIRE(store->write(b));  // a replay is served once

  HostSampleQuery q;
  q.node = "n0";
  auto all = store->hostSamples(q);
  REQUIRE(all);
  REQUIRE(all->size() == 5);
  CHECK(all->front().time_ns() == kT0);
  CHECK(all->back().time_ns() == kT0 + 4 * kSec);
  const wire::GpuSample& g = (*all)[1].gpus(0);
  CHECK(g.uuid() == kUuid);
  CHECK(g.sm_clock_mhz() == 1001);
  CHECK(g.clock_event_reasons() == 0x40);
  CHECK(g.throttle_ns() == 3 * kSec);
  REQUIRE((*all)[2].gpu_events_size() == 1);
  CHECK((*all)[2].gpu_events(0).code() == 79);
  CHECK((*all)[2].gpu_events(0).kind() == wire::GPU_EVENT_XID);

  q.fromNs = kT0 + kSec;
  q.toNs = kT0 + 3 * kSec;
  q.limit = 2;  // the newest two of the range, oldest first
  auto some = store->hostSamples(q);
  REQUIRE(some);
  REQUIRE(some->size() == 2);
  CHECK((*some)[0].time_ns() == kT0 + 2 * kSec);
  CHECK((*some)[1].time_ns() == kT0 + 3 * kSec);

  q = HostSampleQuery{};
  q.node = "nobody";
  CHECK(store->hostSamples(q)->empty());

  // The node's latest sample carries its GPUs too.
  auto nodes = store->nodes();
  REQUIRE(nodes);
  REQUIRE(nodes->size() == 2);
  REQUIRE(nodes->at(0).latestHost);
  CHECK(nodes->at(0).latestHost->gpus(0).sm_clock_mhz() == 1004);
}

TEST_CASE("storage keeps the GPU a rank named in its registration") {
  TempDir dir;
  const std::string path = dir.sub("ranks.db");
  {
    auto store = trainscope::storage::testing::openTestStore(path);
    WriteBatch b;
    for (uint32_t r = 0; r < 2; ++r) {
      wire::RankInfo i;
      i.set_job("j");
      i.set_rank(r);
      i.set_world_size(2);
      i.set_node("n0");
      i.set_pid(100 + r);
      if (r == 1) i.set_gpu_uuid(kUuid);
      b.ranks.push_back(i);
    }
    REQUIRE(store->write(b));
  }
  auto store = trainscope::storage::testing::openTestStore(path);
  auto ranks = store->ranks("j");
  REQUIRE(ranks);
  REQUIRE(ranks->size() == 2);
  CHECK(ranks->at(0).gpuUuid.empty());
  CHECK(ranks->at(1).gpuUuid == kUuid);
}

TEST_CASE("a version-6 database gains the ranks' GPU column and keeps its ranks", "[sqlite]") {
  TempDir dir;
  const std::string path = dir.sub("v6.db");
  createAtVersion(path, 6,
                  "INSERT INTO jobs(id, name, first_seen_ns, last_seen_ns) VALUES(1, 'j', 1, 1);"
                  "INSERT INTO ranks(job_id, rank, node, first_seen_ns, last_seen_ns)"
                  " VALUES(1, 3, 'old-node', 1, 1);");
  auto store = trainscope::storage::testing::openTestStore(path);
  CHECK(userVersion(path) == currentSchemaVersion());
  auto ranks = store->ranks("j");
  REQUIRE(ranks);
  REQUIRE(ranks->size() == 1);
  CHECK(ranks->at(0).node == "old-node");
  CHECK(ranks->at(0).gpuUuid.empty());
}
