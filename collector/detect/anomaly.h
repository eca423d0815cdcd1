// What the detectors emit: one Anomaly per detected regression, plus the context a caller
// passes with each step report. Plain values; any thread may use them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace trainscope::detect {

enum class AnomalyKind {
  kStepShift,          // the job's step time changed and stayed changed
  kStraggler,          // one rank computes slower than its peers; the others wait for it
  kSlowComm,           // a collective (op, group, bytes) or a link got slower while compute did
                       // not; names the link's sender and peer where links are reported
  kOpRegression,       // an operator's time per call rose against its own baseline
  kHang,               // a rank or the whole job stopped reporting steps (or its process exited)
  kSpike,              // periodic outlier steps (a checkpoint every N steps); informational
  kStageImbalance,     // a pipeline stage's work is chronically longer than the other stages';
                       // names that stage's ranks (labels.stage)
  kWorkloadImbalance,  // the job is chronically slower than its balanced time while the
                       // slowest data-parallel replica changes from step to step; job-wide
  kExpertImbalance,    // a MoE job's router sends more tokens to the experts at one
                       // expert-parallel index; names those ranks (labels.ep_index)
  kGpuFault,           // the GPU a rank uses raised an Xid, ECC or NVLink errors, was lost, or
                       // stayed throttled; names the ranks on it (labels.cause, gpu_uuid)
};

// Stable lower-case names used in ids, the API and the CLI: "step_shift", "straggler", ...
const char* anomalyKindName(AnomalyKind kind);
bool parseAnomalyKind(const std::string& name, AnomalyKind* out);

// Stored and served as storage::AnomalyState (collector/pipeline.cpp maps it).
enum class AnomalyState { kOpen, kResolved };

struct Anomaly {
  // Unique and stable: "<job>/<kind>/<onset step>/<subject>" where subject names the ranks and,
  // where it matters, the op or collective key. Re-detecting the same thing after a collector
  // restart yields the same id, so storing it is idempotent.
  std::string id;
  std::string job;
  AnomalyKind kind = AnomalyKind::kStepShift;
  std::vector<uint32_t> ranks;     // sorted; every rank of the job for job-wide anomalies
  std::vector<std::string> nodes;  // sorted, unique; nodes of `ranks` where known
  int64_t onsetStep = -1;          // estimated first affected step (not the detection step)
  int64_t detectedStep = -1;       // step being processed when the detector fired
  int64_t detectedNs = 0;          // collector clock at detection
  double magnitude = 1.0;   // slowdown ratio new/baseline (>1 slower); hangs: silence/threshold
  double confidence = 0.0;  // 0..1, heuristic strength of the evidence
  std::map<std::string, double> evidence;     // named numbers: baseline_ms, current_ms, z, ...
  std::map<std::string, std::string> labels;  // named strings: op, group, link, direction
  AnomalyState state = AnomalyState::kOpen;
  // An open anomaly seen again (EventLog::refresh): the same id with its evidence, magnitude
  // and summary recomputed over more steps since the onset. Stored over the open row; not a new
  // anomaly (no second capture, not counted as opened).
  bool refresh = false;
  int64_t resolvedStep = -1;  // first step back to normal (state kResolved only)
  int64_t resolvedNs = 0;     // collector clock when resolution was seen
  std::string summary;        // one line for people
};

// What the caller knows about the rank that sent a report (from its RankHello, the agent's
// heartbeats and the ingest clock).
struct RankContext {
  std::string node;           // the agent's node name; "" when unknown
  uint32_t worldSize = 0;     // ranks in the job; 0 = take it from earlier reports of the job
  int64_t clockOffsetNs = 0;  // collector clock - node clock (from the agent's heartbeats)
  int64_t receivedNs = 0;     // collector clock when the report arrived; 0 = end_ns + offset
};

}  // namespace trainscope::detect
