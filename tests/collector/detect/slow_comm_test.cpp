#include <catch2/catch.hpp>

#include <cstdlib>

#include "collector/detect/detector_set.h"
#include "collector/detect/slow_comm.h"
#include "tests/collector/detect/synth.h"

using namespace trainscope::detect;
using namespace trainscope::detect::test;

namespace {
// One rank's part of a collective step: it arrives at `arrival` and completes at
// `completion` (collector clock); its node clock runs `offsetNs` behind.
struct CollectiveRank {
  std::string node;
  int64_t arrival = 0;
  int64_t completion = 0;
  int64_t computeNs = 50'000'000;
  int64_t offsetNs = 0;
};

AssembledStep collectiveStep(int64_t step, trainscope::wire::CollectiveOp op,
                             const std::string& group, uint64_t bytes,
                             const std::vector<CollectiveRank>& ranks) {
  AssembledStep st;
  st.job = "j";
  st.step = step;
  st.worldSize = static_cast<uint32_t>(ranks.size());
  for (uint32_t r = 0; r < ranks.size(); ++r) {
    RankStep rs;
    rs.report.set_rank(r);
    rs.report.set_step(step);
    rs.report.set_compute_ns(ranks[r].computeNs);
    rs.ctx.node = ranks[r].node;
    rs.ctx.clockOffsetNs = ranks[r].offsetNs;
    auto* c = rs.report.add_collectives();
    c->set_op(op);
    c->set_group(group);
    c->set_bytes(bytes);
    c->set_count(1);
    c->set_first_arrival_ns(ranks[r].arrival - ranks[r].offsetNs);
    c->set_last_completion_ns(ranks[r].completion - ranks[r].offsetNs);
    c->set_total_ns(ranks[r].completion - ranks[r].arrival);
    st.ranks.push_back(rs);
  }
  return st;
}
}  // namespace

TEST_CASE("slow_comm: no alarm on 20,000 healthy steps x 8 ranks with 5% noise") {
  for (uint64_t seed : {41u, 42u}) {
    SynthJob job;
    job.seed = seed;
    job.rng_.seed(seed);
    DetectorSet set;
    std::vector<Anomaly> events;
    run(job, set, 0, 20000, &events);
    INFO(describe(events));
    CHECK(ofKind(events, AnomalyKind::kSlowComm).empty());
  }
}

TEST_CASE("slow_comm: a 10% slower all-reduce is found on its group with onset, then resolved") {
  SynthJob job;
  job.seed = 43;
  job.rng_.seed(43);
  job.world = 8;
  job.ranksPerNode = 4;  // two nodes: the group spans one link
  job.transferFactor = [](int64_t s) { return s >= 2000 && s < 3000 ? 1.10 : 1.0; };
  DetectorSet set;
  std::vector<Anomaly> events;
  run(job, set, 0, 4000, &events);
  INFO(describe(events));
  auto opened = ofKind(events, AnomalyKind::kSlowComm);
  REQUIRE(opened.size() == 1);
  const Anomaly& a = opened[0];
  CHECK(a.labels.at("op") == "all_reduce");
  CHECK(a.labels.at("group") == "world");
  CHECK(a.labels.at("link") == "node-0 <-> node-1");
  CHECK(a.ranks.size() == 8);
  CHECK(a.magnitude == Approx(1.10).margin(0.05));  // estimated from the first steps
  CHECK(std::llabs(a.onsetStep - 2000) <= 8);
  CHECK(a.evidence.at("bytes") == 64.0 * (1 << 20));
  CHECK(a.evidence.at("current_gbps") < a.evidence.at("baseline_gbps"));
  auto resolved = ofKind(events, AnomalyKind::kSlowComm, AnomalyState::kResolved);
  REQUIRE(resolved.size() == 1);
  CHECK(std::llabs(resolved[0].resolvedStep - 3000) <= 8);
  CHECK(ofKind(events, AnomalyKind::kStraggler).empty());
}

TEST_CASE("slow_comm: a 2x slower all-reduce is found within a few steps") {
  SynthJob job;
  job.seed = 44;
  job.rng_.seed(44);
  job.transferFactor = [](int64_t s) { return s >= 1000 ? 2.0 : 1.0; };
  DetectorSet set;
  std::vector<Anomaly> events;
  run(job, set, 0, 1200, &events);
  INFO(describe(events));
  auto opened = ofKind(events, AnomalyKind::kSlowComm);
  REQUIRE(opened.size() == 1);
  CHECK(opened[0].onsetStep == 1000);
  CHECK(opened[0].detectedStep <= 1005);
  CHECK(opened[0].magnitude == Approx(2.0).margin(0.08));
}

TEST_CASE("slow_comm: a straggler inflates its peers' comm time but is not slow communication") {
  SynthJob job;
  job.seed = 45;
  job.rng_.seed(45);
  job.computeFactor = [](int64_t s, uint32_t r) { return r == 3 && s >= 1000 ? 2.0 : 1.0; };
  DetectorSet set;
  std::vector<Anomaly> events;
  run(job, set, 0, 2000, &events);
  INFO(describe(events));
  CHECK(ofKind(events, AnomalyKind::kSlowComm).empty());
  REQUIRE(ofKind(events, AnomalyKind::kStraggler).size() == 1);
}

TEST_CASE("slow_comm: a rank completing late after the last arrival is named as the slow end") {
  // A send/recv pair whose receiving rank 1 completes 30% of the transfer time after its peer;
  // from step 300 the transfer doubles.
  EventLog log;
  SlowCommDetector det("j", SlowCommOptions{}, &log);
  std::mt19937_64 rng(9);
  std::normal_distribution<double> n(0.0, 0.03);
  int64_t t = 1'000'000'000;
  for (int64_t s = 0; s < 400; ++s) {
    double transfer = 10e6 * (1 + n(rng)) * (s >= 300 ? 2.0 : 1.0);
    std::vector<CollectiveRank> ranks(2);
    for (uint32_t r = 0; r < 2; ++r) {
      ranks[r].node = r == 0 ? "a" : "b";
      ranks[r].offsetNs = r == 0 ? 0 : 5'000'000;  // node b's clock is 5 ms behind
      ranks[r].arrival = t;
      ranks[r].completion = t + static_cast<int64_t>(transfer * (r == 1 ? 1.3 : 1.0));
    }
    AssembledStep st = collectiveStep(s, trainscope::wire::SEND, "pp0-1", 1 << 20, ranks);
    t += 100'000'000;
    det.onStep(st);
  }
  auto events = log.take();
  INFO(describe(events));
  REQUIRE(events.size() == 1);
  CHECK(events[0].kind == AnomalyKind::kSlowComm);
  // Both ends of the link, the slow one (rank 1, whose own transfer lags) as the culprit
  // and first in the link.
  CHECK(events[0].ranks == std::vector<uint32_t>{0, 1});
  CHECK(events[0].labels.at("culprit") == "rank 1 (b)");
  CHECK(events[0].evidence.at("culprit_rank") == 1.0);
  CHECK(events[0].labels.at("link") == "rank 1 <-> rank 0");
  CHECK(events[0].onsetStep == 300);
}

TEST_CASE("slow_comm: in an all-reduce group the rank whose own transfer fell behind its peers is named") {
  // 8 ranks; from step 300 rank 5's link is slow: the all-reduce takes 1.5x and rank 5
  // completes 40% of the transfer time after the others (its own bandwidth fell), while no
  // rank computes more.
  EventLog log;
  SlowCommDetector det("j", SlowCommOptions{}, &log);
  std::mt19937_64 rng(12);
  std::normal_distribution<double> n(0.0, 0.03);
  int64_t t = 1'000'000'000;
  for (int64_t s = 0; s < 400; ++s) {
    const bool bad = s >= 300;
    double transfer = 10e6 * (1 + n(rng)) * (bad ? 1.5 : 1.0);
    std::vector<CollectiveRank> ranks(8);
    const int64_t lastArrival = t + 7'000'000;
    for (uint32_t r = 0; r < 8; ++r) {
      ranks[r].node = "node" + std::to_string(r / 4);
      ranks[r].computeNs = static_cast<int64_t>(50e6 * (1 + n(rng)));
      ranks[r].arrival = t + 1'000'000 * static_cast<int64_t>(r);
      ranks[r].completion =
          lastArrival + static_cast<int64_t>(transfer * (bad && r == 5 ? 1.4 : 1.0));
    }
    AssembledStep st = collectiveStep(s, trainscope::wire::ALL_REDUCE, "dp", 25 << 20, ranks);
    t += 100'000'000;
    det.onStep(st);
  }
  auto events = log.take();
  INFO(describe(events));
  REQUIRE(events.size() == 1);
  CHECK(events[0].kind == AnomalyKind::kSlowComm);
  CHECK(events[0].ranks == std::vector<uint32_t>{5});
  CHECK(events[0].labels.at("culprit") == "rank 5 (node1)");
  CHECK(events[0].labels.at("link") == "node1 <-> node0");
  CHECK(std::llabs(events[0].onsetStep - 300) <= 2);
}
