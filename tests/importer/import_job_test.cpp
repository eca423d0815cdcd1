// importTraces over the fixtures of tests/data/import (written by make_traces.py): every step's
// compute, communication, exposed communication and data time equal the generator's own
// unions; collectives carry their bytes (from the kernels' arguments, or joined to the host
// call in the legacy shape); ranks come from distributedInfo or the file name; clocks are
// aligned; the timeline is a valid per-rank capture file; bad files leave nothing behind.
#include "importer/import_job.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include <catch2/catch.hpp>

#include "collector/ingest/validate.h"
#include "tests/agent/probe/capture_files.h"
#include "tests/common/support.h"
#include "tests/importer/bundle.h"

using trainscope::importer::ImportOptions;
using trainscope::importer::importTraces;
using trainscope::importer::testing::dataDir;
using trainscope::importer::testing::readBundle;
using trainscope::importer::testing::readJson;
using trainscope::probe::testing::readJsonGz;
using trainscope::tests::TempDir;

namespace fs = std::filesystem;

namespace {

std::string data(const std::string& rel) {
  return dataDir() + "/" + rel;
}

// Checks every report of `rank` in `steps` against the generator's FILE.expected.json.
void checkExpected(const std::vector<trainscope::wire::StepReport>& steps, uint32_t rank,
                   const std::string& expectedFile) {
  const auto exp = readJson(expectedFile);
  REQUIRE(exp.is_object());
  std::map<int64_t, const trainscope::wire::StepReport*> byStep;
  for (const auto& s : steps) {
    if (s.rank() == rank) byStep[s.step()] = &s;
  }
  REQUIRE(byStep.size() == exp["steps"].size());
  for (const auto& e : exp["steps"]) {
    const int64_t step = e["step"].get<int64_t>();
    INFO("rank " << rank << " step " << step);
    REQUIRE(byStep.count(step) == 1);
    const auto& s = *byStep[step];
    CHECK(s.duration_ns() == e["duration_ns"].get<int64_t>());
    CHECK(s.compute_ns() == e["compute_ns"].get<int64_t>());
    CHECK(s.comm_ns() == e["comm_ns"].get<int64_t>());
    CHECK(s.exposed_comm_ns() == e["exposed_comm_ns"].get<int64_t>());
    CHECK(s.data_ns() == e["data_ns"].get<int64_t>());
    uint64_t calls = 0;
    uint64_t bytes = 0;
    for (const auto& c : s.collectives()) {
      calls += c.count();
      bytes += c.bytes() * c.count();
      CHECK(c.bandwidth_bps() > 0);
      CHECK(c.bandwidth_bps() ==
            Approx(static_cast<double>(c.bytes() * c.count()) / (c.total_ns() * 1e-9)));
    }
    CHECK(calls == e["collectives"].get<uint64_t>());
    CHECK(bytes == e["collective_bytes"].get<uint64_t>());
    // What ingest checks of an agent's report holds for an imported one.
    CHECK_FALSE(trainscope::ingest::validateStep(s, std::nullopt, {}).has_value());
  }
}

}  // namespace

TEST_CASE("two Kineto GPU ranks: figures, collectives, ranks, aligned clocks, timelines") {
  TempDir dir;
  auto r =
      importTraces({data("kineto_gpu/rank-0.json"), data("kineto_gpu/rank-1.json.gz")}, dir.path());
  REQUIRE(r);
  CHECK(r->job == "import-kineto_gpu");
  CHECK(r->worldSize == 2);
  REQUIRE(r->ranks.size() == 2);
  CHECK(r->ranks[0].rankFrom == "distributedInfo");
  CHECK(r->ranks[1].rankFrom == "distributedInfo");
  CHECK(r->ranks[0].format == "kineto");
  CHECK(r->ranks[0].device);
  CHECK(r->ranks[0].comm == "NCCL kernels");
  CHECK(r->ranks[0].fold.steps == 4);
  CHECK(r->ranks[0].fold.firstStep == 20);
  CHECK(r->ranks[0].fold.lastStep == 23);
  CHECK(r->ranks[0].fold.sizedCollectives == r->ranks[0].fold.collectives);
  // Rank 1's clock runs 5 ms ahead in its file (and its ts are relative to
  // baseTimeNanoseconds): it is shifted back exactly.
  CHECK(r->ranks[0].shiftNs == 0);
  CHECK(r->ranks[1].shiftNs == -5'000'000);

  auto b = readBundle(r->stepsFile);
  REQUIRE(b.ok);
  REQUIRE(b.ranks.size() == 2);
  CHECK(b.ranks[0].job() == "import-kineto_gpu");
  CHECK(b.ranks[1].world_size() == 2);
  CHECK(b.ranks[0].probe_version() == "import");
  REQUIRE(b.goodbyes.size() == 2);
  CHECK(b.goodbyes[0].last_step() == 23);
  REQUIRE(b.steps.size() == 8);
  checkExpected(b.steps, 0, data("kineto_gpu/rank-0.expected.json"));
  checkExpected(b.steps, 1, data("kineto_gpu/rank-1.expected.json"));
  std::map<std::pair<int64_t, uint32_t>, const trainscope::wire::StepReport*> at;
  for (const auto& s : b.steps) at[{s.step(), s.rank()}] = &s;
  for (int64_t step = 20; step <= 23; ++step) {
    CHECK(at[{step, 0}]->end_ns() == at[{step, 1}]->end_ns());
  }
  const auto& first = *at[{20, 0}];
  CHECK(first.start_ns() == 1'700'000'000'000'000'000);
  // Top operators: the compute kernels (names cut at 256 bytes), by total time.
  REQUIRE(first.ops_size() >= 3);
  CHECK(first.ops(0).total_ns() >= first.ops(1).total_ns());
  bool memcpy = false;
  for (const auto& op : first.ops()) {
    CHECK(op.name().size() <= 256);
    memcpy |= op.name() == "Memcpy HtoD (Pageable -> Device)";
  }
  CHECK(memcpy);
  REQUIRE(first.collectives_size() == 2);  // two sizes of all_reduce
  CHECK(first.collectives(0).op() == trainscope::wire::ALL_REDUCE);
  CHECK(first.collectives(0).group() == "default_pg");

  // Timelines: per-rank capture files on the aligned clock.
  const auto t1 = readJsonGz(dir.sub("rank-1.json.gz"));
  REQUIRE(t1.is_object());
  CHECK(t1["trainscope"]["kind"] == "import");
  CHECK(t1["trainscope"]["rank"] == 1);
  CHECK(t1["trainscope"]["first_step"] == 20);
  std::set<std::string> cats;
  std::set<std::string> laneNames;
  bool stepAligned = false;
  for (const auto& e : t1["traceEvents"]) {
    CHECK(e["pid"] == 1);
    if (e.contains("cat")) cats.insert(e["cat"].get<std::string>());
    if (e["name"] == "thread_name") laneNames.insert(e["args"]["name"].get<std::string>());
    if (e["name"] == "ProfilerStep#20") {
      CHECK(e["cat"] == "step");
      CHECK(e["args"]["step"] == 20);
      CHECK(e["args"]["source_cat"] == "user_annotation");
      stepAligned = e["ts"].get<double>() == Approx(1'700'000'000'000'000.0);
    }
    if (e.contains("cat") && e["cat"] == "collective") {
      CHECK(e["args"].contains("step"));
      CHECK(e["args"]["source_cat"] == "kernel");
    }
  }
  CHECK(stepAligned);
  CHECK(cats.count("op") == 1);
  CHECK(cats.count("collective") == 1);
  CHECK(cats.count("range") == 1);  // the DataLoader wait
  CHECK(cats.count("ac2g") == 1);   // flows are kept
  CHECK(laneNames.count("GPU 1 stream 7") == 1);
  CHECK(laneNames.count("CPU / thread 4001 (python3)") == 1);
}

TEST_CASE(
    "legacy NCCL kernels are sized from the host call that launched them; rank from the name") {
  TempDir dir;
  auto r = importTraces({data("kineto_legacy/trace_rank3.pt.trace.json.gz")}, dir.path());
  REQUIRE(r);
  REQUIRE(r->ranks.size() == 1);
  CHECK(r->ranks[0].rank == 3);
  CHECK(r->ranks[0].rankFrom == "file name");
  CHECK(r->worldSize == 4);
  CHECK(r->ranks[0].fold.collectives == 6);
  CHECK(r->ranks[0].fold.sizedCollectives == 6);
  auto b = readBundle(r->stepsFile);
  REQUIRE(b.ok);
  checkExpected(b.steps, 3, data("kineto_legacy/trace_rank3.expected.json"));
  for (const auto& s : b.steps) {
    for (const auto& c : s.collectives()) CHECK(c.op() == trainscope::wire::ALL_REDUCE);
  }
}

TEST_CASE("CPU-only (gloo): host operators are compute, gloo annotations the collectives") {
  TempDir dir;
  ImportOptions o;
  o.job = "cpu-job";
  auto r =
      importTraces({data("kineto_cpu/rank-0.json"), data("kineto_cpu/rank-1.json")}, dir.path(), o);
  REQUIRE(r);
  CHECK(r->job == "cpu-job");
  CHECK_FALSE(r->ranks[0].device);
  CHECK(r->ranks[0].comm == "host annotations");
  auto b = readBundle(r->stepsFile);
  checkExpected(b.steps, 0, data("kineto_cpu/rank-0.expected.json"));
  checkExpected(b.steps, 1, data("kineto_cpu/rank-1.expected.json"));
  // c10d::allreduce_ wraps the collective: neither compute nor a second collective.
  for (const auto& s : b.steps) {
    for (const auto& op : s.ops()) CHECK(op.name().rfind("c10d::", 0) != 0);
  }

  SECTION("--ranks overrides what the files say, one rank per file in order") {
    TempDir d2;
    ImportOptions o2;
    o2.ranks = {5, 2};
    auto r2 = importTraces({data("kineto_cpu/rank-0.json"), data("kineto_cpu/rank-1.json")},
                           d2.path(), o2);
    REQUIRE(r2);
    REQUIRE(r2->ranks.size() == 2);
    CHECK(r2->ranks[0].rank == 2);  // by rank
    CHECK(r2->ranks[0].rankFrom == "--ranks");
    CHECK(r2->ranks[1].rank == 5);
    CHECK(r2->worldSize == 6);
    auto b2 = readBundle(r2->stepsFile);
    checkExpected(b2.steps, 5, data("kineto_cpu/rank-0.expected.json"));
    checkExpected(b2.steps, 2, data("kineto_cpu/rank-1.expected.json"));
  }
  SECTION("--ranks must name one rank per file, without repeats") {
    ImportOptions o2;
    o2.ranks = {1};
    auto r2 = importTraces({data("kineto_cpu/rank-0.json"), data("kineto_cpu/rank-1.json")},
                           dir.sub("x"), o2);
    REQUIRE_FALSE(r2);
    CHECK(r2.message().find("--ranks names 1 ranks for 2 files") != std::string::npos);
    o2.ranks = {1, 1};
    auto r3 = importTraces({data("kineto_cpu/rank-0.json"), data("kineto_cpu/rank-1.json")},
                           dir.sub("y"), o2);
    REQUIRE_FALSE(r3);
    CHECK(r3.message().find("rank 1 (from its --ranks) is also the rank of") != std::string::npos);
  }
}

TEST_CASE(
    "another tool's trace: steps from events with a step argument, B/E pairs, relative clock") {
  TempDir dir;
  auto r = importTraces({data("chrome_generic/worker.json")}, dir.path());
  REQUIRE(r);
  REQUIRE(r->ranks.size() == 1);
  CHECK(r->ranks[0].rankFrom == "only file");
  CHECK(r->ranks[0].format == "chrome");
  CHECK(r->ranks[0].stepRule == "events named 'train_step' with a step argument");
  REQUIRE(r->notes.size() == 1);  // the relative clock was moved to the file's time
  auto b = readBundle(r->stepsFile);
  checkExpected(b.steps, 0, data("chrome_generic/worker.expected.json"));
  const auto mtime = fs::last_write_time(data("chrome_generic/worker.json"));
  (void)mtime;
  CHECK(b.steps.back().end_ns() > 1'000'000'000'000'000'000);  // a Unix time now

  SECTION("--step-event names the steps") {
    TempDir d2;
    ImportOptions o;
    o.stepEvent = "backward";  // B/E pairs, numbered by their order
    auto r2 = importTraces({data("chrome_generic/worker.json")}, d2.path(), o);
    REQUIRE(r2);
    CHECK(r2->ranks[0].fold.steps == 3);
    CHECK(r2->ranks[0].fold.firstStep == 0);
  }
  SECTION("an unknown --step-event is an error") {
    ImportOptions o;
    o.stepEvent = "nope";
    auto r2 = importTraces({data("chrome_generic/worker.json")}, dir.sub("x"), o);
    REQUIRE_FALSE(r2);
    CHECK(r2.message().find("no events named 'nope'") != std::string::npos);
  }
}

TEST_CASE("a small memory bound folds a window of steps at a time, to the same reports") {
  TempDir a;
  TempDir b;
  ImportOptions tight;
  tight.maxUnits = 200;  // a few steps' intervals
  tight.timeline = false;
  const std::vector<std::string> files = {data("kineto_gpu/rank-0.json"),
                                          data("kineto_gpu/rank-1.json.gz")};
  auto whole = importTraces(files, a.path());
  auto windowed = importTraces(files, b.path(), tight);
  REQUIRE(whole);
  REQUIRE(windowed);
  auto x = readBundle(whole->stepsFile);
  auto y = readBundle(windowed->stepsFile);
  REQUIRE(x.steps.size() == y.steps.size());
  std::map<std::pair<int64_t, uint32_t>, std::string> xs;
  for (const auto& s : x.steps) xs[{s.step(), s.rank()}] = s.SerializeAsString();
  for (const auto& s : y.steps) CHECK(xs[{s.step(), s.rank()}] == s.SerializeAsString());
  CHECK(windowed->ranks[0].fold.steps == 4);
  CHECK_FALSE(fs::exists(b.sub("rank-0.json.gz")));

  SECTION("one step larger than the bound is an error naming the bound") {
    ImportOptions tiny;
    tiny.maxUnits = 5;
    auto r = importTraces(files, b.sub("tiny"), tiny);
    REQUIRE_FALSE(r);
    CHECK(r.message().find("one step holds more than 5") != std::string::npos);
  }
}

TEST_CASE("files read on several threads make the same bundle as one thread, byte for byte") {
  TempDir a;
  TempDir b;
  const std::vector<std::string> files = {
      data("kineto_gpu/rank-0.json"), data("kineto_gpu/rank-1.json.gz"),
      data("kineto_cpu/rank-0.json"), data("kineto_cpu/rank-1.json")};
  ImportOptions one;
  one.threads = 1;
  one.nowNs = 1'700'000'000'000'000'000;
  one.ranks = {0, 1, 2, 3};
  ImportOptions four = one;
  four.threads = 4;
  auto x = importTraces(files, a.path(), one);
  auto y = importTraces(files, b.path(), four);
  REQUIRE(x);
  REQUIRE(y);
  CHECK(x->reports == y->reports);
  CHECK(x->reports > 0);
  auto bytes = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  CHECK(bytes(x->stepsFile) == bytes(y->stepsFile));
  for (uint32_t rank = 0; rank < 4; ++rank) {
    const std::string name = "rank-" + std::to_string(rank) + ".json.gz";
    INFO(name);
    CHECK(readJsonGz(a.sub(name)) == readJsonGz(b.sub(name)));
  }

  SECTION("a bad file is reported in the order given, whichever thread reads it first") {
    const std::vector<std::string> bad = {data("kineto_gpu/rank-0.json"),
                                          data("bad/not_a_trace.json"),
                                          data("bad/truncated.json.gz")};
    for (unsigned threads : {1u, 3u}) {
      ImportOptions o;
      o.threads = threads;
      auto r = importTraces(bad, b.sub("bad-" + std::to_string(threads)), o);
      REQUIRE_FALSE(r);
      CHECK(r.message().find("not_a_trace.json") != std::string::npos);
      CHECK_FALSE(fs::exists(b.sub("bad-" + std::to_string(threads))));
    }
  }
}

TEST_CASE("an event without a name, or with an empty one, is reported as '(unnamed)'") {
  // Found by the chrome_trace fuzz target: a nameless kernel became an operator named '',
  // which ingest refuses.
  TempDir dir;
  std::string events;
  for (int step = 0; step < 2; ++step) {
    const std::string t0 = std::to_string(step * 10000);
    const auto at = [&](int us) { return std::to_string(step * 10000 + us); };
    events +=
        std::string(events.empty() ? "" : ", ") + R"({"name": "train_step", "ph": "B", "ts": )" +
        t0 + R"(, "pid": 1, "tid": 1, "args": {"step": )" + std::to_string(step) + "}}" +
        R"(, {"ph": "X", "ts": )" + at(100) + R"(, "dur": 2000, "pid": 1, "tid": 1})" +
        R"(, {"name": "", "ph": "X", "ts": )" + at(3000) + R"(, "dur": 1000, "pid": 1, "tid": 1})" +
        R"(, {"name": "train_step", "ph": "E", "ts": )" + at(5000) + R"(, "pid": 1, "tid": 1})";
  }
  const std::string path = dir.sub("worker.json");
  std::ofstream(path) << "[" << events << "]";
  ImportOptions o;
  o.stepEvent = "train_step";
  auto r = importTraces({path}, dir.sub("bundle"), o);
  INFO(r.message());
  REQUIRE(r);
  auto b = readBundle(r->stepsFile);
  REQUIRE(b.steps.size() == 2);
  for (const auto& s : b.steps) {
    CHECK_FALSE(trainscope::ingest::validateStep(s, std::nullopt, {}).has_value());
    std::set<std::string> names;
    for (const auto& op : s.ops()) names.insert(op.name());
    CHECK(names.count("(unnamed)") == 1);  // both events, one operator
    CHECK(names.count("") == 0);
  }
}

TEST_CASE("clocks no int64 or ingest holds are named, and a span outlasting its step is cut") {
  // Found by the chrome_trace fuzz target: a baseTimeNanoseconds in 2195 placed steps past
  // 2100, where ingest refuses them.
  TempDir dir;
  const auto trace = [](const std::string& header, int64_t t0Us, int64_t opUs) {
    std::string events;
    for (int step = 0; step < 2; ++step) {
      const auto at = [&](int64_t us) { return std::to_string(t0Us + int64_t{10000} * step + us); };
      events += std::string(events.empty() ? "" : ", ") +
                R"({"name": "train_step", "ph": "X", "ts": )" + at(0) +
                R"(, "dur": 5000, "pid": 1, "tid": 1, "args": {"step": )" + std::to_string(step) +
                "}}" + R"(, {"name": "forward", "ph": "X", "ts": )" + at(100) + R"(, "dur": )" +
                std::to_string(opUs) + R"(, "pid": 1, "tid": 1})";
    }
    return "{" + header + R"("traceEvents": [)" + events + "]}";
  };
  ImportOptions o;
  o.stepEvent = "train_step";
  const int64_t now = 1'700'000'000'000'000;  // µs
  SECTION("a base past 2100 is refused, naming the file") {
    const std::string path = dir.sub("base.json");
    std::ofstream(path) << trace(R"("baseTimeNanoseconds": 7119853884000000000, )", 0, 1000);
    auto r = importTraces({path}, dir.sub("bundle"), o);
    REQUIRE_FALSE(r);
    CHECK(r.message().find(path) != std::string::npos);
    CHECK(r.message().find("not a Unix time before 2100") != std::string::npos);
  }
  SECTION("steps past 2100 are refused, naming the file") {
    const std::string path = dir.sub("late.json");
    std::ofstream(path) << trace("", 5'000'000'000'000'000, 1000);
    auto r = importTraces({path}, dir.sub("bundle"), o);
    REQUIRE_FALSE(r);
    CHECK(r.message().find(path) != std::string::npos);
    CHECK(r.message().find("between 1970 and 2100") != std::string::npos);
  }
  SECTION("an operator that outlasts its step counts only its time within the step") {
    const std::string path = dir.sub("long.json");
    std::ofstream(path) << trace("", now, 4'000'000'000'000'000);
    auto r = importTraces({path}, dir.sub("bundle"), o);
    INFO(r.message());
    REQUIRE(r);
    auto b = readBundle(r->stepsFile);
    REQUIRE_FALSE(b.steps.empty());
    for (const auto& s : b.steps) {
      CHECK_FALSE(trainscope::ingest::validateStep(s, std::nullopt, {}).has_value());
      for (const auto& op : s.ops()) CHECK(op.total_ns() <= s.duration_ns());
    }
  }
}

TEST_CASE("the timeline stays under its bound and says where it was cut") {
  TempDir dir;
  ImportOptions o;
  o.timelineMaxBytes = 6000;
  auto r = importTraces({data("kineto_gpu/rank-0.json")}, dir.path(), o);
  REQUIRE(r);
  CHECK(r->ranks[0].timelineTruncated);
  CHECK(r->ranks[0].fold.steps == 4);  // the steps still cover the whole file
  CHECK(fs::file_size(dir.sub("rank-0.json.gz")) <= 6000);
  const auto t = readJsonGz(dir.sub("rank-0.json.gz"));
  REQUIRE(t.is_object());
  CHECK(t["trainscope"]["truncated"] == true);
  CHECK(t["traceEvents"].back()["name"].get<std::string>().find("timeline cut at") !=
        std::string::npos);
}

TEST_CASE("bad files: the message names the file and the place; nothing is left behind") {
  TempDir dir;
  const std::string out = dir.sub("bundle");
  auto cut = importTraces({data("kineto_gpu/rank-0.json"), data("bad/truncated.json.gz")}, out);
  REQUIRE_FALSE(cut);
  CHECK(cut.message().find("bad/truncated.json.gz: the file ends inside") != std::string::npos);
  CHECK(cut.message().find("at byte") != std::string::npos);
  CHECK_FALSE(fs::exists(out));  // every file is read before anything is written

  auto notJson = importTraces({data("bad/not_a_trace.json")}, out);
  REQUIRE_FALSE(notJson);
  CHECK(notJson.message().find("not_a_trace.json: event #1, byte 119: expected ',' or '}'") !=
        std::string::npos);

  dir.write("nosteps.json",
            R"({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 2}]})");
  auto noSteps = importTraces({dir.sub("nosteps.json")}, out);
  REQUIRE_FALSE(noSteps);
  CHECK(noSteps.message().find("nosteps.json: no steps found") != std::string::npos);
  CHECK(noSteps.message().find("--step-event") != std::string::npos);

  dir.write("a.json",
            R"({"traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "ts": 1, "dur": 2}]})");
  dir.write("b.json",
            R"({"traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "ts": 1, "dur": 2}]})");
  auto noRank = importTraces({dir.sub("a.json"), dir.sub("b.json")}, out);
  REQUIRE_FALSE(noRank);
  CHECK(noRank.message().find("a.json: cannot tell its rank") != std::string::npos);

  auto twice = importTraces({data("kineto_gpu/rank-0.json"), data("kineto_gpu/rank-0.json")}, out);
  REQUIRE_FALSE(twice);
  CHECK(twice.message().find("rank 0 (from its distributedInfo) is also the rank of") !=
        std::string::npos);
}

TEST_CASE("rank numbers in file names") {
  using trainscope::importer::rankFromFileName;
  CHECK(rankFromFileName("/x/rank-3.json.gz") == 3u);
  CHECK(rankFromFileName("trace_rank12.pt.trace.json") == 12u);
  CHECK(rankFromFileName("RANK_7.json") == 7u);
  CHECK(rankFromFileName("rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz") == 34u);
  CHECK_FALSE(rankFromFileName("worker.json").has_value());
  CHECK_FALSE(rankFromFileName("ranking.json").has_value());
}
