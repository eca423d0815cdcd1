#include "tools/simtrain/truth.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "common/median.h"
#include "tools/simtrain/step_model.h"

namespace trainscope::sim {

std::vector<double> truthGains(const SimOptions& options) {
  std::vector<double> out(options.injects.size(), std::numeric_limits<double>::quiet_NaN());
  const int64_t steps =
      options.steps > 0 ? std::min(options.steps, kTruthGainSteps) : kTruthGainSteps;
  for (size_t i = 0; i < options.injects.size(); ++i) {
    const Inject& in = options.injects[i];
    if (in.kind == Inject::Kind::kHang || in.kind == Inject::Kind::kSpike) continue;
    SimOptions without = options;
    without.injects.erase(without.injects.begin() + static_cast<std::ptrdiff_t>(i));
    StepModel faulty(options);
    StepModel healthy(without);
    std::vector<double> gains;
    int64_t a = 0;
    int64_t b = 0;
    for (int64_t s = 0; s < steps; ++s) {
      const StepTimeline x = faulty.step(s, a);
      const StepTimeline y = healthy.step(s, b);
      const auto tx = static_cast<double>(x.endNs - x.beginNs);
      const auto ty = static_cast<double>(y.endNs - y.beginNs);
      if (s >= in.fromStep && s >= options.warmup && tx > 0) gains.push_back((tx - ty) / tx);
      a = x.endNs;
      b = y.endNs;
    }
    if (!gains.empty()) out[i] = medianInPlace(gains);
  }
  return out;
}

nlohmann::json truthJson(const SimOptions& options) {
  nlohmann::json list = nlohmann::json::array();
  const std::vector<double> gains = truthGains(options);
  for (size_t i = 0; i < options.injects.size(); ++i) {
    const Inject& in = options.injects[i];
    nlohmann::json t;
    if (std::isfinite(gains[i])) t["gain"] = gains[i];
    t["kind"] = truthKindName(in.kind);
    t["ranks"] = injectRanks(options, in);
    t["from_step"] = in.fromStep;
    t["factor"] = in.factor;
    switch (in.kind) {
      case Inject::Kind::kOp:
        t["op"] = in.op;
        break;
      case Inject::Kind::kHang:
        t["from_step"] = in.atStep;
        t["factor"] = 0.0;
        break;
      case Inject::Kind::kStage:
        t["pp"] = in.pp;
        break;
      case Inject::Kind::kWorker:
        t["pp"] = in.pp;
        t["dp"] = in.dp;
        t["coords"] = {{"pp", in.pp}, {"dp", in.dp}};
        break;
      case Inject::Kind::kGpu:
        if (options.parallel && in.rank) {
          const ParallelLayout& par = *options.parallel;
          t["coords"] = {{"pp", par.ppIndex(*in.rank)},
                         {"dp", par.dpIndex(*in.rank)},
                         {"tp", par.tpIndex(*in.rank)}};
        }
        break;
      case Inject::Kind::kSeqlen:
        t["cv"] = in.cv;
        t["factor"] = 1.0 + in.cv;
        break;
      case Inject::Kind::kP2p:
        t["from_rank"] = in.rank.value_or(0);
        t["to_rank"] = in.to;
        break;
      case Inject::Kind::kExperts:
        t["ep"] = in.ep;
        t["skew"] = in.factor;
        t["coords"] = {{"ep", in.ep}};
        break;
      case Inject::Kind::kSpike:
        t["from_step"] = in.every;  // the first step that carries a checkpoint
        t["every"] = in.every;
        break;
      default:
        break;
    }
    if (options.parallel) {
      // The pipeline a fault ran under: its effect (and the gain of fixing it) depends on it.
      t["schedule"] = options.schedule;
      t["microbatches"] =
          options.microbatches > 0 ? options.microbatches : 2 * options.parallel->pp;
    }
    list.push_back(std::move(t));
  }
  return list;
}

Status writeTruth(const SimOptions& options, const std::string& path) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return Status::error("--truth '" + path + "': cannot open for writing");
    out << truthJson(options).dump(2) << "\n";
    if (!out.flush()) return Status::error("--truth '" + path + "': write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::error("--truth '" + path + "': cannot rename into place");
  }
  return Status::ok();
}

}  // namespace trainscope::sim
