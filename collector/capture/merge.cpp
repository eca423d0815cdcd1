#include "collector/capture/merge.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "collector/capture/gzip_file.h"
#include "collector/capture/json_list_reader.h"

namespace trainscope::capture {
namespace {

using nlohmann::json;

std::string dumpJson(const json& j) {
  // Text from a probe may hold invalid UTF-8 (a thread name, a path): replace, never throw.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Reads the list `listKey` of a rank's file, handing each entry to `onEntry` (nothing: only
// checks it). Memory stays at one entry (ListReadLimits), whatever the file's size.
Status readRankList(const RankFile& f, const std::string& listKey, const MergeOptions& options,
                    const ListEntryFn& onEntry) {
  auto reader = GzipReader::open(f.path, options.rankFile);
  if (!reader) return reader.status();
  auto read = readJsonList(**reader, listKey, options.entries, onEntry);
  if (!read) {
    return Status::error("the file of rank " + std::to_string(f.rank) + ": " + read.message());
  }
  return Status::ok();
}

Result<MergeOutcome> finish(GzipWriter& out, const std::string& outPath, MergeOutcome outcome) {
  if (auto s = out.close(); !s) return s;
  std::error_code ec;
  auto size = std::filesystem::file_size(outPath, ec);
  if (ec) return Status::error("cannot stat " + outPath + ": " + ec.message());
  outcome.bytes = size;
  return outcome;
}

}  // namespace

Result<MergeOutcome> mergeTrace(const std::vector<RankFile>& ranks, const DescribeCapture& describe,
                                const std::string& outPath, const MergeOptions& options) {
  GzipWriter out;
  if (auto s = out.open(outPath); !s) return s;
  MergeOutcome outcome;
  out.write("{\"traceEvents\":[");
  bool first = true;
  auto emit = [&](const json& event) {
    if (!first) out.write(",\n");
    first = false;
    out.write(dumpJson(event));
    ++outcome.events;
  };
  for (const auto& f : ranks) {
    // Checked whole before the first event is written: a file that turns out bad halfway
    // leaves nothing of itself in the merged file.
    if (Status s = readRankList(f, "traceEvents", options, nullptr); !s) {
      outcome.failures[f.rank] = s.message();
      continue;
    }
    const std::string label =
        "rank " + std::to_string(f.rank) + (f.node.empty() ? "" : " (" + f.node + ")");
    emit(json{{"name", "process_name"}, {"ph", "M"}, {"pid", f.rank}, {"args", {{"name", label}}}});
    emit(json{{"name", "process_sort_index"},
              {"ph", "M"},
              {"pid", f.rank},
              {"args", {{"sort_index", f.rank}}}});
    // Microseconds: the offset is applied as a double, like the probe's fractional ts.
    const double shiftUs = static_cast<double>(f.offsetNs) / 1000.0;
    Status read = readRankList(f, "traceEvents", options, [&](json& event) {
      if (!event.is_object()) return;
      event["pid"] = f.rank;
      auto ts = event.find("ts");
      if (ts != event.end() && ts->is_number()) *ts = ts->get<double>() + shiftUs;
      emit(event);
    });
    // The file was read once already: only a change under the merge fails it now.
    if (!read) outcome.failures[f.rank] = read.message();
  }
  out.write("],\n\"trainscope\":");
  out.write(dumpJson(describe(outcome.failures)));
  out.write("}\n");
  return finish(out, outPath, std::move(outcome));
}

Result<MergeOutcome> mergeStacks(const std::vector<RankFile>& ranks,
                                 const DescribeCapture& describe, const std::string& outPath,
                                 const MergeOptions& options) {
  GzipWriter out;
  if (auto s = out.open(outPath); !s) return s;
  MergeOutcome outcome;
  out.write("{\"kind\":\"stacks\",\"ranks\":[");
  bool first = true;
  for (const auto& f : ranks) {
    if (Status s = readRankList(f, "threads", options, nullptr); !s) {
      outcome.failures[f.rank] = s.message();
      continue;
    }
    if (!first) out.write(",\n");
    first = false;
    out.write("{\"rank\":" + std::to_string(f.rank) + ",\"node\":" + dumpJson(json(f.node)) +
              ",\"threads\":[");
    bool firstThread = true;
    Status read = readRankList(f, "threads", options, [&](json& thread) {
      if (!firstThread) out.write(",");
      firstThread = false;
      out.write(dumpJson(thread));
      ++outcome.events;
    });
    out.write("]}");
    if (!read) outcome.failures[f.rank] = read.message();
  }
  out.write("],\n\"capture\":");
  out.write(dumpJson(describe(outcome.failures)));
  out.write("}\n");
  return finish(out, outPath, std::move(outcome));
}

}  // namespace trainscope::capture
