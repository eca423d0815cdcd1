#include <catch2/catch.hpp>

#include <cstdlib>

#include "collector/detect/detector_set.h"
#include "collector/detect/slow_comm.h"
#include "tests/collector/detect/synth.h"
#include "tests/common/gcc12_string_warnings.h"  // last: GCC 12 -O3 false positives

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
    job.rng.seed(seed);
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
  job.rng.seed(43);
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
  job.rng.seed(44);
  job.transferFactor = [](int64_t s) { return s >= 1000 ? 2.0 : 1.0; };
  DetectorSet set;
  std::vector<Anomaly> events;
  run(job, set, 0, 1200, &events);
  INFO(describe(events));
  auto opened = ofKind(events, AnomalyKind::kSlowComm);
  REQUIRE(opened.size() == 1);
  CHECK(opened[0].onsetStep == 1000);
  CHECK(opened[0].detectedStep <= 1005 + FoldOptions{}.confirmSteps);
  CHECK(opened[0].magnitude == Approx(2.0).margin(0.08));
}

TEST_CASE("slow_comm: a straggler inflates its peers' comm time but is not slow communication") {
  SynthJob job;
  job.seed = 45;
  job.rng.seed(45);
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

TEST_CASE(
    "slow_comm: in an all-reduce group the rank whose own transfer fell behind its peers is "
    "named") {
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

namespace {

// A ring all-reduce job whose reports carry per-peer link totals (StepReport.links): the
// synthetic job of synth.h (compute, operators, one all-reduce on group "world"), and rank r
// sending each step's bucket to (r + 1) % world. A link is in flight for the transfer time
// (times its own slow-down and a jitter that only shortens it); the all-reduce goes at its
// slowest link. Deterministic for a seed. Not copyable: the job's hooks point at it.
struct RingJob {
  explicit RingJob(uint64_t seed) {
    base.seed = seed;
    base.rng.seed(seed);
    rng.seed(seed * 31 + 7);
    base.transferFactor = [this](int64_t s) {
      double slowest = 1.0;
      for (uint32_t r = 0; ringFollowsLinks && linkFactor && r < base.world; ++r) {
        slowest = std::max(slowest, linkFactor(s, r));
      }
      return slowest;
    };
  }
  RingJob(const RingJob&) = delete;
  RingJob& operator=(const RingJob&) = delete;

  SynthJob base;
  bool ringFollowsLinks = true;  // false: the collective keeps its time (a link that is not
                                 // the ring's bottleneck, e.g. with spare pipeline slack)
  std::function<double(int64_t, uint32_t)> linkFactor;  // per sender
  std::mt19937_64 rng;

  std::vector<trainscope::wire::StepReport> step(int64_t s) {
    std::vector<trainscope::wire::StepReport> reps = base.step(s);
    std::normal_distribution<double> n(0.0, 1.0);
    const uint64_t bucket = 64ull << 20;  // synth.h's all-reduce
    for (auto& rep : reps) {
      const uint32_t r = rep.rank();
      const double lf = linkFactor ? linkFactor(s, r) : 1.0;
      auto* l = rep.add_links();
      l->set_peer((r + 1) % base.world);
      l->set_group(base.group);
      l->set_bytes(bucket * 2 * (base.world - 1) / base.world);
      l->set_transfers(1);
      l->set_wire_ns(static_cast<int64_t>(base.transferMs * 1e6 * lf *
                                          std::exp(-base.noise * std::fabs(n(rng)))));
    }
    return reps;
  }
  RankContext ctx(uint32_t r) const { return base.ctx(r); }
};

std::vector<Anomaly> runRing(RingJob& job, int64_t steps,
                             const std::function<void(trainscope::wire::StepReport&)>& edit = {},
                             DetectOptions options = {}) {
  DetectorSet set(options);
  std::vector<Anomaly> events;
  for (int64_t s = 0; s < steps; ++s) {
    for (auto& rep : job.step(s)) {
      if (edit) edit(rep);
      const uint32_t r = rep.rank();
      const auto observed = set.observe(std::move(rep), job.ctx(r));
      REQUIRE(observed.isOk());
    }
    set.tick(job.base.now());
    for (auto& e : set.takeEvents()) events.push_back(std::move(e));
  }
  return events;
}

}  // namespace

TEST_CASE("slow_comm: the sender of a slow link in a ring all-reduce is named, with its peer") {
  for (double factor : {1.15, 1.5, 3.0}) {
    RingJob job(21);
    // Rank 3 (node0) sends to rank 4 (node1): its link slows from step 300; the ring with it.
    job.linkFactor = [&](int64_t s, uint32_t r) { return r == 3 && s >= 300 ? factor : 1.0; };
    auto events = runRing(job, 500);
    INFO("factor " << factor << "\n" << describe(events));
    auto opened = ofKind(events, AnomalyKind::kSlowComm);
    REQUIRE(opened.size() == 1);
    const Anomaly& a = opened[0];
    CHECK(a.ranks == std::vector<uint32_t>{3, 4});
    CHECK(a.nodes == std::vector<std::string>{"node-0", "node-1"});
    CHECK(a.labels.at("scope") == "link");
    CHECK(a.labels.at("link") == "rank 3 (node-0) -> rank 4 (node-1)");
    CHECK(a.labels.at("culprit") == "rank 3 (node-0)");
    CHECK(a.labels.at("group") == "world");
    // Whichever judged first (the link against its peers, or the all_reduce key with its
    // links), one anomaly names the link and its ratios.
    CHECK(a.evidence.at("culprit_rank") == 3.0);
    CHECK(a.evidence.at("link_ratio") == Approx(factor).epsilon(0.05));
    CHECK(a.evidence.at("link_peer_ratio") > 1.0 + (factor - 1.0) / 2);
    CHECK(std::llabs(a.onsetStep - 300) <= 3);
    CHECK(a.detectedStep <= 320 + FoldOptions{}.confirmSteps);
    CHECK(ofKind(events, AnomalyKind::kStraggler).empty());
  }
}

TEST_CASE("slow_comm: when the all_reduce opens first, its anomaly names the slow link") {
  RingJob job(29);
  job.linkFactor = [](int64_t s, uint32_t r) { return r == 5 && s >= 300 ? 1.2 : 1.0; };
  DetectOptions o;
  o.slowComm.linkPersistence.cusumH = 1e9;  // links alone never open here
  auto events = runRing(job, 450, {}, o);
  INFO(describe(events));
  auto opened = ofKind(events, AnomalyKind::kSlowComm);
  REQUIRE(opened.size() == 1);
  const Anomaly& a = opened[0];
  CHECK(a.ranks == std::vector<uint32_t>{5, 6});
  CHECK(a.labels.at("scope") == "link");
  CHECK(a.labels.at("op") == "all_reduce");
  CHECK(a.labels.at("link") == "rank 5 (node-1) -> rank 6 (node-1)");
  CHECK(a.evidence.at("links_slowed") == 1.0);
  CHECK(a.evidence.at("links_judged") == 8.0);
  CHECK(a.evidence.at("ratio") == Approx(1.2).epsilon(0.05));
  CHECK(a.summary.find("link rank 5 (node-1) -> rank 6 (node-1)") != std::string::npos);
}

TEST_CASE("slow_comm: every link slower together is the fabric: the group is named") {
  RingJob job(22);
  job.linkFactor = [](int64_t s, uint32_t) { return s >= 300 ? 1.3 : 1.0; };
  auto events = runRing(job, 450);
  INFO(describe(events));
  auto opened = ofKind(events, AnomalyKind::kSlowComm);
  REQUIRE(opened.size() == 1);
  CHECK(opened[0].labels.at("scope") == "fabric");
  CHECK(opened[0].ranks.size() == 8);
  CHECK(opened[0].labels.count("culprit") == 0);
  CHECK(opened[0].evidence.at("links_slowed") == 8.0);
  CHECK(std::llabs(opened[0].onsetStep - 300) <= 3);
}

TEST_CASE("slow_comm: healthy rings with noisy links stay quiet") {
  for (uint64_t seed : {23u, 24u, 25u}) {
    RingJob job(seed);
    job.base.world = 16;
    job.base.noise = 0.08;
    auto events = runRing(job, 3000);
    INFO(describe(events));
    CHECK(ofKind(events, AnomalyKind::kSlowComm).empty());
  }
}

TEST_CASE("slow_comm: a straggler leaves every link's in-flight time alone: no slow_comm") {
  RingJob job(26);
  job.base.computeFactor = [](int64_t s, uint32_t r) { return r == 2 && s >= 300 ? 1.5 : 1.0; };
  auto events = runRing(job, 500);
  INFO(describe(events));
  CHECK(ofKind(events, AnomalyKind::kSlowComm).empty());
  auto stragglers = ofKind(events, AnomalyKind::kStraggler);
  REQUIRE(stragglers.size() == 1);
  CHECK(stragglers[0].ranks == std::vector<uint32_t>{2});
}

TEST_CASE("slow_comm: a link slower against itself and its peers is reported on its own") {
  // The collective keeps its time (the link is not the ring's bottleneck), so only the link
  // tells; it resolves when the link recovers.
  RingJob job(27);
  job.ringFollowsLinks = false;
  job.linkFactor = [](int64_t s, uint32_t r) { return r == 6 && s >= 200 && s < 400 ? 1.4 : 1.0; };
  auto events = runRing(job, 500);
  INFO(describe(events));
  auto opened = ofKind(events, AnomalyKind::kSlowComm);
  REQUIRE(opened.size() == 1);
  const Anomaly& a = opened[0];
  CHECK(a.ranks == std::vector<uint32_t>{6, 7});
  CHECK(a.labels.at("scope") == "link");
  CHECK(a.labels.at("link") == "rank 6 (node-1) -> rank 7 (node-1)");
  CHECK(a.labels.count("op") == 0);
  CHECK(a.magnitude == Approx(1.4).epsilon(0.05));
  CHECK(a.evidence.at("current_gbps") < a.evidence.at("baseline_gbps"));
  CHECK(std::llabs(a.onsetStep - 200) <= 3);
  auto resolved = ofKind(events, AnomalyKind::kSlowComm, AnomalyState::kResolved);
  REQUIRE(resolved.size() == 1);
  CHECK(resolved[0].id == a.id);
  CHECK(std::llabs(resolved[0].resolvedStep - 400) <= 5);
}

TEST_CASE("slow_comm: malformed link totals are ignored, memory stays bounded") {
  RingJob job(28);
  job.linkFactor = [](int64_t s, uint32_t r) { return r == 1 && s >= 300 ? 2.0 : 1.0; };
  // Every report also carries junk: no bytes, no time, a link to itself, a huge peer, and
  // many peers of an all-to-all (more than maxPeersPerRank are not tracked).
  auto events = runRing(job, 400, [](trainscope::wire::StepReport& rep) {
    auto add = [&](uint32_t peer, uint64_t bytes, int64_t wire) {
      auto* l = rep.add_links();
      l->set_peer(peer);
      l->set_group("junk");
      l->set_bytes(bytes);
      l->set_wire_ns(wire);
    };
    add(rep.rank() ^ 1, 0, 1000);
    add(rep.rank() ^ 1, 1000, -5);
    add(rep.rank(), 1000, 1000);
    add(4'000'000'000u, 1000, 1000);
    for (uint32_t p = 100; p < 140; ++p) add(p, 1000, 1000);
  });
  INFO(describe(events));
  auto opened = ofKind(events, AnomalyKind::kSlowComm);
  REQUIRE(opened.size() == 1);
  CHECK(opened[0].ranks == std::vector<uint32_t>{1, 2});

  EventLog log;
  SlowCommOptions o;
  o.maxLinksPerJob = 20;
  SlowCommDetector det("j", o, &log);
  RingJob big(30);
  big.base.world = 64;
  for (int64_t s = 0; s < 5; ++s) {
    AssembledStep st;
    st.job = "job1";
    st.step = s;
    st.worldSize = big.base.world;
    for (auto& rep : big.step(s)) st.ranks.push_back(RankStep{std::move(rep), big.ctx(0)});
    det.onStep(st);
  }
  CHECK(det.trackedLinks() == 20);
}
