// workload_imbalance: the job runs chronically slower than its balanced time because the work
// is shared out unevenly among the data-parallel replicas, and unevenly in a different way
// every step (sequence lengths that vary from batch to batch, say): the replicas meet in the
// gradient all_reduce, so every step lasts as long as that step's heaviest replica, whichever
// it is. No replica is a straggler (each is the slowest now and then), so the straggler
// detector, which looks for one that stays slow, rightly says nothing.
//
// Method. Per step each replica's work ratio r_d: with a layout, the mean over its workers of
// worker compute / the median worker compute of the same stage (so stages of different length
// compare alike). Jobs without a layout (no tp or pp groups declared) are not judged: a rank's
// compute there jitters with the host's load as much as with its data. The signal is how much the
// ratios change from one step to the next, spread across replicas: s_t = sigma over replicas of
// (r_{d,t} - r_{d,t-1}) (from their Gini mean difference), divided by sqrt(2) (the sigma of one
// step's ratios when they are drawn afresh every step). Taking changes, not the ratios themselves,
// leaves out every persistent difference — a straggler, a heavier last stage, a slower node, a
// pipeline judged flat because it declared nothing — which all keep their ratio from step to step;
// and it needs no baseline of the job's own, so work that was uneven from the first step is found
// from the first steps. Healthy jitter gives s_t of about 1 % (5 % noise per operator averages over
// a step's operators; a rank whose whole step varies 5 % at random gives 5 %), a sequence-length
// spread of 10 % gives about 10 %. A one-sided CUSUM, S = max(0, S + min(s_t, clip) - minSpread),
// opens at cusumH once at least minSteps steps of the excursion were costly (s_t >= minSpread), the
// slowest replica in those steps was not mostly the same one (at most maxShare of them: else it is
// a straggler that comes and goes), and balancing would save at least minGain of the step. The
// onset is the excursion's first step (the first step of the job when it began there). It resolves
// once the mean s_t (clipped) of the last `window` steps is below minSpread / 2.
//
// Evidence: the per-step spread (median s_t since the onset), the slowest replica's excess over
// the mean (median of max r / mean r - 1), how often the slowest replica changed between
// consecutive steps and the largest share one replica had, the replica count, and
// estimated_gain: per step (max r - mean r) x the replica's work (with a layout the schedule's
// replay of layout.h on the stages' work; without, the median compute) / the step time, the time
// the job would save if every replica had the mean work; the median over the steps since the onset.
// Persistent differences (each replica's median ratio over up to the last 64 steps, once 16
// are known) are taken out of it first, so a straggler's cost is not counted twice. The anomaly
// is job-wide (every rank), added_ms_per_step = gain x step time (what folds a step_shift the
// imbalance caused). While it is open its figures are recomputed every 16 judged steps over the
// last 64 (EventLog::refresh): the handful of steps it opens on gave gains up to 0.12 off the
// truth in the evaluation sweep (77 of 92 within 0.05; refreshed, 92 of 92). Needs two replicas
// or more; used from the caller's thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collector/detect/events.h"
#include "collector/detect/layout.h"
#include "collector/detect/options.h"
#include "collector/detect/robust.h"
#include "collector/detect/step_assembler.h"

namespace trainscope::detect {

class WorkloadImbalanceDetector {
 public:
  WorkloadImbalanceDetector(std::string job, const WorkloadImbalanceOptions& options,
                            EventLog* log);
  void onStep(const AssembledStep& step);
  // The job's layout (replicas = dp index); nullptr: the detector does nothing. A new layout
  // starts over.
  void setLayout(std::shared_ptr<const JobLayout> layout);
  // An excursion of the spread is under way and not yet reported: DetectorSet holds a
  // step_shift that this may explain until it is decided.
  // Only once two costly steps had different slowest replicas (a straggler's first step is
  // one costly step with one slowest replica).
  bool judging() const { return !open_ && cusum_ > 0 && moving_; }
  bool isOpen() const { return open_; }
  // The median per-step spread of the latest steps (up to `window` of them; 0 before any).
  double currentSpread() const;

  // The per-step spread of the changes of `ratios` against `previous` (same replicas, same
  // order; NaN where a replica has no previous ratio): a sigma over replicas of the
  // changes (Gini mean difference), / sqrt(2). NaN with fewer than two changes. Exposed for
  // tests.
  static double changeSpread(const std::vector<double>& ratios,
                             const std::vector<double>& previous);

 private:
  struct Record {
    int64_t step = 0;
    double spread = 0;       // s_t
    double gain = 0;         // this step's estimated gain
    double maxOverMean = 0;  // max r / mean r - 1
    double stepNs = 0;
    int32_t slowest = -1;  // replica with the largest ratio
  };
  // This step's ratio per replica (NaN where none reported); false when fewer than two.
  bool ratios(const AssembledStep& step, std::vector<double>* out, double* workNs);
  // The anomaly as the records since `onset` describe it (id, state and detection fields are
  // the caller's to set).
  Anomaly describe(const AssembledStep& step, int64_t onset) const;
  void open(const AssembledStep& step, int64_t onset);
  void reset();

  std::string job_;
  WorkloadImbalanceOptions o_;
  EventLog* log_;
  std::shared_ptr<const JobLayout> layout_;
  std::vector<double> previous_;      // by replica: last step's ratio (NaN: none)
  std::vector<Ring<float>> history_;  // by replica: recent ratios (persistent offsets)
  Ring<Record> records_;              // the latest steps judged
  Ring<double> recentSpread_;         // for resolution
  double cusum_ = 0;
  int64_t excursionStart_ = -1;
  bool moving_ = false;         // the excursion's costly steps had different slowest replicas
  int64_t refreshedStep_ = -1;  // the step the open anomaly was last opened or refreshed at
  int64_t firstStep_ = -1;      // the first step judged (ratios known)
  bool open_ = false;
  Anomaly anomaly_;
  LayoutStep view_;  // scratch
};

}  // namespace trainscope::detect
