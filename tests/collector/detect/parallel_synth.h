// A synthetic tensor x pipeline x data parallel job for the layout-aware detector tests: ranks
// in Megatron's order (rank = pp * dp * tp + dp * tp + tp), the groups they would declare, and
// per step each rank's compute (its stage's work x its factors x noise), a step time from the
// 1F1B model and one pipeline receive entry per peer carrying the microbatch count.
// Deterministic for a given seed.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "collector/detect/detector_set.h"
#include "collector/detect/layout.h"
#include "collector/topology/topology.h"
#include "schema/trainscope.pb.h"

namespace trainscope::detect::test {

struct ParallelSynth {
  std::string job = "pjob";
  uint32_t tp = 2, pp = 2, dp = 2;
  uint32_t ep = 1;  // expert parallelism: declared groups only (the step model has no experts)
  uint32_t microbatches = 4;
  double stageMs = 60.0;  // one stage's compute per step
  double noise = 0.05;    // relative sigma of one microbatch's compute
  int warmupSteps = 5;    // 2x slower
  uint64_t seed = 1;
  std::vector<double> stageLoad;  // per stage extra factor (a naturally unbalanced pipeline)
  bool tpWaits = false;      // report each rank's tensor-parallel all_reduce (group "tp"): its time
                             // is the wait for the group's slowest rank plus a small transfer
  double tpWaitShare = 1.0;  // of that wait, the share spent in the tp collectives (the rest
                             // falls in work no tp collective follows: W passes, expert layers)
  // Fault hooks (1.0 = healthy): by step and stage; by step, stage and replica (a worker);
  // by step and rank (one GPU).
  std::function<double(int64_t, uint32_t)> stageFactor;
  std::function<double(int64_t, uint32_t, uint32_t)> workerFactor;
  std::function<double(int64_t, uint32_t)> rankFactor;
  std::vector<uint32_t> undeclared;  // ranks that have not declared their groups yet

  uint32_t world() const { return tp * pp * dp; }
  uint32_t rankAt(uint32_t s, uint32_t d, uint32_t t) const { return s * dp * tp + d * tp + t; }

  topology::Topology topology() const { return topology::derive(rankGroups()); }

  // The groups each declared rank declares (tp, pp in stage order, dp).
  std::vector<topology::RankGroups> rankGroups() const {
    std::vector<topology::RankGroups> all;
    for (uint32_t r = 0; r < world(); ++r) {
      if (std::find(undeclared.begin(), undeclared.end(), r) != undeclared.end()) continue;
      const uint32_t t = r % tp, d = (r / tp) % dp, s = r / (tp * dp);
      topology::RankGroups g;
      g.rank = r;
      g.declaredNs = 1;
      auto add = [&](const char* name, wire::GroupKind kind, const std::vector<uint32_t>& members) {
        wire::ProcessGroup pg;
        pg.set_name(name);
        pg.set_kind(kind);
        for (uint32_t m : members) pg.add_ranks(m);
        g.groups.push_back(pg);
      };
      std::vector<uint32_t> tg, pg, dg;
      for (uint32_t i = 0; i < tp; ++i) tg.push_back(rankAt(s, d, i));
      for (uint32_t i = 0; i < pp; ++i) pg.push_back(rankAt(i, d, t));
      for (uint32_t i = 0; i < dp; ++i) dg.push_back(rankAt(s, i, t));
      add("tp", wire::GROUP_TP, tg);
      add("pp", wire::GROUP_PP, pg);
      add("dp", wire::GROUP_DP, dg);
      if (ep > 1) {  // carved out of dp: blocks of ep consecutive replicas
        std::vector<uint32_t> eg;
        for (uint32_t i = d / ep * ep; i < d / ep * ep + ep && i < dp; ++i) {
          eg.push_back(rankAt(s, i, t));
        }
        add("ep", wire::GROUP_EP, eg);
      }
      all.push_back(std::move(g));
    }
    return all;
  }

  std::vector<wire::StepReport> step(int64_t s) {
    std::normal_distribution<double> n(0.0, noise);
    const double warm = s < warmupSteps ? 2.0 : 1.0;
    std::vector<double> compute(world());
    // Per replica, the stages' work as the slowest worker of each sets the pipeline's pace.
    double stepNs = 0;
    for (uint32_t d = 0; d < dp; ++d) {
      std::vector<double> stages(pp, 0.0);
      for (uint32_t st = 0; st < pp; ++st) {
        double f = warm * (st < stageLoad.size() ? stageLoad[st] : 1.0);
        if (stageFactor) f *= stageFactor(s, st);
        if (workerFactor) f *= workerFactor(s, st, d);
        for (uint32_t t = 0; t < tp; ++t) {
          const uint32_t r = rankAt(st, d, t);
          double sum = 0;
          for (uint32_t m = 0; m < microbatches; ++m) {
            sum += stageMs * 1e6 / microbatches * std::max(0.2, 1.0 + n(rng));
          }
          compute[r] = sum * f * (rankFactor ? rankFactor(s, r) : 1.0);
          stages[st] = std::max(stages[st], compute[r]);
        }
      }
      stepNs = std::max(stepNs, pipelineStepNs(stages, microbatches) + 5e6);
    }
    std::vector<wire::StepReport> out;
    for (uint32_t r = 0; r < world(); ++r) {
      wire::StepReport rep;
      rep.set_job(job);
      rep.set_rank(r);
      rep.set_step(s);
      rep.set_start_ns(clockNs);
      rep.set_end_ns(clockNs + static_cast<int64_t>(stepNs));
      rep.set_duration_ns(static_cast<int64_t>(stepNs));
      rep.set_compute_ns(static_cast<int64_t>(compute[r]));
      const uint32_t st = r / (tp * dp);
      if (tpWaits && tp > 1) {
        double slowest = 0;
        for (uint32_t t = 0; t < tp; ++t) slowest = std::max(slowest, compute[r - r % tp + t]);
        auto* c = rep.add_collectives();
        c->set_op(wire::ALL_REDUCE);
        c->set_group("tp");
        c->set_bytes(1u << 20);
        c->set_count(uint64_t{microbatches} * 2);
        c->set_total_ns(static_cast<int64_t>((slowest - compute[r]) * tpWaitShare + 0.5e6));
      }
      if (pp > 1) {
        auto* p = rep.add_p2p();
        p->set_peer(st == 0 ? r + tp * dp : r - tp * dp);
        p->set_group("pp");
        p->set_op(wire::RECV);
        p->set_count(microbatches);
      }
      out.push_back(std::move(rep));
    }
    clockNs += static_cast<int64_t>(stepNs);
    return out;
  }

  RankContext ctx(uint32_t rank) const {
    RankContext c;
    c.node = "node-" + std::to_string(rank / 8);
    c.worldSize = world();
    return c;
  }

  // Feeds steps [from, to) (reports in a shuffled order) and collects every event.
  void run(DetectorSet& set, int64_t from, int64_t to, std::vector<Anomaly>* events) {
    std::mt19937_64 shuffle(seed * 7 + 3);
    for (int64_t s = from; s < to; ++s) {
      auto reps = step(s);
      std::shuffle(reps.begin(), reps.end(), shuffle);
      for (auto& r : reps) REQUIRE(set.observe(r, ctx(r.rank())).isOk());
      for (auto& e : set.takeEvents()) events->push_back(std::move(e));
    }
  }

  std::mt19937_64 rng{seed};
  int64_t clockNs = 1'700'000'000'000'000'000;
};

// A replica's share of work in step s: log-normal, mean 1, coefficient of variation cv, drawn
// afresh every step (sequence lengths that vary from batch to batch).
inline double workload(uint64_t seed, int64_t s, uint32_t replica, double cv) {
  std::mt19937_64 g(seed * 1'000'003 + static_cast<uint64_t>(s) * 131 + replica);
  std::normal_distribution<double> z(0.0, 1.0);
  const double sigma = std::sqrt(std::log1p(cv * cv));
  return std::exp(sigma * z(g) - sigma * sigma / 2);
}

// Runs `steps` steps of the job (from its seed) through a default DetectorSet, told the job's
// layout first unless `declare` is false (a job that declares nothing), and returns the events.
inline std::vector<Anomaly> runLayoutJob(ParallelSynth& job, int64_t steps, bool declare = true) {
  job.rng.seed(job.seed);
  DetectorSet set;
  if (declare) set.setTopology(job.job, job.topology());
  std::vector<Anomaly> events;
  job.run(set, 0, steps, &events);
  return events;
}

// The same, with the layout told only after the first `late` steps were judged flat (the
// ranks' hellos with their groups came later than their first reports).
inline std::vector<Anomaly> runLateLayoutJob(ParallelSynth& job, int64_t steps, int64_t late) {
  job.rng.seed(job.seed);
  DetectorSet set;
  std::vector<Anomaly> events;
  job.run(set, 0, late, &events);
  set.setTopology(job.job, job.topology());
  job.run(set, late, steps, &events);
  return events;
}

}  // namespace trainscope::detect::test
