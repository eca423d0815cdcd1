// The parallel layout as the detectors see it: which ranks form one worker (a tensor-parallel
// group: the ranks that compute one shard of the model together and wait for each other in
// every layer, so they are slow or fast together), which pipeline stage each worker runs, and
// the coordinates that name it in anomalies. Built from the topology the collector derives
// from the groups ranks declare (collector/topology), and handed to the detectors: they stay
// pure and never read the store. Immutable once built; any thread may read it.
//
// Also the what-if model behind evidence.estimated_gain (pipelineStepNs).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "collector/detect/step_assembler.h"
#include "collector/topology/schedule.h"
#include "collector/topology/topology.h"
#include "common/pipeline_schedule.h"

namespace trainscope::detect {

struct Worker {
  std::vector<uint32_t> ranks;  // sorted: the tensor- (x context-) parallel group
  uint32_t stage = 0;           // pipeline stage (pp index); 0 without pipeline parallelism
  uint32_t replica = 0;         // data-parallel replica (dp index); 0 without data parallelism
  std::string coords;           // JSON text of its coordinates other than tp: {"pp":0,"dp":1}
  std::vector<int32_t> tp;      // by position in `ranks`: the rank's tp index (-1: none)
};

struct JobLayout {
  uint32_t stages = 1;                // pipeline stages (pp size)
  uint32_t replicas = 1;              // data-parallel replicas (dp size, at least 1)
  std::vector<Worker> workers;        // by first rank
  std::vector<int32_t> workerOf;      // rank -> index into workers; -1: rank without coordinates
  std::vector<std::string> tpGroups;  // names of the declared tensor-parallel groups, sorted
  std::vector<std::string> dpGroups;  // the same for data-parallel groups
  // replica -> the lowest replica it shares an expert-parallel group with (itself without
  // experts): such replicas meet in every MoE layer's all_to_all and go at the slowest's pace.
  std::vector<uint32_t> expertBlock;
  std::vector<int32_t> stageOf;  // rank -> pipeline stage; -1: rank without coordinates
  int32_t workerOfRank(uint32_t rank) const { return rank < workerOf.size() ? workerOf[rank] : -1; }
};

// The layout of a topology, or nullptr when it tells the detectors nothing a flat job does not
// (nothing declared, neither tensor- nor pipeline-parallel groups larger than one rank, or not
// yet every rank of the layout (pp x dp x tp x cp) with its coordinates): such jobs keep the
// flat, job-wide comparisons. Workers are the ranks with the same pp and dp
// coordinates (a tensor- and context-parallel group: they wait for each other in every layer;
// coords names pp and dp only).
std::shared_ptr<const JobLayout> layoutOf(const topology::Topology& topology);

// One step seen through the layout: each worker's compute (the largest compute_ns of its ranks
// that reported one, as tensor-parallel ranks wait for each other in every layer: a worker goes
// at its slowest rank, and one slow GPU is not diluted by its group's size; 0 when none
// reported), each stage's work (the lower median of its workers'
// compute, so one slow worker does not move it), the job's step time (median duration_ns), the
// pipeline schedule and microbatches per step and replica the step's p2p shows
// (collector/topology/schedule.h; 1F1B over 0 microbatches when the job reports no p2p).
struct LayoutStep {
  std::vector<double> workerNs;
  // Each worker's time in data-parallel collectives (the least of its ranks'; -1: none): the
  // replicas meet there, so a replica that finished its pipeline sooner waits longer.
  std::vector<double> dpWaitNs;
  std::vector<double> stageNs;
  double stepNs = 0;
  double microbatches = 0;
  pipeline::Schedule schedule;
};
void viewStep(const AssembledStep& step, const JobLayout& layout, LayoutStep* out);

// What a detector keeps of each step for the evidence of an anomaly opened later, and their
// medians since its onset: per stage (over the steps it had work), step time, microbatches.
struct StepSummary {
  std::vector<double> stageNs;
  double stepNs = 0;
  double microbatches = 0;
  pipeline::Schedule schedule;   // the one most steps showed
  std::vector<double> workerNs;  // each step's own (replayedGain); medianOf leaves it empty
  std::vector<double> dpWaitNs;  // the same
};
inline StepSummary summaryOf(const LayoutStep& v) {
  return {v.stageNs, v.stepNs, v.microbatches, v.schedule, v.workerNs, v.dpWaitNs};
}
// The schedule and microbatches are the ones most of `scheduleSteps` showed (nullptr: `steps`):
// a job's schedule does not change, and where one step's bubble tells two schedules apart only
// narrowly (interleaved:2 from 1F1B with two stages) the steps before a fault's onset vote
// too.
StepSummary medianOf(const std::vector<StepSummary>& steps, size_t stages,
                     const std::vector<StepSummary>* scheduleSteps = nullptr);

// The nodes of `ranks` among the step's reports (unsorted, unique; EventLog sorts them).
std::vector<std::string> nodesOf(const AssembledStep& step, const std::vector<uint32_t>& ranks);

// The what-if model behind evidence.estimated_gain: replays one replica's pipeline schedule
// (common/pipeline_schedule.h: the job's own, as inferred from its p2p; each rank's ops in the
// schedule's order, a forward waiting for the previous virtual stage's, a backward for the next
// one's) with each stage's work per step split evenly over the microbatches and model chunks, a
// third of it forward and two thirds backward (B and W a third each where the schedule splits
// the backward), and returns the makespan. Data-parallel replicas and tensor-parallel ranks
// meet in collectives, so the job goes at its slowest replica: fixing the culprit saves what its
// replica's makespan shrinks by. Without a pipeline (one stage) the step lasts the slowest
// worker. microbatches 0 (the job reports no p2p) takes the slowest stage alone. Simple on
// purpose, and stated as such in the evidence: the optimizer (once per step, not per
// microbatch) and compute that overlaps communication are not modelled apart.
inline constexpr double kForwardFraction = 1.0 / 3.0;
double pipelineStepNs(const std::vector<double>& stageNs, double microbatches,
                      const pipeline::Schedule& schedule = {});

// The fraction of the step time the job would save if `stage`'s work were `fixedNs` instead of
// `slowNs` (all other stages at `stageNs`): (T(slow) - T(fixed)) / stepNs, within [0, 1].
double estimatedGain(std::vector<double> stageNs, size_t stage, double slowNs, double fixedNs,
                     double microbatches, double stepNs, const pipeline::Schedule& schedule = {});

// The same what-if replayed on each recorded step rather than on their medians, for one
// worker whose compute would be `scale` times what it was (its peers' median over its own):
// per step, the time saved is the least of what the replay of its replica saves (slow, then
// fixed, with the replicas that share an expert-parallel group with it, which wait for it in
// every MoE layer, replayed beside it) and how much later its replica finished than the latest
// other one; returns the median over the steps of the time saved / the step's duration.
// Replicas meet in data-parallel collectives every step, so a slow worker costs only what it
// adds over the slowest other replica of that step. That lag is read from the data-parallel
// waits where every stage shows them (a replica that finished a stage d sooner waited d
// longer there; the stage where the culprit lags most), else from replays of the other
// replicas' workers' compute: a replay without each op's noise and transfers finishes a
// balanced replica too soon, which overestimated the gain of fixing a 2x worker by about
// 15 %.
// `schedule` and `microbatches` are the ones most steps showed. -1 when no step recorded its
// workers.
double replayedGain(const std::vector<StepSummary>& steps, const JobLayout& layout, size_t worker,
                    double scale, double microbatches, const pipeline::Schedule& schedule);

}  // namespace trainscope::detect
