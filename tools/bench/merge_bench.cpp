// The capture merge's memory and speed (collector/capture/merge.h): writes R rank files of
// about M MiB of Kineto-like events each (gzip), merges them as the collector does, and prints
// the peak resident memory the merge added (VmHWM, reset before the merge through
// /proc/self/clear_refs) per MiB of JSON merged, the time and the events per second.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "collector/capture/gzip_file.h"
#include "collector/capture/merge.h"
#include "common/clock.h"
#include "common/guarded_main.h"
#include "common/process_memory.h"

using namespace trainscope;

namespace {

// VmHWM or VmRSS in bytes from /proc/self/status.
int64_t statusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return -1;
}

// One rank's file: events until `bytes` of JSON, as the probe and Kineto write them.
uint64_t writeRankFile(const std::string& path, uint32_t rank, uint64_t bytes) {
  capture::GzipWriter out;
  if (!out.open(path)) throw std::runtime_error("cannot write " + path);
  out.write("{\"traceEvents\":[");
  uint64_t written = 16;
  for (uint64_t i = 0; written < bytes; ++i) {
    nlohmann::json e = {{"name", "aten::linear"},
                        {"ph", "X"},
                        {"cat", "cpu_op"},
                        {"pid", rank},
                        {"tid", 1 + i % 4},
                        {"ts", 1.7e15 + static_cast<double>(i) * 10.5},
                        {"dur", 8.25},
                        {"args",
                         {{"External id", i},
                          {"Input Dims", {{128, 1024}, {1024, 1024}, {1024}}},
                          {"Input type", {"float", "float", "float"}},
                          {"Sequence number", i / 3}}}};
    std::string text = (i == 0 ? "" : ",") + e.dump();
    written += text.size();
    out.write(text);
  }
  out.write("]}");
  if (!out.close()) throw std::runtime_error("cannot close " + path);
  return written;
}

int benchMain(int argc, char** argv) {
  CLI::App app("capture merge: peak memory per merged MiB and events/s");
  uint32_t ranks = 2;
  uint64_t mib = 32;
  std::string dir = "/tmp/trainscope-merge-bench";
  app.add_option("--ranks", ranks, "rank files to merge")->capture_default_str();
  app.add_option("--mib", mib, "MiB of event JSON in each rank file")->capture_default_str();
  app.add_option("--dir", dir, "where the files are written (removed after)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::filesystem::create_directories(dir);
  std::vector<capture::RankFile> files;
  uint64_t jsonBytes = 0;
  for (uint32_t r = 0; r < ranks; ++r) {
    capture::RankFile f;
    f.rank = r;
    f.node = "n" + std::to_string(r);
    f.path = dir + "/rank-" + std::to_string(r) + ".json.gz";
    jsonBytes += writeRankFile(f.path, r, mib << 20);
    files.push_back(f);
  }
  releaseFreeHeap();  // the writer's buffers, so the peak below is the merge's
  std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM := VmRSS
  const int64_t before = statusBytes("VmRSS");
  const int64_t t0 = monotonicNowNs();
  auto merged = capture::mergeTrace(
      files, [](const std::map<uint32_t, std::string>&) { return nlohmann::json::object(); },
      dir + "/trace.json.gz");
  const double seconds = static_cast<double>(monotonicNowNs() - t0) / 1e9;
  const int64_t peak = statusBytes("VmHWM");
  std::filesystem::remove_all(dir);
  if (!merged) {
    std::cerr << "merge failed: " << merged.message() << "\n";
    return 1;
  }
  const double mergedMiB = static_cast<double>(jsonBytes) / (1 << 20);
  const double addedMiB = static_cast<double>(peak - before) / (1 << 20);
  std::cout << "ranks " << ranks << ", JSON " << mergedMiB << " MiB, events " << merged->events
            << ", failures " << merged->failures.size() << "\n"
            << "peak RSS added by the merge: " << addedMiB << " MiB (" << addedMiB / mergedMiB
            << " MiB per merged MiB)\n"
            << "time " << seconds << " s, " << static_cast<double>(merged->events) / seconds
            << " events/s, " << mergedMiB / seconds << " MiB/s of JSON\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return trainscope::guardedMain("merge_bench", [&] { return benchMain(argc, argv); });
}
