// stage_imbalance: a pipeline stage whose work is chronically longer than the other stages'.
// In a pipeline the slowest stage sets the pace of every microbatch slot, so the others idle
// (their bubble grows) while it computes; the fix is to move layers, not to replace a machine.
// Per step each stage's work is the lower median of its workers' compute (layout.h: one slow
// worker does not move it; that is a straggler), and its ratio to the median of the other
// stages' work is judged against 1.0 with the persistence test, noise learned from the ratios'
// step-to-step changes (PeerRatioSet: a pipeline of two stages has two units only).
// minExcess is larger than the straggler's on purpose: real pipelines are a little unbalanced
// by construction (the first stage carries the embedding, the last the head and the loss), and
// that is the layout the job chose, not a regression; a stage a few percent heavier is left
// alone. Where every stage has a single worker (no data parallelism) the stages are compared
// by the lower median of their ranks' compute instead, so that one slow GPU, which sets its
// worker's pace, is not read as a heavier stage (the straggler detector names it). The anomaly
// names every rank of the stage, labels.stage, and evidence.estimated_gain
// (the what-if of layout.h with the stage at the other stages' median work). Only for jobs with
// a layout of two or more stages (setLayout); a stage heavy from before the layout arrived has
// the first step judged with it as its onset. Used from the caller's thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collector/detect/events.h"
#include "collector/detect/layout.h"
#include "collector/detect/options.h"
#include "collector/detect/peer_ratio.h"
#include "collector/detect/step_assembler.h"

namespace trainscope::detect {

class StageImbalanceDetector {
 public:
  StageImbalanceDetector(std::string job, const StageImbalanceOptions& options, EventLog* log);
  void onStep(const AssembledStep& step);
  // nullptr or a layout of one stage: the detector does nothing. A new layout starts over.
  void setLayout(std::shared_ptr<const JobLayout> layout);

 private:
  struct StageState {
    bool open = false;
    Anomaly anomaly;
  };

  std::string job_;
  StageImbalanceOptions o_;
  EventLog* log_;
  std::shared_ptr<const JobLayout> layout_;
  std::unique_ptr<PeerRatioSet> set_;
  std::vector<StageState> stages_;
  Ring<StepSummary> views_;       // for the evidence (medians since onset)
  LayoutStep view_;               // scratch
  std::vector<double> rankWork_;  // scratch: the stages' work with one worker each (see .cpp)
};

}  // namespace trainscope::detect
