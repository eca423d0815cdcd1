// CaptureRecorder with synthetic steps: which steps land in the file, events inside their
// step, the collective fields, the size bound's marker, rejections, a close mid-capture and a
// file that cannot be written.
#include "agent/probe/capture.h"
#include "agent/probe/capture_worker.h"

#include <sys/stat.h>

#include <fstream>
#include <map>
#include <mutex>
#include <set>

#include <catch2/catch.hpp>

#include "agent/probe/intern.h"
#include "tests/agent/probe/capture_files.h"
#include "tests/agent/probe/fake_agent.h"
#include "tests/agent/probe/records.h"
#include "tests/common/gcc12_string_warnings.h"  // last: GCC 12 -O3 false positives

using trainscope::probe::CaptureIdentity;
using trainscope::probe::CaptureOptions;
using trainscope::probe::CaptureRecorder;
using trainscope::probe::FlightRecorder;
using trainscope::probe::Record;
using trainscope::probe::RecordType;
using trainscope::probe::testing::readJsonGz;
using trainscope::probe::testing::rec;
using trainscope::probe::testing::TempDir;
using trainscope::tests::waitFor;

namespace {

constexpr int64_t kBase = 1'700'000'000'000'000'000;  // ns since the epoch
constexpr int64_t kStepNs = 10'000'000;

int64_t stepStart(int64_t s) {
  return kBase + s * kStepNs;
}
int64_t stepEnd(int64_t s) {
  return stepStart(s) + kStepNs - 1000;
}

// One step's records: `ops` operators on ring 1, a compute range on ring 0, an all_reduce on
// ring 2, and one unattributed record that must not show up.
std::vector<Record> stepRecords(int64_t s, int ops = 2) {
  std::vector<Record> v;
  const int64_t t = stepStart(s);
  for (int i = 0; i < ops; ++i) {
    Record r = rec(RecordType::kOp, s, t + 1000 + int64_t{i} * 100, t + 1050 + int64_t{i} * 100);
    r.name = trainscope::probe::internName("aten::mm");
    r.ring = 1;
    v.push_back(r);
  }
  Record range = rec(RecordType::kRange, s, t + 500, t + 5'000'000);
  range.name = trainscope::probe::internName("forward \"quoted\"");
  range.kind = TS_RANGE_COMPUTE;
  v.push_back(range);
  Record coll = rec(RecordType::kCollective, s, t + 6'000'000, t + 8'000'000);
  coll.kind = TS_COLL_ALL_REDUCE;
  coll.group = trainscope::probe::internName("world");
  coll.bytes = 4 << 20;
  coll.ring = 2;
  v.push_back(coll);
  Record loose = rec(RecordType::kOp, -1, t - 100, t - 50);
  loose.name = trainscope::probe::internName("loose");
  v.push_back(loose);
  return v;
}

trainscope::wire::Command captureCommand(const std::string& id, int64_t start, uint32_t steps,
                                         uint32_t history, uint64_t maxBytes = 0) {
  trainscope::wire::Command cmd;
  cmd.set_id(id);
  cmd.set_job("j");
  auto* c = cmd.mutable_capture();
  c->set_capture_id(id);
  c->set_start_step(start);
  c->set_steps(steps);
  c->set_history(history);
  c->set_max_bytes(maxBytes);
  return cmd;
}

CaptureIdentity identity() {
  CaptureIdentity id;
  id.job = "j";
  id.rank = 3;
  id.host = "h";
  id.pid = 77;
  return id;
}

CaptureOptions optionsIn(const std::string& dir) {
  CaptureOptions o;
  o.dir = dir;
  return o;
}

// Flight recorder holding steps 0..last (8 kept).
void fill(FlightRecorder& fr, int64_t last, int ops = 2) {
  for (int64_t s = 0; s <= last; ++s) fr.add(s, stepRecords(s, ops), stepStart(s), stepEnd(s));
}

uint64_t fileSize(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

}  // namespace

TEST_CASE("capture takes steps S-K..S+N-1 from the flight recorder and live steps") {
  TempDir tmp;
  FlightRecorder fr(8, 1u << 20);
  fill(fr, 9);  // holds 2..9
  CaptureRecorder cap(identity(), optionsIn(tmp.path()));
  auto started = cap.start(captureCommand("cap-1-abcd", 12, 3, 4), 9, fr);
  REQUIRE(started.size() == 1);
  CHECK(started[0].state() == "recording");
  CHECK(started[0].detail() == "steps 12..14, history from 8");
  CHECK(started[0].rank() == 3);
  CHECK(started[0].job() == "j");
  CHECK(cap.active());

  // Steps folded after the command: 10..13 keep it going, 14 ends it, 15 is not taken.
  for (int64_t s = 10; s <= 13; ++s) {
    CHECK_FALSE(cap.offer(s, stepStart(s), stepEnd(s), stepRecords(s)).has_value());
  }
  auto done = cap.offer(14, stepStart(14), stepEnd(14), stepRecords(14));
  REQUIRE(done.has_value());
  CHECK_FALSE(cap.active());
  CHECK_FALSE(cap.offer(15, stepStart(15), stepEnd(15), stepRecords(15)).has_value());
  CHECK(done->state() == "uploading");
  CHECK(done->first_step() == 8);
  CHECK(done->last_step() == 14);
  CHECK_FALSE(done->truncated());
  CHECK(done->file_path() == tmp.path() + "/cap-1-abcd/rank-3.json.gz");
  CHECK(done->file_bytes() == fileSize(done->file_path()));

  const nlohmann::json doc = readJsonGz(done->file_path());
  REQUIRE(doc.is_object());
  const auto& meta = doc["trainscope"];
  CHECK(meta["kind"] == "trace");
  CHECK(meta["capture_id"] == "cap-1-abcd");
  CHECK(meta["rank"] == 3);
  CHECK(meta["pid"] == 77);
  CHECK(meta["start_step"] == 12);
  CHECK(meta["steps"] == 3);
  CHECK(meta["history"] == 4);
  CHECK(meta["first_step"] == 8);
  CHECK(meta["last_step"] == 14);
  CHECK(meta["truncated"] == false);

  std::map<int64_t, std::pair<double, double>> stepSpan;
  std::set<int64_t> eventSteps;
  int collectives = 0;
  for (const auto& e : doc["traceEvents"]) {
    CHECK(e["pid"] == 3);
    CHECK(e["name"] != "loose");
    const int64_t step = e["args"]["step"].get<int64_t>();
    eventSteps.insert(step);
    if (e["cat"] == "step") {
      CHECK(e["name"] == "ProfilerStep#" + std::to_string(step));
      CHECK(e["tid"] == 0);
      stepSpan[step] = {e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()};
    }
  }
  CHECK(eventSteps == std::set<int64_t>{8, 9, 10, 11, 12, 13, 14});
  CHECK(stepSpan.size() == 7);
  for (const auto& e : doc["traceEvents"]) {
    const int64_t step = e["args"]["step"].get<int64_t>();
    const double ts = e["ts"].get<double>();
    CHECK(ts >= stepSpan[step].first - 1);
    CHECK(ts + e["dur"].get<double>() <= stepSpan[step].second + 1);
    if (e["cat"] == "op") {
      CHECK(e["name"] == "aten::mm");
      CHECK(e["tid"] == 1);
      CHECK(e["dur"].get<double>() == Approx(0.05));
    }
    if (e["cat"] == "range") {
      CHECK(e["name"] == "forward \"quoted\"");
      CHECK(e["args"]["kind"] == "compute");
    }
    if (e["cat"] == "collective") {
      ++collectives;
      CHECK(e["name"] == "all_reduce");
      CHECK(e["tid"] == 2);
      CHECK(e["args"]["bytes"] == 4 << 20);
      CHECK(e["args"]["op"] == "all_reduce");
      CHECK(e["args"]["group"] == "world");
    }
  }
  CHECK(collectives == 7);
}

TEST_CASE("capture ts keeps nanoseconds as exact fractional microseconds") {
  TempDir tmp;
  FlightRecorder fr(8, 1u << 20);
  CaptureRecorder cap(identity(), optionsIn(tmp.path()));
  cap.start(captureCommand("cap-ns", 1, 1, 0), 0, fr);
  std::vector<Record> v;
  Record r = rec(RecordType::kOp, 1, stepStart(1) + 1234567, stepStart(1) + 1234567 + 1001);
  r.name = trainscope::probe::internName("k");
  v.push_back(r);
  auto done = cap.offer(1, stepStart(1), stepEnd(1), v);
  REQUIRE(done.has_value());
  const std::string text = trainscope::probe::testing::gunzipFile(done->file_path());
  CHECK(text.find("\"ts\": " + std::to_string((stepStart(1) + 1234567) / 1000) + ".567") !=
        std::string::npos);
  CHECK(text.find("\"dur\": 1.001") != std::string::npos);
}

TEST_CASE(
    "a command that comes after its start step takes the passed steps from the flight "
    "recorder while it holds them") {
  TempDir tmp;
  FlightRecorder fr(8, 1u << 20);
  fill(fr, 9);  // holds 2..9

  // Steps 8..10 asked for at step 9: 4..9 from the flight recorder, 10 live.
  CaptureRecorder late(identity(), optionsIn(tmp.path()));
  auto started = late.start(captureCommand("cap-late", 8, 3, 4), 9, fr);
  REQUIRE(started.size() == 1);
  CHECK(started[0].state() == "recording");
  CHECK(started[0].detail() ==
        "steps 8..10, history from 4; steps to 9 from the flight recorder (the command came at "
        "step 9)");
  auto done = late.offer(10, stepStart(10), stepEnd(10), stepRecords(10));
  REQUIRE(done.has_value());
  CHECK(done->state() == "uploading");
  CHECK(done->first_step() == 4);
  CHECK(done->last_step() == 10);
  std::set<int64_t> steps;
  const nlohmann::json doc = readJsonGz(done->file_path());
  for (const auto& e : doc["traceEvents"]) {
    if (e["cat"] == "step") steps.insert(e["args"]["step"].get<int64_t>());
  }
  CHECK(steps == std::set<int64_t>{4, 5, 6, 7, 8, 9, 10});

  // The whole window passed and held: the file is written at once.
  auto whole = CaptureRecorder(identity(), optionsIn(tmp.path()))
                   .start(captureCommand("cap-whole", 5, 3, 1), 9, fr);
  REQUIRE(whole.size() == 2);
  CHECK(whole[0].state() == "recording");
  CHECK(whole[1].state() == "uploading");
  CHECK(whole[1].first_step() == 4);
  CHECK(whole[1].last_step() == 7);
  CHECK_FALSE(whole[1].truncated());

  // Its start no longer held: refused, saying what is held.
  auto gone = CaptureRecorder(identity(), optionsIn(tmp.path()))
                  .start(captureCommand("cap-gone", 1, 3, 0), 9, fr);
  REQUIRE(gone.size() == 1);
  CHECK(gone[0].state() == "failed");
  CHECK(gone[0].detail() ==
        "start step 1 already passed: rank 3 is at step 9 and its flight "
        "recorder holds steps from 2");
  FlightRecorder empty(8, 1u << 20);
  auto none = CaptureRecorder(identity(), optionsIn(tmp.path()))
                  .start(captureCommand("cap-none", 9, 1, 0), 9, empty);
  CHECK(none[0].detail() ==
        "start step 9 already passed: rank 3 is at step 9 and its flight "
        "recorder holds no step");
}

TEST_CASE("capture rejects a second capture and bad commands") {
  TempDir tmp;
  FlightRecorder fr(8, 1u << 20);
  fill(fr, 9);
  CaptureRecorder cap(identity(), optionsIn(tmp.path()));

  REQUIRE(cap.start(captureCommand("cap-a", 11, 3, 4), 9, fr)[0].state() == "recording");
  auto second = cap.start(captureCommand("cap-b", 12, 3, 4), 9, fr);
  CHECK(second[0].state() == "failed");
  CHECK(second[0].detail().find("already running") != std::string::npos);
  CHECK(second[0].detail().find("cap-a") != std::string::npos);
  // The agent resending the running command gets "recording" again, nothing restarts.
  CHECK(cap.start(captureCommand("cap-a", 11, 3, 4), 9, fr)[0].state() == "recording");
  CHECK(cap.activeId() == "cap-a");

  auto zero = CaptureRecorder(identity(), optionsIn(tmp.path()))
                  .start(captureCommand("cap-z", 11, 0, 4), 9, fr);
  CHECK(zero[0].state() == "failed");
  CHECK(zero[0].detail().find("steps must be between 1 and 1000") != std::string::npos);
  auto bad = CaptureRecorder(identity(), optionsIn(tmp.path()))
                 .start(captureCommand("../evil", 11, 1, 0), 9, fr);
  CHECK(bad[0].state() == "failed");
  CHECK(bad[0].detail().find("not a valid capture id") != std::string::npos);
}

TEST_CASE("capture cuts the trace at max_bytes with a visible marker") {
  TempDir tmp;
  FlightRecorder fr(8, 64u << 20);
  fill(fr, 9, 3000);
  CaptureRecorder cap(identity(), optionsIn(tmp.path()));
  const uint64_t bound = 8 << 10;
  auto started = cap.start(captureCommand("cap-small", 12, 3, 4, bound), 9, fr);
  // The history alone is far over 8 KiB compressed: cut while writing it.
  REQUIRE(started.size() == 2);
  CHECK(started[0].state() == "recording");
  const auto& done = started[1];
  CHECK(done.state() == "uploading");
  CHECK(done.truncated());
  CHECK(done.file_bytes() <= bound);
  CHECK(done.file_bytes() > bound / 2);
  CHECK(done.first_step() == 8);
  CHECK_FALSE(cap.active());
  const nlohmann::json doc = readJsonGz(done.file_path());
  REQUIRE(doc.is_object());
  CHECK(doc["trainscope"]["truncated"] == true);
  const auto& last = doc["traceEvents"].back();
  CHECK(last["name"] == "trainscope: trace cut at the 8 KiB bound");
  CHECK(last["ph"] == "i");
  CHECK(last["s"] == "g");
  CHECK(last["pid"] == 3);
  CHECK(doc["traceEvents"].size() > 10);
}

TEST_CASE("capture cut by live steps past the bound ends at once") {
  TempDir tmp;
  FlightRecorder fr(8, 64u << 20);
  CaptureRecorder cap(identity(), optionsIn(tmp.path()));
  REQUIRE(cap.start(captureCommand("cap-live", 1, 100, 0, 16 << 10), 0, fr).size() == 1);
  std::optional<trainscope::wire::CommandStatus> done;
  int64_t s = 1;
  for (; s < 100 && !done; ++s) done = cap.offer(s, stepStart(s), stepEnd(s), stepRecords(s, 300));
  REQUIRE(done.has_value());
  CHECK(s < 100);
  CHECK(done->truncated());
  CHECK(done->file_bytes() <= 16u << 10);
  CHECK(readJsonGz(done->file_path()).is_object());
}

TEST_CASE("a probe closed mid-capture writes what it has and says where it ended") {
  TempDir tmp;
  FlightRecorder fr(8, 1u << 20);
  fill(fr, 9);
  CaptureRecorder cap(identity(), optionsIn(tmp.path()));
  cap.start(captureCommand("cap-close", 12, 5, 2), 9, fr);
  for (int64_t s = 10; s <= 13; ++s) cap.offer(s, stepStart(s), stepEnd(s), stepRecords(s));
  auto done = cap.close(13);
  REQUIRE(done.has_value());
  CHECK(done->state() == "uploading");
  CHECK(done->detail() == "rank ended at step 13");
  CHECK_FALSE(done->truncated());
  CHECK(done->first_step() == 10);
  CHECK(done->last_step() == 13);
  const nlohmann::json doc = readJsonGz(done->file_path());
  REQUIRE(doc.is_object());
  CHECK(doc["trainscope"]["detail"] == "rank ended at step 13");
  CHECK(doc["trainscope"]["last_step"] == 13);
  CHECK_FALSE(cap.close(13).has_value());
}

TEST_CASE("a capture directory that cannot be created fails naming the path and errno") {
  TempDir tmp;
  const std::string blocker = tmp.path() + "/file";
  std::ofstream(blocker) << "x";
  FlightRecorder fr(8, 1u << 20);
  CaptureRecorder cap(identity(), optionsIn(blocker + "/sub"));
  auto st = cap.start(captureCommand("cap-err", 12, 1, 0), 9, fr);
  REQUIRE(st.size() == 1);
  CHECK(st[0].state() == "failed");
  CHECK(st[0].detail().find(blocker) != std::string::npos);
  CHECK(st[0].detail().find("Not a directory") != std::string::npos);
  CHECK_FALSE(cap.active());
}

TEST_CASE("capture bound names read like the contract's marker") {
  CHECK(trainscope::probe::formatBound(64u << 20) == "64 MiB");
  CHECK(trainscope::probe::formatBound(8u << 10) == "8 KiB");
  CHECK(trainscope::probe::formatBound(1000) == "1000 bytes");
}

TEST_CASE("capture worker writes on its own thread and ends a capture it cannot keep up with") {
  TempDir tmp;
  FlightRecorder fr(8, 1u << 20);
  fill(fr, 9);
  std::mutex mu;
  std::vector<trainscope::wire::CommandStatus> seen;
  auto post = [&](trainscope::wire::CommandStatus st) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(std::move(st));
  };
  auto states = [&] {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::string> out;
    out.reserve(seen.size());
    for (const auto& st : seen) out.push_back(st.state());
    return out;
  };
  {
    trainscope::probe::CaptureWorker w(identity(), optionsIn(tmp.path()), &fr, post, 1u << 20);
    w.command(captureCommand("cap-w", 12, 2, 2), 9);
    CHECK(w.running());
    std::vector<int64_t> taken;
    for (int64_t s = 10; s <= 14; ++s) {
      auto v = stepRecords(s);
      if (w.offer(s, stepStart(s), stepEnd(s), v)) {
        taken.push_back(s);
      } else {
        fr.add(s, std::move(v), stepStart(s), stepEnd(s));
      }
    }
    REQUIRE(waitFor([&] { return !w.running(); }, 5000));
    CHECK(states() == std::vector<std::string>{"recording", "uploading"});
    std::lock_guard<std::mutex> lock(mu);
    CHECK(seen[1].first_step() == 10);
    CHECK(seen[1].last_step() == 13);
    CHECK(readJsonGz(seen[1].file_path()).is_object());
    // The steps it took reached the flight recorder through the worker.
    CHECK(taken.size() >= 4);
    CHECK(fr.heldSteps().back() == 14);
    CHECK(fr.stepsIn(10, 13).size() == 4);
  }
  seen.clear();
  {
    // 100 records (6.4 KB) per step against a 4 KiB queue: the first live step is refused.
    trainscope::probe::CaptureWorker w(identity(), optionsIn(tmp.path()), &fr, post, 4u << 10);
    w.command(captureCommand("cap-behind", 11, 3, 1), 9);
    for (int64_t s = 10; s <= 14; ++s) {
      auto v = stepRecords(s, 100);
      CHECK_FALSE(w.offer(s, stepStart(s), stepEnd(s), v));  // refused: the caller keeps it
    }
    w.close(14);
    CHECK(states() == std::vector<std::string>{"recording", "uploading"});
    std::lock_guard<std::mutex> lock(mu);
    CHECK(seen[1].truncated());
    CHECK(seen[1].detail().find("fell behind the training at step 10") != std::string::npos);
    CHECK(readJsonGz(seen[1].file_path()).is_object());
  }
}
