// The `detect` subcommand of the trainscope CLI: change points of a series read from a file or
// standard input, found offline by collector/detect/offline.h's penalised segmentation; needs no
// collector. Single-threaded like the rest of the CLI: call from one thread.
#pragma once

#include <iosfwd>
#include <string>

#include <nlohmann/json.hpp>

#include "collector/detect/offline.h"
#include "tools/cli/cli.h"

namespace trainscope::cli {

struct DetectArgs {
  std::string input;                    // a file, or "-" for stdin
  std::istream* stdinStream = nullptr;  // what "-" reads; null = std::cin (tests pass their own)
  detect::OfflineOptions options;       // the flags; defaults are the detector's
};

// The --json form of a segmentation of `values` values: summary fields, "segments" (start,
// end exclusive, values, mean, sd, slope) and "change_points" (index, before, after, jump,
// ratio, sd_before, sd_after).
nlohmann::json segmentationJson(const detect::Segmentation& seg, size_t values);

// Reads args.input, segments it and prints the change points and segments (a table, or JSON
// under --json). Exit 1 with a message naming the file, or the line, on bad input.
int runDetect(Context& ctx, const DetectArgs& args);

}  // namespace trainscope::cli
