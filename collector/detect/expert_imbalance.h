// expert_imbalance: the router of a MoE (mixture-of-experts) job sends more tokens to some
// experts than to others, so the expert-parallel ranks holding the hot experts receive more in
// the dispatch all_to_all and compute longer on them, while their expert-parallel peers wait
// in the combine all_to_all. Each step the whole expert-parallel group goes at its hottest
// rank; the fix is the router's balance (aux loss, capacity, expert placement), not a machine.
//
// Why bytes: an all_to_all's per-rank time is mostly waiting, and the rank everybody waits for
// shows the least of it, so times point the wrong way; the bytes a rank receives in the token
// all_to_all are its experts' load, and compute alone cannot tell a hot expert from a slow GPU.
// Per step and expert-parallel index (a unit: the same experts sit at the same index of every
// expert-parallel group), the ratio of the bytes its rank received to the median of its group's
// other ranks, median over the groups, is judged against 1.0 with the persistence test and the
// noise learned from the ratios' step-to-step changes (PeerRatioSet, like stage_imbalance).
//
// The anomaly names every rank of the hot index, labels.group (the expert-parallel groups'
// name), labels.ep_index and labels.coords {"ep": i}; its evidence says what it costs: the
// all_to_all share of the step, how much longer the peers wait in all_to_all than the hot
// ranks (wait_ratio), and estimated_gain: the what-if of layout.h with each stage's work at
// the hot rank's compute plus its all_to_all transfers (slow) against the group's mean compute
// plus the transfers at a balanced load (fixed; the transfer is the least all_to_all time in
// the group, the rank arriving last waits for nothing), replayed over the pipeline when the
// job has one. Fixed keeps the router's jitter: balanced, a group still goes at its busiest
// index, so it is the mean or the busiest other index, whichever is higher (compute and
// load); the mean alone overestimated the gain by up to 0.07 with 4 and 8 indices (a 1.1x
// skew over 8 costs 0.5 % of the step, where the mean said 4.6 %). Used from the caller's
// thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "collector/detect/events.h"
#include "collector/detect/layout.h"
#include "collector/detect/options.h"
#include "collector/detect/peer_ratio.h"
#include "collector/detect/step_assembler.h"
#include "collector/topology/topology.h"

namespace trainscope::detect {

// The expert-parallel groups of a job, from its declared topology.
struct ExpertGroups {
  std::vector<std::vector<uint32_t>> groups;  // ranks in group order; all of the same size
  std::set<std::string> names;                // the groups' names (the collectives' group)
  uint32_t size = 0;                          // ranks per group (the ep size)
};

// nullptr when the topology declares no expert-parallel group of two or more ranks. Groups of
// another size than the largest are left out (the topology lists that as a problem).
std::shared_ptr<const ExpertGroups> expertGroupsOf(const topology::Topology& topology);

class ExpertImbalanceDetector {
 public:
  ExpertImbalanceDetector(std::string job, const ExpertImbalanceOptions& options, EventLog* log);
  void onStep(const AssembledStep& step);
  // The job's expert-parallel groups (nullptr: the detector does nothing) and its layout
  // (nullptr: judged as one stage). New groups start over.
  void setGroups(std::shared_ptr<const ExpertGroups> groups,
                 std::shared_ptr<const JobLayout> layout);
  bool active() const { return groups_ != nullptr; }
  bool isOpen() const;

 private:
  // What the evidence needs of each step, per expert-parallel index.
  struct IndexView {
    double gainNs = 0;  // what-if: slow - fixed step time, ns
    double hotCompute = 0;
    double peerCompute = 0;
    double waitRatio = 0;  // peers' all_to_all time / this index's
  };
  struct StepView {
    std::vector<IndexView> index;
    double stepNs = 0;
    double a2aShare = 0;  // median over ranks of all_to_all_ns / duration_ns
  };
  struct IndexState {
    bool open = false;
    Anomaly anomaly;
  };

  std::string job_;
  ExpertImbalanceOptions o_;
  EventLog* log_;
  std::shared_ptr<const ExpertGroups> groups_;
  std::shared_ptr<const JobLayout> layout_;
  std::vector<uint32_t> stageOfGroup_;  // by group: its pipeline stage (0 without a layout)
  uint32_t stages_ = 1;
  std::unique_ptr<PeerRatioSet> set_;
  std::vector<IndexState> states_;
  Ring<StepView> views_;
};

}  // namespace trainscope::detect
