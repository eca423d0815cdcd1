// StepFolder turns the raw records of one probe instance into one StepReport per step.
// Pure and single-threaded: the runtime thread feeds it what it drains from the rings; tests
// feed it records with explicit timestamps.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
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
  // Marks the end of a drain pass over every ring. A step whose end was seen in an earlier
  // pass is final now: every ring has been drained past its end since.
  void endPass();
  // Finalizes every ended step without waiting for another pass, and counts whatever is
  // still pending as unattributed (shutdown).
  void finish();
  // Finished steps, oldest first; moves them out.
  std::vector<FoldedStep> take();

  uint64_t unattributed() const { return unattributed_; }
  uint64_t records() const { return records_; }
  int64_t lastStep() const { return lastStep_; }  // -1 until a step is final

 private:
  struct Span {
    int64_t step;
    int64_t begin;
    int64_t end = -1;      // -1 while open
    uint64_t endPass = 0;  // pass in which the end was seen
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
  int64_t lastEnd_ = INT64_MIN;  // end of the last final step
  int64_t lastStep_ = -1;
};

// Helpers exposed for tests: length of the union of [a,b) intervals, and of the overlap of
// two unions.
int64_t unionLength(std::vector<std::pair<int64_t, int64_t>> intervals);
int64_t overlapLength(std::vector<std::pair<int64_t, int64_t>> a,
                      std::vector<std::pair<int64_t, int64_t>> b);

}  // namespace trainscope::probe
