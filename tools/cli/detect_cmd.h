// The `detect` subcommand of the trainscope CLI: change points of a series read from a file or
// standard input (no collector needed) or of a stored job's step times fetched from the
// collector, found offline by collector/detect/offline.h's penalised segmentation.
// Single-threaded like the rest of the CLI: call from one thread.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collector/detect/offline.h"
#include "tools/cli/cli.h"

namespace trainscope::cli {

// The detector's flags, shared by `trainscope detect` and the offline detector's evaluation
// (tools/bench/offline_detect_eval), so both take the same flags with the same checks.
struct DetectorFlags {
  detect::OfflineOptions options;  // defaults are the detector's
  std::string model = "auto";      // --model, a name parseSegmentModel accepts
};
// Adds --model, --penalty, --penalty-scale, --min-segment, --outlier-sigmas, --max-autocorr
// and --no-seasonal to `app`, filling *flags (which must outlive the parse).
void addDetectorFlags(CLI::App& app, DetectorFlags* flags);
// The options the flags ask for, model included.
detect::OfflineOptions detectorOptions(const DetectorFlags& flags);

// Where the series comes from: a file (or stdin), or a job stored by the collector. Exactly one
// of `input` and `job` is set.
struct DetectArgs {
  std::string input;                    // a file, or "-" for stdin
  std::istream* stdinStream = nullptr;  // what "-" reads; null = std::cin (tests pass their own)
  std::string job;                      // a stored job: its step times, in ms, by step
  std::optional<uint32_t> rank;         // with job: this rank's step times; none = the median
                                        // over the job's ranks of each step
  std::optional<int64_t> from;          // with job: first step, inclusive
  std::optional<int64_t> to;            // with job: last step, inclusive
  DetectorFlags flags;
};

// A stored job's step times in ms, in step order: the median over ranks of each step, or one
// rank's. Pages through the collector's /summary or /steps (1,000 rows a request). On failure
// prints the message and sets *exitCode as fetchJson does.
struct JobSeries {
  std::vector<double> valuesMs;
  std::vector<int64_t> steps;  // the step of each value; steps nothing reported are absent
};
std::optional<JobSeries> fetchJobSeries(Context& ctx, const DetectArgs& args, int* exitCode);

// The --json form of a segmentation of `values` values: summary fields, "segments" (start,
// end exclusive, values, mean, sd, slope) and "change_points" (index, before, after, jump,
// ratio, sd_before, sd_after). With `steps` (one per value, a job's series) segments also
// carry first_step and last_step, and change points the step where the new segment begins.
nlohmann::json segmentationJson(const detect::Segmentation& seg, size_t values,
                                const std::vector<int64_t>* steps = nullptr);

// Reads args.input or the job's step times, segments them and prints the change points and
// segments (a table, or JSON under --json). kExitLocalError with a message naming the file,
// or the line, on bad input; the collector's errors as the other subcommands report them.
int runDetect(Context& ctx, const DetectArgs& args);

}  // namespace trainscope::cli
