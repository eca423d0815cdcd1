// libFuzzer target: the capture merge reading rank files (collector/capture/merge.h,
// gzip_file.h). The input makes up to four rank files: raw bytes (the gzip reader's input), or
// a gzip of text from the input (the JSON reader's), with a clock offset each, merged as a
// trace or as stacks under a size bound that is sometimes tiny.
// Properties beyond "no crash, leak or UB": the merge succeeds, its output is one valid JSON
// document, and every rank is in it or named among the failures.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collector/capture/gzip_file.h"
#include "collector/capture/merge.h"
#include "tests/common/support.h"
#include "tests/fuzz/fuzz_util.h"

using namespace trainscope;
using nlohmann::json;

using fuzz::check;
using fuzz::gzipOf;
using fuzz::writeRaw;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  tests::TempDir dir;
  if (dir.path().empty()) return 0;

  const bool stacks = in.ConsumeBool();
  capture::MergeOptions options;
  if (in.ConsumeBool()) {
    // A tiny bound on the decompressed rank file (and ratio): the refusal path.
    options.rankFile.maxBytes = in.ConsumeIntegralInRange<uint64_t>(0, 256);
    options.rankFile.maxRatio = in.ConsumeIntegralInRange<uint64_t>(1, 64);
  }
  std::vector<capture::RankFile> ranks;
  const int n = in.ConsumeIntegralInRange<int>(1, 4);
  for (int i = 0; i < n; ++i) {
    capture::RankFile f;
    f.rank = static_cast<uint32_t>(i);
    f.node = in.ConsumeRandomLengthString(16);
    f.offsetNs = in.ConsumeIntegral<int64_t>();
    f.path = dir.sub("rank-" + std::to_string(i) + ".json.gz");
    const bool gzip = in.ConsumeBool();
    const std::string bytes =
        i + 1 == n ? in.ConsumeRemainingBytesAsString() : in.ConsumeRandomLengthString(4096);
    writeRaw(f.path, gzip ? gzipOf(bytes) : bytes);
    ranks.push_back(std::move(f));
  }

  std::map<uint32_t, std::string> failed;
  auto describe = [&](const std::map<uint32_t, std::string>& failures) {
    failed = failures;
    json j = json::object();
    for (const auto& [rank, why] : failures) j[std::to_string(rank)] = why;
    return j;
  };
  const std::string out = dir.sub("trace.json.gz");
  auto merged = stacks ? capture::mergeStacks(ranks, describe, out, options)
                       : capture::mergeTrace(ranks, describe, out, options);
  check(merged.isOk());

  auto text = capture::readGzipFile(out, capture::DecompressLimits{});
  check(text.isOk());
  const json doc = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  check(!doc.is_discarded() && doc.is_object());
  // Every rank that is not among the failures is in the merged file.
  std::set<uint64_t> present;
  if (stacks) {
    for (const auto& r : doc.at("ranks")) present.insert(r.at("rank").get<uint64_t>());
  } else {
    for (const auto& e : doc.at("traceEvents")) {
      if (e.value("name", "") == "process_name" && e.at("pid").is_number_unsigned()) {
        present.insert(e.at("pid").get<uint64_t>());
      }
    }
  }
  for (const auto& f : ranks) check(failed.count(f.rank) == 1 || present.count(f.rank) == 1);
  return 0;
}
