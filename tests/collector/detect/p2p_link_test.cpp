#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>

#include "collector/detect/detector_set.h"
#include "tests/collector/detect/synth.h"

using namespace trainscope;
using namespace trainscope::detect;
using namespace trainscope::detect::test;

namespace {

// A tp2 x pp2 x dp2 job (rank = pp * 4 + dp * 2 + tp): stage 0's ranks send each microbatch's
// activations to the same rank of stage 1 (r -> r + 4) and get its gradients back (r + 4 -> r).
// Each send takes 200 us x noise x the link's factor; the step reports carry per peer totals as
// the probe folds them (count, bytes, total, min).
struct PipeJob {
  uint64_t seed = 1;
  double noise = 0.05;
  uint32_t micro = 4;
  std::function<double(int64_t, uint32_t, uint32_t)> linkFactor;  // (step, sender, peer)
  std::function<std::string(uint32_t)> nodeOf = [](uint32_t r) {
    return "node-" + std::to_string(r / 4);
  };

  std::vector<Anomaly> run(int64_t steps) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> n(0.0, noise);
    std::normal_distribution<double> work(0.0, 0.02);  // compute: a steady job
    // The links' transfers are a small share of the step (a slow one adds well under 1 % of
    // it), so the gain floor would drop them: these tests are about naming the link.
    DetectOptions o;
    o.fold.minGain = 0;
    DetectorSet set(o);
    std::vector<Anomaly> events;
    int64_t clock = 1'700'000'000'000'000'000;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t stepNs = 100'000'000;
      std::vector<wire::StepReport> reps;
      for (uint32_t r = 0; r < 8; ++r) {
        wire::StepReport rep;
        rep.set_job("pipe");
        rep.set_rank(r);
        rep.set_step(s);
        rep.set_start_ns(clock);
        rep.set_end_ns(clock + stepNs);
        rep.set_duration_ns(stepNs);
        rep.set_compute_ns(static_cast<int64_t>(80e6 * (1.0 + work(rng))));
        const uint32_t peer = r < 4 ? r + 4 : r - 4;
        const double f = linkFactor ? linkFactor(s, r, peer) : 1.0;
        int64_t total = 0, least = 0, most = 0;
        for (uint32_t m = 0; m < micro; ++m) {
          const int64_t t = static_cast<int64_t>(200e3 * f * std::exp(n(rng)));
          total += t;
          least = m == 0 ? t : std::min(least, t);
          most = std::max(most, t);
        }
        auto* send = rep.add_p2p();
        send->set_peer(peer);
        send->set_group("pp");
        send->set_op(wire::SEND);
        send->set_count(micro);
        send->set_bytes(uint64_t{micro} << 20);
        send->set_total_ns(total);
        send->set_min_ns(least);
        send->set_max_ns(most);
        auto* recv = rep.add_p2p();
        recv->set_peer(peer);
        recv->set_group("pp");
        recv->set_op(wire::RECV);
        recv->set_count(micro);
        recv->set_bytes(uint64_t{micro} << 20);
        recv->set_total_ns(static_cast<int64_t>(5e6 * (1.0 + n(rng))));  // waits: the bubble
        reps.push_back(std::move(rep));
      }
      for (auto& rep : reps) {
        RankContext c;
        c.node = nodeOf(rep.rank());
        c.worldSize = 8;
        REQUIRE(set.observe(rep, c).isOk());
      }
      for (auto& e : set.takeEvents()) events.push_back(std::move(e));
      clock += stepNs;
    }
    return events;
  }
};

}  // namespace

TEST_CASE("p2p_link: a slow pipeline link from step 150 is slow_comm naming both ranks") {
  PipeJob job;
  job.seed = 61;
  job.linkFactor = [](int64_t s, uint32_t from, uint32_t to) {
    return s >= 150 && from == 1 && to == 5 ? 1.5 : 1.0;
  };
  auto events = job.run(400);
  INFO(describe(events));
  auto opened = ofKind(events, AnomalyKind::kSlowComm);
  REQUIRE(opened.size() == 1);
  const Anomaly& a = opened[0];
  CHECK(a.ranks == std::vector<uint32_t>{1, 5});
  CHECK(a.labels.at("scope") == "link");
  CHECK(a.labels.at("link") == "rank 1 (node-0) -> rank 5 (node-1)");
  CHECK(a.labels.at("op") == "send");
  CHECK(a.onsetStep >= 148);
  CHECK(a.onsetStep <= 152);
  CHECK(a.detectedStep - 150 <= 6 + FoldOptions{}.confirmSteps);
  CHECK(a.magnitude == Approx(1.5).epsilon(0.05));
  CHECK(a.evidence.at("current_ms") == Approx(1.5 * a.evidence.at("peer_median_ms")).epsilon(0.08));
  CHECK(a.id == "pipe/slow_comm/" + std::to_string(a.onsetStep) + "/p2p|pp|r1|r5");
  CHECK(events.size() == 1);  // nothing else: not a straggler, not a step_shift
}

TEST_CASE("p2p_link: a link slow from the first step has onset 0; it resolves when repaired") {
  PipeJob job;
  job.seed = 62;
  job.linkFactor = [](int64_t s, uint32_t from, uint32_t to) {
    return s < 300 && from == 6 && to == 2 ? 1.3 : 1.0;
  };
  auto events = job.run(500);
  INFO(describe(events));
  auto opened = ofKind(events, AnomalyKind::kSlowComm);
  REQUIRE(opened.size() == 1);
  CHECK(opened[0].ranks == std::vector<uint32_t>{2, 6});
  CHECK(opened[0].onsetStep <= 1);
  CHECK(opened[0].labels.at("culprit") == "rank 6 (node-1)");
  auto resolved = ofKind(events, AnomalyKind::kSlowComm, AnomalyState::kResolved);
  REQUIRE(resolved.size() == 1);
  CHECK(resolved[0].resolvedStep >= 295);
  CHECK(resolved[0].resolvedStep <= 320);
}

TEST_CASE("p2p_link: quiet on healthy links, a fabric-wide slowdown, and inter-node hops") {
  for (uint64_t seed : {63u, 64u}) {
    PipeJob job;
    job.seed = seed;
    auto events = job.run(3000);
    INFO(describe(events));
    CHECK(ofKind(events, AnomalyKind::kSlowComm).empty());
  }
  // Every link 2x slower from step 100: the fabric, not one link.
  PipeJob fabric;
  fabric.seed = 65;
  fabric.linkFactor = [](int64_t s, uint32_t, uint32_t) { return s >= 100 ? 2.0 : 1.0; };
  auto events = fabric.run(400);
  INFO(describe(events));
  CHECK(ofKind(events, AnomalyKind::kSlowComm).empty());

  // Ranks 6 and 7 on another node: the links 2 <-> 6 and 3 <-> 7 cross nodes and are 40 %
  // slower by design; they are compared with each other, not with the links inside node a.
  PipeJob split;
  split.seed = 66;
  split.nodeOf = [](uint32_t r) { return std::string(r >= 6 ? "b" : "a"); };
  split.linkFactor = [](int64_t s, uint32_t from, uint32_t to) {
    const bool cross = (from >= 6) != (to >= 6);
    return (cross ? 1.4 : 1.0) * (s >= 200 && from == 3 && to == 7 ? 1.5 : 1.0);
  };
  auto crossing = split.run(400);
  INFO(describe(crossing));
  auto opened = ofKind(crossing, AnomalyKind::kSlowComm);
  REQUIRE(opened.size() == 1);  // only the inter-node link that got slower
  CHECK(opened[0].ranks == std::vector<uint32_t>{3, 7});
  CHECK(opened[0].onsetStep >= 198);
}
