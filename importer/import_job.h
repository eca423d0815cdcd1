// The import of a set of trace files as one job, into a bundle directory the CLI uploads to the
// collector (collector/ingest/import_receiver.h):
//   steps.pb         the job's RankHello, StepReport and RankGoodbye envelopes (schema/
//                    trainscope.proto), each preceded by its length as a varint
//   rank-<R>.json.gz each rank's timeline, a per-rank capture file (docs/CAPTURE.md) of kind
//                    "import", its times on the aligned clock
// Every file is read once to learn its rank and steps before anything is written, so a bad or
// truncated file fails the import with its name and where it is wrong, and leaves no bundle.
// Then the ranks' clocks are aligned on their step boundaries and every file is read again and
// folded. The files are read in parallel (ImportOptions::threads); the result is the same as
// reading them one after the other. One call at a time per bundle directory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "importer/rank_trace.h"

namespace trainscope::importer {

struct ImportOptions {
  std::string job;        // "" = the capture files' job, else "import-<their folder or name>"
  std::string stepEvent;  // events of this name are the steps ("" = detect: ProfilerStep#N, ...)
  // The rank of each file, in the order of the files (empty = from inside the file, else its
  // name): for traces that say neither. Not for merged captures, whose ranks are their pids'.
  std::vector<uint32_t> ranks;
  // Shift each rank so its step ends line up with the lowest rank's (median over the steps
  // they share): ranks on different hosts have different clocks, and in synchronous training
  // every rank leaves each step's last collective together.
  bool align = true;
  bool timeline = true;  // write the ranks' timeline files
  // Bound on each rank's compressed timeline file: larger keeps more of a long trace to view,
  // costs disk and upload (the step rows always cover the whole file).
  uint64_t timelineMaxBytes = 64ull << 20;
  uint32_t topOps = 32;  // operators kept per step report, as the probe's default
  // Memory bound of one file's fold (see FoldOptions::maxUnits).
  uint64_t maxUnits = uint64_t{32} << 20;
  int64_t nowNs = 0;  // time stamped on the goodbyes; 0 = the wall clock
  // Files read at once, each on its own thread (both passes); 0 = one per core. Memory grows
  // with it: each file being folded holds its steps' accumulators and its step reports.
  unsigned threads = 0;
};

// One imported rank and what was found in its file.
struct ImportedRank {
  uint32_t rank = 0;
  std::string file;
  std::string format;    // kineto, trainscope, chrome
  std::string rankFrom;  // "--ranks", "distributedInfo", "trainscope header", "file name",
                         // "only file", "pid"
  std::string host;
  std::string stepRule;
  std::string comm;     // where its collectives came from
  bool device = false;  // compute and comm from device kernels
  uint64_t fileEvents = 0;
  RankFold fold;
  int64_t shiftNs = 0;  // added to the file's times (clock rebase and alignment)
  uint64_t timelineEvents = 0;
  bool timelineTruncated = false;
  uint64_t timelineBytes = 0;
  std::vector<std::string> notes;
};

struct ImportResult {
  std::string job;
  uint32_t worldSize = 0;                  // highest rank + 1: what the job is stored with
  std::optional<uint32_t> traceWorldSize;  // what the traces' distributedInfo said, if larger
  std::vector<ImportedRank> ranks;         // by rank
  uint64_t events = 0;                     // events read (one pass)
  uint64_t inputBytes = 0;                 // JSON bytes read (one pass)
  uint64_t reports = 0;
  std::string stepsFile;  // DIR/steps.pb
  uint64_t stepsBytes = 0;
  std::vector<std::string> notes;  // about the job as a whole (clock rebase, ...)
};

// Reads `files` into `dir` (created if missing). Fails, naming the file and what is wrong, on
// the first bad file; then nothing is left in `dir` but what was there before.
Result<ImportResult> importTraces(const std::vector<std::string>& files, const std::string& dir,
                                  const ImportOptions& options = {});

// A rank number in a file name ("rank-3.json.gz", "trace_rank7.pt.trace.json", "rank_12");
// nullopt when the name has none.
std::optional<uint32_t> rankFromFileName(const std::string& path);

// Bundle file names.
inline constexpr const char* kStepsFileName = "steps.pb";
std::string rankFileName(uint32_t rank);  // "rank-<R>.json.gz"

}  // namespace trainscope::importer
