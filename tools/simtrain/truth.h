// The truth file of a simulated run: which faults were injected where, so a test or a
// benchmark can score what the detectors found. Pure functions, safe from any thread.
#pragma once

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "tools/simtrain/sim_options.h"

namespace trainscope::sim {

// A JSON list with one object per --inject: {"kind", "ranks": [...], "from_step", "factor"},
// plus "op" for op_regression and "every" for spike. A hang's factor is 0 (no slow-down: it
// never finishes); its from_step is the step that hangs. A seqlen fault has "cv" and factor
// 1 + cv (its size, for tables); a p2p fault "from_rank" and "to_rank" (ranks: both, sender
// first); a gpu fault its rank's "coords"; an experts fault its hot "ep" index, "skew" (its
// factor) and "coords" {"ep": K}, ranks every rank at that expert-parallel index. With
// --parallel each also has the pipeline "schedule" (as given) and "microbatches" (per step).
// Every fault but a hang or a spike has "gain": its entry in `gains` (truthGains'; what
// detectors' estimated_gain is scored against, in-process and live) when that is a number.
nlohmann::json truthJson(const SimOptions& options, const std::vector<double>& gains);
// The same with the gains replayed here (truthGains(options)).
nlohmann::json truthJson(const SimOptions& options);

// Per --inject, the fraction of step time the job would save without it: the same job (same
// seed, so the same noise draws) run through the step model without that fault, the median
// over the steps from its onset (after the warm-up) of (T - T without) / T. NaN for a hang (no
// step to compare) or a spike (a notice), or when no step follows the onset. At most
// kTruthGainSteps steps are replayed (all of them for --steps 0 runs up to that bound). When
// `stop` becomes true (from another thread) the replay ends at the next step, and the gains are
// those of the steps replayed so far.
inline constexpr int64_t kTruthGainSteps = 5000;
std::vector<double> truthGains(const SimOptions& options, const std::atomic<bool>* stop = nullptr);

// Whether some --inject has a gain (is neither a hang nor a spike).
bool hasTruthGains(const SimOptions& options);

// Writes truthJson(options, gains) to `path`, replacing it in one rename (a reader never sees
// half a file). The message names the path on failure.
Status writeTruth(const SimOptions& options, const std::string& path,
                  const std::vector<double>& gains);

// The --truth file of a running simulation. start() writes it at once without gains (so a run
// that is killed still leaves its faults), then replays the gains on a background thread at
// idle priority (it takes seconds to minutes for large layouts and must not delay or slow the
// simulated job) and rewrites the file with them. finish() waits for that; early = true (the
// run was interrupted) stops the replay at the steps done so far. One thread owns it.
class TruthWriter {
 public:
  TruthWriter() = default;
  TruthWriter(const TruthWriter&) = delete;
  TruthWriter& operator=(const TruthWriter&) = delete;
  ~TruthWriter();

  Status start(const SimOptions& options);
  // Whether the gains are still being replayed (finish() would wait).
  [[nodiscard]] bool pending() const { return thread_.joinable() && !done_.load(); }
  // The final write's result (ok when start() was never called).
  Status finish(bool early);

 private:
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};
  Status result_ = Status::ok();
};

}  // namespace trainscope::sim
