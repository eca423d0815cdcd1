// GET /api/v1/jobs/{job}/topology and the coordinates in the ranks listing, over the SQLite
// store: a tp2 x pp2 x dp2 job's layout and coordinates; a job that declared nothing keeps
// today's ranks listing (no "coords") and an empty layout; the schedule the p2p of the latest
// steps shows (unknown without a pipeline); errors are 404 / 400.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "collector/http/server.h"
#include "collector/storage/store.h"
#include "common/clock.h"
#include "tests/collector/http/layout_fixture.h"
#include "tests/collector/http/test_client.h"

using nlohmann::json;
namespace storage = trainscope::storage;
namespace wire = trainscope::wire;

using trainscope::testing::group;

namespace {

// Ranks 0-3 on node-0, 4-7 on node-1.
void addRank(storage::WriteBatch& b, const std::string& job, uint32_t rank, uint32_t world) {
  trainscope::testing::addRank(b, job, rank, world, "node-" + std::to_string(rank / 4));
}

}  // namespace

TEST_CASE("topology API: coordinates of a tp2 x pp2 x dp2 job; undeclared jobs as before") {
  auto owned = trainscope::testing::memoryStore();
  storage::Store& store = *owned;

  storage::WriteBatch b;
  b.receivedNs = trainscope::wallNowNs();
  // rank = pp * 4 + dp * 2 + tp; rank 7 registered but its hello carried no groups yet.
  for (uint32_t r = 0; r < 8; ++r) {
    addRank(b, "3d", r, 8);
    if (r == 7) continue;
    const uint32_t pp = r / 4, dp = (r / 2) % 2, tp = r % 2;
    storage::GroupsUpdate u;
    u.job = "3d";
    u.groups.rank = r;
    u.groups.declaredNs = 5;
    u.groups.groups = {group("tp", wire::GROUP_TP, {pp * 4 + dp * 2, pp * 4 + dp * 2 + 1}),
                       group("pp", wire::GROUP_PP, {dp * 2 + tp, 4 + dp * 2 + tp}),
                       group("dp", wire::GROUP_DP, {pp * 4 + tp, pp * 4 + 2 + tp})};
    b.groups.push_back(u);
  }
  // One step of rank 4 (stage 1) with a pipeline receive it waited for, and stated FLOPs.
  wire::StepReport rep;
  rep.set_job("3d");
  rep.set_rank(4);
  rep.set_step(0);
  rep.set_start_ns(1'000'000'000);
  rep.set_duration_ns(1'000'000);
  rep.set_end_ns(rep.start_ns() + rep.duration_ns());
  rep.set_comm_ns(300'000);
  rep.set_exposed_comm_ns(200'000);
  rep.set_p2p_ns(200'000);
  rep.set_bubble_ns(150'000);
  rep.set_collective_ns(100'000);
  rep.set_exposed_collective_ns(50'000);
  rep.set_model_flops(4e8);
  rep.set_peak_flops(1e12);
  auto* p2p = rep.add_p2p();
  p2p->set_peer(0);
  p2p->set_group("pp");
  p2p->set_op(wire::RECV);
  p2p->set_count(2);
  p2p->set_total_ns(200'000);
  b.steps.push_back(rep);
  // Rank 0 (stage 0) sent its stage-1 peer two microbatches' activations and got two
  // gradients back: a 1F1B pipeline over 2 microbatches, as far as its p2p tells.
  rep.set_rank(0);
  rep.clear_p2p();
  p2p = rep.add_p2p();
  p2p->set_peer(4);
  p2p->set_group("pp");
  p2p->set_op(wire::SEND);
  p2p->set_count(2);
  b.steps.push_back(rep);
  addRank(b, "flat", 0, 2);
  addRank(b, "flat", 1, 2);
  REQUIRE(store.write(b).isOk());

  trainscope::http::HttpOptions o;
  o.port = 0;
  trainscope::http::HttpServer server(o, store);
  REQUIRE(server.start().isOk());
  auto get = [&](const std::string& target, unsigned status = 200) {
    auto r = trainscope::testing::httpGet(server.port(), target);
    INFO(target << " -> " << r.body);
    REQUIRE(r.status == status);
    return json::parse(r.body);
  };

  json t = get("/api/v1/jobs/3d/topology");
  CHECK(t["declared"] == true);
  CHECK(t["world_size"] == 8);
  CHECK(t["ranks_declared"] == 7);
  CHECK(t["layout"] == json{{"pp", 2}, {"dp", 2}, {"tp", 2}});
  CHECK(t["problems"].empty());
  CHECK(t["schedule"] == "1f1b");
  CHECK(t["microbatches"] == 2);
  CHECK(t["groups"].size() == 12);
  REQUIRE(t["ranks"].size() == 8);
  for (uint32_t r = 0; r < 8; ++r) {
    INFO("rank " << r);
    const json& e = t["ranks"][r];
    CHECK(e["rank"] == r);
    CHECK(e["node"] == "node-" + std::to_string(r / 4));
    // Rank 7 declared nothing: its place comes from its peers' groups.
    CHECK(e["coords"] == json{{"pp", r / 4}, {"dp", (r / 2) % 2}, {"tp", r % 2}});
  }

  json ranks = get("/api/v1/jobs/3d/ranks");
  REQUIRE(ranks["ranks"].size() == 8);
  CHECK(ranks["ranks"][5]["coords"] == json{{"pp", 1}, {"dp", 0}, {"tp", 1}});
  CHECK(ranks["ranks"][5]["pid"] == 0);  // the listing's own fields are still there

  json step = get("/api/v1/jobs/3d/steps?rank=4&detail=1")["steps"][0];
  CHECK(step["bubble_ns"] == 150'000);
  CHECK(step["bubble_ratio"].get<double>() == Approx(0.15));
  CHECK(step["comm_overlap_ratio"].get<double>() == Approx(0.5));
  CHECK(step["mfu"].get<double>() == Approx(0.4));  // 4e8 / (1 ms * 1e12)
  CHECK(step["hfu"].is_null());
  REQUIRE(step["p2p"].size() == 1);
  CHECK(step["p2p"][0] == json{{"peer", 0},
                               {"group", "pp"},
                               {"op", "recv"},
                               {"count", 2},
                               {"bytes", 0},
                               {"total_ns", 200'000},
                               {"max_ns", 0},
                               {"min_ns", 0}});

  json flat = get("/api/v1/jobs/flat/topology");
  CHECK(flat["declared"] == false);
  CHECK(flat["layout"].empty());
  CHECK(flat["groups"].empty());
  CHECK(flat["schedule"] == "unknown");
  CHECK(flat["ranks"].size() == 2);
  CHECK(flat["ranks"][0]["coords"].empty());
  json flatRanks = get("/api/v1/jobs/flat/ranks");
  CHECK_FALSE(flatRanks["ranks"][0].contains("coords"));

  CHECK(get("/api/v1/jobs/nope/topology", 404)["error"] == "unknown job 'nope'");
  get("/api/v1/jobs/3d/topology?x=1", 400);
  CHECK(trainscope::testing::httpGet(server.port(), "/api/v1/jobs/3d/topology").status == 200);
  server.stop();
}
