#include "tools/simtrain/sim_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agent/probe/cpu_wait.h"
#include "agent/probe/trainscope_probe.h"
#include "common/clock.h"
#include "tools/simtrain/step_model.h"
#include "tools/simtrain/truth.h"

namespace trainscope::sim {
namespace {

volatile std::sig_atomic_t gStop = 0;
extern "C" void onStopSignal(int) {
  gStop = 1;
}

bool stopRequested() {
  return gStop != 0;
}

std::string formatSeconds(double s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

// Steps a probe may have ended but not folded before --fast waits: keeps the per-thread ring
// (16,384 records; a step is ~110) far from full, so nothing is dropped for going fast.
constexpr uint64_t kMaxFoldLag = 48;
// In --fast, wait while a probe holds this many unacknowledged reports (its backlog keeps
// 4,096): an absent agent pauses the simulation instead of losing reports, and the ranks stay
// within a few steps of each other in delivery, as a real synchronous job's do. (At 2,048,
// with 512 ranks on two agents, some probes went 50 steps behind their peers: the collector
// held steps for them until its bound and then judged them without those ranks.)
constexpr uint64_t kMaxBacklog = 16;

struct Names {
  std::vector<ts_name> ops;
  ts_name phase[5] = {};
  ts_name group = 0;  // "dp": the gradient all_reduce
  ts_name tp = 0;     // --parallel: tensor-parallel all_reduces
  ts_name pp = 0;     // --parallel: pipeline sends and receives
  ts_name cp = 0;     // --parallel cp > 1: context-parallel all_gathers
  ts_name ep = 0;     // --parallel ep > 1: expert-parallel all_to_alls
  ts_name of(CollExec::Group g) const {
    switch (g) {
      case CollExec::Group::kTp:
        return tp;
      case CollExec::Group::kCp:
        return cp;
      case CollExec::Group::kEp:
        return ep;
      default:
        return group;
    }
  }
};

uint32_t collOp(CollExec::Op op) {
  switch (op) {
    case CollExec::Op::kAllGather:
      return TS_COLL_ALL_GATHER;
    case CollExec::Op::kAllToAll:
      return TS_COLL_ALL_TO_ALL;
    default:
      return TS_COLL_ALL_REDUCE;
  }
}

uint32_t rangeKind(Phase p) {
  switch (p) {
    case Phase::kData:
      return TS_RANGE_DATA;
    case Phase::kCheckpoint:
      return TS_RANGE_OTHER;
    default:
      return TS_RANGE_COMPUTE;
  }
}

// Emits one rank's step: begin, its events in eventOrder, then end (unless the step hangs).
void emit(ts_probe* p, const Names& names, int64_t step, const RankStep& rs, bool hung) {
  ts_step_begin(p, step, rs.beginNs);
  for (const RankEvent& e : eventOrder(rs)) {
    if (e.kind == RankEvent::Kind::kRange) {
      const auto& r = rs.ranges[e.idx];
      ts_range(p, names.phase[static_cast<int>(r.phase)], rangeKind(r.phase), r.startNs, r.endNs);
    } else if (e.kind == RankEvent::Kind::kOp) {
      const auto& o = rs.ops[e.idx];
      ts_op(p, names.ops[o.op], o.startNs, o.durationNs);
    } else if (e.kind == RankEvent::Kind::kColl) {
      const auto& c = rs.colls[e.idx];
      const ts_name group = names.of(c.group);
      if (c.completeNs == 0) {
        ts_collective_begin(p, collOp(c.op), group, c.bytes, c.arriveNs);
      } else {
        ts_collective(p, collOp(c.op), group, c.bytes, c.arriveNs, c.completeNs);
      }
    } else if (e.kind == RankEvent::Kind::kLink) {
      const auto& l = rs.links[e.idx];
      ts_link_transfer(p, names.group, l.peer, l.bytes, l.postedNs, l.deliveredNs);
    } else {
      const auto& x = rs.p2ps[e.idx];
      ts_p2p(p, x.send ? TS_COLL_SEND : TS_COLL_RECV, names.pp, static_cast<int32_t>(x.peer),
             x.bytes, x.postedNs, x.completeNs);
    }
  }
  if (!hung && rs.endNs > 0) ts_step_end(p, step, rs.endNs);
}

// --parallel: declares rank's tensor-, pipeline- and data-parallel groups (and context- and
// expert-parallel ones where cp or ep > 1) before its first step, as a Megatron job does when
// it builds them. False (with a message) if refused.
bool declareGroups(ts_probe* p, const Names& names, const ParallelLayout& layout, uint32_t rank) {
  std::vector<std::pair<ts_name, ts_group_kind>> kinds = {
      {names.tp, TS_GROUP_TP}, {names.pp, TS_GROUP_PP}, {names.group, TS_GROUP_DP}};
  if (layout.cp > 1) kinds.emplace_back(names.cp, TS_GROUP_CP);
  if (layout.ep > 1) kinds.emplace_back(names.ep, TS_GROUP_EP);
  for (const auto& [name, kind] : kinds) {
    const std::vector<uint32_t> members = kind == TS_GROUP_TP   ? layout.tpGroup(rank)
                                          : kind == TS_GROUP_PP ? layout.ppGroup(rank)
                                          : kind == TS_GROUP_CP ? layout.cpGroup(rank)
                                          : kind == TS_GROUP_EP ? layout.epGroup(rank)
                                                                : layout.dpGroup(rank);
    const std::vector<int32_t> ranks(members.begin(), members.end());
    ts_declare_group(p, name, kind, ranks.data(), static_cast<int32_t>(ranks.size()));
    if (*ts_last_error() != '\0') {
      std::fprintf(stderr, "trainscope-simtrain: rank %u: %s\n", rank, ts_last_error());
      return false;
    }
  }
  return true;
}

// Sleeps until the monotonic time `untilNs`, waking early on a stop request.
void sleepUntil(int64_t untilNs) {
  while (!stopRequested()) {
    const int64_t left = untilNs - monotonicNowNs();
    if (left <= 0) return;
    std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<int64_t>(left, 50'000'000)));
  }
}

struct Totals {
  uint64_t acked = 0, backlog = 0, dropped = 0, backlogDropped = 0, folded = 0;
};

Totals totals(const std::vector<ts_probe*>& probes) {
  Totals t;
  for (auto* p : probes) {
    ts_probe_stats s{};
    ts_probe_get_stats(p, &s);
    t.acked += s.reports_acked;
    t.backlog += s.backlog;
    t.dropped += s.dropped;
    t.backlogDropped += s.backlog_dropped;
    t.folded += s.steps_folded;
  }
  return t;
}

// --fast only: waits until every probe has folded all but kMaxFoldLag of the steps it was
// given and holds fewer than kMaxBacklog unacked reports. Gives up after 30 s without progress
// (then the probe's own drop counters tell what happened).
void backpressure(const std::vector<ts_probe*>& probes, uint64_t stepsEnded) {
  const int64_t giveUp = monotonicNowNs() + 30'000'000'000;
  for (auto* p : probes) {
    while (!stopRequested() && monotonicNowNs() < giveUp) {
      ts_probe_stats s{};
      ts_probe_get_stats(p, &s);
      if (s.steps_folded + kMaxFoldLag >= stepsEnded && s.backlog < kMaxBacklog) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

// Runs fn(probe) for every probe on up to kEndThreads threads. A rank's end (flush, then
// destroy: fold, goodbye, wait for its ack) takes one agent round trip, ~50 ms; one after
// another, 512 ranks said goodbye over 25 s, and the ranks not yet gone looked hung. Real
// ranks are processes and end together.
constexpr size_t kEndThreads = 64;
void forEachProbe(const std::vector<ts_probe*>& probes, const std::function<void(ts_probe*)>& fn) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  const size_t n = std::min(kEndThreads, probes.size());
  for (size_t t = 0; t < n; ++t) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < probes.size(); i = next++) fn(probes[i]);
    });
  }
  for (auto& th : pool) th.join();
}

}  // namespace

void simulatedCollectiveWait(int64_t untilNs) {
  sleepUntil(untilNs);
  // Keeps this frame on the stack while sleepUntil runs (no tail call into it).
  asm volatile("" ::: "memory");
}

int run(const SimOptions& in) {
  SimOptions options = in;
  if (options.job.empty()) options.job = "sim-" + std::to_string(wallNowNs() / 1'000'000'000);
  if (Status st = validate(options, true); !st) {
    std::fprintf(stderr, "trainscope-simtrain: %s\n", st.message().c_str());
    return kExitUsage;
  }
  TruthWriter truth;
  if (!options.truthFile.empty()) {
    if (Status st = truth.start(options); !st) {
      std::fprintf(stderr, "trainscope-simtrain: %s\n", st.message().c_str());
      return kExitUsage;
    }
  }

  std::signal(SIGINT, onStopSignal);
  std::signal(SIGTERM, onStopSignal);

  StepModel model(options);
  Names names;
  for (const auto& n : model.opNames()) names.ops.push_back(ts_intern(n.c_str()));
  for (int i = 0; i < 5; ++i) names.phase[i] = ts_intern(phaseName(static_cast<Phase>(i)));
  names.group = ts_intern("dp");
  names.tp = ts_intern("tp");
  names.pp = ts_intern("pp");
  names.cp = ts_intern("cp");
  names.ep = ts_intern("ep");

  const size_t nAgents = options.agents.size();
  const uint32_t world = worldSizeOf(options);
  std::vector<ts_probe*> probes;
  std::vector<std::string> hosts;
  // The simulator's threads stand in for ranks whose scheduling they are not: their run delay
  // is not the simulated steps' CPU wait.
  probe::setCpuWaitEnabled(false);
  for (uint32_t i = 0; i < options.ranks; ++i) {
    hosts.push_back("node" + std::to_string((options.firstRank + i) % nAgents));
  }
  for (uint32_t i = 0; i < options.ranks; ++i) {
    const uint32_t r = options.firstRank + i;
    ts_probe_config cfg;
    ts_config_init(&cfg);
    cfg.agent_endpoint = options.agents[r % nAgents].c_str();
    cfg.job = options.job.c_str();
    cfg.rank = static_cast<int32_t>(r);
    cfg.world_size = static_cast<int32_t>(world);
    cfg.local_rank = static_cast<int32_t>(r / nAgents);
    cfg.host = hosts[i].c_str();
    ts_probe* p = ts_probe_create(&cfg);
    if (p == nullptr) {
      std::fprintf(stderr, "trainscope-simtrain: rank %u: probe creation failed: %s\n", r,
                   ts_last_error());
      for (auto* q : probes) ts_probe_destroy(q, 0);
      return kExitUsage;
    }
    probes.push_back(p);
    if (options.parallel && !declareGroups(p, names, *options.parallel, r)) {
      for (auto* q : probes) ts_probe_destroy(q, 0);
      return kExitUsage;
    }
  }

  if (!options.quiet) {
    std::string hosted = std::to_string(options.ranks) + " ranks";
    if (options.ranks != world) {
      hosted = "ranks " + std::to_string(options.firstRank) + ".." +
               std::to_string(options.firstRank + options.ranks - 1) + " of " +
               std::to_string(world);
    }
    std::printf("simtrain: job %s, %s over %zu agents, %s steps of %.1f ms%s\n",
                options.job.c_str(), hosted.c_str(), nAgents,
                options.steps == 0 ? "unbounded" : std::to_string(options.steps).c_str(),
                options.stepMs, options.fast ? " (fast)" : "");
    std::fflush(stdout);
  }

  const int64_t wallStart = wallNowNs();
  const int64_t monoStart = monotonicNowNs();
  const int64_t progressEvery = options.steps > 0 ? std::max<int64_t>(1, options.steps / 10) : 100;
  int64_t begin = wallStart;
  int64_t stepsDone = 0;
  bool hung = false;
  for (int64_t s = 0; options.steps == 0 || s < options.steps; ++s) {
    StepTimeline tl = model.step(s, begin);
    if (!options.fast && !tl.hung) sleepUntil(monoStart + (tl.endNs - wallStart));
    for (uint32_t i = 0; i < options.ranks; ++i) {
      emit(probes[i], names, s, tl.ranks[options.firstRank + i], tl.hung);
    }
    if (tl.hung) {
      hung = true;
      break;
    }
    ++stepsDone;
    begin = tl.endNs;
    if (options.fast) backpressure(probes, static_cast<uint64_t>(stepsDone));
    if (!options.quiet && stepsDone % progressEvery == 0) {
      const Totals t = totals(probes);
      // '/', not "/": see step_shift.cpp (GCC PR105651, a false -Wrestrict at -O3).
      std::printf("simtrain: step %lld%s, reports acked %llu, waiting for ack %llu\n",
                  static_cast<long long>(stepsDone),
                  options.steps > 0 ? ('/' + std::to_string(options.steps) + " (" +
                                       std::to_string(stepsDone * 100 / options.steps) + "%)")
                                          .c_str()
                                    : "",
                  static_cast<unsigned long long>(t.acked),
                  static_cast<unsigned long long>(t.backlog));
      std::fflush(stdout);
    }
    if (stopRequested()) break;
  }

  if (hung) {
    if (!options.quiet) {
      // The wall time lets an evaluation measure the detection latency from the hang.
      std::printf("simtrain: step %lld hangs (injected) at wall time %lld ns; holding %s\n",
                  static_cast<long long>(stepsDone), static_cast<long long>(wallNowNs()),
                  options.hangHoldS > 0 ? (formatSeconds(options.hangHoldS)).c_str()
                                        : "until SIGINT/SIGTERM");
      std::fflush(stdout);
    }
    const int64_t until = options.hangHoldS > 0
                              ? monotonicNowNs() + static_cast<int64_t>(options.hangHoldS * 1e9)
                              : INT64_MAX;
    simulatedCollectiveWait(until);
  }

  // Every ended step's report must reach an agent; wait for the acks.
  const int64_t deadline = monotonicNowNs() + options.flushTimeoutMs * 1'000'000;
  forEachProbe(probes, [&](ts_probe* p) {
    const int64_t left = std::max<int64_t>(0, (deadline - monotonicNowNs()) / 1'000'000);
    ts_probe_flush(p, static_cast<int32_t>(std::min<int64_t>(left, INT32_MAX)));
  });
  const Totals t = totals(probes);
  if (options.endStaggerMs > 0) {
    // One by one: rank i ends i x the stagger after the first.
    const int64_t first = monotonicNowNs();
    for (size_t i = 0; i < probes.size(); ++i) {
      sleepUntil(first + static_cast<int64_t>(static_cast<double>(i) * options.endStaggerMs * 1e6));
      ts_probe_destroy(probes[i], 2000);
    }
  } else {
    forEachProbe(probes, [&](ts_probe* p) {
      const int64_t left = std::max<int64_t>(200, (deadline - monotonicNowNs()) / 1'000'000);
      ts_probe_destroy(p, static_cast<int32_t>(std::min<int64_t>(left, 2000)));
    });
  }
  if (truth.pending() && !options.quiet && !stopRequested()) {
    std::printf("simtrain: waiting for the --truth gains (the job replayed without each fault)\n");
    std::fflush(stdout);
  }
  if (Status st = truth.finish(stopRequested()); !st) {
    std::fprintf(stderr, "trainscope-simtrain: %s\n", st.message().c_str());
  }
  const uint64_t expected = static_cast<uint64_t>(stepsDone) * options.ranks;
  const uint64_t unacked = expected > t.acked ? expected - t.acked : 0;
  std::printf(
      "simtrain: done: job %s, steps %lld, ranks %u, reports acked %llu of %llu, dropped %llu "
      "(records %llu, reports %llu)\n",
      options.job.c_str(), static_cast<long long>(stepsDone), options.ranks,
      static_cast<unsigned long long>(t.acked), static_cast<unsigned long long>(expected),
      static_cast<unsigned long long>(t.dropped) + t.backlogDropped,
      static_cast<unsigned long long>(t.dropped),
      static_cast<unsigned long long>(t.backlogDropped));
  std::fflush(stdout);
  if (unacked > 0) {
    std::fprintf(stderr,
                 "trainscope-simtrain: %llu step reports were not acknowledged by the agents "
                 "within --flush-timeout-ms %lld\n",
                 static_cast<unsigned long long>(unacked),
                 static_cast<long long>(options.flushTimeoutMs));
    return kExitUnacked;
  }
  return kExitOk;
}

}  // namespace trainscope::sim
