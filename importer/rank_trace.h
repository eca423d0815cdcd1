// One trace file turned into the step reports of the rank (or ranks) it holds, in two passes
// over the file: scanTrace() learns what the file is (its format, rank, steps, whether it has
// device kernels and where its collectives are); foldTrace() then reads it again and folds each
// event into the step whose span holds its start, with probe::StepAccumulator (the probe's own
// fold), and writes the rank's timeline file. Between the passes the caller aligns the ranks'
// clocks. Memory: the steps, the open steps' accumulators (bounded by FoldOptions::maxUnits, past
// which the file is folded a window of steps at a time) and one event; never the document.
// Pure apart from the sources and files it is given; one call per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "importer/classify.h"
#include "importer/trace_reader.h"
#include "schema/trainscope.pb.h"

namespace trainscope::importer {

enum class TraceFormat : uint8_t {
  kKineto,      // the PyTorch profiler's (Kineto) Chrome trace
  kTrainscope,  // a trainscope capture: a rank file or a merged capture trace
  kChrome,      // another tool's Chrome trace
};
const char* formatName(TraceFormat format);

// Where a file's collectives come from, in the order of preference.
enum class CommSource : uint8_t {
  kNone,
  kDeviceKernels,  // NCCL kernels on the device streams (their time is the transfer)
  kAnnotations,    // host annotations "nccl:all_reduce", "gloo:broadcast", ...
  kParamComms,     // host "record_param_comms" with a "Collective name"
  kC10d,           // host "c10d::allreduce_" operators
  kCapture,        // a trainscope capture's "collective" events
  kGeneric,        // events whose names are collectives' ("all_reduce", "AllGather", ...)
};
const char* commSourceName(CommSource source);

struct StepSpan {
  int64_t step = 0;
  int64_t beginNs = 0;  // the file's clock (ts + baseTimeNanoseconds)
  int64_t endNs = 0;
};

// A host-side collective call, for sizing NCCL kernels whose arguments do not say their size
// (older profilers): kernel -> correlation -> its launch -> the call around the launch.
struct HostCall {
  int64_t beginNs = 0;
  int64_t endNs = 0;
  CollectiveArgs args;
};

struct ScanOptions {
  std::string stepEvent;  // events of this name are the steps ("" = detect them)
};

// One rank found in a file.
struct RankInFile {
  uint32_t rank = 0;
  std::optional<int64_t> pid;   // the events' pid that is this rank (merged captures); none:
                                // every event of the file
  std::vector<StepSpan> steps;  // sorted by begin, disjoint
};

// What the first pass learned about a file.
struct TraceFacts {
  TraceFormat format = TraceFormat::kChrome;
  // Identity from inside the file (Kineto's distributedInfo, a capture's "trainscope").
  std::optional<uint32_t> rank;
  std::optional<uint32_t> worldSize;
  std::string backend;            // distributedInfo.backend
  std::string host;               // Kineto's host_name or the capture's host
  std::string job;                // a capture's job
  uint32_t pid = 0;               // the host process
  int64_t baseNs = 0;             // baseTimeNanoseconds: added to every ts
  bool mergedCapture = false;     // several ranks, one per pid
  std::vector<RankInFile> ranks;  // one unless mergedCapture; ranks[0].rank set by the caller
  std::string stepRule;           // how the steps were found, for messages
  std::string stepEventName;      // the steps are the events of this name ("": by category)
  bool device = false;            // kernels on device streams: compute and comm come from them
  CommSource comm = CommSource::kNone;
  // Counts over the file.
  uint64_t events = 0;
  uint64_t inputBytes = 0;   // JSON text read
  uint64_t kernels = 0;      // device kernels (not communication)
  uint64_t copies = 0;       // device memcpy/memset
  uint64_t commKernels = 0;  // NCCL kernels
  uint64_t cpuOps = 0;
  uint64_t hostCollectives = 0;  // annotations, record_param_comms or c10d ops, per `comm`
  uint64_t dataLoads = 0;
  // Sizing NCCL kernels without size arguments (see HostCall).
  std::unordered_set<int64_t> joinCorrelations;
  std::unordered_map<std::string, std::vector<HostCall>> hostCalls;  // lane -> calls by begin
  std::vector<std::string> notes;  // things the user should know (steps clipped, ...)
};

// Pass 1. Fails on a malformed file, or one with no steps (the message says how steps are
// recognized and names --step-event).
Result<TraceFacts> scanTrace(ByteSource& source, const ScanOptions& options = {});

// What pass 2 produced for one rank of the file.
struct RankFold {
  uint32_t rank = 0;
  uint64_t steps = 0;  // reports produced
  int64_t firstStep = -1;
  int64_t lastStep = -1;
  uint64_t records = 0;           // events folded into steps
  uint64_t outside = 0;           // events of a folded kind that started outside every step
  uint64_t kernels = 0;           // compute operators folded (kernels, or host ops)
  uint64_t collectives = 0;       // collective calls folded
  uint64_t collectiveBytes = 0;   // summed over calls
  int64_t collectiveNs = 0;       // summed over calls
  uint64_t sizedCollectives = 0;  // calls whose size was known
  int64_t computeNs = 0;          // summed over the rank's reports
  int64_t commNs = 0;
  int64_t exposedNs = 0;
  int64_t dataNs = 0;
  int64_t durationNs = 0;
};

// Receives one rank's timeline events (JSON objects) during pass 2; false = no more wanted.
class TimelineSink {
 public:
  virtual ~TimelineSink() = default;
  virtual bool write(uint32_t rank, std::string_view event, int64_t tNs) = 0;
};

struct FoldOptions {
  std::string job;       // copied into every report
  uint32_t topOps = 32;  // operators kept per report (the probe's default)
  // Added to every time of a rank (its clock alignment): rank -> ns. Missing ranks: 0.
  std::map<uint32_t, int64_t> shiftNs;
  // Bound on what open steps hold (StepAccumulator::units(), ~16 bytes each). Past it the file
  // is read again a window of steps at a time.
  uint64_t maxUnits = uint64_t{32} << 20;
};

// Pass 2 over a file described by `facts` (ranks[].rank filled in). `open` gives a fresh source
// of the same file each time it is called (a window may need several passes). Reports go to
// `onReport` in step order per rank, with times shifted; timeline events to `timeline` (may be
// null), written once.
Result<std::vector<RankFold>> foldTrace(
    const std::function<Result<std::unique_ptr<ByteSource>>()>& open, const TraceFacts& facts,
    const FoldOptions& options, const std::function<Status(wire::StepReport&&)>& onReport,
    TimelineSink* timeline);

// The fuzzing entry: both passes over bytes in memory (plain or gzip), as rank 0, without a
// timeline; the reports are handed to `onReport` when given.
Status importTraceBytes(std::string_view bytes,
                        const std::function<void(const wire::StepReport&)>& onReport = {});

}  // namespace trainscope::importer
