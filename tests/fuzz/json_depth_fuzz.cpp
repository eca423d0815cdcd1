// libFuzzer target: JSON from outside at any depth and size, through every path that parses
// it and may later dump it: capture request bodies (collector/capture/request.h), the bounded
// parse of import bodies (common/json_limits.h) and rank files read by the merge
// (collector/capture/merge.h, json_list_reader.h), as a capture's chunks or an import's files
// arrive. The input is a skeleton with one amplified part: `depth` brackets of one kind around
// a core, so a few bytes stand for a document 200,000 levels deep (libFuzzer's inputs are
// small; the crash it guards against needed ~100,000 levels).
// Properties beyond "no crash, leak or UB": text nested past a bound is refused with a message
// saying so, an error message stays short whatever the value, and the merge never fails whole.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "collector/capture/merge.h"
#include "collector/capture/request.h"
#include "common/json_limits.h"
#include "tests/common/support.h"
#include "tests/fuzz/fuzz_util.h"

using namespace trainscope;
using nlohmann::json;

namespace {

using fuzz::check;

// prefix + opens(depth) + core + closes(depth) + suffix, the brackets '[' or '{"k":'.
std::string amplified(FuzzedDataProvider& in) {
  const std::string prefix = in.ConsumeRandomLengthString(64);
  const size_t depth = in.ConsumeIntegralInRange<size_t>(0, 200000);
  const bool objects = in.ConsumeBool();
  const std::string core = in.ConsumeRandomLengthString(256);
  std::string text = prefix;
  text.reserve(prefix.size() + depth * 6 + core.size() + 64);
  for (size_t i = 0; i < depth; ++i) text += objects ? "{\"k\":" : "[";
  text += core;
  text.append(depth, objects ? '}' : ']');
  text += in.ConsumeRemainingBytesAsString();
  return text;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const int path = in.ConsumeIntegralInRange<int>(0, 3);
  const std::string text = amplified(in);
  const bool tooDeepForRequests =
      jsonNestingDepth(text, kMaxRequestJsonDepth) > kMaxRequestJsonDepth;

  if (path == 0) {  // POST /api/v1/jobs/J/captures
    auto r = capture::parseCaptureRequest(text);
    if (tooDeepForRequests) {
      check(!r.isOk() && r.message().rfind("body: nested deeper than", 0) == 0);
    }
    // Nothing of the value is echoed whole: a message is a field name, a bound and a
    // described value (the longest are the rank spec's: two 40-byte cuts and the spec's text).
    if (!r.isOk()) check(r.message().size() < 400);
    return 0;
  }
  if (path == 1) {  // import begin and commit bodies
    std::string why;
    json doc = parseJsonBounded(text, kMaxRequestJsonDepth, &why);
    if (tooDeepForRequests) check(doc.is_discarded() && why.rfind("nested deeper", 0) == 0);
    if (!doc.is_discarded()) {
      check(describeJsonValue(doc).size() < 100);
      if (doc.is_object()) {
        for (const auto& [key, value] : doc.items()) {
          check(shortForMessage(key).size() <= 43);
          check(describeJsonValue(value).size() < 100);
        }
      }
    }
    return 0;
  }

  // A rank file as a capture's chunks or an import's commit leave it: the text whole, or as
  // one event's args.
  tests::TempDir dir;
  if (dir.path().empty()) return 0;
  const bool stacks = path == 3;
  const std::string document =
      in.remaining_bytes() % 2 == 0
          ? text
          : (stacks ? R"({"threads":[{"tid":1,"v":)" : R"({"traceEvents":[{"ph":"i","args":)") +
                text + "}]}";
  capture::RankFile f;
  f.path = dir.sub("rank-0.json.gz");
  fuzz::writeRaw(f.path, fuzz::gzipOf(document));
  std::map<uint32_t, std::string> failed;
  auto describe = [&](const std::map<uint32_t, std::string>& failures) {
    failed = failures;
    return json::object();
  };
  const std::string out = dir.sub("trace.json.gz");
  auto merged =
      stacks ? capture::mergeStacks({f}, describe, out) : capture::mergeTrace({f}, describe, out);
  check(merged.isOk());
  // Too deep to read: the rank fails (for that reason, or an earlier fault of the text).
  if (jsonNestingDepth(document, kMaxTraceJsonDepth) > kMaxTraceJsonDepth) {
    check(merged->failures.count(0) == 1);
  }
  return 0;
}
