// The capture subcommands of the trainscope CLI (capture, captures, stacks; docs/CAPTURE.md):
// request a trace or a stack dump, follow it to its end, download the merged file and show
// stacks side by side. The pure pieces are here so tests can check them without a collector.
// Single-threaded like the rest of the CLI: call from one thread.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "tools/cli/cli.h"

namespace trainscope::cli {

struct CaptureArgs {
  std::string job;
  std::string kind = "trace";                  // "trace" or "stacks"
  std::optional<std::vector<uint32_t>> ranks;  // none: every rank of the job
  std::optional<uint32_t> steps;               // none: the collector's default (5)
  std::optional<uint32_t> history;             // none: the collector's default (4)
  std::optional<int64_t> startStep;            // none: latest step of the job + 2
  std::optional<double> maxMb;                 // none: the collector's default (64 MiB)
  std::string reason;                          // "": the collector's "on request"
  bool wait = false;                           // follow the capture to its end (implied by --out)
  double timeoutS = 0;  // give up waiting after this long; 0 = the capture's own deadline
                        // (as the collector computed it) plus 30 s
  std::string out;      // write the merged trace here ("" = nowhere); *.gz stays gzip
  int pollMs = 500;     // time between progress polls: a CLI may poll, 2/s is cheap
};

// Parses "0,3,5-7" (ranks and inclusive ranges, any order, repeats allowed) into a sorted list
// without repeats. The message names the bad item.
Result<std::vector<uint32_t>> parseRankList(const std::string& text);
// The inverse: "0-3,5,7-9"; "-" for an empty list.
std::string formatRankList(const std::vector<uint32_t>& ranks);

// The POST /api/v1/jobs/{job}/captures body for `args` (only the fields that were given).
nlohmann::json captureRequestBody(const CaptureArgs& args);

// One line for a rank's status entry of the capture JSON, e.g.
// "rank 5 (node1): recording: steps 12..14, history from 10".
std::string rankStatusLine(const nlohmann::json& rankStatus);

// Prints the merged stacks JSON ({"kind":"stacks","capture":...,"ranks":[...]}): per rank a
// header and per thread its innermost frames (Python first where it runs Python), marking
// the ranks whose main thread's top frames differ from the most common ones.
void renderStacks(const nlohmann::json& merged, std::ostream& out);

// gzip helpers for --out: whole buffers in memory (a merged trace is at most some hundred MB).
Result<std::string> gunzip(const std::string& data);
Result<std::string> gzipCompress(const std::string& data);

// The subcommands; each returns the process exit code (0 complete, 3 partial, 5 failed or
// timed out; otherwise as cli.h's table says).
int runCapture(Context& ctx, const CaptureArgs& args);
int runCaptures(Context& ctx, const std::string& job);

}  // namespace trainscope::cli
