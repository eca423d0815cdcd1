// DetectorSet: the collector's detect stage. Step reports and rank lifecycle events in,
// anomaly events out; no sockets, files, threads or clocks of its own (time comes in with
// the reports' RankContext and with tick). Not thread-safe: one thread (ingest's) calls every
// method, or the caller serializes them.
//
// Per job it keeps a StepAssembler (reports from different ranks arrive in any order and
// late; a step is judged once every rank reported it or graceSteps later) feeding the
// step_shift, straggler, stage_imbalance, workload_imbalance, expert_imbalance, slow_comm
// (with its pipeline
// links, p2p_link.h) and op_regression detectors, and a HangDetector fed with
// every report directly and with each rank's progress (rankProgress), which names the stuck
// rank of a hang. Memory is bounded per job by the option limits and across jobs by
// maxJobs (least recently seen job forgotten first).
//
// Ended jobs. When every rank of a job said goodbye its state is dropped, and the job is
// remembered (its latest step and report end time; up to maxJobs of them): a report of it
// replayed later (an agent's spool resent) is counted late instead of starting a new job
// state whose silence would read as a hang; a report newer than any before starts the job
// anew (a restart under the same id). Goodbyes, exits and progress of a job without state
// open nothing.
//
// Delivery. nodeDelivered tells when the collector last received anything from a node's
// agent (its host samples, every second); the hang detector measures the silence of that
// node's ranks on this clock, and each report from a node moves it too (see hang.h).
//
// Folding (FoldOptions): one fault often moves several signals. A straggler also raises the
// job's step time; an op regression on one rank also makes that rank a straggler. So a
// straggler or step_shift is held for holdSteps judged steps, and dropped (counted in
// DetectStats::folded, with its resolution) when an anomaly that explains it opened within
// onsetSteps of its onset: for a straggler an op regression on the same rank, for a rising
// step_shift a straggler, op regression, slow_comm, stage_imbalance, workload_imbalance or
// expert_imbalance
// (also one that opened earlier and is
// still open: a small rise from a straggler can take the step_shift CUSUM many steps to
// find); "explains" means its evidence added_ms_per_step is at least minExplained of the held
// one's. A held anomaly is published
// with detectedStep/detectedNs of the step it was released at, so the wait shows in latency.
// A step_shift waits up to 8 more judged steps while workload_imbalance judges an excursion
// (it needs a few costly steps to tell work moving between replicas from a straggler); an
// open workload_imbalance explains a straggler, op regression (held too while it is open) or
// step_shift whose ratio is within 3 of its per-step spreads (a replica that drew heavy work a
// few steps in a row, the step time following the heaviest draws).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collector/detect/anomaly.h"
#include "collector/detect/events.h"
#include "collector/detect/expert_imbalance.h"
#include "collector/detect/gpu_fault.h"
#include "collector/detect/hang.h"
#include "collector/detect/layout.h"
#include "collector/detect/options.h"
#include "collector/detect/step_assembler.h"
#include "common/status.h"
#include "schema/trainscope.pb.h"

namespace trainscope::detect {

struct DetectStats {
  uint64_t reports = 0;       // accepted step reports
  uint64_t rejected = 0;      // reports refused by observe (bad fields)
  uint64_t duplicates = 0;    // same (job, rank, step) seen again (replays)
  uint64_t late = 0;          // arrived after their step was judged (or their job ended)
  uint64_t stepsJudged = 0;   // assembled steps fed to the detectors
  uint64_t partialSteps = 0;  // judged without every rank
  uint64_t droppedSteps = 0;  // forced out with too few ranks
  uint64_t rewinds = 0;       // jobs that started over at a lower step (restarts)
  uint64_t anomaliesOpened = 0;
  uint64_t anomaliesResolved = 0;
  uint64_t folded = 0;       // anomalies not published: another one explains them
  uint64_t flapped = 0;      // not published: resolved while held (FoldOptions::confirmSteps)
  uint64_t belowFloor = 0;   // not published: estimated gain under FoldOptions::minGain
  uint64_t opCpuBound = 0;   // rank steps whose operators were not judged: the rank waited for
                             // a CPU (OpRegressionOptions::maxCpuWaitShare)
  uint64_t hostWeather = 0;  // not raised: stragglers and step shifts that were the host's
                             // weather (cpu_contention.h)
  size_t jobs = 0;           // jobs tracked now
};

class DetectorSet {
 public:
  explicit DetectorSet(DetectOptions options = {});
  ~DetectorSet();
  DetectorSet(const DetectorSet&) = delete;
  DetectorSet& operator=(const DetectorSet&) = delete;

  // Feeds one step report. Refuses (with a message naming the field) a report without job,
  // with a negative step or duration, or with rank >= world_size. ctx.worldSize 0 keeps the
  // job's known world size.
  Status observe(const wire::StepReport& report, const RankContext& ctx);
  // The same, taking the report over (no copy of its ops and collectives): about 3 us less
  // per report for a caller that has no further use for it.
  Status observe(wire::StepReport&& report, const RankContext& ctx);
  // Time-based detection (hangs); `nowNs` is the collector clock.
  void tick(int64_t nowNs);
  // The collector received data from `node`'s agent at `nowNs` (a host sample): see above.
  void nodeDelivered(const std::string& node, int64_t nowNs);
  // The rank said goodbye: no hang will be reported for it. When every rank of the job
  // ended, pending steps are judged and the job is forgotten (see "Ended jobs"). Ignored for
  // a job without state.
  void rankEnded(const std::string& job, uint32_t rank, int64_t nowNs = 0);
  // The rank's process is gone without a goodbye (its agent saw it exit). Ignored for a job
  // without state.
  void rankGone(const std::string& job, uint32_t rank, int64_t nowNs = 0);
  // Where the rank is, from its latest RankHello (schema RankProgress): what names the stuck
  // rank when a hang opens (HangDetector). ctx.receivedNs: collector clock when the progress
  // was true (the hello's sent_ns + the node's clock offset, or its arrival); ctx.clockOffsetNs
  // converts its probe-clock times. Ignored for a job or rank that sent no step report yet:
  // progress never opens a hang by itself. Refuses (naming the field) an empty job, a rank not
  // below the job's world size, and steps below -1 or negative times.
  Status rankProgress(const std::string& job, uint32_t rank, const wire::RankProgress& progress,
                      const RankContext& ctx);
  // The job's parallel layout, derived by the caller from the groups its ranks declared
  // (collector/topology). With tensor- or pipeline-parallel groups the straggler detector
  // compares workers only with those of the same stage and stage_imbalance judges the stages
  // (see straggler.h, stage_imbalance.h); without, the job is judged flat, as before.
  // Expert-parallel groups feed expert_imbalance (with or without a layout). May come
  // before the job's first report, after its first steps were judged flat (the stragglers
  // those opened are carried over or resolved: straggler.h, "Layout changes"), and again
  // when the declarations change (a restart); a layout equal to the one in use changes
  // nothing. Kept for up to maxJobs jobs.
  void setTopology(const std::string& job, const topology::Topology& topology);
  // GPU health (gpu_fault.h): the GPU a rank uses (its RankInfo.gpu_uuid), and each node's host
  // samples with their GPU readings and events (collector clock `nowNs`). gpu_fault anomalies
  // come out of takeEvents with the rest; a straggler whose GPU throttled or faulted shortly
  // before says so (labels.cause gpu_throttle or gpu_fault).
  void rankGpu(const std::string& job, uint32_t rank, const std::string& uuid,
               const std::string& node);
  void hostSample(const wire::HostSample& host, int64_t nowNs);
  // Drops all state of a job (e.g. deleted by retention).
  void forgetJob(const std::string& job);

  // Newly opened anomalies and resolution updates (same id, state resolved), oldest first.
  std::vector<Anomaly> takeEvents();

  DetectStats stats() const;
  const DetectOptions& options() const { return options_; }

 private:
  struct Job;
  Job& job(const std::string& name);
  // Feeds assembled steps to the detectors, routing their events after each one; `final`
  // publishes whatever is still held (the job ended).
  void judge(Job& j, std::vector<AssembledStep>& steps, bool final);
  // Moves the job's staged detector events to the output, holding and folding as described
  // above. Holds age only when `judged` (the step just judged) is given.
  void route(Job& j, const AssembledStep* judged, bool final);
  void publish(Anomaly a);
  // Remembers a job whose ranks all ended, bounded by maxJobs.
  void rememberEnded(const std::string& name, const Job& j);
  // Whether a report belongs to an ended job's run (a replay): see "Ended jobs".
  bool replayOfEnded(const wire::StepReport& report, const RankContext& ctx);

  DetectOptions options_;
  std::vector<Anomaly> out_;  // published events, oldest first
  uint64_t opened_ = 0;
  uint64_t resolved_ = 0;
  uint64_t folded_ = 0;
  uint64_t flapped_ = 0;
  uint64_t belowFloor_ = 0;
  std::map<std::string, std::unique_ptr<Job>> jobs_;
  uint64_t useCounter_ = 0;
  DetectStats retired_;  // counters of forgotten jobs
  uint64_t rejected_ = 0;
  uint64_t lateAfterEnd_ = 0;  // reports of ended jobs (replays)
  struct Ended {
    int64_t lastStep = -1;
    int64_t latestEndNs = 0;  // latest report end time (collector clock)
  };
  std::map<std::string, Ended> ended_;  // jobs whose ranks all ended
  std::deque<std::string> endedOrder_;  // oldest first
  HangDetector::NodeClock nodes_;       // node -> latest delivery (see "Delivery")
  GpuFaults gpu_;                       // GPU health of every job (gpu_fault.h)
  // Layouts and expert-parallel groups given by setTopology, by job (nullptr: judged flat,
  // no MoE); at most maxJobs, the oldest given forgotten first.
  struct Declared {
    std::shared_ptr<const JobLayout> layout;
    std::shared_ptr<const ExpertGroups> experts;
  };
  std::map<std::string, Declared> layouts_;
  std::deque<std::string> layoutOrder_;
};

}  // namespace trainscope::detect
