// A synthetic synchronous training job for detector tests: per step every rank computes,
// then all meet in one all-reduce (the last arrival sets the pace), then load data. Faults are
// injected through the factor hooks. Deterministic for a given seed.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "collector/detect/anomaly.h"
#include "collector/detect/detector_set.h"
#include "schema/trainscope.pb.h"

namespace trainscope::detect::test {

struct SynthJob {
  std::string job = "job1";
  uint32_t world = 8;
  uint32_t ranksPerNode = 4;
  double computeMs = 80.0;
  double transferMs = 15.0;
  double dataMs = 5.0;
  double noise = 0.05;      // relative sigma of compute, transfer and op times
  int warmupSteps = 10;     // these steps are 5x slower (compile)
  int checkpointEvery = 0;  // 0: none; else every N steps a 3x step (all ranks)
  uint64_t seed = 1;
  std::string group = "world";
  // Fault hooks (1.0 = healthy).
  std::function<double(int64_t, uint32_t)> computeFactor;
  std::function<double(int64_t)> transferFactor;
  std::function<double(int64_t, uint32_t, const std::string&)> opFactor;
  std::string device;  // StepReport.device of every report ("" = operators on the host)
  std::function<void(wire::StepReport&)> tamper;  // applied to every report last, if set

  std::string nodeOf(uint32_t rank) const { return "node-" + std::to_string(rank / ranksPerNode); }

  std::vector<wire::StepReport> step(int64_t s) {
    std::normal_distribution<double> n(0.0, noise);
    auto noisy = [&](double v) { return v * std::max(0.2, 1.0 + n(rng)); };
    double warm = s < warmupSteps ? 5.0 : 1.0;
    std::vector<double> compute(world);
    std::vector<int64_t> arrival(world);
    int64_t lastArrival = 0;
    for (uint32_t r = 0; r < world; ++r) {
      double f = computeFactor ? computeFactor(s, r) : 1.0;
      compute[r] = noisy(computeMs * 1e6) * f * warm;
      arrival[r] = clockNs + static_cast<int64_t>(compute[r]);
      lastArrival = std::max(lastArrival, arrival[r]);
    }
    double tf = transferFactor ? transferFactor(s) : 1.0;
    int64_t transfer = static_cast<int64_t>(noisy(transferMs * 1e6) * tf);
    int64_t completion = lastArrival + transfer;
    double checkpoint = (checkpointEvery > 0 && s > 0 && s % checkpointEvery == 0)
                            ? 2.0 * (computeMs + transferMs + dataMs) * 1e6
                            : 0.0;
    int64_t end = completion + static_cast<int64_t>(dataMs * 1e6 + checkpoint);
    std::vector<wire::StepReport> out;
    for (uint32_t r = 0; r < world; ++r) {
      wire::StepReport rep;
      rep.set_job(job);
      rep.set_rank(r);
      rep.set_step(s);
      rep.set_start_ns(clockNs);
      rep.set_end_ns(end);
      rep.set_duration_ns(end - clockNs);
      rep.set_compute_ns(static_cast<int64_t>(compute[r]));
      rep.set_comm_ns(completion - arrival[r]);
      rep.set_exposed_comm_ns(completion - arrival[r]);
      rep.set_data_ns(static_cast<int64_t>(dataMs * 1e6 + checkpoint));
      if (!device.empty()) rep.set_device(device);
      const char* names[] = {"matmul", "attention", "layernorm"};
      const double shares[] = {0.6, 0.3, 0.1};
      const uint64_t counts[] = {100, 50, 200};
      for (int k = 0; k < 3; ++k) {
        double f = opFactor ? opFactor(s, r, names[k]) : 1.0;
        auto* op = rep.add_ops();
        op->set_name(names[k]);
        op->set_count(counts[k]);
        int64_t total = static_cast<int64_t>(noisy(computeMs * 1e6 * shares[k]) * f * warm);
        op->set_total_ns(total);
        op->set_max_ns(total / static_cast<int64_t>(counts[k]) * 2);
      }
      auto* c = rep.add_collectives();
      c->set_op(wire::ALL_REDUCE);
      c->set_group(group);
      c->set_bytes(64u << 20);
      c->set_count(1);
      c->set_total_ns(completion - arrival[r]);
      c->set_max_ns(completion - arrival[r]);
      c->set_bandwidth_bps(static_cast<double>(64u << 20) /
                           (static_cast<double>(completion - arrival[r]) / 1e9));
      c->set_first_arrival_ns(arrival[r]);
      c->set_last_completion_ns(completion);
      if (tamper) tamper(rep);
      out.push_back(std::move(rep));
    }
    clockNs = end;
    return out;
  }

  RankContext ctx(uint32_t rank) const {
    RankContext c;
    c.node = nodeOf(rank);
    c.worldSize = world;
    return c;
  }
  int64_t now() const { return clockNs; }

  std::mt19937_64 rng{seed};
  int64_t clockNs = 1'700'000'000'000'000'000;
};

// Feeds steps [from, to) into the set, reports in a shuffled order with some ranks one step
// late, and collects every event.
inline void run(SynthJob& job, DetectorSet& set, int64_t from, int64_t to,
                std::vector<Anomaly>* events) {
  std::vector<wire::StepReport> held;  // reports delayed by one step
  std::mt19937_64 shuffle(job.seed * 7 + 3);
  for (int64_t s = from; s < to; ++s) {
    std::vector<wire::StepReport> reps = job.step(s);
    std::shuffle(reps.begin(), reps.end(), shuffle);
    std::vector<wire::StepReport> next;
    for (auto& r : reps) {
      if (shuffle() % 8 == 0) {
        next.push_back(std::move(r));
      } else {
        REQUIRE(set.observe(r, job.ctx(r.rank())).isOk());
      }
    }
    for (auto& r : held) REQUIRE(set.observe(r, job.ctx(r.rank())).isOk());
    held = std::move(next);
    set.tick(job.now());
    for (auto& e : set.takeEvents()) events->push_back(std::move(e));
  }
  for (auto& r : held) REQUIRE(set.observe(r, job.ctx(r.rank())).isOk());
  for (auto& e : set.takeEvents()) events->push_back(std::move(e));
}

// The openings (or resolutions) of `kind`; refreshes of open anomalies are refreshesOf's.
inline std::vector<Anomaly> ofKind(const std::vector<Anomaly>& events, AnomalyKind kind,
                                   AnomalyState state = AnomalyState::kOpen) {
  std::vector<Anomaly> out;
  for (const Anomaly& a : events) {
    if (a.kind == kind && a.state == state && !a.refresh) out.push_back(a);
  }
  return out;
}

inline std::vector<Anomaly> refreshesOf(const std::vector<Anomaly>& events, const std::string& id) {
  std::vector<Anomaly> out;
  for (const Anomaly& a : events) {
    if (a.id == id && a.refresh) out.push_back(a);
  }
  return out;
}

inline std::string describe(const std::vector<Anomaly>& events) {
  std::string s;
  for (const Anomaly& a : events) {
    s += std::string(a.refresh                        ? "refresh"
                     : a.state == AnomalyState::kOpen ? "open"
                                                      : "resolved") +
         " " + a.id + " onset=" + std::to_string(a.onsetStep) +
         " det=" + std::to_string(a.detectedStep) + " res=" + std::to_string(a.resolvedStep) +
         " mag=" + std::to_string(a.magnitude) + " : " + a.summary + "\n";
  }
  return s;
}

}  // namespace trainscope::detect::test
