// The process groups ranks declare (issue 11): the latest set per rank is kept (an older
// replay never replaces it), read back per job ordered by rank, kept across a reopen, and a
// version-4 database gains the columns with its ranks intact.
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

std::unique_ptr<Store> openAt(const std::string& path) {
  return trainscope::storage::testing::openTestStore(path);
}

wire::RankInfo info(const std::string& job, uint32_t rank) {
  wire::RankInfo i;
  i.set_job(job);
  i.set_rank(rank);
  i.set_world_size(4);
  i.set_node('n' + std::to_string(rank));
  i.set_pid(100 + rank);
  return i;
}

GroupsUpdate update(const std::string& job, uint32_t rank, int64_t declaredNs,
                    const std::string& name, const std::vector<uint32_t>& ranks) {
  GroupsUpdate u;
  u.job = job;
  u.groups.rank = rank;
  u.groups.declaredNs = declaredNs;
  wire::ProcessGroup g;
  g.set_name(name);
  g.set_kind(wire::GROUP_PP);
  for (uint32_t r : ranks) g.add_ranks(r);
  u.groups.groups.push_back(g);
  return u;
}

}  // namespace

TEST_CASE("storage keeps each rank's latest declared groups, per job, across a reopen") {
  TempDir dir;
  const std::string path = dir.sub("groups.db");
  {
    auto store = openAt(path);
    WriteBatch b;
    b.ranks = {info("a", 0), info("a", 1), info("a", 2), info("b", 0)};
    b.groups = {update("a", 1, 200, "pp", {1, 3}), update("a", 0, 100, "pp", {0, 2}),
                update("b", 0, 100, "stages", {0})};
    auto written = store->write(b);
    INFO(written.message());
    REQUIRE(written);
    // A replayed, older declaration of rank 1 changes nothing; a newer one of rank 0 replaces.
    WriteBatch again;
    again.groups = {update("a", 1, 150, "old", {1}), update("a", 0, 300, "pp2", {2, 0})};
    REQUIRE(store->write(again));
  }
  auto store = openAt(path);
  auto a = store->groups("a");
  REQUIRE(a);
  REQUIRE(a->size() == 2);  // rank 2 declared nothing
  CHECK((*a)[0].rank == 0);
  CHECK((*a)[0].declaredNs == 300);
  CHECK((*a)[0].groups.at(0).name() == "pp2");
  CHECK((*a)[0].groups.at(0).ranks(0) == 2);
  CHECK((*a)[1].rank == 1);
  CHECK((*a)[1].groups.at(0).name() == "pp");
  CHECK((*a)[1].groups.at(0).kind() == wire::GROUP_PP);
  CHECK(store->groups("b")->size() == 1);
  CHECK(store->groups("unknown")->empty());
  // The rank rows are the same rows: registration fields untouched by the groups.
  auto ranks = store->ranks("a");
  REQUIRE(ranks);
  REQUIRE(ranks->size() == 3);
  CHECK((*ranks)[1].node == "n1");
  CHECK((*ranks)[1].pid == 101);
}

TEST_CASE("a version-4 database gains the group columns and keeps its ranks", "[sqlite]") {
  TempDir dir;
  const std::string path = dir.sub("v4.db");
  createAtVersion(path, 4,
                  "INSERT INTO jobs(id, name, first_seen_ns, last_seen_ns) VALUES(1, 'j', 1, 1);"
                  "INSERT INTO ranks(job_id, rank, node, first_seen_ns, last_seen_ns)"
                  " VALUES(1, 3, 'old-node', 1, 1);");
  auto store = openAt(path);
  CHECK(userVersion(path) == currentSchemaVersion());
  CHECK(store->groups("j")->empty());
  WriteBatch b;
  b.groups = {update("j", 3, 10, "pp", {3})};
  REQUIRE(store->write(b));
  REQUIRE(store->groups("j")->size() == 1);
  CHECK(store->ranks("j")->at(0).node == "old-node");
}
