// step_shift: a sustained change of a job's step time (median duration across ranks per
// step), found online with a two-sided CUSUM on a robustly standardised statistic:
// z = (x - median) / (1.4826 * MAD) of a lagged reference of healthy steps, clipped to
// +-zClip so one outlier cannot raise an alarm alone. The onset is the step after the CUSUM
// last left zero. Outlier steps repeating at a fixed gap (checkpoints) are recognised as a
// periodic spike, reported once, and from then on left out of both the CUSUM and the
// reference. A shift resolves when the median of the last resolveWindow steps is nearer the
// old reference than the shifted level. While a shift is open no second shift is looked for.
// StepShiftCore is the pure series algorithm (also used offline); StepShiftDetector turns its
// events into anomalies. Used from the caller's thread only.
//
// The live detector reports slowdowns only: a job that got faster is nothing to act on, so its
// reference is learned again at the new level, and no anomaly (nor capture) follows. Where the
// ranks report their wait for a CPU (StepReport.cpu_wait_ns), a slowdown carries it in its
// evidence (cpu_wait_ms since the onset, baseline_cpu_wait_ms before), says so when the extra
// wait explains it (labels.cause "cpu_contention"), and is not raised when it is the host's
// weather (cpu_contention.h): the reference is then learned again at the new level, as for a
// faster job, and the slowdown counted (hostWeatherHeld).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "collector/detect/events.h"
#include "collector/detect/options.h"
#include "collector/detect/robust.h"
#include "collector/detect/step_assembler.h"

namespace trainscope::detect {

class StepShiftCore {
 public:
  enum class EventType { kNone, kShift, kShiftResolved, kPeriodicSpike, kSpikesStopped };
  struct Event {
    EventType type = EventType::kNone;
    int64_t onsetStep = -1;   // kShift: estimated first shifted step; kShiftResolved: first
                              // step back at the reference
    double before = 0.0;      // reference level
    double after = 0.0;       // shifted level
    double cusum = 0.0;       // statistic at the alarm
    int direction = 0;        // +1 slower, -1 faster
    int64_t period = 0;       // kPeriodicSpike: steps between spikes
    double spikeValue = 0.0;  // kPeriodicSpike: median spike value
    int spikes = 0;           // outliers that formed the pattern
  };

  explicit StepShiftCore(const StepShiftOptions& options);
  // Steps must be pushed in increasing order; gaps are allowed.
  Event push(int64_t step, double value);

  // Forgets the reference and learns a new one from the next steps (after a shift the live
  // detector does not report: a job that got faster).
  void rebaseline();
  bool shifted() const { return shifted_; }
  double reference() const { return refMedian_; }
  double referenceSigma() const { return refSigma_; }
  int64_t spikePeriod() const { return period_; }

 private:
  void refreshReference();
  bool predictedSpike(int64_t step) const;
  Event notePossibleSpike(int64_t step, double value);

  StepShiftOptions o_;
  int64_t seen_ = 0;
  Ring<double> ref_;
  std::deque<double> lagged_;  // healthy steps waiting baselineLag steps to join ref_
  double refMedian_ = 0.0;
  double refSigma_ = 0.0;
  double sPlus_ = 0.0;
  double sMinus_ = 0.0;
  int64_t plusStart_ = -1;  // first step of the current positive excursion
  int64_t minusStart_ = -1;
  Ring<int64_t> recentSteps_;  // non-spike steps, for levels and resolution
  Ring<double> recentValues_;
  bool shifted_ = false;
  double shiftLevel_ = 0.0;
  int64_t shiftOnset_ = -1;
  int direction_ = 0;
  // Periodic spikes.
  Ring<int64_t> outlierSteps_;
  Ring<double> outlierValues_;
  int64_t period_ = 0;
  int64_t lastSpike_ = -1;
};

class StepShiftDetector {
 public:
  StepShiftDetector(std::string job, const StepShiftOptions& options, EventLog* log);
  void onStep(const AssembledStep& step);
  // Slowdowns not raised: the host's weather (cpu_contention.h).
  uint64_t hostWeatherHeld() const { return hostWeather_; }

 private:
  static constexpr size_t kWaitHistory = 512;
  std::string job_;
  StepShiftOptions o_;
  EventLog* log_;
  StepShiftCore core_;
  // Each step's wait for a CPU of the rank the others waited for (StepReport.cpu_wait_ns of the
  // longest own time), by step: what a slowdown's share of it was, before and since its onset.
  Ring<int64_t> waitSteps_{kWaitHistory};
  Ring<double> waits_{kWaitHistory};
  bool anyWait_ = false;  // some rank measured a wait
  uint64_t hostWeather_ = 0;
  bool hasOpen_ = false;
  Anomaly open_;
  bool spikeReported_ = false;
  bool spikeOpen_ = false;
  Anomaly spike_;
};

}  // namespace trainscope::detect
