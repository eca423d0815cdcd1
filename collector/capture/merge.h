// Merging per-rank capture files (docs/CAPTURE.md) into the one file the API serves: for a
// trace, a Chrome-trace JSON whose events are shifted onto the collector's clock, one process
// per rank; for stacks, every rank's threads side by side. Pure functions of their inputs and
// files; safe from any thread. Each rank's file is streamed (json_list_reader.h), checked
// whole and then read event by event, so memory stays at one event whatever the files' size.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collector/capture/gzip_file.h"
#include "collector/capture/json_list_reader.h"
#include "common/json_limits.h"
#include "common/status.h"

namespace trainscope::capture {

// One rank's stored file and where its clock stands.
struct RankFile {
  uint32_t rank = 0;
  std::string node;
  int64_t offsetNs = 0;  // collector clock - the node's clock (Heartbeat.offset_ns)
  std::string path;      // rank-<R>.json.gz
};

struct MergeOutcome {
  uint64_t bytes = 0;   // size of the written (gzip) file
  uint64_t events = 0;  // trace events written (metadata included), or threads for stacks
  // Ranks whose file could not be used (not gzip, not JSON, wrong shape), with why. They are
  // left out of the merged file.
  std::map<uint32_t, std::string> failures;
};

struct MergeOptions {
  // A rank file decompressing to more than maxBytes (1 GiB), or to more than maxRatio (64)
  // times its compressed size (at least 1 MiB), is refused and its rank failed: it is read
  // twice, so this bounds the merge's time, and a small gzip bomb costs no more than that.
  DecompressLimits rankFile;
  // Nesting (512 levels) and one event's size in memory (64 MiB), as the importer reads
  // them: a rank file past either is refused and its rank failed. The depth bound keeps a
  // recursive dump of an event off the end of the stack; the size bound is the merge's memory.
  ListReadLimits entries = {kMaxTraceJsonDepth, 64u << 20};
};

// Called once every rank is read, with the ranks that failed; returns the capture JSON the
// merged file carries ("trainscope" for a trace, "capture" for stacks). Written last, so it can
// report those failures.
using DescribeCapture =
    std::function<nlohmann::json(const std::map<uint32_t, std::string>& failures)>;

// Writes `outPath` (gzip): {"traceEvents": [...], "trainscope": describe(...)}. Every event of
// rank R gets pid R and, when it has a numeric ts (microseconds), ts + offsetNs / 1000; each rank
// gets process_name "rank R (node)" and process_sort_index R metadata events. Fails only when
// the output cannot be written.
Result<MergeOutcome> mergeTrace(const std::vector<RankFile>& ranks, const DescribeCapture& describe,
                                const std::string& outPath, const MergeOptions& options = {});

// Writes `outPath` (gzip): {"kind": "stacks", "ranks": [{"rank", "node", "threads"}],
// "capture": describe(...)}.
Result<MergeOutcome> mergeStacks(const std::vector<RankFile>& ranks,
                                 const DescribeCapture& describe, const std::string& outPath,
                                 const MergeOptions& options = {});

}  // namespace trainscope::capture
