#include "tools/bench/detect_eval/eval_score.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace trainscope::bench {
namespace {

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  double pos = q * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

bool kindMatches(const detect::Anomaly& a, const TruthFault& t) {
  if (detect::anomalyKindName(a.kind) != t.kind) return false;
  if (t.kind == "op_regression") {
    auto it = a.labels.find("op");
    if (it == a.labels.end() || it->second != t.op) return false;
  }
  if (t.kind == "hang") return a.detectedNs >= t.startNs;
  return a.detectedStep >= t.fromStep;
}

bool active(const detect::Anomaly& a, const TruthFault& t) {
  return t.kind == "hang" ? a.detectedNs >= t.startNs : a.detectedStep >= t.fromStep;
}

// The ranks are right when they include a faulty rank and, for a single-rank fault, name at
// most 2 others; for a job-wide fault, when they include every faulty rank.
bool ranksRight(const detect::Anomaly& a, const TruthFault& t, uint32_t world) {
  std::set<uint32_t> named(a.ranks.begin(), a.ranks.end());
  if (t.ranks.size() == 1) {
    return named.count(t.ranks[0]) > 0 && named.size() <= 3;
  }
  (void)world;
  for (uint32_t r : t.ranks) {
    if (!named.count(r)) return false;
  }
  return true;
}

struct Cell {
  int faults = 0;
  int found = 0;
  int ranksOk = 0;
  int ranksExact = 0;                 // named exactly the faulty ranks
  std::vector<double> latency;        // steps
  std::vector<double> latencyS;       // seconds (hangs)
  std::vector<double> onsetErr;       // |reported onset - true onset|, steps
  std::vector<double> gainErr;        // evidence.estimated_gain - truth gain, where both exist
  std::vector<double> gainAtOpenErr;  // the same with the gain it opened with (refreshed later)
  nlohmann::json gains = nlohmann::json::array();  // per fault: scenario, estimate, truth
  std::vector<std::string> missed;
};

struct KindPrecision {
  int matched = 0;
  int secondary = 0;
  int falseAlarms = 0;
  std::map<std::string, int> secondaryBy;  // injected kind -> count
};

// "tp2pp4dp2" (and the edge load of a naturally unbalanced pipeline) for --parallel jobs.
std::string layoutName(const sim::SimOptions& o) {
  if (!o.parallel) return "";
  std::string s = "tp" + std::to_string(o.parallel->tp) + "pp" + std::to_string(o.parallel->pp) +
                  "dp" + std::to_string(o.parallel->dp);
  if (o.parallel->cp > 1) s += "cp" + std::to_string(o.parallel->cp);
  if (o.parallel->ep > 1) s += "ep" + std::to_string(o.parallel->ep);
  if (o.edgeLoad > 0) s += " edge+" + std::to_string(static_cast<int>(o.edgeLoad * 100)) + '%';
  return s;
}

std::string fmt(double v, const char* f = "%.2f") {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

nlohmann::json scoreAndPrint(const std::vector<ScenarioResult>& results, const Targets& targets,
                             std::FILE* out, bool* passed) {
  nlohmann::json js;
  bool ok = true;
  // group ("fault >= 10%" / "fault 5%") -> fault label -> (magnitude, onset) cell
  std::map<std::string, std::map<std::string, std::map<std::pair<double, int64_t>, Cell>>> cells;
  std::map<std::string, std::map<std::string, KindPrecision>> precision;  // group -> det kind
  std::map<std::string, std::vector<std::string>> falseList;
  std::map<std::string, std::vector<std::string>> secondaryList;
  int64_t healthySteps5 = 0, healthyFalse5 = 0;
  int64_t parallelSteps = 0, parallelFalse = 0;  // healthy --parallel layouts, every noise
  std::map<std::string, std::pair<int64_t, int64_t>> healthyBy;  // "ranks/noise" -> steps, FAs
  int64_t totalNs = 0;
  uint64_t totalReports = 0;
  std::vector<std::string> healthyFalseList;
  std::map<uint32_t, std::pair<int64_t, uint64_t>> costByRanks;  // ranks -> ns, reports

  for (const ScenarioResult& r : results) {
    totalNs += r.detectNs;
    totalReports += r.reports;
    costByRanks[r.scenario.sim.ranks].first += r.detectNs;
    costByRanks[r.scenario.sim.ranks].second += r.reports;
    const Scenario& sc = r.scenario;
    if (sc.group == "healthy") {
      int fa = 0;
      for (const auto& a : r.detections) {
        if (a.kind == detect::AnomalyKind::kSpike) continue;
        ++fa;
        if (healthyFalseList.size() < 20) healthyFalseList.push_back(sc.name + ": " + a.summary);
      }
      char key[96];
      const std::string layout = layoutName(sc.sim);
      std::snprintf(key, sizeof key, "%5u ranks%s%s, noise %2.0f%%", sc.sim.ranks,
                    layout.empty() ? "" : " ", layout.c_str(), sc.sim.noise * 100);
      healthyBy[key].first += r.stepsJudged;
      healthyBy[key].second += fa;
      if (sc.sim.parallel) {
        parallelSteps += r.stepsJudged;
        parallelFalse += fa;
      } else if (std::fabs(sc.sim.noise - 0.05) < 1e-9) {
        healthySteps5 += r.stepsJudged;
        healthyFalse5 += fa;
      }
      continue;
    }
    // --parallel jobs in groups of their own, so the flat jobs' tables stay comparable.
    const std::string grp =
        std::string(sc.sim.parallel ? "parallel " : "") +
        (sc.magnitude == 0.0 || sc.magnitude >= 1.1 - 1e-9 ? "fault >= 10%" : "fault 5%");
    for (const TruthFault& t : r.truth) {
      Cell& c = cells[grp][sc.faultLabel][{sc.magnitude, t.fromStep}];
      ++c.faults;
      const detect::Anomaly* first = nullptr;
      for (const auto& a : r.detections) {
        if (kindMatches(a, t)) {
          first = &a;
          break;
        }
      }
      if (first == nullptr) {
        c.missed.push_back(sc.name);
        continue;
      }
      ++c.found;
      if (ranksRight(*first, t, sc.sim.ranks)) ++c.ranksOk;
      if (std::set<uint32_t>(first->ranks.begin(), first->ranks.end()) ==
          std::set<uint32_t>(t.ranks.begin(), t.ranks.end())) {
        ++c.ranksExact;
      }
      c.onsetErr.push_back(static_cast<double>(std::llabs(first->onsetStep - t.fromStep)));
      if (auto g = first->evidence.find("estimated_gain");
          g != first->evidence.end() && !std::isnan(t.gain)) {
        c.gainErr.push_back(g->second - t.gain);
        nlohmann::json row = {{"scenario", sc.name}, {"estimate", g->second}, {"truth", t.gain}};
        if (auto o = first->evidence.find("estimated_gain_at_open"); o != first->evidence.end()) {
          row["estimate_at_open"] = o->second;
          c.gainAtOpenErr.push_back(o->second - t.gain);
        } else {
          c.gainAtOpenErr.push_back(g->second - t.gain);
        }
        c.gains.push_back(std::move(row));
      }
      if (t.kind == "hang") {
        double s = static_cast<double>(first->detectedNs - t.startNs) / 1e9;
        c.latencyS.push_back(s);
        c.latency.push_back(std::ceil(s * 1e9 / r.stepNs));
      } else {
        c.latency.push_back(static_cast<double>(first->detectedStep - t.fromStep));
      }
    }
    for (const auto& a : r.detections) {
      if (a.kind == detect::AnomalyKind::kSpike) continue;
      KindPrecision& p = precision[grp][detect::anomalyKindName(a.kind)];
      bool matched = false, secondary = false;
      std::string by;
      for (const TruthFault& t : r.truth) {
        if (kindMatches(a, t))
          matched = true;
        else if (active(a, t) && t.kind != detect::anomalyKindName(a.kind)) {
          secondary = true;
          by = t.kind;
        } else if (active(a, t) && t.kind == "op_regression") {
          secondary = true;  // an op fault moving another op (shared compute): same cause
          by = "op_regression (other op)";
        }
      }
      if (matched) {
        ++p.matched;
      } else if (secondary) {
        ++p.secondary;
        ++p.secondaryBy[by];
        if (secondaryList[grp].size() < 12) {
          secondaryList[grp].push_back(sc.name + ": [" + by + "] detected at step " +
                                       std::to_string(a.detectedStep) + ": " + a.summary);
        }
      } else {
        ++p.falseAlarms;
        if (falseList[grp].size() < 12) falseList[grp].push_back(sc.name + ": " + a.summary);
      }
    }
  }

  const double costNs =
      totalReports ? static_cast<double>(totalNs) / static_cast<double>(totalReports) : 0.0;
  for (const auto& [grp, labels] : cells) {
    const bool isTarget = grp.size() >= 12 && grp.compare(grp.size() - 12, 12, "fault >= 10%") == 0;
    std::fprintf(out, "\n==== %s%s ====\n", grp.c_str(),
                 isTarget ? " (targets apply)" : " (reported, no target)");
    nlohmann::json jg;
    for (const auto& [label, byCell] : labels) {
      std::fprintf(out, "\n-- %s --\n", label.c_str());
      std::fprintf(out, "%-8s %-6s %6s %6s %7s %8s %8s %8s %9s\n", "factor", "onset", "faults",
                   "found", "recall", "ranks_ok", "lat_med", "lat_p90", "onset_err");
      Cell all;
      for (const auto& [key, c] : byCell) {
        double rec = c.faults ? static_cast<double>(c.found) / c.faults : 0.0;
        std::fprintf(out, "%-8s %-6lld %6d %6d %7.3f %8s %8s %8s %9s\n",
                     key.first == 0.0 ? "hang" : fmt(key.first).c_str(),
                     static_cast<long long>(key.second), c.faults, c.found, rec,
                     c.found ? fmt(static_cast<double>(c.ranksOk) / c.found, "%.3f").c_str() : "-",
                     fmt(quantile(c.latency, 0.5), "%.1f").c_str(),
                     fmt(quantile(c.latency, 0.9), "%.1f").c_str(),
                     fmt(quantile(c.onsetErr, 0.5), "%.1f").c_str());
        all.faults += c.faults;
        all.found += c.found;
        all.ranksOk += c.ranksOk;
        all.ranksExact += c.ranksExact;
        all.latency.insert(all.latency.end(), c.latency.begin(), c.latency.end());
        all.latencyS.insert(all.latencyS.end(), c.latencyS.begin(), c.latencyS.end());
        all.onsetErr.insert(all.onsetErr.end(), c.onsetErr.begin(), c.onsetErr.end());
        all.gainErr.insert(all.gainErr.end(), c.gainErr.begin(), c.gainErr.end());
        all.gainAtOpenErr.insert(all.gainAtOpenErr.end(), c.gainAtOpenErr.begin(),
                                 c.gainAtOpenErr.end());
        for (const auto& g : c.gains) all.gains.push_back(g);
        all.missed.insert(all.missed.end(), c.missed.begin(), c.missed.end());
      }
      double rec = all.faults ? static_cast<double>(all.found) / all.faults : 0.0;
      double ranks = all.found ? static_cast<double>(all.ranksOk) / all.found : 0.0;
      double med = quantile(all.latency, 0.5), p90 = quantile(all.latency, 0.9);
      std::fprintf(out, "%-15s %6d %6d %7.3f %8.3f %8s %8s %9s\n", "all", all.faults, all.found,
                   rec, ranks, fmt(med, "%.1f").c_str(), fmt(p90, "%.1f").c_str(),
                   fmt(quantile(all.onsetErr, 0.5), "%.1f").c_str());
      std::vector<double> gainAbs;
      for (double e : all.gainErr) gainAbs.push_back(std::fabs(e));
      const size_t gainOk = static_cast<size_t>(
          std::count_if(gainAbs.begin(), gainAbs.end(), [](double e) { return e <= 0.05; }));
      if (!all.gainErr.empty()) {
        std::fprintf(out,
                     "  estimated_gain within +-0.05 of the truth (same job without the fault): "
                     "%zu of %zu (|error| median %.3f, p90 %.3f; estimate - truth from %+.3f "
                     "to %+.3f)\n",
                     gainOk, all.gainErr.size(), quantile(gainAbs, 0.5), quantile(gainAbs, 0.9),
                     quantile(all.gainErr, 0.0), quantile(all.gainErr, 1.0));
        if (all.gainAtOpenErr != all.gainErr) {
          // Refreshed while open: what it said when it opened.
          const size_t atOpenOk =
              static_cast<size_t>(std::count_if(all.gainAtOpenErr.begin(), all.gainAtOpenErr.end(),
                                                [](double e) { return std::fabs(e) <= 0.05; }));
          std::fprintf(out, "  (as opened, before its refreshes: %zu of %zu within +-0.05)\n",
                       atOpenOk, all.gainAtOpenErr.size());
        }
      }
      if (!all.latencyS.empty()) {
        std::fprintf(out, "  hang latency: median %.1f s, p90 %.1f s after the hung step began\n",
                     quantile(all.latencyS, 0.5), quantile(all.latencyS, 0.9));
      }
      // Why ranks_ok can be low here, in the table itself (see last_run.txt).
      if (label == "slow_comm") {
        std::fprintf(out,
                     "  note: a slow link slows the whole ring alike; the ranks are told by the "
                     "links' in-flight time per byte (StepReport.links), named as sender and "
                     "peer\n");
      }
      if (label.rfind("gpu", 0) == 0 || label == "par_gpu") {
        std::fprintf(out,
                     "  note: a slow GPU is named alone when its tp peers' collectives show them "
                     "waiting for it; named exactly the slow rank: %d of %d\n",
                     all.ranksExact, all.found);
      }
      if (label == "hang") {
        std::fprintf(out,
                     "  note: every rank's last report is the step before the hang; the probes' "
                     "progress (in each RankHello) tells the stuck rank (no open collective) "
                     "from its peers waiting in one; named exactly the stuck rank: %d of %d\n",
                     all.ranksExact, all.found);
      }
      for (size_t i = 0; i < all.missed.size() && i < 8; ++i) {
        std::fprintf(out, "  missed: %s\n", all.missed[i].c_str());
      }
      if (all.missed.size() > 8) std::fprintf(out, "  ... %zu missed in all\n", all.missed.size());
      bool latencyApplies = label != "hang";
      if (isTarget) {
        bool cellOk =
            rec >= targets.recall && ranks >= targets.ranksNamed &&
            (!latencyApplies || (med <= targets.latencyMedian && p90 <= targets.latencyP90));
        if (!cellOk) ok = false;
        std::fprintf(out, "  target: %s\n", cellOk ? "met" : "NOT met");
      }
      jg[label] = {
          {"faults", all.faults},
          {"found", all.found},
          {"recall", rec},
          {"ranks_named", ranks},
          {"latency_median_steps", std::isnan(med) ? nlohmann::json() : nlohmann::json(med)},
          {"latency_p90_steps", std::isnan(p90) ? nlohmann::json() : nlohmann::json(p90)},
          {"onset_error_median_steps",
           all.onsetErr.empty() ? nlohmann::json() : nlohmann::json(quantile(all.onsetErr, 0.5))},
          {"missed", all.missed}};
      if (!all.latencyS.empty()) jg[label]["latency_median_s"] = quantile(all.latencyS, 0.5);
      if (!all.gainErr.empty()) {
        jg[label]["gain_within_005"] = gainOk;
        jg[label]["gain_judged"] = all.gainErr.size();
        jg[label]["gain_abs_error_median"] = quantile(gainAbs, 0.5);
        jg[label]["gain_error_signed_median"] = quantile(all.gainErr, 0.5);
        jg[label]["gains"] = all.gains;
        jg[label]["gain_at_open_within_005"] =
            std::count_if(all.gainAtOpenErr.begin(), all.gainAtOpenErr.end(),
                          [](double e) { return std::fabs(e) <= 0.05; });
      }
    }
    std::fprintf(out, "\nprecision by detected kind (%s):\n", grp.c_str());
    std::fprintf(out, "%-14s %8s %10s %6s %10s %14s\n", "kind", "matched", "secondary", "false",
                 "precision", "prec_excl_2nd");
    nlohmann::json jp;
    for (const auto& [kind, p] : precision[grp]) {
      int all = p.matched + p.secondary + p.falseAlarms;
      double strict = all ? static_cast<double>(p.matched) / all : 1.0;
      int excl = p.matched + p.falseAlarms;
      double loose = excl ? static_cast<double>(p.matched) / excl : 1.0;
      std::string by;
      for (const auto& [k, n] : p.secondaryBy)
        by += (by.empty() ? "" : ", ") + k + " " + std::to_string(n);
      std::fprintf(out, "%-14s %8d %10d %6d %10.3f %14.3f  %s\n", kind.c_str(), p.matched,
                   p.secondary, p.falseAlarms, strict, loose,
                   by.empty() ? "" : ("(secondary to: " + by + ")").c_str());
      if (isTarget && loose < targets.precision) ok = false;
      jp[kind] = {{"matched", p.matched},
                  {"secondary", p.secondary},
                  {"false", p.falseAlarms},
                  {"precision", strict},
                  {"precision_excluding_secondary", loose},
                  {"secondary_to", p.secondaryBy}};
    }
    for (const auto& s : falseList[grp]) std::fprintf(out, "  false: %s\n", s.c_str());
    for (const auto& s : secondaryList[grp]) std::fprintf(out, "  secondary: %s\n", s.c_str());
    js["groups"][grp] = {{"kinds", jg}, {"precision", jp}};
  }

  std::fprintf(
      out, "\n==== healthy jobs (spike notices allowed; anything else is a false alarm) ====\n");
  for (const auto& [key, v] : healthyBy) {
    std::fprintf(out, "%s: %8lld job-steps, %3lld false alarms\n", key.c_str(),
                 static_cast<long long>(v.first), static_cast<long long>(v.second));
    js["healthy"][key] = {{"job_steps", v.first}, {"false_alarms", v.second}};
  }
  for (const auto& s : healthyFalseList) std::fprintf(out, "  false: %s\n", s.c_str());
  double per100k =
      healthySteps5 ? 1e5 * static_cast<double>(healthyFalse5) / static_cast<double>(healthySteps5)
                    : 0.0;
  bool faOk = healthyFalse5 == 0 && healthySteps5 >= 100000 && parallelFalse == 0;
  bool costOk = !targets.scoreCost || costNs <= targets.costNsPerReport;
  if (!faOk || !costOk) ok = false;

  std::fprintf(out, "\n==== summary ====\n");
  if (parallelSteps > 0) {
    std::fprintf(out,
                 "false alarms on healthy --parallel layouts (balanced and unbalanced pipelines, "
                 "checkpoints): %lld in %lld job-steps\n",
                 static_cast<long long>(parallelFalse), static_cast<long long>(parallelSteps));
    js["false_alarms_parallel"] = {{"healthy_job_steps", parallelSteps},
                                   {"false_alarms", parallelFalse}};
  }
  std::fprintf(out,
               "false alarms at 5%% noise with checkpoints: %lld in %lld healthy job-steps = %.2f "
               "per 100k (target 0 in >= 100k: %s)\n",
               static_cast<long long>(healthyFalse5), static_cast<long long>(healthySteps5),
               per100k, faOk ? "met" : "NOT met");
  if (!targets.scoreCost) {
    std::fprintf(out, "detector cost: not measured here (%llu step reports)\n",
                 static_cast<unsigned long long>(totalReports));
  } else {
    std::fprintf(out,
                 "detector cost: %.0f ns per step report over %llu reports (target <= %.0f: %s)\n",
                 costNs, static_cast<unsigned long long>(totalReports), targets.costNsPerReport,
                 costOk ? "met" : "NOT met");
  }
  for (const auto& [ranks, v] : costByRanks) {
    if (!targets.scoreCost) break;
    double c = v.second ? static_cast<double>(v.first) / static_cast<double>(v.second) : 0.0;
    std::fprintf(out, "  cost in %4u-rank jobs: %.0f ns per report over %llu reports\n", ranks, c,
                 static_cast<unsigned long long>(v.second));
    js["cost_ns_per_report_by_ranks"][std::to_string(ranks)] = c;
  }
  std::fprintf(out, "all targets: %s\n", ok ? "MET" : "NOT MET");
  js["false_alarms"] = {{"healthy_job_steps_5pct", healthySteps5},
                        {"false_alarms_5pct", healthyFalse5},
                        {"per_100k", per100k}};
  js["cost_ns_per_report"] = costNs;
  js["reports"] = totalReports;
  js["targets_met"] = ok;
  *passed = ok;
  return js;
}

}  // namespace trainscope::bench
