#include "tools/simtrain/truth.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>

#include <pthread.h>
#include <sched.h>

#include "common/median.h"
#include "tools/simtrain/step_model.h"

namespace trainscope::sim {

namespace {

bool hasGain(const Inject& in) {
  return in.kind != Inject::Kind::kHang && in.kind != Inject::Kind::kSpike;
}

}  // namespace

bool hasTruthGains(const SimOptions& options) {
  return std::any_of(options.injects.begin(), options.injects.end(), hasGain);
}

std::vector<double> truthGains(const SimOptions& options, const std::atomic<bool>* stop) {
  const size_t n = options.injects.size();
  std::vector<double> out(n, std::numeric_limits<double>::quiet_NaN());
  const int64_t steps =
      options.steps > 0 ? std::min(options.steps, kTruthGainSteps) : kTruthGainSteps;
  // The faulty job once, and beside it, step by step, the job without each fault (so an early
  // stop leaves every fault the same steps).
  StepModel faulty(options);
  std::vector<std::optional<StepModel>> healthy(n);
  std::vector<int64_t> healthyEnd(n, 0);
  std::vector<std::vector<double>> gains(n);
  for (size_t i = 0; i < n; ++i) {
    if (!hasGain(options.injects[i])) continue;
    SimOptions without = options;
    without.injects.erase(without.injects.begin() + static_cast<std::ptrdiff_t>(i));
    healthy[i].emplace(without);
  }
  int64_t faultyEnd = 0;
  for (int64_t s = 0; s < steps; ++s) {
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) break;
    const StepTimeline x = faulty.step(s, faultyEnd);
    const auto tx = static_cast<double>(x.endNs - x.beginNs);
    for (size_t i = 0; i < n; ++i) {
      if (!healthy[i]) continue;
      const StepTimeline y = healthy[i]->step(s, healthyEnd[i]);
      const auto ty = static_cast<double>(y.endNs - y.beginNs);
      if (s >= options.injects[i].fromStep && s >= options.warmup && tx > 0) {
        gains[i].push_back((tx - ty) / tx);
      }
      healthyEnd[i] = y.endNs;
    }
    faultyEnd = x.endNs;
  }
  for (size_t i = 0; i < n; ++i) {
    if (!gains[i].empty()) out[i] = medianInPlace(gains[i]);
  }
  return out;
}

nlohmann::json truthJson(const SimOptions& options) {
  return truthJson(options, truthGains(options));
}

nlohmann::json truthJson(const SimOptions& options, const std::vector<double>& gains) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < options.injects.size(); ++i) {
    const Inject& in = options.injects[i];
    nlohmann::json t;
    if (i < gains.size() && std::isfinite(gains[i])) t["gain"] = gains[i];
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

Status writeTruth(const SimOptions& options, const std::string& path,
                  const std::vector<double>& gains) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return Status::error("--truth '" + path + "': cannot open for writing");
    out << truthJson(options, gains).dump(2) << "\n";
    if (!out.flush()) return Status::error("--truth '" + path + "': write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::error("--truth '" + path + "': cannot rename into place");
  }
  return Status::ok();
}

TruthWriter::~TruthWriter() {
  (void)finish(true);
}

Status TruthWriter::start(const SimOptions& options) {
  if (Status st = writeTruth(options, options.truthFile, {}); !st) return st;
  if (!hasTruthGains(options)) return Status::ok();
  thread_ = std::thread([this, options] {
    // Idle priority: the replay runs on what the simulated job leaves over. Best effort.
    sched_param idle{};
    (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
    const std::vector<double> gains = truthGains(options, &stop_);
    result_ = writeTruth(options, options.truthFile, gains);
    done_ = true;
  });
  return Status::ok();
}

Status TruthWriter::finish(bool early) {
  if (early) stop_ = true;
  if (thread_.joinable()) thread_.join();
  return result_;
}

}  // namespace trainscope::sim
