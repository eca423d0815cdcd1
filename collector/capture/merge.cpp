#include "collector/capture/merge.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "collector/capture/gzip_file.h"

namespace trainscope::capture {
namespace {

using nlohmann::json;

std::string dumpJson(const json& j) {
  // Text from a probe may hold invalid UTF-8 (a thread name, a path): replace, never throw.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A rank's file parsed, or why it cannot be used.
Result<json> readRankJson(const RankFile& f, const MergeOptions& options) {
  auto text = readGzipFile(f.path, options.rankFile);
  if (!text) return text.status();
  auto doc = json::parse(*text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Result<json>::error("the file of rank " + std::to_string(f.rank) +
                               " is not a JSON object");
  }
  return doc;
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
    auto doc = readRankJson(f, options);
    if (!doc) {
      outcome.failures[f.rank] = doc.message();
      continue;
    }
    auto it = doc->find("traceEvents");
    if (it == doc->end() || !it->is_array()) {
      outcome.failures[f.rank] =
          "the file of rank " + std::to_string(f.rank) + " has no traceEvents list";
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
    for (auto& event : *it) {
      if (!event.is_object()) continue;
      event["pid"] = f.rank;
      auto ts = event.find("ts");
      if (ts != event.end() && ts->is_number()) *ts = ts->get<double>() + shiftUs;
      emit(event);
    }
    doc = json();  // free this rank before reading the next
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
    auto doc = readRankJson(f, options);
    if (!doc) {
      outcome.failures[f.rank] = doc.message();
      continue;
    }
    auto threads = doc->find("threads");
    if (threads == doc->end() || !threads->is_array()) {
      outcome.failures[f.rank] =
          "the file of rank " + std::to_string(f.rank) + " has no threads list";
      continue;
    }
    outcome.events += threads->size();
    if (!first) out.write(",\n");
    first = false;
    out.write(dumpJson(json{{"rank", f.rank}, {"node", f.node}, {"threads", std::move(*threads)}}));
  }
  out.write("],\n\"capture\":");
  out.write(dumpJson(describe(outcome.failures)));
  out.write("}\n");
  return finish(out, outPath, std::move(outcome));
}

}  // namespace trainscope::capture
