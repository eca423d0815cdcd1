// Which pipeline schedule a job runs, inferred from what the collector sees of one step: each
// rank's pipeline stage (its coordinates) and the sends it reported to each peer (ts_p2p), its
// compute and its bubble. Jobs do not state their schedule; this is how the topology API names
// it and how the what-if model (collector/detect/layout.h) replays the right one. Pure; any
// thread.
//
// The rule, per step (P stages; a, b: the sends a stage-0 rank made to its stage-1 peer and to
// its last-stage peer, lower median over stage-0 ranks):
// - b > 0 (P >= 3): stage 0 talks to the last stage only when the pipeline wraps around, as
//   interleaved 1F1B does (the last stage's chunk v feeds stage 0's chunk v + 1; stage 0 sends
//   the gradients of its chunks 1..V-1 back): a = V M and b = (V - 1) M give M = a - b, V = a / M.
// - otherwise each link carries one forward and one backward per microbatch and model chunk:
//   1F1B with a microbatches, or a V schedule (zb-v, dualpipe-v: two chunks, the turn on the last
//   stage with no transfer) with a / 2, or, with two stages (where the wrap is the next stage),
//   interleaved:V with a / (2V - 1) (stage 0 sends V activations and V - 1 gradients per
//   microbatch). The counts allow each; what differs is the bubble, so the step's measured
//   bubble (summed bubble_ns over summed compute_ns) picks the candidate whose replay
//   (common/pipeline_schedule.h, each stage's measured work) idles closest to it, up to an
//   offset common to the stages; 1F1B unless another fits clearly better. zb-v and dualpipe-v
//   have the same peers, counts and, in the replay, bubbles: they are named together,
//   "v-shape", and replayed as zb-v.
// With two stages the shape is one number, how much more of its work stage 0 idles than stage
// 1: in the replay of equal stages, with the 12 transfers a link carries for 4 microbatches
// of interleaved:2, 0.083 for interleaved:2 over 4, 0.056 for 1F1B over 12, 0 for DualPipe-V
// and -0.028 for ZB-V over 6. Per-step noise of a few percent can tip one step; the window's
// vote (mostCommon) steadies it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/pipeline_schedule.h"
#include "schema/trainscope.pb.h"

namespace trainscope::topology {

// What one rank reported of one step.
struct RankPipe {
  uint32_t rank = 0;
  int32_t replica = 0;  // data-parallel index (its own pipeline); 0 when not known
  double computeNs = 0;
  double bubbleNs = 0;
  // (peer global rank, transfers in the step): per peer the larger of its sends and its
  // receives (equal under every schedule; a probe may report only one side).
  std::vector<std::pair<uint32_t, uint64_t>> sends;
};
std::vector<std::pair<uint32_t, uint64_t>> transfersOf(
    const google::protobuf::RepeatedPtrField<wire::P2pTotal>& p2p);
std::vector<std::pair<uint32_t, uint64_t>> transfersOf(const std::vector<wire::P2pTotal>& p2p);

struct ScheduleGuess {
  std::optional<pipeline::Schedule> schedule;  // nullopt: unknown (no pipeline, no p2p)
  uint32_t microbatches = 0;                   // per step and replica; 0 when unknown
};

// "1f1b", "interleaved:V", "v-shape" (zb-v or dualpipe-v) or "unknown".
std::string guessName(const ScheduleGuess& guess);

// stageOf: by global rank, its pipeline stage (-1: none); stages: the pp size.
ScheduleGuess inferSchedule(const std::vector<int32_t>& stageOf, uint32_t stages,
                            std::span<const RankPipe> ranks);

// The guess most steps agree on (known ones first), for a window of steps.
ScheduleGuess mostCommon(std::span<const ScheduleGuess> guesses);

}  // namespace trainscope::topology
