// libFuzzer target: `trainscope import` reading arbitrary trace files (importer/import_job.h:
// the streaming JSON reader, the format and rank scan, the fold into step reports, the timeline
// writer). The input's last bytes choose one or two files and whether each is gzipped; the rest
// is their content. Properties beyond "no crash, leak or UB": an import either succeeds with
// every step report one that ingest accepts, or fails with a message naming one of the files.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "collector/ingest/validate.h"
#include "importer/import_job.h"
#include "tests/common/support.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/importer/bundle.h"

using namespace trainscope;

namespace {

using fuzz::check;
using fuzz::gzipOf;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  tests::TempDir dir;
  if (dir.path().empty()) return 0;
  const int n = in.ConsumeBool() ? 2 : 1;
  // Two files are read on two threads or on one, as the input says: both paths, and most
  // inputs spare the threads' start-up.
  const unsigned threads = n == 2 && in.ConsumeBool() ? 2 : 1;
  std::vector<std::string> files;
  for (int i = 0; i < n; ++i) {
    const bool gzip = in.ConsumeBool();
    const std::string bytes =
        i + 1 == n ? in.ConsumeRemainingBytesAsString() : in.ConsumeRandomLengthString(1 << 16);
    const std::string path = dir.sub("rank" + std::to_string(i) + (gzip ? ".json.gz" : ".json"));
    fuzz::writeRaw(path, gzip ? gzipOf(bytes) : bytes);
    files.push_back(path);
  }
  importer::ImportOptions options;
  options.job = "fuzz";
  options.threads = threads;
  auto r = importer::importTraces(files, dir.sub("bundle"), options);
  if (!r) {
    bool named = false;
    for (const auto& f : files) named = named || r.message().find(f) != std::string::npos;
    // What failed, for whoever replays a crash file (a fuzzing run closes stderr).
    if (!named) std::fprintf(stderr, "import failed naming no file: %s\n", r.message().c_str());
    check(named);
    return 0;
  }
  const auto bundle = importer::testing::readBundle(r->stepsFile);
  check(bundle.ok);
  for (const auto& s : bundle.steps) {
    const auto bad = ingest::validateStep(s, r->worldSize, {});
    if (bad) std::fprintf(stderr, "ingest refuses an imported step: %s\n", bad->detail.c_str());
    check(!bad.has_value());
  }
  return 0;
}
