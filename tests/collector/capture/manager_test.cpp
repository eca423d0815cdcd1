// The capture manager's state machine with a fake command sink and synthetic statuses and
// chunks (manager_harness.h): validation (404/400/409), commands per agent, done with a merged
// aligned trace, restart recovery, stored-file bounds and automatic captures. How ranks fail
// (checksums, chunks, probes, deadlines, unconnected agents): manager_failure_test.cpp.
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "collector/capture/gzip_file.h"
#include "collector/capture/manager.h"
#include "tests/collector/capture/manager_harness.h"
#include "tests/common/gcc12_string_warnings.h"  // last: GCC 12 -O3 false positives

using namespace trainscope;
using namespace trainscope::capture;
using nlohmann::json;
namespace fs = std::filesystem;

using namespace trainscope::testing;

TEST_CASE("requests the job cannot take are refused with their code") {
  Harness h;
  std::string msg;
  CHECK(refusal(h, "nope", "{}", &msg) == StatusCode::kNotFound);
  CHECK(msg == "unknown job 'nope'");
  CHECK(refusal(h, "j", R"({"ranks":"2-4"})", &msg) == StatusCode::kInvalidArgument);
  CHECK(msg == "ranks: rank 4 is outside 0..3 (world size 4)");
  CHECK(refusal(h, "j", R"({"start_step":10})", &msg) == StatusCode::kConflict);
  CHECK(msg == "start step 10 already passed: rank 0 is at step 10");
  h.start(R"({"ranks":"1-2"})");
  CHECK(refusal(h, "j", R"({"ranks":[2,3]})", &msg) == StatusCode::kConflict);
  CHECK_THAT(msg, Catch::Matchers::Contains("already running on rank 2 of job j"));
  // Disjoint ranks of the same job are fine.
  h.start(R"({"ranks":[0,3]})");
  CHECK(h.sent.size() == 4);
}

TEST_CASE(
    "world sizes: all 65,536 ranks resolve, overlap checks stay cheap, a stored huge job is "
    "refused") {
  Harness h;
  // Rank 0 re-registers claiming the largest world size the protocol allows.
  storage::WriteBatch b;
  b.receivedNs = 2'000'000'000;
  wire::RankInfo info;
  info.set_job("j");
  info.set_rank(0);
  info.set_world_size(wire::kMaxWorldSize);
  info.set_node("n0");
  b.ranks.push_back(info);
  REQUIRE(h.store->write(b));
  auto all = h.start(R"({"ranks":"all"})");
  CHECK(all.rankStatus.size() == wire::kMaxWorldSize);
  std::string msg;
  CHECK(refusal(h, "j", R"({"ranks":"0-65535"})", &msg) == StatusCode::kConflict);
  CHECK_THAT(msg, Catch::Matchers::Contains("already running on rank"));

  // A database written before the limit existed may hold a larger one: refused, not resolved.
  info.set_job("old");
  info.set_world_size(1'000'000);
  b.ranks = {info};
  REQUIRE(h.store->write(b));
  CHECK(refusal(h, "old", "{}", &msg) == StatusCode::kInvalidArgument);
  CHECK(msg == "ranks: the job's world size 1000000 exceeds the limit of 65536");
}

TEST_CASE("start steps: beyond the step limit refused; a stored INT64_MAX step cannot overflow") {
  Harness h;
  std::string msg;
  CHECK_FALSE(parseCaptureRequest(R"({"start_step":1000000000001})"));
  CHECK_THAT(parseCaptureRequest(R"({"start_step":9223372036854775807})").message(),
             Catch::Matchers::StartsWith("start_step: must be at most 1000000000000"));
  CHECK_THAT(parseCaptureRequest(R"({"start_step":18446744073709551615})").message(),
             Catch::Matchers::StartsWith("start_step: must be at most 1000000000000"));
  // A database from before the limit: rank 0 of job "j" stored at step INT64_MAX.
  storage::WriteBatch b;
  b.receivedNs = 2'000'000'000;
  wire::StepReport rep;
  rep.set_job("j");
  rep.set_rank(0);
  rep.set_step(std::numeric_limits<int64_t>::max());
  rep.set_start_ns(1);
  rep.set_end_ns(2);
  rep.set_duration_ns(1);
  b.steps.push_back(rep);
  REQUIRE(h.store->write(b));
  CHECK(refusal(h, "j", "{}", &msg) == StatusCode::kConflict);
  CHECK(msg ==
        "the job's latest step 9223372036854775807 leaves no start step within the step "
        "limit 1000000000000");
  // Naming a start step is still judged against each selected rank.
  CHECK(refusal(h, "j", R"({"ranks":[0],"start_step":20})", &msg) == StatusCode::kConflict);
  CHECK_THAT(msg, Catch::Matchers::StartsWith("start step 20 already passed: rank 0 is at step"));
  auto ok = h.start(R"({"ranks":[1],"start_step":20})");
  CHECK(ok.startStep == 20);
  CHECK(ok.deadlineNs > kStartNs);
}

TEST_CASE("a trace capture sends one command per agent, collects files, merges aligned") {
  Harness h;
  auto cap = h.start(R"({"ranks":"0,2","steps":5,"history":4})");
  CHECK(cap.state == wire::CaptureState::kRunning);
  // Latest step 10 + a lead of 1 s at 100 ms steps (10 steps + 1): the stored latest step lags.
  CHECK(cap.startStep == 21);
  CHECK(cap.maxBytes == 64ull << 20);
  CHECK(cap.deadlineNs > kStartNs + 30'000'000'000LL);
  CHECK(cap.rankStatus.size() == 2);
  CHECK(h.stored(cap.id).state == wire::CaptureState::kRunning);
  CHECK(h.rank(h.stored(cap.id), 0).state == wire::RankState::kPending);
  REQUIRE(h.sent.size() == 2);
  std::map<std::string, wire::Command> byNode(h.sent.begin(), h.sent.end());
  REQUIRE(byNode.count("n0") == 1);
  const auto& c0 = byNode["n0"];
  CHECK(c0.id() == cap.id);
  CHECK(c0.job() == "j");
  REQUIRE(c0.ranks_size() == 1);
  CHECK(c0.ranks(0) == 0);
  CHECK(c0.capture().capture_id() == cap.id);
  CHECK(c0.capture().start_step() == 21);
  CHECK(c0.capture().steps() == 5);
  CHECK(c0.capture().history() == 4);
  CHECK(c0.capture().max_bytes() == 64ull << 20);
  CHECK(byNode["n1"].ranks(0) == 2);

  const double trueUs = 1.7e15;
  const std::string f0 = h.traceBytes(0, trueUs);
  const std::string f2 = h.traceBytes(2, trueUs - 5000.0);  // n1's clock is 5 ms behind
  h.manager->onCommandItem("n0", testing::statusOf(cap.id, 0, "recording", "steps 12..16"));
  CHECK(h.rank(h.stored(cap.id), 0).state == wire::RankState::kRecording);
  CHECK(h.rank(h.stored(cap.id), 0).detail == "steps 12..16");
  h.upload(cap.id, 0, f0);
  auto afterOne = h.stored(cap.id);
  CHECK(h.rank(afterOne, 0).state == wire::RankState::kDone);
  CHECK(h.rank(afterOne, 0).bytes == f0.size());
  CHECK(h.rank(afterOne, 0).firstStep == 8);
  CHECK(h.rank(afterOne, 0).lastStep == 14);
  CHECK(afterOne.state == wire::CaptureState::kRunning);
  // A resend of chunks after done changes nothing.
  for (const auto& c : testing::chunksOf(cap.id, 0, f0, 100)) h.manager->onCommandItem("n0", c);
  CHECK(h.rank(h.stored(cap.id), 0).state == wire::RankState::kDone);

  // Rank 2: every chunk arrives twice (agent resends); repeats are skipped.
  h.manager->onCommandItem("n1", testing::statusOf(cap.id, 2, "uploading"));
  auto chunks = testing::chunksOf(cap.id, 2, f2, 64);
  REQUIRE(chunks.size() > 2);
  for (size_t i = 0; i < chunks.size(); ++i) {
    h.manager->onCommandItem("n1", chunks[i]);
    if (i + 1 < chunks.size()) h.manager->onCommandItem("n1", chunks[i]);
  }
  CHECK(h.rank(h.stored(cap.id), 2).state == wire::RankState::kDone);
  CHECK(h.manager->stats().chunksIgnored >= chunks.size() - 1);
  auto onDisk = readFileBytes(h.manager->directory(cap.id) + "/rank-2.json.gz");
  REQUIRE(onDisk);
  CHECK(*onDisk == f2);

  h.manager->tick(h.clock.nowNs());
  auto done = h.stored(cap.id);
  CHECK(done.state == wire::CaptureState::kComplete);
  CHECK(done.summary == "2 of 2 ranks done");
  REQUIRE(done.finishedNs.has_value());
  REQUIRE(done.traceBytes.has_value());
  CHECK(*done.traceBytes == fs::file_size(h.manager->directory(cap.id) + "/trace.json.gz"));
  auto text = readAllOf(h.manager->openFile(cap.id, "trace.json.gz", false));
  REQUIRE(text);
  json trace = json::parse(*text);
  CHECK(trace["trainscope"]["id"] == cap.id);
  CHECK(trace["trainscope"]["state"] == "complete");
  std::map<uint32_t, double> firstStepTs;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("cat", "") == "step" && e["args"]["step"] == 8) firstStepTs[e["pid"]] = e["ts"];
  }
  REQUIRE(firstStepTs.size() == 2);
  CHECK(firstStepTs[0] == Approx(firstStepTs[2]).epsilon(0).margin(0.01));
  auto st = h.manager->stats();
  CHECK(st.finished[wire::CaptureState::kComplete] == 1);
  CHECK((st.started[{"trace", "request"}]) == 1);
  CHECK(st.bytes == f0.size() + f2.size());
  CHECK_THAT(captureMetricsText(st),
             Catch::Matchers::Contains(
                 "trainscope_captures_started_total{kind=\"trace\",trigger=\"request\"} 1"));
}

TEST_CASE("captures left running by a previous collector fail; done ranks are still merged") {
  Harness h;
  auto cap = h.start(R"({"ranks":[0,1]})");
  h.upload(cap.id, 0, h.traceBytes(0, 1.0));
  h.manager.reset();  // a clean stop stores what changed
  CaptureManagerOptions o;
  o.dir = h.dir.sub("captures");
  CaptureManager restarted(o, *h.store, h.clock,
                           [](const std::string&, const wire::Command&) { return Status::ok(); });
  restarted.recover();
  auto row = h.stored(cap.id);
  CHECK(h.rank(row, 1).state == wire::RankState::kFailed);
  CHECK(h.rank(row, 1).detail == "collector restarted during the capture");
  restarted.tick(h.clock.nowNs());
  row = h.stored(cap.id);
  CHECK(row.state == wire::CaptureState::kPartial);
  CHECK(row.traceBytes.has_value());
}

TEST_CASE("a capture whose merges the collector died in twice is failed, not merged again") {
  // A merge that crashes the collector (one did, on a rank file nested 100,000 deep) must not
  // be begun again by every restart: the manager counts merges begun in the capture's
  // directory ("merge-attempts") and recovery gives up after two.
  for (const int attempts : {1, 2}) {
    INFO("merges begun before the restart: " << attempts);
    Harness h;
    auto cap = h.start(R"({"ranks":[0,1]})");
    h.upload(cap.id, 0, h.traceBytes(0, 1.0));
    h.upload(cap.id, 1, h.traceBytes(1, 1.0));
    const fs::path dir = h.manager->directory(cap.id);
    const fs::path marker = dir / "merge-attempts";
    std::ofstream(marker) << attempts << "\n";
    h.manager.reset();  // the collector stops (here cleanly: what changed is stored)
    CaptureManagerOptions o;
    o.dir = h.dir.sub("captures");
    CaptureManager restarted(o, *h.store, h.clock,
                             [](const std::string&, const wire::Command&) { return Status::ok(); });
    restarted.recover();
    restarted.tick(h.clock.nowNs());
    auto row = h.stored(cap.id);
    if (attempts == 1) {  // merged again, and the count cleared
      CHECK(row.state == wire::CaptureState::kComplete);
      CHECK(row.traceBytes.has_value());
      CHECK_FALSE(fs::exists(marker));
    } else {
      CHECK(row.state == wire::CaptureState::kFailed);
      CHECK_FALSE(row.traceBytes.has_value());
      CHECK_THAT(h.rank(row, 0).detail, Catch::Matchers::Contains("not merged again"));
      CHECK(fs::exists(dir / "rank-0.json.gz"));
    }
  }
}

TEST_CASE("stored files are bounded: past the byte bound the oldest go, past the retention all") {
  CaptureManagerOptions o;
  o.filesRetentionNs = 3'600'000'000'000;  // an hour
  Harness h(o);
  // Three finished captures a minute apart, and one still running.
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    auto cap = h.start(R"({"ranks":[0]})");
    h.upload(cap.id, 0, h.traceBytes(0, 1.0));
    h.manager->tick(h.clock.nowNs());
    REQUIRE(h.stored(cap.id).state == wire::CaptureState::kComplete);
    ids.push_back(cap.id);
    h.clock.advance(60'000'000'000);
  }
  auto running = h.start(R"({"ranks":[1]})");
  auto bytesOf = [&](const std::string& id) {
    uint64_t n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(h.manager->directory(id), ec)) n += e.file_size();
    return n;
  };
  const uint64_t each = bytesOf(ids[0]);
  const uint64_t oldestTwo = each + bytesOf(ids[1]);
  const uint64_t newest = bytesOf(ids[2]);
  REQUIRE(each > 0);

  // Nothing is over a bound yet.
  auto removed = h.manager->pruneStoredFiles(h.clock.nowNs());
  REQUIRE(removed);
  CHECK(*removed == 0);

  // A bound that holds one capture: the two oldest lose their files, their rows say so.
  CaptureManagerOptions bounded = o;
  bounded.dir = h.dir.sub("captures");
  bounded.maxStoredBytes = newest + each / 2;
  CaptureManager pruner(bounded, *h.store, h.clock,
                        [](const std::string&, const wire::Command&) { return Status::ok(); });
  removed = pruner.pruneStoredFiles(h.clock.nowNs());
  REQUIRE(removed);
  CHECK(*removed == oldestTwo);
  for (int i = 0; i < 2; ++i) {
    CHECK_FALSE(fs::exists(h.manager->directory(ids[i])));
    auto row = h.stored(ids[i]);
    CHECK_FALSE(row.traceBytes.has_value());
    CHECK_THAT(row.summary, Catch::Matchers::Contains("files removed: the oldest"));
  }
  CHECK(h.stored(ids[2]).traceBytes.has_value());
  CHECK(fs::exists(h.manager->directory(running.id)));

  // Past the retention the last one goes too; the running capture is never touched.
  h.clock.advance(3'700'000'000'000);
  removed = h.manager->pruneStoredFiles(h.clock.nowNs());
  REQUIRE(removed);
  CHECK(*removed == newest);
  CHECK_THAT(h.stored(ids[2]).summary, Catch::Matchers::Contains("older than the retention"));
  CHECK(fs::exists(h.manager->directory(running.id)));
}

TEST_CASE("automatic captures: anomaly ranks plus a reference rank, stacks for hangs") {
  Harness h;
  storage::AnomalyRow a;
  a.id = "j/straggler/5/r2";
  a.job = "j";
  a.kind = "straggler";
  a.ranks = {2};
  auto started = h.manager->startForAnomaly(a);
  INFO(started.message());
  REQUIRE(started);
  auto row = h.stored(started->id);
  CHECK(row.ranks == std::vector<uint32_t>{0, 2});
  CHECK(row.kind == "trace");
  CHECK(row.steps == 3);
  CHECK(row.history == 4);  // no onset given: the least K
  CHECK(row.reason == "anomaly j/straggler/5/r2: straggler");
  CHECK(row.anomalyId == a.id);
  storage::AnomalyRow hang = a;
  hang.id = "j/hang/9/r0";
  hang.kind = "hang";
  hang.ranks = {0, 1};
  h.clock.advance(600'000'000'001LL);
  h.manager->tick(h.clock.nowNs());  // the first one times out; its ranks are free again
  auto stacks = h.manager->startForAnomaly(hang);
  REQUIRE(stacks);
  row = h.stored(stacks->id);
  CHECK(row.kind == "stacks");
  CHECK(row.ranks == std::vector<uint32_t>{0, 1, 2});
  CHECK((h.manager->stats().started[{"stacks", "anomaly"}]) == 1);
}

TEST_CASE(
    "automatic captures: the history reaches the anomaly's onset, up to its bound, and says so") {
  // Job j: steps of 100 ms, latest 10; the start step leads by 1 s, so it is step 21.
  storage::AnomalyRow a;
  a.id = "j/straggler/5/r2";
  a.job = "j";
  a.kind = "straggler";
  a.ranks = {2};
  a.onsetStep = 5;
  {
    Harness h;
    auto started = h.manager->startForAnomaly(a);
    REQUIRE(started);
    CHECK(started->startStep == 21);
    // From kOnsetLeadSteps (3) before the onset: K = 21 - 2 = 19, not the default 4.
    CHECK(started->history == 19);
    CHECK(started->startStep - started->history == a.onsetStep - kOnsetLeadSteps);
    CHECK_THAT(started->reason,
               Catch::Matchers::EndsWith("; history from step 2 covers the onset (step 5)"));
    // The command carries that K to the probes.
    REQUIRE_FALSE(h.sent.empty());
    CHECK(h.sent.front().second.capture().history() == 19);
  }
  {
    CaptureManagerOptions o;
    o.autoMaxHistory = 8;
    Harness h(o);
    auto started = h.manager->startForAnomaly(a);
    REQUIRE(started);
    CHECK(started->history == 8);
    CHECK_THAT(
        started->reason,
        Catch::Matchers::EndsWith(
            "; the onset (step 5) is out of reach: history capped at 8 steps (from step 13)"));
  }
}

TEST_CASE("a trace whose rank file begins after the history asked for says so when it ends") {
  Harness h;
  auto cap = h.start(R"({"ranks":[0,1],"start_step":30,"steps":2,"history":10})");
  // Rank 0 holds the whole history; rank 1's flight recorder held steps from 25 only.
  for (uint32_t r : {0u, 1u}) {
    auto st = testing::statusOf(cap.id, r, "uploading");
    st.mutable_command_status()->set_first_step(r == 0 ? 20 : 25);
    st.mutable_command_status()->set_last_step(31);
    h.manager->onCommandItem("n", st);
    for (const auto& c : testing::chunksOf(cap.id, r, h.traceBytes(r, 1000.0), 100))
      h.manager->onCommandItem("n", c);
  }
  h.manager->tick(h.clock.nowNs());
  auto row = h.stored(cap.id);
  CHECK(row.state == wire::CaptureState::kComplete);
  CHECK(row.summary ==
        "2 of 2 ranks done; history short on 1 rank (rank 1): from step 25, asked from 20 (the "
        "probe held fewer steps)");
}

TEST_CASE(
    "automatic captures: offered anomalies wait their window, the most important takes the "
    "capture and comes back with its id; small ones and resolved ones take none") {
  Harness h;
  auto anomaly = [](const std::string& id, std::vector<uint32_t> ranks, double gain) {
    storage::AnomalyRow a;
    a.id = id;
    a.job = "j";
    a.kind = "straggler";
    a.ranks = std::move(ranks);
    a.onsetStep = 8;
    a.confidence = 1.0;
    a.evidence["estimated_gain"] = gain;
    return a;
  };
  auto first = anomaly("j/step_shift/8/all", {0, 1, 2, 3}, 0.01);  // below the 2 % floor
  auto blip = anomaly("j/straggler/8/r1", {1}, 0.5);
  auto real = anomaly("j/straggler/8/r3", {3}, 0.3);
  h.manager->offerAnomaly(first);
  h.manager->offerAnomaly(blip);
  h.manager->offerAnomaly(real);
  CHECK(h.manager->pickAutoCaptures(h.clock.nowNs()).empty());  // within the window
  CHECK(h.manager->stats().autoCandidates == 3);
  blip.state = storage::AnomalyState::kResolved;  // a false alarm, over in a few steps
  h.manager->offerAnomaly(blip);
  h.clock.advance(1'000'000'000);
  auto picked = h.manager->pickAutoCaptures(h.clock.nowNs());
  REQUIRE(picked.size() == 1);
  CHECK(picked.front().id == real.id);
  REQUIRE(picked.front().captureId);
  auto row = h.stored(*picked.front().captureId);
  CHECK(row.anomalyId == real.id);
  CHECK(row.ranks == std::vector<uint32_t>{0, 3});
  CHECK(h.manager->pickAutoCaptures(h.clock.nowNs()).empty());
  auto st = h.manager->stats();
  CHECK(st.autoSkips.smallGain == 1);
  CHECK(st.autoSkips.resolved == 1);
  CHECK(st.autoSkipped == 2);
  CHECK(st.autoCandidates == 0);
  CHECK_THAT(
      captureMetricsText(st),
      Catch::Matchers::Contains("trainscope_capture_auto_skips_total{reason=\"small_gain\"} 1"));
}

TEST_CASE("automatic captures: a candidate whose ranks are busy waits for them") {
  Harness h;
  h.start(R"({"ranks":[0,3]})");  // a requested capture holds ranks 0 and 3
  storage::AnomalyRow a;
  a.id = "j/straggler/8/r3";
  a.job = "j";
  a.kind = "straggler";
  a.ranks = {3};
  a.confidence = 1.0;
  a.evidence["estimated_gain"] = 0.3;
  h.manager->offerAnomaly(a);
  h.clock.advance(1'000'000'000);
  CHECK(h.manager->pickAutoCaptures(h.clock.nowNs()).empty());
  CHECK(h.manager->stats().autoCandidates == 1);  // kept: tried again
  h.clock.advance(600'000'000'000LL);
  h.manager->tick(h.clock.nowNs());  // the requested one times out
  // Past the candidate's time to live (60 s) it is dropped, not captured with a lost onset.
  CHECK(h.manager->pickAutoCaptures(h.clock.nowNs()).empty());
  CHECK(h.manager->stats().autoSkips.expired == 1);
}

TEST_CASE("automatic captures off: nothing starts") {
  CaptureManagerOptions o;
  o.autoCapture.intervalNs = 0;
  Harness h(o);
  storage::AnomalyRow a;
  a.id = "x";
  a.job = "j";
  a.kind = "straggler";
  a.ranks = {1};
  a.evidence["estimated_gain"] = 0.5;
  CHECK(h.manager->startForAnomaly(a).code() == StatusCode::kUnavailable);
  h.manager->offerAnomaly(a);
  h.clock.advance(2'000'000'000);
  CHECK(h.manager->pickAutoCaptures(h.clock.nowNs()).empty());
  CHECK(h.sent.empty());
}

TEST_CASE("file reads refuse names outside the capture's directory") {
  Harness h;
  CHECK_FALSE(h.manager->openFile("../etc", "trace.json.gz", true));
  CHECK_FALSE(h.manager->openFile("cap-1-abcd", "../../passwd", true));
  CHECK_FALSE(h.manager->openFile("cap-1-abcd", "rank-x.json.gz", true));
}

TEST_CASE("the default start step leads the latest step by at least two steps") {
  CaptureManagerOptions o;
  o.minLeadNs = 0;
  Harness h(o);
  auto cap = h.start(R"({"ranks":"0"})");
  CHECK(cap.startStep == 12);  // latest step 10 + 2
}

TEST_CASE("rank statuses are understood from the enum alone and from the string alone") {
  Harness h;
  auto cap = h.start(R"({"ranks":"0,2","steps":5,"history":4})");
  // A new probe may leave the string empty; an old one sends only the string.
  wire::Envelope enumOnly = testing::statusOf(cap.id, 0, "", "steps 12..16");
  enumOnly.mutable_command_status()->set_rank_state(wire::RANK_CAPTURE_RECORDING);
  h.manager->onCommandItem("n0", enumOnly);
  CHECK(h.rank(h.stored(cap.id), 0).state == wire::RankState::kRecording);
  h.manager->onCommandItem("n1", testing::statusOf(cap.id, 2, "failed", "out of disk"));
  CHECK(h.rank(h.stored(cap.id), 2).state == wire::RankState::kFailed);
  CHECK(h.rank(h.stored(cap.id), 2).detail == "out of disk");
  // A state neither field names changes nothing.
  h.manager->onCommandItem("n0", testing::statusOf(cap.id, 0, "paused"));
  CHECK(h.rank(h.stored(cap.id), 0).state == wire::RankState::kRecording);
}

TEST_CASE("statuses and chunks store nothing on ingest's thread; a tick stores a capture once") {
  Harness h;
  auto cap = h.start(R"({"ranks":"0-3"})");
  const uint64_t before = h.store->stats().transactions;
  // Storing the whole capture (every rank's status) per item cost ingest's socket thread
  // O(ranks) per item: 20 ms per status at 8,192 ranks.
  for (uint32_t r = 0; r < 4; ++r) {
    h.manager->onCommandItem("n0", testing::statusOf(cap.id, r, "recording", "steps 12..16"));
    h.manager->onCommandItem("n0", testing::statusOf(cap.id, r, "uploading"));
  }
  const std::string f0 = h.traceBytes(0, 1.0);
  for (const auto& c : testing::chunksOf(cap.id, 0, f0, 100)) h.manager->onCommandItem("n0", c);
  h.manager->onCommandItem("n1", testing::statusOf(cap.id, 3, "failed", "out of disk"));
  CHECK(h.store->stats().transactions == before);
  h.manager->tick(h.clock.nowNs());
  CHECK(h.store->stats().transactions == before + 1);
  auto row = h.inStore(cap.id);
  CHECK(row.state == wire::CaptureState::kRunning);
  CHECK(h.rank(row, 0).state == wire::RankState::kDone);
  CHECK(h.rank(row, 0).bytes == f0.size());
  CHECK(h.rank(row, 1).state == wire::RankState::kUploading);
  CHECK(h.rank(row, 1).firstStep == 8);
  CHECK(h.rank(row, 3).state == wire::RankState::kFailed);
  CHECK(h.rank(row, 3).detail == "out of disk");
  CHECK(row.summary == "1 of 4 ranks done, 1 failed");
  // Nothing changed since: nothing written.
  h.manager->tick(h.clock.nowNs());
  CHECK(h.store->stats().transactions == before + 1);
}

TEST_CASE("a manager that stops stores the statuses it has not stored yet") {
  Harness h;
  auto cap = h.start(R"({"ranks":[0,1]})");
  h.manager->onCommandItem("n0", testing::statusOf(cap.id, 1, "recording", "steps 12..16"));
  h.manager.reset();
  auto row = h.inStore(cap.id);
  CHECK(h.rank(row, 1).state == wire::RankState::kRecording);
  CHECK(h.rank(row, 1).detail == "steps 12..16");
}

TEST_CASE("after a crash, a rank whose whole file was received is done, not failed") {
  Harness h;
  auto cap = h.start(R"({"ranks":[0,1]})");
  // The collector stopped after rank 0's last chunk was in place, before the rank's new state
  // was stored: the store says pending, the rank file is complete.
  const std::string f0 = h.traceBytes(0, 1.0);
  fs::create_directories(h.manager->directory(cap.id));
  {
    std::ofstream out(h.manager->directory(cap.id) + "/rank-0.json.gz", std::ios::binary);
    out << f0;
  }
  CaptureManagerOptions o;
  o.dir = h.dir.sub("captures");
  CaptureManager restarted(o, *h.store, h.clock,
                           [](const std::string&, const wire::Command&) { return Status::ok(); });
  restarted.recover();
  auto row = h.inStore(cap.id);
  CHECK(h.rank(row, 0).state == wire::RankState::kDone);
  CHECK(h.rank(row, 0).bytes == f0.size());
  CHECK(h.rank(row, 1).state == wire::RankState::kFailed);
  CHECK(h.rank(row, 1).detail == "collector restarted during the capture");
  restarted.tick(h.clock.nowNs());
  row = h.inStore(cap.id);
  CHECK(row.state == wire::CaptureState::kPartial);
  CHECK(row.summary == "1 of 2 ranks done, 1 failed");
}

TEST_CASE("a flush with one rank changed of 16,384 writes that rank, not the whole capture") {
  // Each flush rewrote the capture's row with every rank's status: 53-148 ms of the store's
  // write lock at 16,384 ranks, for one changed rank. Measured here by what the flushes add to
  // the database's write-ahead log (no checkpoint comes between: the log stays far below its
  // 32 MiB checkpoint size).
  constexpr uint32_t kRanks = 16384;
  testing::TempDir dir;
  storage::SqliteOptions so;
  so.path = dir.sub("big.db");
  auto opened = storage::openSqliteStore(so);
  REQUIRE(opened);
  auto store = std::move(opened.value());
  storage::WriteBatch b;
  b.receivedNs = 1'000'000'000;
  for (uint32_t r = 0; r < kRanks; ++r) {
    wire::RankInfo info;
    info.set_job("big");
    info.set_rank(r);
    info.set_world_size(kRanks);
    info.set_node("node" + std::to_string(r / 8));
    info.set_host(info.node());
    info.set_pid(1000 + r);
    b.ranks.push_back(info);
  }
  REQUIRE(store->write(b));
  ManualClock clock{kStartNs};
  CaptureManagerOptions o;
  o.dir = dir.sub("captures");
  CaptureManager manager(o, *store, clock,
                         [](const std::string&, const wire::Command&) { return Status::ok(); });
  auto req = parseCaptureRequest(R"({"ranks":"all","steps":5,"start_step":100})");
  REQUIRE(req);
  auto cap = manager.start("big", *req);
  INFO(cap.message());
  REQUIRE(cap);
  REQUIRE(cap->rankStatus.size() == kRanks);
  manager.flush();
  const uint64_t before = store->stats().bytesOnDisk;
  for (uint32_t r = 0; r < 4; ++r) {
    manager.onCommandItem("node0", testing::statusOf(cap->id, r, "recording", "steps 100..104"));
    manager.flush();
  }
  const uint64_t grown = store->stats().bytesOnDisk - before;
  INFO("the log grew by " << grown << " bytes over 4 flushes");
  CHECK(grown < (uint64_t{512} << 10));
  auto row = store->capture(cap->id);
  REQUIRE(row);
  REQUIRE(row->has_value());
  const auto& stored = **row;
  REQUIRE(stored.rankStatus.size() == kRanks);
  CHECK(stored.rankStatus[3].state == wire::RankState::kRecording);
  CHECK(stored.rankStatus[3].detail == "steps 100..104");
  CHECK(stored.rankStatus[4].state == wire::RankState::kPending);
  CHECK(stored.summary == "0 of 16384 ranks done");
}
