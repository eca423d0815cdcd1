// hang: a rank, or the whole job, that stopped reporting steps. Evaluated on tick(now): a
// rank is silent when now - its last report (collector clock) exceeds
// max(stepMultiple * its typical step, floorNs, longestStepMultiple * its longest step after
// warm-up), so slow checkpoint steps are not hangs. One hang anomaly is open per job at a
// time; it names the culprit: among the silent ranks, those with the lowest latest step (in a
// synchronous job the others block a step later inside a collective and go silent after
// it). When every silent rank stopped after the same step (the usual case on a synchronous
// job: the others block inside the stuck step's first collective) the reports cannot tell the
// culprit, so all are named and labels["culprit"] is "unknown"; otherwise it names the
// culprits. It resolves when every culprit reports a newer step.
// A process that exited (rankGone, from its agent) is not a hang of that rank: it is reported
// at once as kind hang with evidence process_gone=1 and a summary saying the process exited,
// and while it is open the rest of the job is not reported as hung (the dead peer explains
// their silence). It resolves if the rank reports again. A rank that ended cleanly
// (rankEnded, from its goodbye) is never reported. Used from the caller's thread only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "collector/detect/events.h"
#include "collector/detect/options.h"
#include "collector/detect/robust.h"
#include "schema/trainscope.pb.h"

namespace trainscope::detect {

class HangDetector {
public:
  HangDetector(std::string job, const HangOptions& options, EventLog* log);

  void observe(const wire::StepReport& report, const RankContext& ctx, uint32_t worldSize);
  void tick(int64_t nowNs);
  void rankEnded(uint32_t rank, int64_t nowNs);
  void rankGone(uint32_t rank, int64_t nowNs);

  bool allEnded() const;
  // Silence threshold of a rank now (for tests and the API); 0 for an unknown rank.
  int64_t thresholdNs(uint32_t rank) const;

private:
  struct RankState {
    explicit RankState(size_t window) : durations(window) {}
    int64_t lastStep = -1;
    int64_t lastActivityNs = 0;
    Ring<double> durations;
    double longest = 0.0;
    double typical = 0.0;   // median of durations, refreshed every few steps (tick reads it)
    int64_t stepsSeen = 0;
    std::string node;
    bool ended = false;
    bool gone = false;
    bool goneOpen = false;
    Anomaly goneAnomaly;
  };
  int64_t threshold(const RankState& st) const;
  RankState& state(uint32_t rank);

  std::string job_;
  HangOptions o_;
  EventLog* log_;
  uint32_t worldSize_ = 0;
  std::map<uint32_t, RankState> ranks_;
  bool hangOpen_ = false;
  Anomaly hang_;
  std::map<uint32_t, int64_t> culpritSteps_;  // culprit rank -> its last step at the hang
};

}  // namespace trainscope::detect
