#include "tools/bench/detect_eval/eval_suite.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/str_cat.h"
#include "tools/bench/detect_eval/eval_score.h"

namespace trainscope::bench {
namespace {

sim::Inject inject(const std::string& spec) {
  auto r = sim::parseInject(spec);
  if (!r) {
    std::fprintf(stderr, "detect_eval: internal spec error: %s\n", r.message().c_str());
    std::exit(2);
  }
  return *r;
}

Scenario base(uint32_t ranks, int64_t steps, double noise, uint64_t seed) {
  Scenario s;
  s.sim.ranks = ranks;
  s.sim.steps = steps;
  s.sim.noise = noise;
  s.sim.seed = seed;
  s.sim.stepMs = 100.0;
  s.sim.warmup = 5;
  s.sim.job = "eval";
  return s;
}

// A healthy job of a parallel layout named `layout`: checkpoints every 50 steps at 3x, the
// pipeline balanced (edge 0) or with its first and last stage heavier (edge 0.05).
Scenario healthyParallel(Scenario s, const std::string& layout, double edge, uint64_t seed) {
  s.group = "healthy";
  s.faultLabel = "healthy";
  s.sim.edgeLoad = edge;
  s.sim.injects.push_back(inject("spike:every=50,factor=3"));
  s.name =
      "healthy " + layout + (edge > 0 ? " edge+5%" : "") + " noise 5% seed " + std::to_string(seed);
  return s;
}

// Healthy 64- and 256-rank jobs with checkpoints at noise 5, 6, ... 10 %: the false alarms per
// noise level tell where the defaults stop being quiet.
std::vector<Scenario> noiseSweep(const EvalOptions& o) {
  std::vector<Scenario> out;
  uint64_t seed = 5000;
  for (int pct = 5; pct <= 10; ++pct) {
    for (int j = 0; j < std::max(1, o.seeds); ++j) {
      for (uint32_t ranks : {64u, 256u}) {
        Scenario s = base(ranks, ranks == 64 ? 600 : 300, pct / 100.0, ++seed);
        s.group = "healthy";
        s.faultLabel = "healthy";
        s.sim.injects.push_back(inject("spike:every=50,factor=3"));
        s.name = "healthy " + std::to_string(ranks) + "r noise " + std::to_string(pct) + "% seed " +
                 std::to_string(seed);
        out.push_back(std::move(s));
      }
    }
  }
  return out;
}

// The --inject spec of one parallel fault kind (worker, stage, gpu, p2p, seqlen) for seed sd at
// factor f (seqlen: the cv) from step `from`: the place it hits moves with the seed.
std::string parallelFault(const std::string& label, const sim::ParallelLayout& par, int sd,
                          const char* f, int64_t from) {
  const uint32_t pp = static_cast<uint32_t>(sd + 1) % par.pp;
  const uint32_t dp = static_cast<uint32_t>(sd * 3 + 1) % par.dp;
  const uint32_t tp = static_cast<uint32_t>(sd) % par.tp;
  const std::string at = ",from=" + std::to_string(from);
  if (label == "worker") {
    return "worker:dp=" + std::to_string(dp) + ",pp=" + std::to_string(pp) + ",factor=" + f + at;
  }
  if (label == "stage") return "stage:pp=" + std::to_string(pp) + ",factor=" + f + at;
  if (label == "gpu") {
    return "gpu:rank=" + std::to_string(par.rankAt(pp, dp, tp)) + ",factor=" + f + at;
  }
  if (label == "p2p") {
    // Activations forward on odd seeds, gradients back on even ones.
    const uint32_t a = par.rankAt(pp % (par.pp - 1), dp, tp);
    const uint32_t b = par.rankAt(pp % (par.pp - 1) + 1, dp, tp);
    return "p2p:from=" + std::to_string(sd % 2 == 1 ? a : b) +
           ",to=" + std::to_string(sd % 2 == 1 ? b : a) + ",factor=" + f + at;
  }
  return std::string("seqlen:cv=") + f + at;
}

// Tensor x pipeline x data parallel jobs (1F1B, 2 * pp microbatches): healthy ones, balanced
// and naturally unbalanced (--edge-load 5 %: the first stage 2.5 % heavier, the last 5 %), and
// a slow worker (a tp group) or a slow stage from step 0 or 100, scored in groups of their own.
void addParallel(const EvalOptions& o, std::vector<Scenario>* out) {
  struct Layout {
    uint32_t tp, pp, dp;
  };
  const std::vector<Layout> layouts =
      o.quick ? std::vector<Layout>{{2, 2, 2}, {2, 4, 4}}
              : std::vector<Layout>{{2, 2, 2}, {2, 4, 2}, {4, 2, 4}, {2, 4, 8}};
  auto make = [&](const Layout& l, int64_t steps, double noise, uint64_t seed) {
    Scenario s = base(l.tp * l.pp * l.dp, steps, noise, seed);
    s.sim.parallel = sim::ParallelLayout{l.tp, l.pp, l.dp};
    return s;
  };
  auto layoutName = [](const Layout& l) {
    return "tp" + std::to_string(l.tp) + "pp" + std::to_string(l.pp) + "dp" + std::to_string(l.dp);
  };
  uint64_t seed = 7000;
  for (const Layout& l : layouts) {
    for (double edge : {0.0, 0.05}) {
      for (int j = 0; j < (o.quick ? 1 : 2); ++j) {
        ++seed;
        out->push_back(
            healthyParallel(make(l, o.quick ? 300 : 1000, 0.05, seed), layoutName(l), edge, seed));
      }
    }
  }
  const std::vector<double> mags =
      o.quick ? std::vector<double>{1.1, 1.5} : std::vector<double>{1.05, 1.1, 1.2, 1.5, 2.0};
  // seqlen: the magnitude is 1 + cv (cv 0.05 is the "5 %" cell, no target).
  const std::vector<double> seqMags =
      o.quick ? std::vector<double>{1.1, 1.2} : std::vector<double>{1.05, 1.1, 1.2, 1.3};
  for (const std::string label : {"worker", "stage", "gpu", "p2p", "seqlen"}) {
    for (const Layout& l : layouts) {
      for (int64_t from : {int64_t{0}, int64_t{100}}) {
        for (int sd = 1; sd <= (o.quick ? 1 : 2); ++sd) {
          for (double m : label == "seqlen" ? seqMags : mags) {
            Scenario s =
                make(l, 300, 0.05, static_cast<uint64_t>(sd) * 31 + uint64_t{l.pp} * 7 + l.dp);
            s.faultLabel = label + ' ' + layoutName(l);
            s.magnitude = m;
            s.sim.injects.push_back(inject("spike:every=75,factor=2.5"));
            char f[32];
            std::snprintf(f, sizeof f, "%g", label == "seqlen" ? m - 1.0 : m);
            const std::string spec =
                parallelFault(label, sim::ParallelLayout{l.tp, l.pp, l.dp}, sd, f, from);
            sim::Inject in = inject(spec);
            s.group = sim::truthKindName(in.kind);
            s.sim.injects.push_back(in);
            s.name = spec + " " + layoutName(l) + " seed " + std::to_string(s.sim.seed);
            out->push_back(std::move(s));
          }
        }
      }
    }
  }
}

// The pipeline schedules (--schedule): tp2pp4dp2 with 8 microbatches under 1f1b,
// interleaved:2, zb-v and dualpipe-v, healthy (balanced and edge-loaded) and with each parallel
// fault kind from step 0 and 100, labelled with the schedule so each gets its own rows.
void addSchedules(const EvalOptions& o, std::vector<Scenario>* out) {
  const sim::ParallelLayout par{2, 4, 2};
  const std::vector<double> mags =
      o.quick ? std::vector<double>{1.2} : std::vector<double>{1.1, 1.2, 1.5, 2.0};
  const std::vector<double> seqMags =
      o.quick ? std::vector<double>{1.2} : std::vector<double>{1.1, 1.2, 1.3};
  uint64_t seed = 11000;
  for (const char* sched : {"1f1b", "interleaved:2", "zb-v", "dualpipe-v"}) {
    auto make = [&](int64_t steps, uint64_t sd) {
      Scenario s = base(par.world(), steps, 0.05, sd);
      s.sim.parallel = par;
      s.sim.schedule = sched;
      s.sim.microbatches = 8;
      return s;
    };
    for (double edge : {0.0, 0.05}) {
      for (int j = 0; j < (o.quick ? 1 : 2); ++j) {
        Scenario s = make(o.quick ? 300 : 1000, ++seed);
        s.group = "healthy";
        s.faultLabel = std::string("healthy sched ") + sched;
        s.sim.edgeLoad = edge;
        s.sim.injects.push_back(inject("spike:every=50,factor=3"));
        s.name = std::string("healthy tp2pp4dp2 sched ") + sched + (edge > 0 ? " edge+5%" : "") +
                 " seed " + std::to_string(seed);
        out->push_back(std::move(s));
      }
    }
    for (const std::string label : {"worker", "stage", "gpu", "p2p", "seqlen"}) {
      for (int64_t from : {int64_t{0}, int64_t{100}}) {
        const int sd = from == 0 ? 1 : 2;  // one seed per onset, the place moves with it
        for (double m : label == "seqlen" ? seqMags : mags) {
          Scenario s = make(300, static_cast<uint64_t>(sd) * 41 + 3);
          s.faultLabel = label + " tp2pp4dp2 sched " + sched;
          s.magnitude = m;
          s.sim.injects.push_back(inject("spike:every=75,factor=2.5"));
          char f[32];
          std::snprintf(f, sizeof f, "%g", label == "seqlen" ? m - 1.0 : m);
          const std::string spec = parallelFault(label, par, sd, f, from);
          sim::Inject in = inject(spec);
          s.group = sim::truthKindName(in.kind);
          s.sim.injects.push_back(in);
          s.name = spec + " tp2pp4dp2 sched " + sched + " seed " + std::to_string(s.sim.seed);
          out->push_back(std::move(s));
        }
      }
    }
  }
}

// The sweep (label 'sweep', issue 11's evaluation grid): layouts from 8 to 1,024 ranks (tp 1-8,
// pp 2-8, dp 1-32, two with expert parallelism; tp1pp4dp2, last, is issue 34's Megatron job,
// whose stage faults slow a stage on both replicas) under each pipeline schedule, with every fault
// kind the layout has (worker and seqlen need dp >= 2, experts ep >= 2) at x1.1/x1.5/x2 (seqlen
// cv 0.1-0.3, experts skew 1.1-2) from step 0 and step 100, and healthy jobs per layout and
// schedule, balanced and edge-loaded. One seed per cell (the grid is large): the seed, and with
// it the place a fault hits, moves with layout, schedule and magnitude. The large layouts run a
// thinner grid so the whole sweep stays within minutes on two cores: simulating and folding a
// 1,024-rank step costs about 200 ms of CPU.
struct SweepLayout {
  sim::ParallelLayout par;
  int64_t faultSteps;    // steps of a fault job
  int64_t healthySteps;  // steps of a healthy job
  // Which (magnitude, onset) cells: kFull every magnitude from step 0 and 100; kEnds x1.1 and
  // x2 only; kOne one cell per kind and schedule, turning with the schedule (x1.1 @0, x1.5 @100,
  // x2 @0, x1.1 @100), so each magnitude and onset is still seen.
  enum class Grid { kFull, kEnds, kOne } grid;
};

std::string sweepLayoutName(const sim::ParallelLayout& l) {
  std::string n =
      "tp" + std::to_string(l.tp) + "pp" + std::to_string(l.pp) + "dp" + std::to_string(l.dp);
  if (l.ep > 1) n += "ep" + std::to_string(l.ep);
  return n;
}

std::vector<SweepLayout> sweepLayouts(bool quick) {
  using L = sim::ParallelLayout;
  using G = SweepLayout::Grid;
  if (quick) return {{L{2, 2, 2}, 200, 300, G::kFull}, {L{2, 4, 4, 1, 2}, 200, 300, G::kEnds}};
  return {{L{2, 2, 2}, 300, 1000, G::kFull},       {L{8, 2, 1}, 300, 1000, G::kFull},
          {L{2, 4, 4, 1, 2}, 300, 1000, G::kFull}, {L{4, 4, 4}, 300, 600, G::kFull},
          {L{8, 4, 8}, 200, 300, G::kEnds},        {L{4, 8, 32, 1, 8}, 150, 150, G::kOne},
          {L{1, 4, 2}, 300, 1000, G::kFull}};
}

void addSweep(const EvalOptions& o, std::vector<Scenario>* out) {
  const std::vector<SweepLayout> layouts = sweepLayouts(o.quick);
  const std::vector<double> mags = {1.1, 1.5, 2.0};
  const std::vector<double> seqMags = {1.1, 1.2, 1.3};
  auto checked = [](Scenario s) {
    if (auto st = sim::validate(s.sim, false); !st) {
      std::fprintf(stderr, "detect_eval: internal sweep error in '%s': %s\n", s.name.c_str(),
                   st.message().c_str());
      std::exit(2);
    }
    return s;
  };
  uint64_t healthySeed = 13000;
  for (size_t li = 0; li < layouts.size(); ++li) {
    const SweepLayout& layout = layouts[li];
    const sim::ParallelLayout& par = layout.par;
    const std::string ln = sweepLayoutName(par);
    for (size_t si = 0; si < 4; ++si) {
      const char* sched = std::array{"1f1b", "interleaved:2", "zb-v", "dualpipe-v"}[si];
      auto make = [&](int64_t steps, uint64_t seed) {
        Scenario s = base(par.world(), steps, 0.05, seed);
        s.sim.parallel = par;
        s.sim.schedule = sched;
        return s;
      };
      for (double edge : {0.0, 0.05}) {
        Scenario s = make(layout.healthySteps, ++healthySeed);
        s.group = "healthy";
        s.faultLabel = std::string("healthy sweep ") + ln + " " + sched;
        s.sim.edgeLoad = edge;
        s.sim.injects.push_back(inject("spike:every=50,factor=3"));
        s.name = "healthy sweep " + ln + " sched " + sched + (edge > 0 ? " edge+5%" : "") +
                 " seed " + std::to_string(healthySeed);
        out->push_back(checked(std::move(s)));
      }
      std::vector<std::pair<size_t, int64_t>> cells;  // (magnitude index, onset)
      for (int64_t from : {int64_t{0}, int64_t{100}}) {
        for (size_t mi = 0; mi < mags.size(); ++mi) {
          if (layout.grid == SweepLayout::Grid::kEnds && mi == 1) continue;
          if (layout.grid != SweepLayout::Grid::kOne) cells.emplace_back(mi, from);
        }
      }
      if (layout.grid == SweepLayout::Grid::kOne) {
        cells.emplace_back(std::array<size_t, 4>{0, 1, 2, 0}[si], si % 2 == 1 ? 100 : 0);
      }
      for (const std::string label : {"worker", "gpu", "stage", "p2p", "seqlen", "experts"}) {
        if ((label == "worker" || label == "seqlen") && par.dp < 2) continue;
        if (label == "experts" && par.ep < 2) continue;
        for (const auto& [mi, from] : cells) {
          // seqlen: the magnitude is 1 + cv, as in the other suites.
          const double m = label == "seqlen" ? seqMags[mi] : mags[mi];
          // The place moves with the cell; the noise draws with the seed.
          const int sd = static_cast<int>(li + si * 3 + mi + (from > 0 ? 5 : 0));
          Scenario s =
              make(layout.faultSteps, 20000 + li * 1000 + si * 100 + mi * 10 + (from > 0 ? 1 : 0));
          s.faultLabel = strCat(label, " sweep ", ln, " ", sched);
          s.magnitude = m;
          s.sim.injects.push_back(inject("spike:every=75,factor=2.5"));
          char f[32];
          std::snprintf(f, sizeof f, "%g", label == "seqlen" ? m - 1.0 : m);
          std::string spec;
          if (label == "experts") {
            spec = "experts:skew=" + std::string(f) + ",ep=" + std::to_string(sd % par.ep) +
                   ",from=" + std::to_string(from);
          } else {
            spec = parallelFault(label, par, sd, f, from);
          }
          sim::Inject in = inject(spec);
          s.group = sim::truthKindName(in.kind);
          s.sim.injects.push_back(in);
          s.name =
              strCat(spec, " sweep ", ln, " sched ", sched, " seed ", std::to_string(s.sim.seed));
          out->push_back(checked(std::move(s)));
        }
      }
    }
  }
}

}  // namespace

// The sweep's fault cells folded two ways, kind x schedule (over layouts) and kind x layout
// (over schedules), scored by the same rules as the full table (which is printed before this),
// plus the healthy sweep jobs' false alarms per layout and schedule: the summary a reader
// compares with the targets.
void printSweepSummary(const std::vector<ScenarioResult>& results, std::FILE* out) {
  std::vector<ScenarioResult> bySched, byLayout;
  std::map<std::string, std::pair<int64_t, int64_t>> healthy;  // "layout sched" -> steps, FAs
  for (const auto& r : results) {
    const std::string& label = r.scenario.faultLabel;
    const size_t at = label.find(" sweep ");
    if (at == std::string::npos) continue;
    // "<kind> sweep <layout> <schedule>"
    const std::string kind = label.substr(0, at);
    const std::string rest = label.substr(at + 7);
    const std::string layout = rest.substr(0, rest.find(' '));
    const std::string sched = rest.substr(rest.find(' ') + 1);
    if (r.scenario.group == "healthy") {
      int64_t fa = 0;
      for (const auto& a : r.detections) fa += a.kind != detect::AnomalyKind::kSpike;
      auto& h = healthy[strCat(layout, " ", sched)];
      h.first += r.stepsJudged;
      h.second += fa;
      continue;
    }
    bySched.push_back(r);
    bySched.back().scenario.faultLabel = strCat(kind, " ", sched);
    byLayout.push_back(r);
    byLayout.back().scenario.faultLabel = strCat(kind, " ", layout);
  }
  if (bySched.empty() && healthy.empty()) return;
  const Targets targets;
  auto table = [&](const std::vector<ScenarioResult>& rs, const char* title) {
    if (rs.empty()) return nlohmann::json();
    std::FILE* sink = std::tmpfile();
    if (sink == nullptr) return nlohmann::json();
    bool passed = false;
    nlohmann::json js = scoreAndPrint(rs, targets, sink, &passed);
    std::fclose(sink);
    std::fprintf(out, "\n==== sweep summary: %s (x1.1-2, seqlen cv 0.1-0.3; targets apply) ====\n",
                 title);
    std::fprintf(out, "%-26s %6s %6s %7s %8s %8s %8s %10s %7s\n", "kind", "faults", "found",
                 "recall", "ranks_ok", "lat_med", "lat_p90", "gain_ok", "target");
    for (const auto& entry : js["groups"]["parallel fault >= 10%"]["kinds"].items()) {
      // Not a structured binding: clang 14 cannot capture one in the lambda below.
      const std::string& label = entry.key();
      const nlohmann::json& k = entry.value();
      auto num = [&](const char* key) {
        return k[key].is_number() ? k[key].get<double>() : std::nan("");
      };
      const double rec = num("recall"), ranks = num("ranks_named");
      const double med = num("latency_median_steps"), p90 = num("latency_p90_steps");
      const bool met = rec >= targets.recall && ranks >= targets.ranksNamed &&
                       med <= targets.latencyMedian && p90 <= targets.latencyP90;
      char gain[32] = "-";
      if (k.contains("gain_judged")) {
        std::snprintf(gain, sizeof gain, "%d/%d", k["gain_within_005"].get<int>(),
                      k["gain_judged"].get<int>());
      }
      char medS[16] = "-", p90S[16] = "-";
      if (!std::isnan(med)) std::snprintf(medS, sizeof medS, "%.1f", med);
      if (!std::isnan(p90)) std::snprintf(p90S, sizeof p90S, "%.1f", p90);
      std::fprintf(out, "%-26s %6d %6d %7.3f %8.3f %8s %8s %10s %7s\n", label.c_str(),
                   k["faults"].get<int>(), k["found"].get<int>(), rec, ranks, medS, p90S, gain,
                   met ? "met" : "NOT met");
    }
    return js;
  };
  table(byLayout, "kind x layout, over the 4 schedules");
  const nlohmann::json js = table(bySched, "kind x schedule, over the layouts");
  if (js.is_object() && js["groups"].contains("parallel fault >= 10%")) {
    std::fprintf(out, "\nsweep precision by detected kind (secondary: another injected kind):\n");
    for (const auto& [kind, p] : js["groups"]["parallel fault >= 10%"]["precision"].items()) {
      std::fprintf(out,
                   "  %-20s matched %5d  secondary %4d  false %3d  precision excl. "
                   "secondary %.3f\n",
                   kind.c_str(), p["matched"].get<int>(), p["secondary"].get<int>(),
                   p["false"].get<int>(), p["precision_excluding_secondary"].get<double>());
    }
  }
  if (!healthy.empty()) {
    std::fprintf(out, "\nsweep healthy jobs (5%% noise, balanced + edge-loaded, checkpoints):\n");
    int64_t steps = 0, fas = 0;
    for (const auto& [key, v] : healthy) {
      std::fprintf(out, "  %-32s %7lld job-steps %3lld false alarms\n", key.c_str(),
                   static_cast<long long>(v.first), static_cast<long long>(v.second));
      steps += v.first;
      fas += v.second;
    }
    std::fprintf(out, "  all: %lld false alarms in %lld job-steps\n", static_cast<long long>(fas),
                 static_cast<long long>(steps));
  }
}

// How well the collector's inference named each schedule (steps right of those inferred).
void printScheduleInference(const std::vector<ScenarioResult>& results, std::FILE* out) {
  std::map<std::string, std::pair<int64_t, int64_t>> bySched;  // (right, steps)
  std::map<std::string, std::set<std::string>> wrong;
  for (const auto& r : results) {
    if (r.scheduleSteps == 0) continue;
    const std::string k = r.scenario.sim.schedule;
    bySched[k].first += r.scheduleRight;
    bySched[k].second += r.scheduleSteps;
    wrong[k].insert(r.scheduleWrong.begin(), r.scheduleWrong.end());
  }
  if (bySched.empty()) return;
  std::fprintf(out, "\n==== schedule inference (collector/topology/schedule.h, per step) ====\n");
  for (const auto& [k, n] : bySched) {
    std::string w;
    for (const auto& x : wrong[k]) w += (w.empty() ? "" : ", ") + x;
    std::fprintf(out, "%-14s right %lld of %lld steps (%.4f)%s%s\n", k.c_str(),
                 static_cast<long long>(n.first), static_cast<long long>(n.second),
                 static_cast<double>(n.first) / static_cast<double>(n.second),
                 w.empty() ? "" : "; wrong guesses: ", w.c_str());
  }
}

namespace {

// MoE jobs (expert parallelism carved out of data parallelism, ep 2-8, one with context
// parallelism too): healthy ones, balanced and edge-loaded, and an experts skew (the experts of
// one expert-parallel index get 1.05-2x the tokens of the others) from step 0 or 100; plus a
// slow worker and a slow stage in one MoE layout, so the all_to_all coupling of replicas is
// seen not to hide them.
void addExperts(const EvalOptions& o, std::vector<Scenario>* out) {
  using L = sim::ParallelLayout;
  const std::vector<L> layouts =
      o.quick ? std::vector<L>{L{2, 2, 4, 1, 2}, L{1, 1, 8, 1, 8}}
              : std::vector<L>{L{2, 2, 4, 1, 2}, L{1, 2, 8, 1, 4}, L{1, 1, 8, 1, 8},
                               L{2, 2, 2, 2, 2}, L{2, 4, 8, 1, 8}};
  auto name = [](const L& l) {
    std::string n =
        "tp" + std::to_string(l.tp) + "pp" + std::to_string(l.pp) + "dp" + std::to_string(l.dp);
    if (l.cp > 1) n += "cp" + std::to_string(l.cp);
    return n + "ep" + std::to_string(l.ep) + " moe";
  };
  auto make = [&](const L& l, int64_t steps, uint64_t seed) {
    Scenario s = base(l.world(), steps, 0.05, seed);
    s.sim.parallel = l;
    return s;
  };
  uint64_t seed = 9000;
  for (const L& l : layouts) {
    for (double edge : {0.0, 0.05}) {
      if (l.pp == 1 && edge > 0) continue;
      for (int j = 0; j < (o.quick ? 1 : 2); ++j) {
        ++seed;
        out->push_back(healthyParallel(make(l, o.quick ? 300 : 1000, seed), name(l), edge, seed));
      }
    }
  }
  const std::vector<double> mags =
      o.quick ? std::vector<double>{1.1, 1.5} : std::vector<double>{1.05, 1.1, 1.2, 1.5, 2.0};
  for (const L& l : layouts) {
    std::vector<std::string> labels = {"experts"};
    if (&l == &layouts.front()) labels = {"experts", "worker", "stage"};
    for (const std::string& label : labels) {
      for (int64_t from : {int64_t{0}, int64_t{100}}) {
        for (int sd = 1; sd <= (o.quick ? 1 : 2); ++sd) {
          for (double m : mags) {
            Scenario s = make(l, 300, static_cast<uint64_t>(sd) * 37 + uint64_t{l.ep} * 5 + l.pp);
            s.faultLabel = label + ' ' + name(l);
            s.magnitude = m;
            s.sim.injects.push_back(inject("spike:every=75,factor=2.5"));
            char f[32];
            std::snprintf(f, sizeof f, "%g", m);
            const std::string at = ",from=" + std::to_string(from);
            const uint32_t pp = static_cast<uint32_t>(sd + 1) % l.pp;
            const uint32_t dp = static_cast<uint32_t>(sd * 3 + 1) % l.dp;
            std::string spec;
            if (label == "experts") {
              spec = "experts:skew=" + std::string(f) + ",ep=" + std::to_string(sd % l.ep) + at;
            } else if (label == "worker") {
              spec = "worker:dp=" + std::to_string(dp) + ",pp=" + std::to_string(pp) +
                     ",factor=" + f + at;
            } else {
              spec = "stage:pp=" + std::to_string(pp) + ",factor=" + f + at;
            }
            sim::Inject in = inject(spec);
            s.group = sim::truthKindName(in.kind);
            s.sim.injects.push_back(in);
            s.name = spec + " " + name(l) + " seed " + std::to_string(s.sim.seed);
            out->push_back(std::move(s));
          }
        }
      }
    }
  }
}

}  // namespace

std::string sweepLayoutsText(bool quick) {
  std::string ls;
  for (const auto& l : sweepLayouts(quick)) {
    ls += (ls.empty() ? "" : ", ") + sweepLayoutName(l.par) + " (" + std::to_string(l.par.world()) +
          "r, " + std::to_string(l.faultSteps) + " steps" +
          (l.grid == SweepLayout::Grid::kEnds  ? ", x1.1/x2 only"
           : l.grid == SweepLayout::Grid::kOne ? ", one cell per kind and schedule"
                                               : "") +
          ")";
  }
  return ls;
}

std::vector<Scenario> buildSuite(const EvalOptions& o) {
  if (o.noiseSweep) return noiseSweep(o);
  std::vector<Scenario> out;
  const int seeds = std::max(1, o.seeds);
  // Healthy jobs: checkpoints every 50 steps at 3x a step; 5 % noise carries the false-alarm
  // target (>= 100,000 job-steps), 2 % and 10 % are reported.
  struct Size {
    uint32_t ranks;
    int64_t steps;
    int jobs;
  };
  const int64_t healthyTarget = o.quick ? 10000 : 100000;
  std::vector<Size> sizes5 = o.quick
                                 ? std::vector<Size>{{64, 500, 1}, {256, 200, 1}, {1024, 100, 1}}
                                 : std::vector<Size>{{64, 1000, 3}, {256, 500, 1}, {1024, 200, 1}};
  int64_t bigSteps = 0;
  for (const Size& z : sizes5) bigSteps += z.steps * z.jobs;
  const int64_t smallSteps = o.quick ? 1000 : 2000;
  sizes5.insert(
      sizes5.begin(),
      {8, smallSteps, static_cast<int>((healthyTarget - bigSteps + smallSteps - 1) / smallSteps)});
  auto addHealthy = [&](const std::vector<Size>& sizes, double noise) {
    uint64_t seed = 1000;
    for (const Size& z : sizes) {
      for (int j = 0; j < z.jobs; ++j) {
        Scenario s = base(z.ranks, z.steps, noise, ++seed);
        s.group = "healthy";
        s.faultLabel = "healthy";
        s.sim.injects.push_back(inject("spike:every=50,factor=3"));
        s.name = "healthy " + std::to_string(z.ranks) + "r noise " +
                 std::to_string(static_cast<int>(noise * 100)) + "% seed " + std::to_string(seed);
        out.push_back(std::move(s));
      }
    }
  };
  addHealthy(sizes5, 0.05);
  std::vector<Size> other =
      o.quick
          ? std::vector<Size>{{8, 500, 1}, {64, 300, 1}}
          : std::vector<Size>{{8, 1000, seeds}, {64, 500, seeds}, {256, 300, 1}, {1024, 150, 1}};
  addHealthy(other, 0.02);
  addHealthy(other, 0.10);

  // Faults on a 16-rank job of 500 steps with checkpoints every 75 steps.
  const std::vector<double> mags = {1.05, 1.1, 1.2, 1.5, 2.0};
  const std::vector<int64_t> onsets = {60, 400};
  const char* kOp = "aten::matmul";
  auto addFault = [&](const std::string& label, double mag, int64_t from, double noise,
                      uint64_t seed, uint32_t ranks = 16) {
    Scenario s = base(ranks, 500, noise, seed);
    s.faultLabel = label;
    s.magnitude = label == "hang" ? 0.0 : mag;
    s.sim.injects.push_back(inject("spike:every=75,factor=2.5"));
    const uint32_t rank = static_cast<uint32_t>((seed * 5 + 3) % ranks);
    char f[32];
    std::snprintf(f, sizeof f, "%g", mag);
    const std::string rk = std::to_string(rank), at = std::to_string(from);
    std::string spec;
    if (label == "straggler") spec = "straggler:rank=" + rk + ",from=" + at + ",factor=" + f;
    if (label == "step_shift") spec = "shift:from=" + at + ",factor=" + f;
    if (label == "slow_comm") spec = "comm:rank=" + rk + ",from=" + at + ",factor=" + f;
    if (label == "op_one_rank")
      spec = std::string("op:name=") + kOp + ",rank=" + rk + ",from=" + at + ",factor=" + f;
    if (label == "op_all_ranks")
      spec = std::string("op:name=") + kOp + ",from=" + at + ",factor=" + f;
    if (label == "hang") spec = "hang:rank=" + rk + ",at=" + at;
    sim::Inject in = inject(spec);
    s.group = sim::truthKindName(in.kind);
    s.sim.injects.push_back(in);
    if (label == "hang") s.sim.steps = from + 1;
    char name[160];
    std::snprintf(name, sizeof name, "%s x%s @%lld noise %d%% seed %llu%s", label.c_str(),
                  label == "hang" ? "-" : f, static_cast<long long>(from),
                  static_cast<int>(noise * 100), static_cast<unsigned long long>(seed),
                  ranks == 16 ? "" : (" " + std::to_string(ranks) + " ranks").c_str());
    s.name = name;
    out.push_back(std::move(s));
  };
  const std::vector<std::string> labels = {"straggler",   "step_shift",   "slow_comm",
                                           "op_one_rank", "op_all_ranks", "hang"};
  const int faultSeeds = o.quick ? 1 : seeds;
  for (const auto& label : labels) {
    for (int64_t from : onsets) {
      for (int sd = 1; sd <= faultSeeds; ++sd) {
        if (label == "hang") {
          addFault(label, 0.0, from, 0.05, static_cast<uint64_t>(sd));
          continue;
        }
        for (double m : mags) addFault(label, m, from, 0.05, static_cast<uint64_t>(sd));
      }
    }
    // Faults present from the first steps (issue 10, honest onsets): a rank slower than its
    // peers from step 0 or 3 is a straggler from that step; a hang in step 3 (no typical step
    // time learned yet). Other kinds are judged against the job's own history, which a fault
    // present from the start is part of.
    if (label == "straggler") {
      for (int64_t from : {int64_t{0}, int64_t{3}}) {
        for (int sd = 1; sd <= faultSeeds; ++sd) {
          for (double m : mags) {
            if (m >= 1.1 - 1e-9) addFault(label, m, from, 0.05, static_cast<uint64_t>(sd));
          }
        }
      }
    }
    if (label == "hang") addFault(label, 0.0, 3, 0.05, 1);
    if (o.quick) continue;
    if (label == "hang") {
      // Hangs are cheap to run (they end at the hang): more stuck ranks (seed picks the rank)
      // and larger jobs, so the share of detections naming the right rank means something.
      for (int sd = seeds + 1; sd <= std::max(seeds, 10); ++sd) {
        addFault(label, 0.0, sd % 2 == 0 ? 60 : 400, 0.05, static_cast<uint64_t>(sd));
      }
      addFault(label, 0.0, 60, 0.05, 1, 64);
      addFault(label, 0.0, 60, 0.05, 2, 256);
    }
    for (double noise : {0.02, 0.10}) {
      if (label == "hang") {
        addFault(label, 0.0, 60, noise, 101);
        continue;
      }
      for (double m : {1.1, 1.5}) addFault(label, m, 60, noise, 101);
    }
  }
  addParallel(o, &out);
  addSchedules(o, &out);
  addExperts(o, &out);
  // The sweep is large: only when asked for by name (--only sweep, --only "seqlen sweep", ...),
  // so that the other selections run and read as before.
  if (o.only.find("sweep") != std::string::npos) addSweep(o, &out);
  if (!o.only.empty()) {
    std::vector<Scenario> kept;
    for (auto& s : out) {
      if (s.group.find(o.only) != std::string::npos ||
          s.faultLabel.find(o.only) != std::string::npos ||
          s.name.find(o.only) != std::string::npos) {
        kept.push_back(std::move(s));
      }
    }
    out.swap(kept);
  }
  return out;
}

}  // namespace trainscope::bench
