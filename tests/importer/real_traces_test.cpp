// Real public traces: the four of tests/data/import/hta (HolisticTraceAnalysis' test data, MIT:
// a 2-rank GPU job with NCCL kernels, a ROCm rank, a CPU-only rank), or the directory in
// $TRAINSCOPE_REAL_TRACES instead. Every *.json and *.json.gz file is imported on its own, and
// every folder whose files each hold a different rank as one job. An import either succeeds
// with every step report passing ingest's checks, or fails with a message that names the file;
// at least one must succeed (all five, of the committed ones). Prints what it found (ranks,
// steps, kernels, collectives, bytes, bandwidth). Exit 77 (skipped) without traces.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "collector/ingest/validate.h"
#include "common/guarded_main.h"
#include "importer/import_job.h"
#include "tests/common/support.h"
#include "tests/importer/bundle.h"

namespace fs = std::filesystem;
using trainscope::tests::TempDir;

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::printf("FAILED: %s\n", what.c_str());
  }
}

bool isTrace(const fs::path& p) {
  const std::string n = p.filename().string();
  auto ends = [&](const std::string& s) {
    return n.size() > s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
  };
  return ends(".json") || ends(".json.gz");
}

// Imports `files` as one job; true when it succeeded.
bool importAndCheck(const std::vector<std::string>& files, const std::string& label) {
  TempDir dir;
  trainscope::importer::ImportOptions o;
  o.job = "real";
  auto r = trainscope::importer::importTraces(files, dir.sub("bundle"), o);
  if (!r) {
    bool named = false;
    for (const auto& f : files) named |= r.message().find(f) != std::string::npos;
    expect(named, label + ": the error names no file: " + r.message());
    std::printf("%-70s not imported: %s\n", label.c_str(), r.message().c_str());
    return false;
  }
  auto b = trainscope::importer::testing::readBundle(r->stepsFile);
  expect(b.ok, label + ": steps.pb does not read back");
  for (const auto& s : b.steps) {
    auto rej = trainscope::ingest::validateStep(s, r->worldSize, {});
    expect(!rej.has_value(), label + ": a report ingest would refuse: " + (rej ? rej->detail : ""));
  }
  for (const auto& k : r->ranks) {
    const double gbps = k.fold.collectiveNs > 0 ? static_cast<double>(k.fold.collectiveBytes) /
                                                      static_cast<double>(k.fold.collectiveNs)
                                                : 0.0;
    std::printf(
        "%-70s rank %u (%s, world %u%s): %llu events, steps %lld-%lld (%llu), %llu compute ops "
        "(%s), %llu collectives (%s, %llu sized) %.1f MiB at %.2f GB/s, compute %.1f%% exposed "
        "comm %.1f%% data %.1f%%, shift %+.3f ms\n",
        label.c_str(), k.rank, k.rankFrom.c_str(), r->worldSize,
        r->traceWorldSize ? (" of " + std::to_string(*r->traceWorldSize)).c_str() : "",
        static_cast<unsigned long long>(k.fileEvents), static_cast<long long>(k.fold.firstStep),
        static_cast<long long>(k.fold.lastStep), static_cast<unsigned long long>(k.fold.steps),
        static_cast<unsigned long long>(k.fold.kernels), k.device ? "device" : "host",
        static_cast<unsigned long long>(k.fold.collectives), k.comm.c_str(),
        static_cast<unsigned long long>(k.fold.sizedCollectives),
        static_cast<double>(k.fold.collectiveBytes) / (1 << 20), gbps,
        k.fold.durationNs > 0 ? 100.0 * k.fold.computeNs / k.fold.durationNs : 0.0,
        k.fold.durationNs > 0 ? 100.0 * k.fold.exposedNs / k.fold.durationNs : 0.0,
        k.fold.durationNs > 0 ? 100.0 * k.fold.dataNs / k.fold.durationNs : 0.0,
        static_cast<double>(k.shiftNs - (r->ranks.front().shiftNs)) / 1e6);
  }
  return true;
}

}  // namespace

namespace {

int realTracesMain() {
  fs::path root;
  bool committed = false;
  if (const char* env = std::getenv("TRAINSCOPE_REAL_TRACES"); env != nullptr && *env != '\0') {
    root = env;
  } else if (const char* src = std::getenv("TRAINSCOPE_SOURCE_ROOT"); src != nullptr) {
    root = fs::path(src) / "tests" / "data" / "import" / "hta";
    committed = true;
  }
  std::error_code ec;
  if (root.empty() || !fs::is_directory(root, ec)) {
    std::printf("no real traces (set TRAINSCOPE_REAL_TRACES to a directory of them): skipped\n");
    return 77;
  }
  std::map<fs::path, std::vector<std::string>> byDir;
  for (auto it = fs::recursive_directory_iterator(root, ec); it != fs::end(it); it.increment(ec)) {
    if (it->is_regular_file(ec) && isTrace(it->path())) {
      byDir[it->path().parent_path()].push_back(it->path().string());
    }
  }
  int imported = 0;
  for (auto& [dir, files] : byDir) {
    std::sort(files.begin(), files.end());
    for (const auto& f : files) imported += importAndCheck({f}, fs::relative(f, root).string());
    if (files.size() < 2) continue;
    // A folder of rank files is one job when every file says a different rank.
    std::map<uint32_t, int> ranks;
    bool distinct = true;
    for (const auto& f : files) {
      auto src = trainscope::importer::openFileSource(f);
      if (!src) continue;
      auto facts = trainscope::importer::scanTrace(**src);
      if (!facts || !facts->rank || ++ranks[*facts->rank] > 1) distinct = false;
    }
    if (distinct && ranks.size() == files.size()) {
      imported += importAndCheck(files, fs::relative(dir, root).string() + "/ (as one job)");
    }
  }
  expect(imported > 0, "no real trace imported");
  // The committed set: each of the four files, and the 2-rank pair as one job.
  if (committed) expect(imported == 5, "not all 5 imports of tests/data/import/hta succeeded");
  std::printf("%d imports succeeded, %d checks failed\n", imported, failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main() {
  return trainscope::guardedMain("real_traces_test", [&] { return realTracesMain(); });
}
