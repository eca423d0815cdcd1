// The parallel-layout figures of stored steps, one definition for everything that serves them
// (steps?detail=1, the /parallel route, /metrics): per rank and step the pipeline bubble ratio,
// the communication overlap ratio, MFU/HFU and the all-to-all share; per pipeline stage the
// bubble ratio of its ranks together. Pure functions of step rows that were read with detail
// (the figures come from StepReport fields 17..25); any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "collector/storage/store.h"
#include "collector/topology/topology.h"
#include "common/prometheus_text.h"

namespace trainscope::http {

// One rank's step. Each figure is nullopt where it has no meaning for that step, never 0 in
// its place: a rank without pipeline peers has no bubble, a job that stated no FLOPs no MFU.
struct StepRatios {
  // bubble_ns / step time: idle time waiting on pipeline peers (p2p not overlapped by
  // compute). Where the rank did p2p in the step.
  std::optional<double> bubble;
  // 1 - exposed / total collective time (p2p excluded). Where the rank ran collectives.
  std::optional<double> overlap;
  // model (hardware) FLOPs / (step time x peak FLOP/s). Where the job stated them.
  std::optional<double> mfu;
  std::optional<double> hfu;
  // all-to-all time / step time (MoE token exchange). Where the rank ran all-to-all.
  std::optional<double> allToAllShare;
};

StepRatios stepRatios(const storage::StepRow& step);

// A pipeline stage's bubble within one step (or over each rank's latest step): the bubble of
// the stage's ranks that did p2p summed, over their step times summed.
struct StageBubble {
  uint32_t stage = 0;
  uint32_t ranks = 0;  // ranks of the stage that did p2p in these rows
  double ratio = 0;
};

// `rows`: at most one row per rank. Ranks without a pipeline coordinate in `layout`, and rows
// without p2p, are left out; so is a stage none of whose rows did p2p. Ordered by stage.
std::vector<StageBubble> stageBubbles(std::span<const storage::StepRow* const> rows,
                                      const topology::Topology& layout);

// The /metrics families of the above over each job's ranks' latest steps: per rank
// trainscope_step_last_{bubble_ratio,comm_overlap_ratio,mfu,hfu,all_to_all_share} (only the
// ranks where the figure has a meaning) and per stage trainscope_stage_bubble_ratio. Collects
// job by job (add), then writes every family once (write). One per render; not thread-safe.
class ParallelMetrics {
 public:
  // Each rank's latest detailed step of `job`. Reads the job's groups from `store` only when
  // some rank did p2p (only pipeline jobs have stages), so other jobs cost no query. A store
  // error leaves the job's stage figures out and is returned as a comment line for the page.
  std::string add(storage::Store& store, const std::string& job,
                  const std::map<uint32_t, const storage::StepRow*>& latest);
  void write(MetricsText& m) const;

 private:
  std::map<std::string, std::map<uint32_t, StepRatios>> ranks_;  // job -> rank -> figures
  std::map<std::string, std::vector<StageBubble>> stages_;       // job -> its stages
};

}  // namespace trainscope::http
