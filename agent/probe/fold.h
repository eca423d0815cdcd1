// StepFolder turns the raw records of one probe instance into one StepReport per step.
// Pure and single-threaded: the runtime thread feeds it what it drains from the rings; tests
// feed it records with explicit timestamps.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "agent/probe/record.h"
#include "schema/trainscope.pb.h"

namespace trainscope::probe {

struct FoldOptions {
  std::string job;                  // copied into every report
  uint32_t rank = 0;                // copied into every report
  uint32_t topOps = 32;             // operators kept per report; more costs bytes per report
  uint32_t maxPending = 1u << 18;   // records waiting for their step (16 MiB); past it the
                                    // oldest are dropped as unattributed, so a step that
                                    // never ends cannot grow memory without bound
  uint32_t maxPairDepth = 64;       // open range/collective begins kept per ring
  uint32_t maxLooseRecords = 4096;  // unattributed records kept for the flight recorder
  // Once device records (kDeviceColl, kDeviceP2p) have been seen, an ended step stays open
  // this long for the device records of its operations, which arrive when the GPU ran them
  // (the host runs ahead of the GPU). Longer keeps more of a slow GPU's records in their step
  // and delays every report by as much; a record later than this is unattributed.
  int64_t deviceLagNs = 500'000'000;
};

// Sums the records of one step, [begin, end), into its StepReport: the unions of compute,
// communication and data time clipped to the step, exposed communication, the top operators,
// collectives per (op, group, bytes of one call) and per-peer links. The one place these
// sums are made: StepFolder feeds it the records it attributed by time, the trace importer
// (importer/) the events of a profiler trace. Pure; one owner at a time.
class StepAccumulator {
 public:
  StepAccumulator(int64_t begin, int64_t end) : begin_(begin), end_(end) {}

  // Adds one complete interval record (kOp, kRange, kCollective, kLink, kP2p, kDeviceColl,
  // kDeviceP2p); other types are ignored. The caller decided it belongs to this step.
  void add(const Record& r);
  // The report of the step: `topOps` operators at most (the rest counted in ops_truncated),
  // `records` as the records field.
  wire::StepReport report(const std::string& job, uint32_t rank, int64_t step, uint32_t topOps,
                          uint64_t records);
  // Intervals and per-name entries held: what this step costs in memory (~16 bytes each), for
  // callers that bound many open steps.
  size_t units() const;

 private:
  struct OpAcc {
    uint64_t count = 0;
    int64_t total = 0;
    int64_t max = 0;
  };
  struct CollAcc {
    uint64_t count = 0;
    int64_t total = 0;
    int64_t max = 0;
    int64_t first = INT64_MAX;
    int64_t last = INT64_MIN;
  };
  struct LinkAcc {
    uint64_t bytes = 0;
    uint64_t transfers = 0;
    int64_t wire = 0;
  };
  struct P2pAcc {
    uint64_t count = 0;
    uint64_t bytes = 0;
    int64_t total = 0;
    int64_t max = 0;
    int64_t min = INT64_MAX;
  };
  // A key's device times (NCCL's profiler plugin): they take the place of the host's in the
  // key's CollectiveTotal, and name the NCCL sequence numbers and what NCCL chose.
  struct DevCollAcc {
    CollAcc times;
    uint64_t firstSeq = UINT64_MAX;
    uint64_t lastSeq = 0;
    uint32_t info = 0;  // TS_DEVICE_INFO of the last call
  };
  using Intervals = std::vector<std::pair<int64_t, int64_t>>;
  void push(Intervals& v, int64_t a, int64_t b);

  int64_t begin_;
  int64_t end_;
  Intervals compute_;
  Intervals comm_;
  Intervals data_;
  Intervals coll_;  // collectives only (comm_ has p2p too)
  Intervals p2p_;
  Intervals a2a_;
  Intervals waits_;          // TS_RANGE_COMM: the training thread blocked on communication
  bool anyCompute_ = false;  // an operator or compute range was added, even of length 0
  std::unordered_map<uint32_t, OpAcc> ops_;
  std::map<std::tuple<uint8_t, uint32_t, uint64_t>, CollAcc> colls_;
  // (peer, group): a rank talks to a handful of peers per group (ring neighbours, tree
  // parent and children), so a small ordered map keeps the report's order stable.
  std::map<std::pair<uint32_t, uint32_t>, LinkAcc> links_;
  // (peer, group, op): a pipeline rank talks to its two neighbours, per direction.
  std::map<std::tuple<uint32_t, uint32_t, uint8_t>, P2pAcc> p2ps_;
  // Device-timed collectives and p2p, keyed as their host counterparts above.
  std::map<std::tuple<uint8_t, uint32_t, uint64_t>, DevCollAcc> devColls_;
  std::map<std::tuple<uint32_t, uint32_t, uint8_t>, P2pAcc> devP2ps_;
  Intervals devComm_;  // device time of NCCL kernels (StepReport.device_comm_ns)
};

// One finished step: its report and the records folded into it (for the flight recorder).
struct FoldedStep {
  wire::StepReport report;
  std::vector<Record> records;  // complete intervals with `step` set; unattributed ones: -1
};

class StepFolder {
 public:
  explicit StepFolder(FoldOptions options);

  // Feeds one record taken from ring `ring`; push/pop and begin/end pair per ring. The
  // records it gives back carry `ring`.
  void add(uint32_t ring, const Record& r);
  // Marks the end of a drain pass over every ring at time `nowNs` (monotonic). A step whose end
  // was seen in an earlier pass is final now: every ring has been drained past its end since;
  // once device records were seen, also deviceLagNs after the pass that saw its end.
  void endPass(int64_t nowNs = 0);
  // Ended steps held open for device records (so a flush waits for them).
  bool holding() const { return !spans_.empty() && spans_.front().end >= 0; }
  // Finalizes every ended step without waiting for another pass, and counts whatever is
  // still pending as unattributed (shutdown).
  void finish();
  // Finished steps, oldest first; moves them out.
  std::vector<FoldedStep> take();
  // What the job stated about its FLOPs (ts_set_flops): stamped into the steps finalized from
  // now on; zeros leave them out.
  void setFlops(double model, double hardware, double peak) {
    modelFlops_ = model;
    hardwareFlops_ = hardware;
    peakFlops_ = peak;
  }

  uint64_t unattributed() const { return unattributed_; }
  uint64_t records() const { return records_; }
  int64_t lastStep() const { return lastStep_; }  // -1 until a step is final

 private:
  struct Span {
    int64_t step;
    int64_t begin;
    int64_t end = -1;        // -1 while open
    uint64_t endPass = 0;    // pass in which the end was seen
    int64_t endPassNs = -1;  // time of the pass that saw the end (-1: not yet)
    // The marking thread's run delay at the begin and the end (record.h; -1: not measured)
    // and the rings of the two marks: the delay between them is the step's CPU wait when
    // one thread made both.
    int64_t beginDelay = -1;
    int64_t endDelay = -1;
    uint32_t beginRing = 0;
    uint32_t endRing = 0;
  };
  struct Pairing {
    std::vector<Record> ranges;
    std::vector<Record> collectives;
  };

  void addComplete(const Record& r);
  void finalize(const Span& span);
  void sweepUnattributed();
  void markUnattributed(Record r);

  FoldOptions options_;
  std::deque<Span> spans_;       // ended-but-not-final steps, then at most one open step
  std::vector<Record> pending_;  // complete intervals not yet given to a step
  std::vector<Record> loose_;    // unattributed, for the next step's flight entry
  std::unordered_map<uint32_t, Pairing> pairing_;
  std::vector<FoldedStep> ready_;
  uint64_t pass_ = 0;
  uint64_t unattributed_ = 0;
  uint64_t records_ = 0;
  double modelFlops_ = 0;
  double hardwareFlops_ = 0;
  double peakFlops_ = 0;
  int64_t lastEnd_ = INT64_MIN;  // end of the last final step
  // The latest step end mark: a step that begins where it ended takes its run delay as its
  // own begin's, so the time between the two calls (`trainscope run` begins a step at its
  // first activity, back-dated to the last end) is counted too.
  int64_t lastMarkEnd_ = INT64_MIN;
  int64_t lastMarkDelay_ = -1;
  uint32_t lastMarkRing_ = 0;
  int64_t lastStep_ = -1;
  bool deviceSeen_ = false;  // a device record was folded: steps wait deviceLagNs
};

// Helpers exposed for tests: length of the union of [a,b) intervals, and of the overlap of
// two unions.
int64_t unionLength(std::vector<std::pair<int64_t, int64_t>> intervals);
int64_t overlapLength(std::vector<std::pair<int64_t, int64_t>> a,
                      std::vector<std::pair<int64_t, int64_t>> b);

}  // namespace trainscope::probe
