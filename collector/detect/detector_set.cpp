#include "collector/detect/detector_set.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <set>

#include "collector/detect/expert_imbalance.h"
#include "collector/detect/hang.h"
#include "collector/detect/op_regression.h"
#include "collector/detect/p2p_link.h"
#include "collector/detect/robust.h"
#include "collector/detect/slow_comm.h"
#include "collector/detect/stage_imbalance.h"
#include "collector/detect/step_assembler.h"
#include "collector/detect/step_shift.h"
#include "collector/detect/straggler.h"
#include "collector/detect/workload_imbalance.h"

namespace trainscope::detect {

namespace {

// A straggler no further above its peers than this many per-step spreads of an open
// workload_imbalance is the moving work itself (see explains).
constexpr double kSpreadsExplained = 3.0;

// The time per step an anomaly adds (evidence added_ms_per_step); 0 when it does not say.
double addedMs(const Anomaly& a) {
  auto it = a.evidence.find("added_ms_per_step");
  return it == a.evidence.end() ? 0.0 : it->second;
}

// `imbalance`: a workload_imbalance of the job is open, which may explain an op regression or
// a step time that went down for a while (the draws were light). `moe`: the job declared
// expert-parallel groups, whose hot experts' operators run longer (expert_imbalance explains).
bool heldKind(const Anomaly& a, bool imbalance, bool moe) {
  if (a.kind == AnomalyKind::kStraggler) return true;
  if (a.kind == AnomalyKind::kOpRegression) return imbalance || moe;
  if (a.kind != AnomalyKind::kStepShift) return false;
  auto it = a.labels.find("direction");
  return imbalance || (it != a.labels.end() && it->second == "slower");
}

bool explainerKind(AnomalyKind k) {
  return k == AnomalyKind::kStraggler || k == AnomalyKind::kOpRegression ||
         k == AnomalyKind::kSlowComm || k == AnomalyKind::kStageImbalance ||
         k == AnomalyKind::kWorkloadImbalance || k == AnomalyKind::kExpertImbalance;
}

bool subset(const std::vector<uint32_t>& small, const std::vector<uint32_t>& big) {
  return !small.empty() && std::includes(big.begin(), big.end(), small.begin(), small.end());
}

// Whether `by` explains `held` (see FoldOptions): same event (onsets close), the right kind
// and place, and enough of the added time per step.
bool explains(const Anomaly& by, const Anomaly& held, const FoldOptions& o) {
  if (by.id == held.id) return false;
  // The same event, or a rise found later while `by` (a straggler, say) still slows the job:
  // at 512 ranks a 1.2x straggler raised the step time by 5 %, which the step_shift CUSUM
  // found 100 steps after the straggler, as a drift.
  const bool sameEvent = std::llabs(by.onsetStep - held.onsetStep) <= o.onsetSteps;
  const bool stillSlowing =
      by.state == AnomalyState::kOpen && by.onsetStep <= held.onsetStep &&
      (held.kind == AnomalyKind::kStepShift || by.kind == AnomalyKind::kWorkloadImbalance ||
       by.kind == AnomalyKind::kExpertImbalance);
  if (!sameEvent && !stillSlowing) return false;
  const double need = addedMs(held);
  // The ranks holding hot experts compute longer (a straggler against their stage, their
  // experts' operators slower than before): the skew itself. And the skew moves compute
  // between the expert-parallel ranks, which op_regression's per-rank normalization (op time
  // over the rank's compute) reads as operators of the cold ranks growing: the same event.
  if (by.kind == AnomalyKind::kExpertImbalance) {
    if (held.kind == AnomalyKind::kStraggler && subset(held.ranks, by.ranks)) return true;
    if (held.kind == AnomalyKind::kOpRegression && (sameEvent || subset(held.ranks, by.ranks)))
      return true;
  }
  if (by.kind == AnomalyKind::kWorkloadImbalance) {
    // While the work moves between replicas, a rank or worker that drew heavy work a few steps
    // in a row looks slow (a straggler, its operators slower) against a noise estimate that
    // has not caught up yet, and the step time follows the heaviest draws (a step_shift); a
    // real fault stands out of the spread by more than that.
    auto spread = by.evidence.find("spread");
    if (spread != by.evidence.end() &&
        std::fabs(held.magnitude - 1.0) <= kSpreadsExplained * spread->second) {
      return true;
    }
    return held.kind == AnomalyKind::kStepShift && need > 0.0 &&
           addedMs(by) >= o.minExplained * need;
  }
  if (held.kind == AnomalyKind::kOpRegression) return false;  // held for the above only
  if (need <= 0.0 || addedMs(by) < o.minExplained * need) return false;
  if (held.kind == AnomalyKind::kStraggler) {
    auto scope = by.labels.find("scope");
    return by.kind == AnomalyKind::kOpRegression && scope != by.labels.end() &&
           scope->second == "rank" && by.ranks == held.ranks;
  }
  return explainerKind(by.kind);
}

// Judged steps kept for fillGain's step time (the median since the anomaly's onset).
constexpr size_t kStepHistory = 16;

// Every anomaly carries evidence.estimated_gain. Detectors that know the step's dependency
// structure (straggler and stage_imbalance with a layout, workload_imbalance, expert_imbalance)
// fill it with their what-if replay; for the others a simpler model, named in
// labels.gain_model: "added_time" — the time the anomaly adds per step (added_ms_per_step),
// all of it on the step's critical path (true of a synchronous job for a straggler, a slower
// collective and an operator on every rank; an upper bound where part of it overlaps other
// work or other ranks are nearly as slow), over the job's step time since the onset; "hang" —
// the job
// makes no progress, all of the step; "checkpoint" — a periodic spike's extra time over its
// period.
void fillGain(Anomaly& a, double stepMs) {
  if (a.state != AnomalyState::kOpen || a.evidence.count("estimated_gain")) return;
  auto ev = [&](const char* k) {
    auto it = a.evidence.find(k);
    return it == a.evidence.end() ? std::nan("") : it->second;
  };
  double gain = std::nan("");
  std::string model;
  if (a.kind == AnomalyKind::kHang) {
    gain = 1.0;
    model = "hang";
  } else if (a.kind == AnomalyKind::kSpike) {
    const double extra = ev("spike_ms") - ev("baseline_ms");
    const double period = ev("period_steps") * ev("baseline_ms");
    if (extra > 0 && period > 0) gain = extra / (period + extra);
    model = "checkpoint";
  } else if (stepMs > 0) {
    const double added = ev("added_ms_per_step");
    if (!std::isnan(added)) gain = added / stepMs;
    model = "added_time";
  }
  if (std::isnan(gain)) return;
  a.evidence["estimated_gain"] = std::clamp(gain, 0.0, 1.0);
  a.labels["gain_model"] = model;
}

// Whether `a` costs the step too little to be raised (FoldOptions::minGain), by its own
// estimated gain; hangs, periodic spikes and anomalies without an estimate are always raised.
bool belowFloor(const Anomaly& a, const FoldOptions& o) {
  if (o.minGain <= 0 || a.kind == AnomalyKind::kHang || a.kind == AnomalyKind::kSpike) return false;
  auto it = a.evidence.find("estimated_gain");
  return it != a.evidence.end() && it->second < o.minGain;
}

// Whether `a` is held until confirmed (FoldOptions::confirmSteps): every kind but a hang.
bool confirming(const Anomaly& a, const FoldOptions& o) {
  return (o.confirmSteps > 0 || o.confirmMs > 0) && a.kind != AnomalyKind::kHang;
}

constexpr size_t kExplainerHistory = 256;
constexpr int kMaxImbalanceWait = 8;  // judged steps a held anomaly waits on workload_imbalance

}  // namespace

struct DetectorSet::Job {
  Job(const std::string& name, const DetectOptions& o)
      : assembler(name, o.assembly),
        stepShift(name, o.stepShift, &staged),
        straggler(name, o.straggler, &staged),
        stageImbalance(name, o.stageImbalance, &staged),
        workloadImbalance(name, o.workloadImbalance, &staged),
        expertImbalance(name, o.expertImbalance, &staged),
        slowComm(name, o.slowComm, &staged),
        p2pLink(name, o.p2pLink, &staged),
        opRegression(name, o.opRegression, &staged),
        hang(name, o.hang, &staged) {}

  struct Held {
    Anomaly anomaly;
    int age = 0;                   // judged steps waited
    int extra = 0;                 // judged steps waited on an imbalance being judged
    std::vector<Anomaly> updates;  // its resolution, when it came while held
    bool foldable = false;         // held for an explanation too, not only to be confirmed
  };

  EventLog staged;  // the detectors' events before folding (declared first: they point here)
  StepAssembler assembler;
  StepShiftDetector stepShift;
  StragglerDetector straggler;
  StageImbalanceDetector stageImbalance;
  WorkloadImbalanceDetector workloadImbalance;
  ExpertImbalanceDetector expertImbalance;
  SlowCommDetector slowComm;
  P2pLinkDetector p2pLink;
  OpRegressionDetector opRegression;
  HangDetector hang;
  std::vector<Held> held;
  std::deque<Anomaly> explainers;  // recent stragglers, op regressions and slow comms
  std::set<std::string> folded;    // ids whose resolution is dropped too
  // Open anomalies published after a hold: the detection step and time they went out with,
  // which their refreshes carry too (until they resolve).
  std::map<std::string, std::pair<int64_t, int64_t>> publishedAt;
  std::shared_ptr<const JobLayout> layout;      // the one the detectors use
  std::shared_ptr<const ExpertGroups> experts;  // the one expertImbalance uses
  // (step, median duration in ms) of the latest judged steps, for fillGain.
  Ring<std::pair<int64_t, double>> stepMs{kStepHistory};
  uint32_t worldSize = 0;
  uint64_t lastUse = 0;
  uint64_t stepsJudged = 0;
};

void DetectorSet::publish(Anomaly a) {
  if (a.kind == AnomalyKind::kStraggler && a.state == AnomalyState::kOpen && !a.refresh) {
    gpu_.explain(a, a.detectedNs);
  }
  if (a.refresh) {
    // Not a new anomaly: counted when it opened.
  } else if (a.state == AnomalyState::kOpen) {
    ++opened_;
  } else {
    ++resolved_;
  }
  out_.push_back(std::move(a));
}

void DetectorSet::route(Job& j, const AssembledStep* judged, bool final) {
  std::vector<Anomaly> events = j.staged.take();
  for (Anomaly& a : events) {
    // The step time since the onset (the one the fix would shorten), else the latest known.
    std::vector<double> since, all;
    for (const auto& [step, ms] : j.stepMs.values()) {
      all.push_back(ms);
      if (step >= a.onsetStep) since.push_back(ms);
    }
    fillGain(a, !since.empty() ? medianInPlace(since) : all.empty() ? 0.0 : medianInPlace(all));
  }
  auto remember = [&](const Anomaly& a) {
    j.explainers.push_back(a);
    if (j.explainers.size() > kExplainerHistory) j.explainers.pop_front();
  };
  // Explainers first, so a straggler and the op regression that explains it, opened on the
  // same step, fold at once.
  for (const Anomaly& a : events) {
    if (a.state == AnomalyState::kOpen && explainerKind(a.kind)) remember(a);
  }
  const bool imbalance = j.workloadImbalance.isOpen();
  for (Anomaly& a : events) {
    if (a.refresh) {
      // Goes where its opening went: dropped with a folded one, into a held one (published
      // with the figures it has then), out with a published one.
      if (j.folded.count(a.id) > 0) continue;
      for (Anomaly& x : j.explainers) {
        if (x.id == a.id) {
          x = a;
          x.refresh = false;
        }
      }
      auto h = std::find_if(j.held.begin(), j.held.end(),
                            [&](const Job::Held& x) { return x.anomaly.id == a.id; });
      if (h != j.held.end()) {
        h->anomaly = std::move(a);
        h->anomaly.refresh = false;
        continue;
      }
      if (auto at = j.publishedAt.find(a.id); at != j.publishedAt.end()) {
        a.detectedStep = at->second.first;
        a.detectedNs = at->second.second;
      }
      publish(std::move(a));
      continue;
    }
    if (a.state == AnomalyState::kOpen) {
      if (belowFloor(a, options_.fold)) {
        ++belowFloor_;
        j.folded.insert(a.id);  // its refreshes and resolution are dropped with it
        continue;
      }
      const bool foldable = heldKind(a, imbalance, j.expertImbalance.active());
      if (foldable || confirming(a, options_.fold)) {
        j.held.push_back(Job::Held{std::move(a), 0, 0, {}, foldable});
      } else {
        publish(std::move(a));
      }
      continue;
    }
    // An explainer that resolved no longer slows the job (see explains).
    for (Anomaly& x : j.explainers) {
      if (x.id == a.id) x.state = AnomalyState::kResolved;
    }
    j.publishedAt.erase(a.id);
    if (j.folded.erase(a.id) > 0) continue;
    auto h = std::find_if(j.held.begin(), j.held.end(),
                          [&](const Job::Held& x) { return x.anomaly.id == a.id; });
    if (h != j.held.end()) {
      h->updates.push_back(std::move(a));
    } else {
      publish(std::move(a));
    }
  }
  if (j.held.empty()) return;
  // A held anomaly that is not published (folded, or a flap) explains nothing any more.
  auto dropHeld = [&j](std::vector<Job::Held>::iterator at) {
    const std::string id = at->anomaly.id;
    j.explainers.erase(std::remove_if(j.explainers.begin(), j.explainers.end(),
                                      [&](const Anomaly& x) { return x.id == id; }),
                       j.explainers.end());
    return j.held.erase(at);
  };
  // Held long enough, in judged steps and collector time since its detection, to stand.
  auto confirmed = [&](const Anomaly& a, int age, const AssembledStep* at) {
    if (!confirming(a, options_.fold)) return true;
    if (age < options_.fold.confirmSteps) return false;
    return at != nullptr && at->nowNs - a.detectedNs >= options_.fold.confirmMs * 1'000'000;
  };
  for (auto it = j.held.begin(); it != j.held.end();) {
    const Anomaly& a = it->anomaly;
    bool explained = it->foldable &&
                     std::any_of(j.explainers.begin(), j.explainers.end(),
                                 [&](const Anomaly& by) { return explains(by, a, options_.fold); });
    // The open imbalance's spread as it is now (its evidence is that of its first steps).
    if (it->foldable && !explained && j.workloadImbalance.isOpen() &&
        a.kind != AnomalyKind::kStageImbalance) {
      explained =
          std::fabs(a.magnitude - 1.0) <= kSpreadsExplained * j.workloadImbalance.currentSpread();
    }
    if (explained) {
      ++folded_;
      if (it->updates.empty()) j.folded.insert(a.id);
      it = dropHeld(it);
      continue;
    }
    if (judged != nullptr) {
      // A step-time rise while work moving between replicas is being judged waits for that
      // verdict (a few steps: it needs several costly steps to tell moving work from a
      // straggler), so the imbalance is not reported a second time as a step_shift.
      if (a.kind == AnomalyKind::kStepShift && j.workloadImbalance.judging() &&
          it->extra < kMaxImbalanceWait) {
        ++it->extra;
      } else {
        ++it->age;
      }
    }
    const bool flap = std::any_of(it->updates.begin(), it->updates.end(), [](const Anomaly& u) {
      return u.state == AnomalyState::kResolved;
    });
    if (flap && confirming(a, options_.fold)) {
      // Over before it was confirmed: a burst, not a regression anyone should act on.
      ++flapped_;
      it = dropHeld(it);
      continue;
    }
    if (final || (it->age > options_.fold.holdSteps && confirmed(a, it->age, judged))) {
      Anomaly out = std::move(it->anomaly);
      if (judged != nullptr) {
        out.detectedStep = std::max(out.detectedStep, judged->step);
        out.detectedNs = std::max(out.detectedNs, judged->nowNs);
      }
      std::vector<Anomaly> updates = std::move(it->updates);
      if (updates.empty()) j.publishedAt[out.id] = {out.detectedStep, out.detectedNs};
      publish(std::move(out));
      for (Anomaly& u : updates) publish(std::move(u));
      it = j.held.erase(it);
      continue;
    }
    ++it;
  }
}

void DetectorSet::judge(Job& j, std::vector<AssembledStep>& steps, bool final) {
  std::vector<double> durations;
  for (const AssembledStep& s : steps) {
    durations.clear();
    for (const RankStep& r : s.ranks) durations.push_back(r.report.duration_ns() / 1e6);
    if (!durations.empty()) j.stepMs.push({s.step, medianInPlace(durations)});
    j.opRegression.onStep(s);
    j.slowComm.onStep(s);
    j.p2pLink.onStep(s);
    j.straggler.onStep(s);
    j.stageImbalance.onStep(s);
    j.workloadImbalance.onStep(s);
    j.expertImbalance.onStep(s);
    j.stepShift.onStep(s);
    ++j.stepsJudged;
    route(j, &s, false);
  }
  if (final) route(j, steps.empty() ? nullptr : &steps.back(), true);
  j.assembler.recycle(steps);
}

DetectorSet::DetectorSet(DetectOptions options) : options_(options), gpu_(options.gpuFault) {}
DetectorSet::~DetectorSet() = default;

DetectorSet::Job& DetectorSet::job(const std::string& name) {
  auto it = jobs_.find(name);
  if (it == jobs_.end()) {
    while (!jobs_.empty() && jobs_.size() >= std::max<size_t>(options_.maxJobs, 1)) {
      auto oldest = std::min_element(jobs_.begin(), jobs_.end(), [](const auto& a, const auto& b) {
        return a.second->lastUse < b.second->lastUse;
      });
      forgetJob(oldest->first);
    }
    it = jobs_.emplace(name, std::make_unique<Job>(name, options_)).first;
    if (auto l = layouts_.find(name); l != layouts_.end()) {
      Job& j = *it->second;
      j.layout = l->second.layout;
      j.experts = l->second.experts;
      if (j.layout) {
        j.straggler.setLayout(j.layout);
        j.stageImbalance.setLayout(j.layout);
        j.workloadImbalance.setLayout(j.layout);
      }
      if (j.experts) j.expertImbalance.setGroups(j.experts, j.layout);
    }
  }
  it->second->lastUse = ++useCounter_;
  return *it->second;
}

Status DetectorSet::observe(const wire::StepReport& report, const RankContext& ctx) {
  return observe(wire::StepReport(report), ctx);
}

Status DetectorSet::observe(wire::StepReport&& report, const RankContext& ctx) {
  auto reject = [&](const std::string& why) {
    ++rejected_;
    return Status::error("step report: " + why);
  };
  if (report.job().empty()) return reject("job is empty");
  if (report.step() < 0) return reject("step is negative (" + std::to_string(report.step()) + ")");
  if (report.duration_ns() < 0) return reject("duration_ns is negative");
  gpu_.rankStep(report.job(), report.rank(), report.step());
  auto it = jobs_.find(report.job());
  if (it == jobs_.end() && replayOfEnded(report, ctx)) return Status::ok();
  uint32_t known = it == jobs_.end() ? 0 : it->second->worldSize;
  uint32_t world = ctx.worldSize != 0 ? ctx.worldSize : known;
  if (world == 0) world = report.rank() + 1;
  if (report.rank() >= world) {
    return reject("rank " + std::to_string(report.rank()) + " is not below world_size " +
                  std::to_string(world));
  }
  Job& j = job(report.job());
  j.worldSize = std::max(j.worldSize, world);
  if (auto n = nodes_.find(ctx.node); n != nodes_.end() && ctx.receivedNs != 0) {
    n->second = std::max(n->second, ctx.receivedNs);
  }
  j.hang.observe(report, ctx, j.worldSize);
  std::vector<AssembledStep> done;
  j.assembler.add(std::move(report), ctx, j.worldSize, &done);
  if (!done.empty()) judge(j, done, false);
  if (j.staged.pending() != 0) route(j, nullptr, false);  // the hang detector's
  return Status::ok();
}

void DetectorSet::tick(int64_t nowNs) {
  for (auto& [name, j] : jobs_) {
    j->hang.tick(nowNs, nodes_.empty() ? nullptr : &nodes_);
    if (j->staged.pending() != 0) route(*j, nullptr, false);
  }
}

void DetectorSet::rankGpu(const std::string& job, uint32_t rank, const std::string& uuid,
                          const std::string& node) {
  gpu_.rankGpu(job, rank, uuid, node);
}

void DetectorSet::hostSample(const wire::HostSample& host, int64_t nowNs) {
  if (host.gpus_size() == 0 && host.gpu_events_size() == 0) return;
  gpu_.hostSample(host.node(), host, nowNs);
  for (Anomaly& a : gpu_.takeEvents()) publish(std::move(a));
}

void DetectorSet::nodeDelivered(const std::string& node, int64_t nowNs) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) {
    // Bounded like the jobs: a node not heard from for longest goes first.
    if (nodes_.size() >= std::max<size_t>(options_.maxJobs, 1)) {
      nodes_.erase(std::min_element(nodes_.begin(), nodes_.end(), [](const auto& a, const auto& b) {
        return a.second < b.second;
      }));
    }
    nodes_.emplace(node, nowNs);
    return;
  }
  it->second = std::max(it->second, nowNs);
}

void DetectorSet::rankEnded(const std::string& name, uint32_t rank, int64_t nowNs) {
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return;  // ended already, or never reported a step
  Job& j = *it->second;
  j.lastUse = ++useCounter_;
  j.hang.rankEnded(rank, nowNs);
  if (j.staged.pending() != 0) route(j, nullptr, false);
  if (j.hang.allEnded()) {
    std::vector<AssembledStep> done;
    j.assembler.flush(&done);
    judge(j, done, true);
    rememberEnded(name, j);
    forgetJob(name);
    return;
  }
}

void DetectorSet::rankGone(const std::string& name, uint32_t rank, int64_t nowNs) {
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return;  // ended already, or never reported a step
  Job& j = *it->second;
  j.lastUse = ++useCounter_;
  j.hang.rankGone(rank, nowNs);
  if (j.staged.pending() != 0) route(j, nullptr, false);
}

void DetectorSet::rememberEnded(const std::string& name, const Job& j) {
  Ended e;
  e.lastStep = j.hang.maxStep();
  e.latestEndNs = j.assembler.latestEndNs();
  if (ended_.insert_or_assign(name, e).second) endedOrder_.push_back(name);
  while (endedOrder_.size() > std::max<size_t>(options_.maxJobs, 1)) {
    ended_.erase(endedOrder_.front());
    endedOrder_.pop_front();
  }
}

bool DetectorSet::replayOfEnded(const wire::StepReport& report, const RankContext& ctx) {
  auto it = ended_.find(report.job());
  if (it == ended_.end()) return false;
  const Ended& e = it->second;
  if (report.step() <= e.lastStep && report.end_ns() + ctx.clockOffsetNs <= e.latestEndNs) {
    ++lateAfterEnd_;
    return true;
  }
  // Newer than anything the ended run reported: the job runs again.
  ended_.erase(it);
  endedOrder_.erase(std::find(endedOrder_.begin(), endedOrder_.end(), report.job()));
  return false;
}

Status DetectorSet::rankProgress(const std::string& name, uint32_t rank,
                                 const wire::RankProgress& p, const RankContext& ctx) {
  auto reject = [](const std::string& why) { return Status::error("rank progress: " + why); };
  if (name.empty()) return reject("job is empty");
  if (p.last_step() < -1)
    return reject("last_step is below -1 (" + std::to_string(p.last_step()) + ")");
  if (p.open_step() < -1)
    return reject("open_step is below -1 (" + std::to_string(p.open_step()) + ")");
  if (p.last_record_ns() < 0) return reject("last_record_ns is negative");
  if (p.collective_since_ns() < 0) return reject("collective_since_ns is negative");
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return Status::ok();
  Job& j = *it->second;
  const uint32_t world = std::max(j.worldSize, ctx.worldSize);
  if (world != 0 && rank >= world) {
    return reject("rank " + std::to_string(rank) + " is not below world_size " +
                  std::to_string(world));
  }
  j.hang.rankProgress(rank, p, ctx);
  return Status::ok();
}

namespace {

bool sameLayout(const JobLayout* a, const JobLayout* b) {
  if (a == nullptr || b == nullptr) return a == b;
  if (a->stages != b->stages || a->workers.size() != b->workers.size()) return false;
  for (size_t i = 0; i < a->workers.size(); ++i) {
    const Worker& x = a->workers[i];
    const Worker& y = b->workers[i];
    if (x.ranks != y.ranks || x.stage != y.stage || x.coords != y.coords) return false;
  }
  return true;
}

bool sameExperts(const ExpertGroups* a, const ExpertGroups* b) {
  if (a == nullptr || b == nullptr) return a == b;
  return a->groups == b->groups && a->names == b->names;
}

}  // namespace

void DetectorSet::setTopology(const std::string& name, const topology::Topology& topology) {
  std::shared_ptr<const JobLayout> layout = layoutOf(topology);
  std::shared_ptr<const ExpertGroups> experts = expertGroupsOf(topology);
  auto [it, fresh] = layouts_.try_emplace(name, Declared{layout, experts});
  if (fresh) {
    layoutOrder_.push_back(name);
    while (layoutOrder_.size() > std::max<size_t>(options_.maxJobs, 1)) {
      layouts_.erase(layoutOrder_.front());
      layoutOrder_.pop_front();
    }
  } else {
    it->second = Declared{layout, experts};
  }
  auto j = jobs_.find(name);
  if (j == jobs_.end()) return;
  Job& job = *j->second;
  const bool layoutSame = sameLayout(job.layout.get(), layout.get());
  if (!layoutSame) {
    job.layout = layout;
    job.straggler.setLayout(layout);
    job.stageImbalance.setLayout(layout);
    job.workloadImbalance.setLayout(layout);
  }
  if (!layoutSame || !sameExperts(job.experts.get(), experts.get())) {
    job.experts = experts;
    job.expertImbalance.setGroups(experts, layout);
  }
}

void DetectorSet::forgetJob(const std::string& name) {
  gpu_.forgetJob(name);
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return;
  const AssemblyStats& a = it->second->assembler.stats();
  retired_.reports += a.reports;
  retired_.duplicates += a.duplicates;
  retired_.late += a.late;
  retired_.partialSteps += a.partialSteps;
  retired_.droppedSteps += a.droppedSteps;
  retired_.rewinds += a.rewinds;
  retired_.stepsJudged += it->second->stepsJudged;
  retired_.opCpuBound += it->second->opRegression.cpuBoundSkipped();
  retired_.hostWeather +=
      it->second->straggler.hostWeatherHeld() + it->second->stepShift.hostWeatherHeld();
  jobs_.erase(it);
}

std::vector<Anomaly> DetectorSet::takeEvents() {
  std::vector<Anomaly> out;
  out.swap(out_);
  return out;
}

DetectStats DetectorSet::stats() const {
  DetectStats s = retired_;
  for (const auto& [name, j] : jobs_) {
    const AssemblyStats& a = j->assembler.stats();
    s.reports += a.reports;
    s.duplicates += a.duplicates;
    s.late += a.late;
    s.partialSteps += a.partialSteps;
    s.droppedSteps += a.droppedSteps;
    s.rewinds += a.rewinds;
    s.stepsJudged += j->stepsJudged;
    s.opCpuBound += j->opRegression.cpuBoundSkipped();
    s.hostWeather += j->straggler.hostWeatherHeld() + j->stepShift.hostWeatherHeld();
  }
  s.late += lateAfterEnd_;
  s.rejected = rejected_;
  s.anomaliesOpened = opened_;
  s.anomaliesResolved = resolved_;
  s.folded = folded_;
  s.flapped = flapped_;
  s.belowFloor = belowFloor_;
  s.jobs = jobs_.size();
  return s;
}

}  // namespace trainscope::detect
