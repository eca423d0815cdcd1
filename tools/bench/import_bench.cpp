// import_bench: how fast `trainscope import` reads traces. Over the trace files it is given
// (e.g. a job written by tests/data/import/make_traces.py --job DIR), it times (1) the
// streaming reader alone: every event parsed into its fields and handed to a handler that only
// counts; (2) the whole import as the CLI runs it (importer::importTraces: the scan pass, the
// fold pass into step reports, and the ranks' timeline files unless --no-timeline). Events per
// second count the events of one pass over the files (what `trainscope import` prints), so the
// import's figure includes its second pass. Each figure is given per wall second and per second
// of this process's CPU time: on a shared, loaded machine the wall clock mostly measures the
// wait for a core. Best of --repeat runs. Prints figures; no assertions.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/guarded_main.h"
#include "importer/import_job.h"
#include "importer/trace_reader.h"

namespace {

namespace fs = std::filesystem;
using trainscope::Status;
using namespace trainscope::importer;

struct BenchOptions {
  std::vector<std::string> files;
  int repeat = 3;        // runs of each figure; the best is printed (a shared machine)
  bool timeline = true;  // the import also writes the ranks' timelines, as the CLI does
  std::string dir;       // the bundle goes here (default: a fresh temp dir, removed)
};

// Counts events and touches the fields a real handler reads, so nothing is optimized away.
class CountingHandler : public TraceHandler {
 public:
  Status onTopLevel(std::string_view, std::string_view) override { return Status::ok(); }
  Status onEvent(const EventView& e) override {
    ++events;
    int64_t ts = 0;
    if (microsToNs(e.ts, &ts)) checksum += static_cast<uint64_t>(ts);
    checksum += e.name.size() + static_cast<uint64_t>(e.ph);
    return Status::ok();
  }
  uint64_t events = 0;
  uint64_t checksum = 0;
};

// Wall and CPU seconds since a Timer was made.
struct Timer {
  static double cpuNow() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }
  std::chrono::steady_clock::time_point wall0 = std::chrono::steady_clock::now();
  double cpu0 = cpuNow();
  double wall() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  }
  double cpu() const { return cpuNow() - cpu0; }
};

// The best (least) wall and CPU seconds over runs.
struct Best {
  double wall = 1e300;
  double cpu = 1e300;
  void add(const Timer& t) {
    wall = std::min(wall, t.wall());
    cpu = std::min(cpu, t.cpu());
  }
};

void printRate(const char* what, const Best& b, uint64_t events, uint64_t bytes) {
  std::printf(
      "%s wall %7.3f s %6.2f M events/s %7.1f MiB/s | CPU %7.3f s %6.2f M events/s %7.1f "
      "MiB/s\n",
      what, b.wall, static_cast<double>(events) / b.wall / 1e6,
      static_cast<double>(bytes) / b.wall / (1 << 20), b.cpu,
      static_cast<double>(events) / b.cpu / 1e6, static_cast<double>(bytes) / b.cpu / (1 << 20));
}

int benchMain(int argc, char** argv) {
  BenchOptions o;
  CLI::App app{"Times trainscope import's reader and whole import over trace files"};
  app.add_option("files", o.files, "Trace files (.json or .json.gz), one per rank")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--repeat", o.repeat, "Runs of each figure (the best is printed)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app.add_flag("!--no-timeline", o.timeline, "Import without writing the timelines");
  app.add_option("--dir", o.dir, "Write the bundle here (default: a temporary directory)");
  CLI11_PARSE(app, argc, argv);

  uint64_t fileBytes = 0;
  for (const auto& f : o.files) fileBytes += fs::file_size(f);

  // (1) The reader alone.
  Best reader;
  uint64_t events = 0;
  uint64_t jsonBytes = 0;
  for (int i = 0; i < o.repeat; ++i) {
    CountingHandler h;
    uint64_t bytes = 0;
    Timer t;
    for (const auto& f : o.files) {
      auto src = openFileSource(f);
      if (!src) {
        std::fprintf(stderr, "import_bench: %s\n", src.message().c_str());
        return 1;
      }
      auto s = readTrace(**src, h);
      if (!s) {
        std::fprintf(stderr, "import_bench: %s: %s\n", f.c_str(), s.message().c_str());
        return 1;
      }
      bytes += s->bytes;
    }
    reader.add(t);
    events = h.events;
    jsonBytes = bytes;
  }
  std::printf("files: %zu, %.1f MiB on disk, %.1f MiB of JSON, %llu events\n", o.files.size(),
              static_cast<double>(fileBytes) / (1 << 20),
              static_cast<double>(jsonBytes) / (1 << 20), static_cast<unsigned long long>(events));
  printRate("reader only: ", reader, events, jsonBytes);

  // (2) The whole import, as `trainscope import` runs it before uploading.
  std::string dir = o.dir;
  const bool temporary = dir.empty();
  if (temporary) {
    std::string pattern = (fs::temp_directory_path() / "import-bench-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      std::fprintf(stderr, "import_bench: cannot create a temporary directory\n");
      return 1;
    }
    dir = pattern;
  }
  ImportOptions io;
  io.timeline = o.timeline;
  Best whole;
  ImportResult last;
  for (int i = 0; i < o.repeat; ++i) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    Timer t;
    auto r = importTraces(o.files, dir, io);
    if (!r) {
      std::fprintf(stderr, "import_bench: %s\n", r.message().c_str());
      return 1;
    }
    whole.add(t);
    last = std::move(*r);
  }
  uint64_t timelineBytes = 0;
  for (const auto& k : last.ranks) timelineBytes += k.timelineBytes;
  printRate("whole import:", whole, last.events, last.inputBytes);
  std::printf("  %llu step reports, %.1f MiB steps.pb, %.1f MiB timelines%s\n",
              static_cast<unsigned long long>(last.reports),
              static_cast<double>(last.stepsBytes) / (1 << 20),
              static_cast<double>(timelineBytes) / (1 << 20), o.timeline ? "" : " (off)");
  if (temporary) {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return trainscope::guardedMain("import_bench", [&] { return benchMain(argc, argv); });
}
