// The parallel-layout figures as served, over the SQLite store: all_to_all_share in step
// detail, GET /api/v1/jobs/{job}/parallel (per rank and step, and the bubble per stage), and
// the /metrics families (per rank's latest step, per stage), for a pp2 x dp2 job whose ranks
// did p2p, one of which stated its FLOPs, one ran all-to-all and one its operators on cuda
// (detail's device); a job without a declared layout or p2p gets nulls and no stage figures.
#include <string>
#include <vector>

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

using trainscope::testing::addRank;
using trainscope::testing::group;

namespace {

constexpr int64_t kStepNs = 1'000'000;

// Rank r's step s: 1 ms, 0.4 ms of p2p of which (r + 1) x 100 us + s x 10 us idle (bubble),
// 0.2 ms of collectives of which 0.05 ms exposed (overlap 0.75).
wire::StepReport step(const std::string& job, uint32_t rank, int64_t s, bool p2p) {
  wire::StepReport rep;
  rep.set_job(job);
  rep.set_rank(rank);
  rep.set_step(s);
  rep.set_start_ns(1'000'000'000 + s * kStepNs);
  rep.set_duration_ns(kStepNs);
  rep.set_end_ns(rep.start_ns() + kStepNs);
  rep.set_collective_ns(200'000);
  rep.set_exposed_collective_ns(50'000);
  if (p2p) {
    rep.set_p2p_ns(400'000);
    rep.set_bubble_ns(static_cast<int64_t>(rank + 1) * 100'000 + s * 10'000);
  }
  return rep;
}

}  // namespace

TEST_CASE("parallel figures: step detail, the /parallel route and /metrics per rank and stage") {
  auto owned = trainscope::testing::memoryStore();
  storage::Store& store = *owned;

  storage::WriteBatch b;
  b.receivedNs = trainscope::wallNowNs();
  // rank = pp * 2 + dp: stage 0 holds ranks 0 and 1, stage 1 ranks 2 and 3.
  for (uint32_t r = 0; r < 4; ++r) {
    addRank(b, "pipe", r, 4, "n");
    const uint32_t pp = r / 2, dp = r % 2;
    storage::GroupsUpdate u;
    u.job = "pipe";
    u.groups.rank = r;
    u.groups.declaredNs = 5;
    u.groups.groups = {group("pp", wire::GROUP_PP, {dp, 2 + dp}),
                       group("dp", wire::GROUP_DP, {pp * 2, pp * 2 + 1})};
    b.groups.push_back(u);
    for (int64_t s = 0; s < 2; ++s) {
      if (r == 2 && s == 1) continue;  // rank 2 did not report step 1
      wire::StepReport rep = step("pipe", r, s, true);
      if (r == 0) {
        rep.set_model_flops(3e8);  // 3e8 / (1 ms x 1e12 FLOP/s) = 0.3
        rep.set_hardware_flops(4e8);
        rep.set_peak_flops(1e12);
      }
      if (r == 3) rep.set_all_to_all_ns(250'000);
      if (r == 1) rep.set_device("cuda");
      b.steps.push_back(rep);
    }
  }
  addRank(b, "flat", 0, 1, "n");
  b.steps.push_back(step("flat", 0, 0, false));
  REQUIRE(store.write(b).isOk());

  trainscope::http::HttpOptions o;
  o.port = 0;
  trainscope::http::HttpServer server(o, store);
  REQUIRE(server.start().isOk());
  auto get = [&](const std::string& target, unsigned status = 200) {
    auto r = trainscope::testing::httpGet(server.port(), target);
    INFO(target << " -> " << r.body.substr(0, 2000));
    REQUIRE(r.status == status);
    return r.body;
  };

  SECTION("step detail") {
    json s3 = json::parse(get("/api/v1/jobs/pipe/steps?rank=3&detail=1"))["steps"][0];
    CHECK(s3["all_to_all_share"].get<double>() == Approx(0.25));
    CHECK(s3["bubble_ratio"].get<double>() == Approx(0.4));
    CHECK(s3["mfu"].is_null());
    json s0 = json::parse(get("/api/v1/jobs/pipe/steps?rank=0&detail=1"))["steps"][0];
    CHECK(s0["all_to_all_share"].is_null());
    CHECK(s0["mfu"].get<double>() == Approx(0.3));
    CHECK(s0["hfu"].get<double>() == Approx(0.4));
    CHECK(s0["device"].is_null());  // operators on the host
    json s1 = json::parse(get("/api/v1/jobs/pipe/steps?rank=1&detail=1"))["steps"][0];
    CHECK(s1["device"] == "cuda");
    json plain = json::parse(get("/api/v1/jobs/pipe/steps?rank=1"))["steps"][0];
    CHECK_FALSE(plain.contains("device"));  // detail only
    json flat = json::parse(get("/api/v1/jobs/flat/steps?detail=1"))["steps"][0];
    CHECK(flat["bubble_ratio"].is_null());
    CHECK(flat["comm_overlap_ratio"].get<double>() == Approx(0.75));
  }

  SECTION("the /parallel route") {
    json p = json::parse(get("/api/v1/jobs/pipe/parallel?from=0&to=2"));
    CHECK(p["from"] == 0);
    CHECK(p["to"] == 2);
    CHECK(p["ranks"] == json::array({0, 1, 2, 3}));
    // Rank-major, 3 steps per rank; step 2 was not reported by anyone, step 1 not by rank 2.
    const json& bubble = p["bubble_ratio"];
    REQUIRE(bubble.size() == 12);
    CHECK(bubble[0].get<double>() == Approx(0.1));
    CHECK(bubble[1].get<double>() == Approx(0.11));
    CHECK(bubble[2].is_null());
    CHECK(bubble[6].get<double>() == Approx(0.3));
    CHECK(bubble[7].is_null());
    CHECK(bubble[10].get<double>() == Approx(0.41));
    CHECK(p["comm_overlap_ratio"][3].get<double>() == Approx(0.75));
    CHECK(p["mfu"][0].get<double>() == Approx(0.3));
    CHECK(p["mfu"][3].is_null());
    CHECK(p["hfu"][1].get<double>() == Approx(0.4));
    CHECK(p["all_to_all_share"][9].get<double>() == Approx(0.25));
    CHECK(p["all_to_all_share"][0].is_null());
    // Per stage: the stage's bubble summed over its step time summed.
    REQUIRE(p["stages"].size() == 2);
    const json& s0 = p["stages"][0];
    CHECK(s0["stage"] == 0);
    CHECK(s0["ranks"] == json::array({0, 1}));
    CHECK(s0["bubble_ratio"][0].get<double>() == Approx(0.15));  // (100 + 200) us / 2 ms
    CHECK(s0["bubble_ratio"][1].get<double>() == Approx(0.16));
    CHECK(s0["bubble_ratio"][2].is_null());
    const json& s1 = p["stages"][1];
    CHECK(s1["ranks"] == json::array({2, 3}));
    CHECK(s1["bubble_ratio"][0].get<double>() == Approx(0.35));
    CHECK(s1["bubble_ratio"][1].get<double>() == Approx(0.41));  // rank 3 alone

    json flat = json::parse(get("/api/v1/jobs/flat/parallel?from=0&to=0"));
    CHECK(flat["stages"].empty());
    CHECK(flat["bubble_ratio"] == json::array({nullptr}));

    CHECK(
        json::parse(get("/api/v1/jobs/pipe/parallel?from=0", 400))["error"].get<std::string>().find(
            "'to'") != std::string::npos);
    CHECK(json::parse(get("/api/v1/jobs/pipe/parallel?from=0&to=20000", 400))["error"]
              .get<std::string>()
              .find("at most 10000 steps") != std::string::npos);
    CHECK(json::parse(get("/api/v1/jobs/nope/parallel?from=0&to=1", 404))["error"] ==
          "unknown job 'nope'");
  }

  SECTION("/metrics") {
    const std::string m = get("/metrics");
    auto has = [&](const std::string& line) {
      INFO("looking for: " << line);
      CHECK(m.find(line + "\n") != std::string::npos);
    };
    has("trainscope_step_last_bubble_ratio{training_job=\"pipe\",rank=\"0\"} 0.11");
    has("trainscope_step_last_bubble_ratio{training_job=\"pipe\",rank=\"2\"} 0.3");
    has("trainscope_step_last_comm_overlap_ratio{training_job=\"flat\",rank=\"0\"} 0.75");
    has("trainscope_step_last_mfu{training_job=\"pipe\",rank=\"0\"} 0.3");
    has("trainscope_step_last_hfu{training_job=\"pipe\",rank=\"0\"} 0.4");
    has("trainscope_step_last_all_to_all_share{training_job=\"pipe\",rank=\"3\"} 0.25");
    // Each rank's latest step: rank 2's is step 0 (300 us), rank 3's step 1 (410 us).
    has("trainscope_stage_bubble_ratio{training_job=\"pipe\",stage=\"0\"} 0.16");
    has("trainscope_stage_bubble_ratio{training_job=\"pipe\",stage=\"1\"} 0.355");
    // Figures without a meaning are not written: no bubble for the flat job, no MFU for
    // ranks that stated no FLOPs.
    CHECK(m.find("trainscope_step_last_bubble_ratio{training_job=\"flat\"") == std::string::npos);
    CHECK(m.find("trainscope_step_last_mfu{training_job=\"pipe\",rank=\"1\"") == std::string::npos);
    CHECK(m.find("trainscope_stage_bubble_ratio{training_job=\"flat\"") == std::string::npos);
  }
  server.stop();
}
