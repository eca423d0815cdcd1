// gpu_replay: replays the step reports of healthy jobs recorded on a GPU machine
// (tests/data/gpu/h200_ddp_steps.json: torch 2.11 on an H200, DDP over NCCL, under
// `trainscope run`, as the collector stored them) through the collector's detectors with
// default options, and prints every anomaly they open: each is a false alarm, since the jobs'
// own synchronized step times were flat (14.8 ms +-0.1). Their operator and collective times
// are host-side (launches; collectives to completion of their future), which is what a probe
// without device timings (CUPTI) reports. Each job is replayed twice: as recorded (the probe
// did not say where its operators ran) and with StepReport.device "cuda", as `trainscope run`
// now reports a rank that uses CUDA. Prints figures; exit 0 unless the file is unreadable.
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "collector/detect/detector_set.h"
#include "common/guarded_main.h"
#include "schema/wire.h"

namespace {

using trainscope::detect::Anomaly;
using trainscope::detect::DetectorSet;
using trainscope::detect::RankContext;
namespace wire = trainscope::wire;

// A row of the file (see its "about"): times in microseconds.
wire::StepReport reportOf(const std::string& job, const nlohmann::json& row,
                          const nlohmann::json& names, int64_t t0, const std::string& device) {
  wire::StepReport r;
  r.set_job(job);
  r.set_device(device);
  r.set_rank(row[0].get<uint32_t>());
  r.set_step(row[1].get<int64_t>());
  const int64_t start = t0 + row[2].get<int64_t>() * 1000;
  const int64_t duration = row[3].get<int64_t>() * 1000;
  r.set_start_ns(start);
  r.set_end_ns(start + duration);
  r.set_duration_ns(duration);
  r.set_compute_ns(row[4].get<int64_t>() * 1000);
  r.set_comm_ns(row[5].get<int64_t>() * 1000);
  r.set_exposed_comm_ns(row[6].get<int64_t>() * 1000);
  r.set_data_ns(row[7].get<int64_t>() * 1000);
  for (const auto& o : row[8]) {
    auto* op = r.add_ops();
    op->set_name(names.at(o[0].get<size_t>()).get<std::string>());
    op->set_count(o[1].get<uint64_t>());
    op->set_total_ns(o[2].get<int64_t>() * 1000);
    op->set_max_ns(o[3].get<int64_t>() * 1000);
  }
  for (const auto& c : row[9]) {
    auto* col = r.add_collectives();
    wire::CollectiveOp op{};
    if (wire::parseCollectiveOp(c[0].get<std::string>(), &op)) col->set_op(op);
    col->set_group(c[1].get<std::string>());
    col->set_bytes(c[2].get<uint64_t>());
    col->set_count(c[3].get<uint64_t>());
    col->set_total_ns(c[4].get<int64_t>() * 1000);
    col->set_max_ns(c[5].get<int64_t>() * 1000);
  }
  return r;
}

int benchMain(int argc, char** argv) {
  CLI::App app{
      "gpu_replay: the collector's detectors over healthy jobs recorded on a GPU "
      "machine; every anomaly printed is a false alarm"};
  std::string file = "tests/data/gpu/h200_ddp_steps.json";
  app.add_option("file", file, "the recorded steps (tests/data/gpu/h200_ddp_steps.json)");
  CLI11_PARSE(app, argc, argv);
  std::ifstream in(file);
  if (!in) {
    std::fprintf(stderr, "gpu_replay: cannot read %s\n", file.c_str());
    return 1;
  }
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.contains("jobs") || !doc.contains("names")) {
    std::fprintf(stderr, "gpu_replay: %s is not a recorded steps file\n", file.c_str());
    return 1;
  }
  constexpr int64_t kT0 = 1'795'788'000'000'000'000;  // about the wall clock of the recording
  for (const auto& [job, rows] : doc.at("jobs").items()) {
    for (const std::string device : {"", "cuda"}) {
      DetectorSet set;
      std::vector<Anomaly> opened;
      int64_t lastEnd = kT0;
      auto take = [&] {
        for (auto& e : set.takeEvents()) {
          if (e.state == trainscope::detect::AnomalyState::kOpen && !e.refresh) {
            opened.push_back(std::move(e));
          }
        }
      };
      for (const auto& row : rows) {
        const wire::StepReport r = reportOf(job, row, doc.at("names"), kT0, device);
        RankContext ctx;
        ctx.node = "node0";
        if (!set.observe(r, ctx).isOk()) continue;
        lastEnd = r.end_ns();
        set.tick(lastEnd);
        take();
      }
      set.tick(lastEnd + 1'000'000'000);
      take();
      std::map<std::string, int> byKind;
      for (const Anomaly& a : opened) ++byKind[trainscope::detect::anomalyKindName(a.kind)];
      std::printf("%s, device '%s': %zu step reports, %zu anomalies opened (all false alarms)",
                  job.c_str(), device.c_str(), rows.size(), opened.size());
      for (const auto& [kind, n] : byKind) std::printf("; %s %d", kind.c_str(), n);
      std::printf("\n");
      for (const Anomaly& a : opened) {
        auto added = a.evidence.find("added_ms_per_step");
        std::printf("  step %4lld %-13s %s%s\n", static_cast<long long>(a.detectedStep),
                    trainscope::detect::anomalyKindName(a.kind), a.summary.c_str(),
                    added == a.evidence.end()
                        ? ""
                        : (" [adds " + std::to_string(added->second) + " ms per step]").c_str());
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return trainscope::guardedMain("gpu_replay", [&] { return benchMain(argc, argv); });
}
