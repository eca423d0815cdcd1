#include "collector/detect/detector_set.h"

#include <algorithm>

#include "collector/detect/hang.h"
#include "collector/detect/op_regression.h"
#include "collector/detect/slow_comm.h"
#include "collector/detect/step_assembler.h"
#include "collector/detect/step_shift.h"
#include "collector/detect/straggler.h"

namespace trainscope::detect {

struct DetectorSet::Job {
  Job(const std::string& name, const DetectOptions& o, EventLog* log)
      : assembler(name, o.assembly),
        stepShift(name, o.stepShift, log),
        straggler(name, o.straggler, log),
        slowComm(name, o.slowComm, log),
        opRegression(name, o.opRegression, log),
        hang(name, o.hang, log) {}

  void judge(std::vector<AssembledStep>& steps) {
    for (const AssembledStep& s : steps) {
      stepShift.onStep(s);
      straggler.onStep(s);
      slowComm.onStep(s);
      opRegression.onStep(s);
      ++stepsJudged;
    }
    steps.clear();
  }

  StepAssembler assembler;
  StepShiftDetector stepShift;
  StragglerDetector straggler;
  SlowCommDetector slowComm;
  OpRegressionDetector opRegression;
  HangDetector hang;
  uint32_t worldSize = 0;
  uint64_t lastUse = 0;
  uint64_t stepsJudged = 0;
};

DetectorSet::DetectorSet(DetectOptions options) : options_(options) {}
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
    it = jobs_.emplace(name, std::make_unique<Job>(name, options_, &log_)).first;
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
  auto it = jobs_.find(report.job());
  uint32_t known = it == jobs_.end() ? 0 : it->second->worldSize;
  uint32_t world = ctx.worldSize != 0 ? ctx.worldSize : known;
  if (world == 0) world = report.rank() + 1;
  if (report.rank() >= world) {
    return reject("rank " + std::to_string(report.rank()) + " is not below world_size " +
                  std::to_string(world));
  }
  Job& j = job(report.job());
  j.worldSize = std::max(j.worldSize, world);
  j.hang.observe(report, ctx, j.worldSize);
  std::vector<AssembledStep> done;
  j.assembler.add(std::move(report), ctx, j.worldSize, &done);
  j.judge(done);
  return Status::ok();
}

void DetectorSet::tick(int64_t nowNs) {
  for (auto& [name, j] : jobs_) j->hang.tick(nowNs);
}

void DetectorSet::rankEnded(const std::string& name, uint32_t rank, int64_t nowNs) {
  Job& j = job(name);
  j.hang.rankEnded(rank, nowNs);
  if (j.hang.allEnded()) {
    std::vector<AssembledStep> done;
    j.assembler.flush(&done);
    j.judge(done);
    forgetJob(name);
  }
}

void DetectorSet::rankGone(const std::string& name, uint32_t rank, int64_t nowNs) {
  job(name).hang.rankGone(rank, nowNs);
}

void DetectorSet::forgetJob(const std::string& name) {
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
  jobs_.erase(it);
}

std::vector<Anomaly> DetectorSet::takeEvents() { return log_.take(); }

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
  }
  s.rejected = rejected_;
  s.anomaliesOpened = log_.opened();
  s.anomaliesResolved = log_.resolved();
  s.jobs = jobs_.size();
  return s;
}

}  // namespace trainscope::detect
