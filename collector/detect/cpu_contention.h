// Host CPU contention as the detectors read it: the ranks' wait for a CPU in a step
// (StepReport.cpu_wait_ns, the training thread's run delay). A slowdown is the host's doing
// when that extra wait accounts for most of it and the work (time less wait) did not grow. Where
// the ranks already waited a good share of their steps before it (a host running more threads than
// it has cores, as any shared machine beside a busy neighbour), such a slowdown is the host's
// weather: the neighbour's load moves, the scheduler hands the CPUs out differently for a while,
// and nothing in the job changed, so it is not raised (counted instead). On a host where the job
// had its CPUs to itself, the same slowdown is news (something new competes) and is raised, saying
// so (labels.cause "cpu_contention"). Pure functions; any thread (WaitShares: its owner's).
#pragma once

#include <cstddef>
#include <vector>

#include "collector/detect/robust.h"

namespace trainscope::detect {

// The shares of their steps a rank (or a job's median rank) waited for a CPU, over its last
// steps, and their median: how busy its host usually is.
class WaitShares {
 public:
  explicit WaitShares(size_t steps) : ring_(steps) {}
  void push(double share) { ring_.push(static_cast<float>(share)); }
  bool empty() const { return ring_.empty(); }
  double median() const {
    thread_local std::vector<double> v;  // scratch: this runs per rank and step
    v.resize(ring_.size());
    for (size_t i = 0; i < ring_.size(); ++i) v[i] = ring_[i];
    return medianInPlace(v);
  }

 private:
  Ring<float> ring_;  // float: the shares are judged against 10 % and 5 %, not to 1e-7
};

// The share of a step the ranks waited for a CPU before a slowdown from which on it counts as
// busy (a quiet host waits well under 1 %; this one, with a busy loop beside two DDP ranks,
// waited 35-55 %).
inline constexpr double kBusyHostWaitShare = 0.10;

// Whether the extra wait for a CPU explains a slowdown of `addedNs` a step: at least half.
inline bool waitExplains(double addedNs, double addedWaitNs) {
  return addedNs > 0 && addedWaitNs >= 0.5 * addedNs;
}

// A slowdown's work (its time less its wait for a CPU) may exceed the reference's by this much
// and still be the host's weather: the step-to-step noise of a busy host's work.
inline constexpr double kWeatherWorkRise = 0.10;

// Whether a slowdown is the host's weather (see above): on ranks that already waited
// kBusyHostWaitShare of their steps, the extra wait explains it and the work did not grow:
// `workNs` (the slow rank's, or the job's since the onset: time less wait) is within
// kWeatherWorkRise of `referenceWorkNs` (its peers', or the job's before). A rank that does
// more work on a busy host also waits more, in proportion; its work still shows the rise.
inline bool hostWeather(double addedNs, double addedWaitNs, double workNs, double referenceWorkNs,
                        double baselineWaitShare) {
  return waitExplains(addedNs, addedWaitNs) && baselineWaitShare >= kBusyHostWaitShare &&
         referenceWorkNs > 0 && workNs <= (1.0 + kWeatherWorkRise) * referenceWorkNs;
}

}  // namespace trainscope::detect
