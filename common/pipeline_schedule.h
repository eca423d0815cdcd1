// Pipeline-parallel schedules as data: which model chunk (virtual stage) lives on which
// pipeline rank, and the order in which each rank runs the forwards (F), backwards (B) and
// weight-gradient passes (W) of its chunks over the microbatches of one step, for 1F1B,
// Megatron's interleaved 1F1B, ZeroBubble's V schedule and DeepSeek's DualPipe-V. Also a replay
// of such an order with given op durations (the dependency structure of one step). Pure
// functions; any thread. Used by the simulator (tools/simtrain), which runs the op lists with
// its own timings and transfers, and by the collector's what-if model (collector/detect).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainscope::pipeline {

enum class Kind : uint8_t {
  k1F1B,         // one chunk per rank: warm-up forwards, then one forward and one backward
  kInterleaved,  // V chunks per rank round-robin: virtual stage v * P + s on rank s
  kZbV,          // two chunks per rank in a V: rank s holds virtual stages s and 2P - 1 - s;
                 // backward split into B (input gradient) and W (weight gradient)
  kDualPipeV,    // the same V, with a forward and a backward of other microbatches paired
};

struct Schedule {
  Kind kind = Kind::k1F1B;
  uint32_t chunks = 1;  // model chunks per rank: 1, V (interleaved) or 2 (V shapes)
  bool operator==(const Schedule&) const = default;
};

// "1f1b", "interleaved:V" (V >= 2), "zb-v", "dualpipe-v"; an error names the text.
Result<Schedule> parseSchedule(const std::string& text);
std::string scheduleName(const Schedule& schedule);
// Whether the backward is split into B and W (zb-v, dualpipe-v).
bool splitsBackward(const Schedule& schedule);
// What the schedule needs of the microbatch count M with P stages ("" = fine): interleaved
// runs microbatches in groups of P, DualPipe-V needs M >= 2P.
std::string microbatchProblem(const Schedule& schedule, uint32_t stages, uint32_t micro);

// Virtual stages: the model cut in P * chunks consecutive pieces. The rank (pipeline stage)
// that holds virtual stage `vs`, and the virtual stage of `chunk` on rank `stage`.
uint32_t rankOfVirtual(const Schedule& schedule, uint32_t stages, uint32_t vs);
uint32_t virtualOf(const Schedule& schedule, uint32_t stages, uint32_t stage, uint32_t chunk);

enum class Pass : uint8_t { kF, kB, kW };
struct Op {
  Pass pass = Pass::kF;
  uint32_t chunk = 0;
  uint32_t micro = 0;
  // DualPipe-V: this forward runs overlapped with the backward that follows it in the list
  // (both start once both inputs are there; see dualPipeV in the .cpp for the approximation).
  bool pairedWithNext = false;
  bool operator==(const Op&) const = default;
};

// Each pipeline rank's ops in the order it runs them, by rank: every (chunk, microbatch) has
// one F, one B and (splitsBackward) one W, and the order respects the dependencies (a
// forward after the previous virtual stage's, a backward after the next one's or, on the last
// virtual stage, after its own forward; W after its B). Requires microbatchProblem() == "".
std::vector<std::vector<Op>> opLists(const Schedule& schedule, uint32_t stages, uint32_t micro);

// The virtual stage whose output a `pass` on virtual stage `vs` waits for: vs - 1 for a
// forward, vs + 1 for a backward; false when none (the first forward, the last virtual stage's
// backward, which follows its own forward, and W, which follows its own B).
bool inputOf(const Schedule& schedule, uint32_t stages, uint32_t vs, Pass pass,
             uint32_t* fromVirtual);

// Each rank's share of one microbatch's work in one op: F a third, B two thirds (B and W a
// third each when split), over the chunks.
double workShare(const Schedule& schedule, Pass pass);

// Replays `lists` (opLists) with op durations `opNs(rank, op)` and no transfer time: each rank
// runs its ops in order, each as soon as its input is ready. Returns each rank's end, and in
// idleNs (if given) each rank's time between its ops (waiting on its pipeline peers).
using OpNs = std::function<double(uint32_t rank, const Op& op)>;
std::vector<double> replay(const Schedule& schedule, uint32_t stages, uint32_t micro,
                           const std::vector<std::vector<Op>>& lists, const OpNs& opNs,
                           std::vector<double>* idleNs = nullptr);

// The makespan of one replica's step with each stage's per-step work stageNs[s] (split over
// the microbatches and chunks by workShare) under `schedule`; microbatchProblem() != "" falls
// back to 1F1B's order.
double makespanNs(const Schedule& schedule, const std::vector<double>& stageNs, uint32_t micro,
                  std::vector<double>* idleNs = nullptr);

}  // namespace trainscope::pipeline
