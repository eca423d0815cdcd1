#include "tools/bench/detect_eval/eval_run.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <random>

#include "agent/probe/fold.h"
#include "agent/probe/intern.h"
#include "agent/probe/progress.h"
#include "agent/probe/trainscope_probe.h"
#include "collector/detect/detector_set.h"
#include "collector/detect/robust.h"
#include "collector/topology/schedule.h"
#include "collector/topology/topology.h"
#include "common/pipeline_schedule.h"
#include "tools/simtrain/step_model.h"
#include "tools/simtrain/truth.h"

namespace trainscope::bench {
namespace {

using probe::Record;
using probe::RecordType;

// Reports reach the collector this long after the step ended (agent coalescing, network).
constexpr int64_t kDeliveryNs = 2'000'000;
// Silence is ticked through in steps of this much simulated time after a hang.
constexpr int64_t kHangTickNs = 500'000'000;
// The collector ticks its detectors about once a second (collector.cpp); ticking every step
// instead would charge a 1,024-rank job's hang scan to every 100 ms step.
constexpr int64_t kTickNs = 1'000'000'000;
// Each probe sends a RankHello with its progress this often (transport.h helloIntervalNs),
// each rank at its own phase.
constexpr int64_t kHelloNs = 2'000'000'000;
constexpr int64_t kEpochNs = 1'700'000'000'000'000'000;
constexpr uint32_t kRanksPerNode = 8;

struct Names {
  std::vector<uint32_t> ops;
  uint32_t phase[5] = {};
  uint32_t group = 0;  // "dp": gradient all_reduces and ring links
  uint32_t tp = 0;     // --parallel: tensor-parallel all_reduces
  uint32_t pp = 0;     // --parallel: pipeline sends and receives
  uint32_t cp = 0;     // --parallel cp > 1: context-parallel all_gathers
  uint32_t ep = 0;     // --parallel ep > 1: expert-parallel all_to_alls
};

uint8_t rangeKind(sim::Phase p) {
  switch (p) {
    case sim::Phase::kData:
      return TS_RANGE_DATA;
    case sim::Phase::kCheckpoint:
      return TS_RANGE_OTHER;
    default:
      return TS_RANGE_COMPUTE;
  }
}

Record makeRecord(RecordType type, uint8_t kind, uint32_t name, uint32_t group, int64_t step,
                  int64_t t0, int64_t t1, uint64_t bytes) {
  Record r{};
  r.type = type;
  r.kind = kind;
  r.name = name;
  r.group = group;
  r.step = step;
  r.t0 = t0;
  r.t1 = t1;
  r.bytes = bytes;
  return r;
}

// Where the runtime thread puts each record it drains: the step folder and the progress
// tracker (whose state every RankHello carries).
struct RecordSink {
  probe::StepFolder& folder;
  probe::ProgressTracker& progress;
  void add(uint32_t ring, const Record& r) {
    folder.add(ring, r);
    progress.add(ring, r);
  }
};

// The records one rank's probe would hold for this step, in the order trainscope-simtrain's
// runner records them (sim::eventOrder).
void feedRank(RecordSink& folder, const Names& names, int64_t step, const sim::RankStep& rs,
              bool hung) {
  folder.add(0, makeRecord(RecordType::kStepBegin, 0, 0, 0, step, rs.beginNs, 0, 0));
  for (const sim::RankEvent& e : sim::eventOrder(rs)) {
    if (e.kind == sim::RankEvent::Kind::kRange) {
      const auto& r = rs.ranges[e.idx];
      folder.add(0,
                 makeRecord(RecordType::kRange, rangeKind(r.phase),
                            names.phase[static_cast<int>(r.phase)], 0, 0, r.startNs, r.endNs, 0));
    } else if (e.kind == sim::RankEvent::Kind::kOp) {
      const auto& o = rs.ops[e.idx];
      folder.add(0, makeRecord(RecordType::kOp, 0, names.ops[o.op], 0, 0, o.startNs,
                               o.startNs + o.durationNs, 0));
    } else if (e.kind == sim::RankEvent::Kind::kColl) {
      const auto& c = rs.colls[e.idx];
      using G = sim::CollExec::Group;
      const uint32_t group = c.group == G::kTp   ? names.tp
                             : c.group == G::kCp ? names.cp
                             : c.group == G::kEp ? names.ep
                                                 : names.group;
      const uint8_t op = c.op == sim::CollExec::Op::kAllToAll    ? TS_COLL_ALL_TO_ALL
                         : c.op == sim::CollExec::Op::kAllGather ? TS_COLL_ALL_GATHER
                                                                 : TS_COLL_ALL_REDUCE;
      if (c.completeNs == 0) {
        folder.add(0, makeRecord(RecordType::kCollBegin, op, 0, group, 0, c.arriveNs, 0, c.bytes));
      } else {
        folder.add(0, makeRecord(RecordType::kCollective, op, 0, group, 0, c.arriveNs, c.completeNs,
                                 c.bytes));
      }
    } else if (e.kind == sim::RankEvent::Kind::kLink) {
      // What ts_link_transfer records: the peer in `name`.
      const auto& l = rs.links[e.idx];
      folder.add(0, makeRecord(RecordType::kLink, 0, l.peer, names.group, 0, l.postedNs,
                               l.deliveredNs, l.bytes));
    } else {
      // What ts_p2p records: the op in `kind`, the peer in `name` (--parallel only).
      const auto& x = rs.p2ps[e.idx];
      folder.add(0, makeRecord(RecordType::kP2p, x.send ? TS_COLL_SEND : TS_COLL_RECV, x.peer,
                               names.pp, 0, x.postedNs, x.completeNs, x.bytes));
    }
  }
  if (!hung && rs.endNs > 0) {
    folder.add(0, makeRecord(RecordType::kStepEnd, 0, 0, 0, step, rs.endNs, 0, 0));
  }
}

std::vector<TruthFault> truthOf(const sim::SimOptions& o) {
  std::vector<TruthFault> out;
  for (const auto& t : sim::truthJson(o)) {
    if (t["kind"] == "spike") continue;
    TruthFault f;
    f.kind = t["kind"].get<std::string>();
    f.ranks = t["ranks"].get<std::vector<uint32_t>>();
    f.fromStep = t["from_step"].get<int64_t>();
    f.factor = t["factor"].get<double>();
    if (t.contains("op")) f.op = t["op"].get<std::string>();
    out.push_back(std::move(f));
  }
  return out;
}

// What the collector infers of the schedule from one step's reports, against the simulator's.
void judgeSchedule(const sim::SimOptions& o, const std::vector<wire::StepReport>& reports,
                   ScenarioResult* res) {
  const sim::ParallelLayout& par = *o.parallel;
  std::vector<int32_t> stageOf(o.ranks);
  for (uint32_t r = 0; r < o.ranks; ++r) stageOf[r] = static_cast<int32_t>(par.ppIndex(r));
  std::vector<topology::RankPipe> pipes;
  pipes.reserve(reports.size());
  for (const auto& rep : reports) {
    pipes.push_back({rep.rank(), static_cast<int32_t>(par.dpIndex(rep.rank())),
                     static_cast<double>(rep.compute_ns()), static_cast<double>(rep.bubble_ns()),
                     topology::transfersOf(rep.p2p())});
  }
  const topology::ScheduleGuess g = topology::inferSchedule(stageOf, par.pp, pipes);
  topology::ScheduleGuess want;
  want.schedule = pipeline::parseSchedule(o.schedule).value();
  want.microbatches = o.microbatches > 0 ? o.microbatches : 2 * par.pp;
  const std::string got = topology::guessName(g) + '/' + std::to_string(g.microbatches);
  ++res->scheduleSteps;
  if (got == topology::guessName(want) + '/' + std::to_string(want.microbatches)) {
    ++res->scheduleRight;
  } else if (std::find(res->scheduleWrong.begin(), res->scheduleWrong.end(), got) ==
             res->scheduleWrong.end()) {
    res->scheduleWrong.push_back(got);
  }
}

// The groups every rank of a --parallel job declares (as trainscope-simtrain's ranks do),
// through the collector's own derivation.
topology::Topology topologyOf(const sim::ParallelLayout& par) {
  std::vector<topology::RankGroups> ranks;
  for (uint32_t r = 0; r < par.world(); ++r) {
    topology::RankGroups g;
    g.rank = r;
    g.declaredNs = 1;
    std::vector<std::pair<const char*, wire::GroupKind>> kinds = {
        {"tp", wire::GROUP_TP}, {"pp", wire::GROUP_PP}, {"dp", wire::GROUP_DP}};
    if (par.cp > 1) kinds.emplace_back("cp", wire::GROUP_CP);
    if (par.ep > 1) kinds.emplace_back("ep", wire::GROUP_EP);
    for (const auto& [name, kind] : kinds) {
      wire::ProcessGroup pg;
      pg.set_name(name);
      pg.set_kind(kind);
      const auto members = kind == wire::GROUP_TP   ? par.tpGroup(r)
                           : kind == wire::GROUP_PP ? par.ppGroup(r)
                           : kind == wire::GROUP_CP ? par.cpGroup(r)
                           : kind == wire::GROUP_EP ? par.epGroup(r)
                                                    : par.dpGroup(r);
      for (uint32_t m : members) pg.add_ranks(m);
      g.groups.push_back(std::move(pg));
    }
    ranks.push_back(std::move(g));
  }
  return topology::derive(ranks);
}

// The truth gain of each fault (see TruthFault::gain; sim::truthGains, as the --truth file of
// a live run carries it).
void measureGains(const sim::SimOptions& o, std::vector<TruthFault>* truth) {
  const std::vector<double> gains = sim::truthGains(o);
  for (size_t i = 0; i < o.injects.size(); ++i) {
    if (std::isnan(gains[i])) continue;
    for (TruthFault& t : *truth) {
      if (t.kind == sim::truthKindName(o.injects[i].kind) && t.fromStep == o.injects[i].fromStep)
        t.gain = gains[i];
    }
  }
}

}  // namespace

ScenarioResult runScenario(const Scenario& scenario) {
  ScenarioResult res;
  res.scenario = scenario;
  res.truth = truthOf(scenario.sim);
  res.stepNs = scenario.sim.stepMs * 1e6;
  const sim::SimOptions& o = scenario.sim;
  const std::string job = o.job.empty() ? "eval" : o.job;

  sim::StepModel model(o);
  Names names;
  for (const auto& n : model.opNames()) names.ops.push_back(probe::internName(n));
  for (int i = 0; i < 5; ++i)
    names.phase[i] = probe::internName(sim::phaseName(static_cast<sim::Phase>(i)));
  names.group = probe::internName("dp");
  names.tp = probe::internName("tp");
  names.pp = probe::internName("pp");
  names.cp = probe::internName("cp");
  names.ep = probe::internName("ep");
  measureGains(o, &res.truth);

  std::vector<probe::StepFolder> folders;
  folders.reserve(o.ranks);
  std::vector<probe::ProgressTracker> trackers(o.ranks);
  std::vector<int64_t> nextHello(o.ranks);
  std::vector<detect::RankContext> ctx(o.ranks);
  for (uint32_t r = 0; r < o.ranks; ++r) {
    probe::FoldOptions f;
    f.job = job;
    f.rank = r;
    folders.emplace_back(f);
    nextHello[r] = kEpochNs + static_cast<int64_t>((r * 2654435761u) % 1000) * (kHelloNs / 1000);
    ctx[r].node = "node" + std::to_string(r / kRanksPerNode);
    ctx[r].worldSize = o.ranks;
  }

  detect::DetectorSet set;  // default options: what users get
  // What the collector does with the groups the ranks declare in their first hello.
  if (o.parallel) set.setTopology(job, topologyOf(*o.parallel));
  std::mt19937_64 shuffleRng(o.seed * 7919 + 17);
  std::vector<wire::StepReport> reports;
  reports.reserve(o.ranks);
  std::vector<uint32_t> order(o.ranks);
  // Thread CPU time, so other processes on a loaded machine do not inflate the cost.
  auto cpuNs = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  };
  // The hellos due by `nowNs` (the latest one per rank), each with its rank's progress as of
  // the records fed so far, dated by its sent time as the collector's pipeline dates them.
  wire::RankProgress progress;
  auto hellos = [&](int64_t nowNs) {
    for (uint32_t r = 0; r < o.ranks; ++r) {
      if (nextHello[r] > nowNs) continue;
      while (nextHello[r] + kHelloNs <= nowNs) nextHello[r] += kHelloNs;  // only the latest
      trackers[r].fill(&progress);
      detect::RankContext c = ctx[r];
      c.receivedNs = nextHello[r];
      nextHello[r] += kHelloNs;
      (void)set.rankProgress(job, r, progress, c);
    }
  };
  auto collect = [&] {
    std::vector<detect::Anomaly> ev = set.takeEvents();
    for (auto& a : ev) {
      if (a.state != detect::AnomalyState::kOpen) continue;
      if (!a.refresh) {
        res.detections.push_back(std::move(a));
        continue;
      }
      // What the API shows by the end: the latest figures, under the detection it opened with
      // (whose estimated_gain is kept as estimated_gain_at_open, scored beside).
      for (auto& d : res.detections) {
        if (d.id != a.id) continue;
        if (auto g = d.evidence.find("estimated_gain");
            g != d.evidence.end() && !d.evidence.count("estimated_gain_at_open")) {
          a.evidence["estimated_gain_at_open"] = g->second;
        } else if (auto o = d.evidence.find("estimated_gain_at_open"); o != d.evidence.end()) {
          a.evidence["estimated_gain_at_open"] = o->second;
        }
        d.evidence = std::move(a.evidence);
        d.magnitude = a.magnitude;
        d.summary = std::move(a.summary);
        break;  // ids are unique
      }
    }
  };

  int64_t begin = kEpochNs;
  int64_t lastEnd = begin;
  int64_t lastTick = 0;
  for (int64_t s = 0; s < o.steps; ++s) {
    sim::StepTimeline tl = model.step(s, begin);
    for (auto& t : res.truth) {
      if (t.fromStep == s) t.startNs = begin;
    }
    reports.clear();
    for (uint32_t r = 0; r < o.ranks; ++r) {
      RecordSink sink{folders[r], trackers[r]};
      feedRank(sink, names, s, tl.ranks[r], tl.hung);
      // Two drain passes: the first sees the end, the second makes the step final.
      folders[r].endPass();
      folders[r].endPass();
      for (auto& f : folders[r].take()) reports.push_back(std::move(f.report));
    }
    if (o.parallel && o.parallel->pp > 1 && !tl.hung) judgeSchedule(o, reports, &res);
    for (uint32_t i = 0; i < reports.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(reports.size()),
                 shuffleRng);
    const int64_t now = (tl.hung ? lastEnd : tl.endNs) + kDeliveryNs;
    const int64_t t0 = cpuNs();
    for (uint32_t i = 0; i < reports.size(); ++i) {
      wire::StepReport& rep = reports[order[i]];
      detect::RankContext c = ctx[rep.rank()];
      c.receivedNs = now;
      if (scenario.copyReports) {
        (void)set.observe(static_cast<const wire::StepReport&>(rep), c);
      } else {
        (void)set.observe(std::move(rep), c);
      }
    }
    hellos(now);
    if (now - lastTick >= kTickNs) {
      set.tick(now);
      lastTick = now;
    }
    res.detectNs += cpuNs() - t0;
    res.reports += reports.size();
    collect();
    if (tl.hung) {
      for (int64_t t = kHangTickNs; t <= static_cast<int64_t>(scenario.hangTickS * 1e9);
           t += kHangTickNs) {
        const int64_t h0 = cpuNs();
        hellos(lastEnd + t);
        set.tick(lastEnd + t);
        res.detectNs += cpuNs() - h0;
        collect();
      }
      break;
    }
    lastEnd = tl.endNs;
    begin = tl.endNs;
  }
  res.stepsJudged = static_cast<int64_t>(set.stats().stepsJudged);
  collect();
  return res;
}

}  // namespace trainscope::bench
