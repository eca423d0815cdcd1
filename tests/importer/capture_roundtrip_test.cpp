// A trainscope capture imported back: the probe folds records into step reports and its capture
// recorder writes the same steps to a rank file; importing that file (or the collector's merge
// of two ranks' files) gives the reports the probe folded, field for field.
#include <map>

#include <catch2/catch.hpp>

#include "agent/probe/capture.h"
#include "agent/probe/flight_recorder.h"
#include "agent/probe/fold.h"
#include "agent/probe/intern.h"
#include "agent/probe/trainscope_probe.h"
#include "collector/capture/merge.h"
#include "importer/import_job.h"
#include "tests/common/support.h"
#include "tests/importer/bundle.h"

using trainscope::importer::testing::readBundle;
using trainscope::probe::FoldedStep;
using trainscope::probe::internName;
using trainscope::probe::Record;
using trainscope::probe::RecordType;
using trainscope::tests::TempDir;
using trainscope::wire::StepReport;

namespace {

constexpr int64_t kBase = 1'700'000'000'123'456'789;
constexpr int64_t kStepNs = 20'000'000;

Record rec(RecordType type, int64_t t0, int64_t t1 = 0) {
  Record r{};
  r.type = type;
  r.t0 = t0;
  r.t1 = t1;
  return r;
}

// Steps 0..5 of one rank: data loading, nested operators, a compute range, two all_reduce sizes
// (one overlapping the compute), a broadcast in another group; `slow` stretches the compute.
// With `wholeMicros` every time is a whole microsecond: the collector's merge reads times as
// doubles, which hold a 2020s Unix time in microseconds to 0.25 us only.
std::vector<FoldedStep> foldSteps(uint32_t rank, double slow, bool wholeMicros = false) {
  auto rec = [wholeMicros](RecordType type, int64_t t0, int64_t t1 = 0) {
    if (wholeMicros) {
      t0 = t0 / 1000 * 1000;
      t1 = t1 / 1000 * 1000;
    }
    return ::rec(type, t0, t1);
  };
  trainscope::probe::FoldOptions o;
  o.job = "j";
  o.rank = rank;
  trainscope::probe::StepFolder folder(o);
  for (int64_t s = 0; s < 6; ++s) {
    const int64_t t = kBase + s * kStepNs + 333;  // odd nanoseconds survive the round trip
    const auto c = static_cast<int64_t>(8'000'000 * slow);
    Record b = rec(RecordType::kStepBegin, t);
    b.step = s;
    folder.add(0, b);
    Record data = rec(RecordType::kRange, t + 10, t + 1'000'017);
    data.kind = TS_RANGE_DATA;
    data.name = internName("dataloader");
    folder.add(0, data);
    Record fwd = rec(RecordType::kRange, t + 1'100'000, t + 1'100'000 + c);
    fwd.kind = TS_RANGE_COMPUTE;
    fwd.name = internName("forward");
    folder.add(0, fwd);
    for (int i = 0; i < 5; ++i) {
      Record op = rec(RecordType::kOp, t + 1'200'000 + int64_t{i} * 900'001,
                      t + 1'900'000 + int64_t{i} * 900'001);
      op.name = internName(i % 2 == 0 ? "aten::mm" : "aten::add \"quoted\"");
      folder.add(1, op);
      Record inner = rec(RecordType::kOp, op.t0 + 5, op.t0 + 105);
      inner.name = internName("aten::resolve_conj");
      folder.add(1, inner);
    }
    Record ar = rec(RecordType::kCollective, t + 7'000'000, t + 7'000'000 + 3'000'123);
    ar.kind = TS_COLL_ALL_REDUCE;
    ar.group = internName("world");
    ar.bytes = 25u << 20;
    folder.add(2, ar);
    Record ar2 =
        rec(RecordType::kCollective, t + 1'100'000 + c + 100'000, t + 1'100'000 + c + 1'100'000);
    ar2.kind = TS_COLL_ALL_REDUCE;
    ar2.group = internName("world");
    ar2.bytes = 1u << 20;
    folder.add(2, ar2);
    Record bc = rec(RecordType::kCollective, t + 15'000'000, t + 15'500'000);
    bc.kind = TS_COLL_BROADCAST;
    bc.group = internName("tp");
    bc.bytes = 4096;
    folder.add(2, bc);
    Record e = rec(RecordType::kStepEnd, t + kStepNs - 1000);
    e.step = s;
    folder.add(0, e);
    folder.endPass();
  }
  folder.finish();
  return folder.take();
}

// Writes rank `rank`'s capture of the folded steps; returns the file's path.
std::string writeCapture(const std::string& dir, uint32_t rank,
                         const std::vector<FoldedStep>& steps) {
  trainscope::probe::CaptureIdentity id;
  id.job = "j";
  id.rank = rank;
  id.host = "host" + std::to_string(rank);
  id.pid = 100 + rank;
  trainscope::probe::CaptureOptions co;
  co.dir = dir;
  trainscope::probe::CaptureRecorder recorder(id, co);
  trainscope::probe::FlightRecorder flight(8, 1u << 20);
  trainscope::wire::Command cmd;
  cmd.set_id("cap-1-abcd");
  cmd.set_job("j");
  auto* c = cmd.mutable_capture();
  c->set_capture_id("cap-1-abcd");
  c->set_start_step(0);
  c->set_steps(static_cast<uint32_t>(steps.size()));
  c->set_history(0);
  REQUIRE(recorder.start(cmd, -1, flight).at(0).state() == "recording");
  std::optional<trainscope::wire::CommandStatus> done;
  for (const auto& s : steps) {
    done = recorder.offer(s.report.step(), s.report.start_ns(), s.report.end_ns(), s.records);
  }
  REQUIRE(done.has_value());
  REQUIRE(done->state() == "uploading");
  return done->file_path();
}

void checkSame(const StepReport& probe, const StepReport& imported) {
  INFO("rank " << probe.rank() << " step " << probe.step());
  CHECK(imported.start_ns() == probe.start_ns());
  CHECK(imported.end_ns() == probe.end_ns());
  CHECK(imported.duration_ns() == probe.duration_ns());
  CHECK(imported.compute_ns() == probe.compute_ns());
  CHECK(imported.comm_ns() == probe.comm_ns());
  CHECK(imported.exposed_comm_ns() == probe.exposed_comm_ns());
  CHECK(imported.data_ns() == probe.data_ns());
  CHECK(imported.records() == probe.records());
  REQUIRE(imported.ops_size() == probe.ops_size());
  for (int i = 0; i < probe.ops_size(); ++i) {
    CHECK(imported.ops(i).name() == probe.ops(i).name());
    CHECK(imported.ops(i).count() == probe.ops(i).count());
    CHECK(imported.ops(i).total_ns() == probe.ops(i).total_ns());
    CHECK(imported.ops(i).max_ns() == probe.ops(i).max_ns());
  }
  REQUIRE(imported.collectives_size() == probe.collectives_size());
  for (int i = 0; i < probe.collectives_size(); ++i) {
    const auto& a = probe.collectives(i);
    const auto& b = imported.collectives(i);
    CHECK(b.op() == a.op());
    CHECK(b.group() == a.group());
    CHECK(b.bytes() == a.bytes());
    CHECK(b.count() == a.count());
    CHECK(b.total_ns() == a.total_ns());
    CHECK(b.bandwidth_bps() == Approx(a.bandwidth_bps()));
    CHECK(b.first_arrival_ns() == a.first_arrival_ns());
    CHECK(b.last_completion_ns() == a.last_completion_ns());
  }
}

}  // namespace

TEST_CASE("a rank's capture file imports back into the reports the probe folded") {
  TempDir dir;
  const auto steps = foldSteps(3, 1.0);
  REQUIRE(steps.size() == 6);
  const std::string file = writeCapture(dir.sub("captures"), 3, steps);
  trainscope::importer::ImportOptions o;
  o.align = true;
  auto r = trainscope::importer::importTraces({file}, dir.sub("bundle"), o);
  REQUIRE(r);
  CHECK(r->job == "j");  // the capture's own job
  REQUIRE(r->ranks.size() == 1);
  CHECK(r->ranks[0].rank == 3);
  CHECK(r->ranks[0].format == "trainscope");
  CHECK(r->ranks[0].rankFrom == "trainscope header");
  CHECK(r->ranks[0].host == "host3");
  CHECK(r->ranks[0].comm == "capture collectives");
  auto b = readBundle(r->stepsFile);
  REQUIRE(b.steps.size() == 6);
  for (size_t i = 0; i < steps.size(); ++i) checkSame(steps[i].report, b.steps[i]);
}

TEST_CASE("the collector's merged capture of two ranks imports as both ranks") {
  TempDir dir;
  const auto fast = foldSteps(0, 1.0, true);
  const auto slow = foldSteps(5, 1.25, true);
  std::vector<trainscope::capture::RankFile> files(2);
  files[0].rank = 0;
  files[0].node = "n0";
  files[0].path = writeCapture(dir.sub("c0"), 0, fast);
  files[1].rank = 5;
  files[1].node = "n1";
  files[1].path = writeCapture(dir.sub("c5"), 5, slow);
  const std::string merged = dir.sub("trace.json.gz");
  auto m = trainscope::capture::mergeTrace(
      files,
      [](const auto&) {
        return nlohmann::json{
            {"id", "cap-1-abcd"}, {"job", "j"}, {"kind", "trace"}, {"ranks", {0, 5}}};
      },
      merged);
  REQUIRE(m);
  auto r = trainscope::importer::importTraces({merged}, dir.sub("bundle"));
  REQUIRE(r);
  REQUIRE(r->ranks.size() == 2);
  CHECK(r->ranks[0].rank == 0);
  CHECK(r->ranks[1].rank == 5);
  CHECK(r->ranks[1].rankFrom == "pid");
  CHECK(r->worldSize == 6);
  auto b = readBundle(r->stepsFile);
  REQUIRE(b.steps.size() == 12);
  std::map<std::pair<uint32_t, int64_t>, const StepReport*> imported;
  for (const auto& s : b.steps) imported[{s.rank(), s.step()}] = &s;
  for (const auto& s : fast) checkSame(s.report, *imported.at({0, s.report.step()}));
  for (const auto& s : slow) checkSame(s.report, *imported.at({5, s.report.step()}));
}
