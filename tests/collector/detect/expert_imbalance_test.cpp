// expert_imbalance: a MoE job whose router sends more tokens to the experts at one
// expert-parallel index. A synthetic data-parallel job with expert-parallel groups of E ranks:
// each rank reports the bytes it received in the token all_to_all (its experts' load), its
// compute (dense part + expert part x load) and its all_to_all time (transfer + the wait for
// the group's slowest rank).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "collector/detect/detector_set.h"
#include "collector/detect/expert_imbalance.h"
#include "collector/topology/topology.h"

using namespace trainscope;
using namespace trainscope::detect;

namespace {

struct MoeSynth {
  uint32_t dp = 8, ep = 4;
  double noise = 0.03;         // router jitter and compute noise
  double computeNoise = -1.0;  // the compute's own, when >= 0
  uint64_t seed = 1;
  // By step and rank: the skew of its expert-parallel index (1 = balanced), and a slow GPU.
  std::function<double(int64_t, uint32_t)> skew;
  std::function<double(int64_t, uint32_t)> slow;
  std::mt19937_64 rng{1};
  int64_t clock = 1'000'000'000;
  double lastStepNs = 0;

  topology::Topology topology(bool withEp = true) const {
    std::vector<topology::RankGroups> all;
    for (uint32_t r = 0; r < dp; ++r) {
      topology::RankGroups g;
      g.rank = r;
      g.declaredNs = 1;
      wire::ProcessGroup d;
      d.set_name("dp");
      d.set_kind(wire::GROUP_DP);
      for (uint32_t m = 0; m < dp; ++m) d.add_ranks(m);
      g.groups.push_back(d);
      if (withEp) {
        wire::ProcessGroup e;
        e.set_name("ep");
        e.set_kind(wire::GROUP_EP);
        for (uint32_t m = r - r % ep; m < r - r % ep + ep; ++m) e.add_ranks(m);
        g.groups.push_back(e);
      }
      all.push_back(std::move(g));
    }
    return topology::derive(all);
  }

  std::vector<wire::StepReport> step(int64_t s) {
    std::normal_distribution<double> n(0.0, noise);
    std::normal_distribution<double> own(0.0, std::max(0.0, computeNoise));
    auto& nc = computeNoise < 0 ? n : own;
    std::vector<double> load(dp), compute(dp);
    for (uint32_t g = 0; g < dp / ep; ++g) {
      double sum = 0;
      for (uint32_t i = 0; i < ep; ++i) {
        const uint32_t r = g * ep + i;
        load[r] = std::exp(n(rng)) * (skew ? skew(s, r) : 1.0);
        sum += load[r];
      }
      for (uint32_t i = 0; i < ep; ++i) load[g * ep + i] *= ep / sum;
    }
    double slowest = 0;
    for (uint32_t r = 0; r < dp; ++r) {
      compute[r] = (40e6 + 20e6 * load[r]) * (1.0 + nc(rng)) * (slow ? slow(s, r) : 1.0);
      slowest = std::max(slowest, compute[r]);
    }
    const double xfer = 2e6 * *std::max_element(load.begin(), load.end());
    lastStepNs = slowest + xfer + 10e6;
    std::vector<wire::StepReport> out;
    for (uint32_t r = 0; r < dp; ++r) {
      double groupMax = 0;
      for (uint32_t m = r - r % ep; m < r - r % ep + ep; ++m)
        groupMax = std::max(groupMax, compute[m]);
      wire::StepReport rep;
      rep.set_job("moe");
      rep.set_rank(r);
      rep.set_step(s);
      rep.set_start_ns(clock);
      rep.set_end_ns(clock + static_cast<int64_t>(lastStepNs));
      rep.set_duration_ns(static_cast<int64_t>(lastStepNs));
      rep.set_compute_ns(static_cast<int64_t>(compute[r]));
      const double a2a = xfer + groupMax - compute[r];
      rep.set_all_to_all_ns(static_cast<int64_t>(a2a));
      auto* c = rep.add_collectives();
      c->set_op(wire::ALL_TO_ALL);
      c->set_group("ep");
      c->set_bytes(static_cast<uint64_t>(1e6 * std::round(load[r] * 100) / 100));
      c->set_count(1);
      c->set_total_ns(static_cast<int64_t>(a2a));
      out.push_back(std::move(rep));
    }
    clock += static_cast<int64_t>(lastStepNs);
    return out;
  }

  void run(DetectorSet& set, int64_t from, int64_t to, std::vector<Anomaly>* events) {
    for (int64_t s = from; s < to; ++s) {
      for (auto& rep : step(s)) {
        RankContext c;
        c.node = "node" + std::to_string(rep.rank() / 4);
        c.worldSize = dp;
        const auto observed = set.observe(std::move(rep), c);
        REQUIRE(observed.isOk());
      }
      for (auto& a : set.takeEvents()) events->push_back(std::move(a));
    }
  }
};

std::vector<Anomaly> opened(const std::vector<Anomaly>& ev, AnomalyKind kind) {
  std::vector<Anomaly> out;
  for (const auto& a : ev) {
    if (a.kind == kind && a.state == AnomalyState::kOpen && !a.refresh) out.push_back(a);
  }
  return out;
}

size_t openedOther(const std::vector<Anomaly>& ev, AnomalyKind kind) {
  size_t n = 0;
  for (const auto& a : ev) n += a.kind != kind && a.state == AnomalyState::kOpen && !a.refresh;
  return n;
}

}  // namespace

TEST_CASE("expert_imbalance: groups come from declared expert-parallel groups only") {
  MoeSynth m;
  auto g = expertGroupsOf(m.topology());
  REQUIRE(g != nullptr);
  CHECK(g->size == 4);
  CHECK(g->groups.size() == 2);
  CHECK(g->groups[1] == std::vector<uint32_t>{4, 5, 6, 7});
  CHECK(g->names == std::set<std::string>{"ep"});
  CHECK(expertGroupsOf(m.topology(false)) == nullptr);
}

TEST_CASE("expert_imbalance: a skew from step 80 names the hot index's ranks, once") {
  MoeSynth m;
  m.skew = [](int64_t s, uint32_t r) { return s >= 80 && r % 4 == 1 ? 1.5 : 1.0; };
  DetectorSet set;
  set.setTopology("moe", m.topology());
  std::vector<Anomaly> ev;
  m.run(set, 0, 200, &ev);
  const auto found = opened(ev, AnomalyKind::kExpertImbalance);
  REQUIRE(found.size() == 1);
  const Anomaly& a = found[0];
  CHECK(a.ranks == std::vector<uint32_t>{1, 5});
  CHECK(a.labels.at("ep_index") == "1");
  CHECK(a.labels.at("group") == "ep");
  CHECK(a.labels.at("coords") == "{\"ep\":1}");
  CHECK(std::llabs(a.onsetStep - 80) <= 3);
  CHECK(a.detectedStep - 80 <= 10 + FoldOptions{}.confirmSteps);
  CHECK(a.magnitude == Approx(1.5).epsilon(0.05));
  // The hot ranks wait least: their peers' all_to_all time is several times theirs.
  CHECK(a.evidence.at("wait_ratio") > 2.0);
  CHECK(a.evidence.at("all_to_all_share") > 0.02);
  // Balanced, the group would go at its mean compute: (hot - mean) + the transfer's excess.
  const double hot = 40e6 + 20e6 * 1.5 * 4 / 4.5, mean = 60e6;
  const double step = hot + 2e6 * 1.5 * 4 / 4.5 + 10e6;
  const double want = (hot - mean + 2e6 * (1.5 * 4 / 4.5 - 1)) / step;
  CHECK(a.evidence.at("estimated_gain") == Approx(want).margin(0.02));
  // The hot ranks' longer compute is the skew, not a straggler of its own; nor is the rise of
  // the step time a step_shift.
  CHECK(openedOther(ev, AnomalyKind::kExpertImbalance) == 0);
}

TEST_CASE("expert_imbalance: the gain keeps the router's jitter, as the job without the skew") {
  // Eight indices whose loads jitter 6 % a step (compute 1 %): balanced, a group still goes at
  // its busiest index, so fixing a 1.2x skew saves less than bringing the hot index to the
  // mean.
  auto make = [](bool skewed) {
    MoeSynth m;
    m.dp = 16;
    m.ep = 8;
    m.noise = 0.06;
    m.computeNoise = 0.01;
    if (skewed) m.skew = [](int64_t, uint32_t r) { return r % 8 == 3 ? 1.2 : 1.0; };
    return m;
  };
  MoeSynth with = make(true), without = make(false);
  DetectorSet set;
  set.setTopology("moe", with.topology());
  std::vector<Anomaly> ev;
  std::vector<double> saved;  // the same draws without the skew: what fixing it saves
  for (int64_t s = 0; s < 150; ++s) {
    for (auto& rep : with.step(s)) {
      RankContext c;
      c.node = "node" + std::to_string(rep.rank() / 4);
      c.worldSize = with.dp;
      const auto observed = set.observe(std::move(rep), c);
      REQUIRE(observed.isOk());
    }
    (void)without.step(s);
    saved.push_back((with.lastStepNs - without.lastStepNs) / with.lastStepNs);
    for (auto& a : set.takeEvents()) ev.push_back(std::move(a));
  }
  std::sort(saved.begin(), saved.end());
  const double truth = saved[saved.size() / 2];
  const auto found = opened(ev, AnomalyKind::kExpertImbalance);
  REQUIRE(found.size() == 1);
  CHECK(found[0].labels.at("ep_index") == "3");
  // At the mean the gain would be about 0.04 here; the truth is about half that.
  const double gain = found[0].evidence.at("estimated_gain");
  CHECK(gain == Approx(truth).margin(0.01));
}

TEST_CASE("expert_imbalance: a skew from step 0 gets onset 0 and resolves when balanced") {
  MoeSynth m;
  m.skew = [](int64_t s, uint32_t r) { return s < 150 && r % 4 == 2 ? 1.3 : 1.0; };
  DetectorSet set;
  set.setTopology("moe", m.topology());
  std::vector<Anomaly> ev;
  m.run(set, 0, 260, &ev);
  const auto found = opened(ev, AnomalyKind::kExpertImbalance);
  REQUIRE(found.size() == 1);
  CHECK(found[0].onsetStep <= 1);
  CHECK(found[0].ranks == std::vector<uint32_t>{2, 6});
  bool resolved = false;
  for (const auto& a : ev) {
    if (a.id == found[0].id && a.state == AnomalyState::kResolved) {
      resolved = true;
      CHECK(a.resolvedStep >= 150);
    }
  }
  CHECK(resolved);
}

TEST_CASE("expert_imbalance: quiet on router jitter, and a slow GPU is no skew") {
  MoeSynth m;
  m.noise = 0.05;
  DetectorSet set;
  set.setTopology("moe", m.topology());
  std::vector<Anomaly> ev;
  m.run(set, 0, 400, &ev);
  CHECK(opened(ev, AnomalyKind::kExpertImbalance).empty());

  MoeSynth g;
  g.slow = [](int64_t s, uint32_t r) { return s >= 60 && r == 3 ? 1.4 : 1.0; };
  DetectorSet set2;
  set2.setTopology("moe", g.topology());
  std::vector<Anomaly> ev2;
  g.run(set2, 0, 200, &ev2);
  CHECK(opened(ev2, AnomalyKind::kExpertImbalance).empty());
  const auto s = opened(ev2, AnomalyKind::kStraggler);
  REQUIRE(s.size() == 1);
  CHECK(s[0].ranks == std::vector<uint32_t>{3});
}

TEST_CASE("expert_imbalance: without expert-parallel groups nothing is judged") {
  MoeSynth m;
  m.skew = [](int64_t, uint32_t r) { return r % 4 == 1 ? 2.0 : 1.0; };
  DetectorSet set;
  set.setTopology("moe", m.topology(false));
  std::vector<Anomaly> ev;
  m.run(set, 0, 120, &ev);
  CHECK(opened(ev, AnomalyKind::kExpertImbalance).empty());
}
