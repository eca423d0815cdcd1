// How the capture manager fails ranks (manager_harness.h's fake command sink, synthetic
// statuses and chunks): a chunk failing its checksum, missing chunks, a probe's failure, a
// goodbye before the last step, a dead process, the deadline (and a rank still on its way past
// it), a stacks capture's deadline, an unconnected agent.
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "collector/capture/manager.h"
#include "tests/collector/capture/manager_harness.h"
#include "tests/common/gcc12_string_warnings.h"  // last: GCC 12 -O3 false positives

using namespace trainscope;
using namespace trainscope::capture;
using namespace trainscope::testing;
using nlohmann::json;
namespace fs = std::filesystem;

TEST_CASE("a chunk failing its checksum fails the rank; the capture ends partial") {
  Harness h;
  auto cap = h.start(R"({"ranks":[0,1]})");
  h.upload(cap.id, 0, h.traceBytes(0, 1000.0));
  auto chunks = testing::chunksOf(cap.id, 1, h.traceBytes(1, 1000.0), 100);
  h.manager->onCommandItem("n0", chunks[0]);
  auto bad = chunks[1];
  bad.mutable_file_chunk()->set_crc32(bad.file_chunk().crc32() ^ 1u);
  h.manager->onCommandItem("n0", bad);
  auto row = h.stored(cap.id);
  CHECK(h.rank(row, 1).state == wire::RankState::kFailed);
  CHECK(h.rank(row, 1).detail == "chunk at offset 100 failed its checksum");
  CHECK_FALSE(fs::exists(h.manager->directory(cap.id) + "/rank-1.json.gz.part"));
  // Later chunks of a failed rank are ignored.
  for (size_t i = 2; i < chunks.size(); ++i) h.manager->onCommandItem("n0", chunks[i]);
  CHECK(h.rank(h.stored(cap.id), 1).state == wire::RankState::kFailed);
  h.manager->tick(h.clock.nowNs());
  row = h.stored(cap.id);
  CHECK(row.state == wire::CaptureState::kPartial);
  CHECK(row.summary == "1 of 2 ranks done, 1 failed");
  CHECK(row.traceBytes.has_value());
}

TEST_CASE("a missing chunk or a wrong total fails the rank") {
  Harness h;
  auto cap = h.start(R"({"ranks":[0,1]})");
  auto chunks = testing::chunksOf(cap.id, 0, h.traceBytes(0, 1.0), 100);
  h.manager->onCommandItem("n0", chunks[0]);
  h.manager->onCommandItem("n0", chunks[2]);
  CHECK(h.rank(h.stored(cap.id), 0).detail ==
        "chunk at offset 200 leaves a gap: the file has 100 bytes");
  auto one = testing::chunksOf(cap.id, 1, "0123456789", 100);
  one[0].mutable_file_chunk()->set_total_bytes(11);
  h.manager->onCommandItem("n0", one[0]);
  CHECK(h.rank(h.stored(cap.id), 1).detail == "file has 10 bytes, its last chunk said 11");
  h.manager->tick(h.clock.nowNs());
  CHECK(h.stored(cap.id).state == wire::CaptureState::kFailed);
}

TEST_CASE("a probe's failure, a goodbye before the last step and a dead process fail ranks") {
  Harness h;
  auto cap = h.start(R"({"ranks":"0-3"})");  // steps 12..16
  h.manager->onCommandItem("n0",
                           testing::statusOf(cap.id, 0, "failed", "a capture is already running"));
  storage::WriteBatch b;
  wire::RankGoodbye bye;
  bye.set_job("j");
  bye.set_rank(1);
  bye.set_last_step(13);
  b.goodbyes.push_back(bye);
  wire::HostSample host;
  host.set_node("n1");
  auto* proc = host.add_procs();
  proc->set_job("j");
  proc->set_rank(2);
  proc->set_pid(102);
  proc->set_alive(false);
  auto* other = host.add_procs();  // another job's rank 3 died: not ours
  other->set_job("k");
  other->set_rank(3);
  other->set_alive(false);
  b.hosts.push_back(host);
  h.manager->onCommitted(b);
  auto row = h.stored(cap.id);
  CHECK(h.rank(row, 0).detail == "a capture is already running");
  CHECK(h.rank(row, 1).state == wire::RankState::kFailed);
  CHECK(h.rank(row, 1).detail == "rank exited at step 13 before the capture finished");
  CHECK(h.rank(row, 2).state == wire::RankState::kFailed);
  CHECK(h.rank(row, 2).detail == "the process of rank 2 (pid 102) is gone, reported by agent n1");
  CHECK(h.rank(row, 3).state == wire::RankState::kPending);
  h.upload(cap.id, 3, h.traceBytes(3, 1.0));
  h.manager->tick(h.clock.nowNs());
  row = h.stored(cap.id);
  CHECK(row.state == wire::CaptureState::kPartial);
  CHECK(row.summary == "1 of 4 ranks done, 3 failed");
}

TEST_CASE("the deadline fails ranks still waiting; a capture with no file ends failed") {
  Harness h;
  auto cap = h.start(R"({"ranks":[0,2]})");
  // Deadline: (21 + 5 - 10) steps x 100 ms median x 3 + 30 s.
  CHECK(cap.deadlineNs == kStartNs + 16 * 100'000'000LL * 3 + 30'000'000'000LL);
  h.manager->onCommandItem("n0", testing::statusOf(cap.id, 0, "recording"));
  h.manager->tick(cap.deadlineNs - 1);
  CHECK(h.stored(cap.id).state == wire::CaptureState::kRunning);
  h.clock.set(cap.deadlineNs);
  h.manager->tick(cap.deadlineNs);
  auto row = h.stored(cap.id);
  CHECK(row.state == wire::CaptureState::kFailed);
  CHECK(h.rank(row, 0).detail == "timed out in state recording");
  CHECK(h.rank(row, 2).detail == "timed out in state pending");
  CHECK_FALSE(row.traceBytes.has_value());
  CHECK(h.manager->stats().finished.at(wire::CaptureState::kFailed) == 1);
  // Over: the same ranks may be captured again.
  h.start(R"({"ranks":[0,2]})");
}

TEST_CASE("a stacks capture: 30 s deadline, stacks command, merged stacks document") {
  Harness h;
  auto cap = h.start(R"({"kind":"stacks","ranks":[1]})");
  CHECK(cap.kind == "stacks");
  CHECK(cap.deadlineNs == kStartNs + 30'000'000'000LL);
  REQUIRE(h.sent.size() == 1);
  CHECK(h.sent[0].second.has_stacks());
  CHECK(h.sent[0].second.stacks().capture_id() == cap.id);
  json doc = {{"trainscope", {{"kind", "stacks"}, {"rank", 1}}},
              {"threads", json::array({{{"tid", 7}, {"name", "main"}}})}};
  h.upload(cap.id, 1, testing::gzipJson(h.dir.sub("stk.json.gz"), doc));
  h.manager->tick(h.clock.nowNs());
  CHECK(h.stored(cap.id).state == wire::CaptureState::kComplete);
  auto merged = json::parse(*readAllOf(h.manager->openFile(cap.id, "trace.json.gz", false)));
  CHECK(merged["kind"] == "stacks");
  CHECK(merged["ranks"][0]["threads"][0]["tid"] == 7);
}

TEST_CASE("ranks on an agent that is not connected fail at once") {
  Harness h;
  h.offline.insert("n1");
  auto cap = h.start(R"({"ranks":[0,2]})");
  CHECK(h.rank(cap, 2).state == wire::RankState::kFailed);
  CHECK(h.rank(cap, 2).detail == "node n1 has no connected agent");
  CHECK(h.rank(cap, 0).state == wire::RankState::kPending);
  h.offline.insert("n0");
  auto none = h.start(R"({"ranks":[1,3]})");
  CHECK(none.state == wire::CaptureState::kFailed);  // nobody can answer: over at once
  CHECK(h.stored(none.id).state == wire::CaptureState::kFailed);
}

TEST_CASE("past the deadline a rank still on its way gets more time; a silent one does not") {
  Harness h;
  auto cap = h.start(R"({"ranks":[0,1,2]})");
  const int64_t lastStep = cap.startStep + static_cast<int64_t>(cap.steps) - 1;
  // The job slowed down: by the deadline rank 1 reported up to two steps before the capture's
  // last step, rank 2 up to its last step (it got past the start without recording); rank 0
  // (recording) was not heard from since the job began.
  auto report = [&](uint32_t rank, int64_t step, int64_t receivedNs) {
    storage::WriteBatch b;
    b.receivedNs = receivedNs;
    wire::StepReport rep;
    rep.set_job("j");
    rep.set_rank(rank);
    rep.set_step(step);
    rep.set_start_ns(step * 100'000'000);
    rep.set_end_ns(step * 100'000'000 + 100'000'000);
    rep.set_duration_ns(100'000'000);
    b.steps.push_back(rep);
    REQUIRE(h.store->write(b));
  };
  h.manager->onCommandItem("n0", testing::statusOf(cap.id, 0, "recording"));
  report(1, lastStep - 2, cap.deadlineNs - 1'000'000'000);
  report(2, lastStep, cap.deadlineNs - 1'000'000'000);
  h.clock.set(cap.deadlineNs);
  h.manager->tick(cap.deadlineNs);
  auto row = h.stored(cap.id);
  CHECK(row.state == wire::CaptureState::kRunning);
  CHECK(h.rank(row, 0).detail == "timed out in state recording");
  CHECK(h.rank(row, 1).state == wire::RankState::kPending);
  CHECK(h.rank(row, 2).detail == "timed out in state pending");
  // Its new deadline is deadlineSlackNs away.
  const int64_t extended = cap.deadlineNs + CaptureManagerOptions{}.deadlineSlackNs;
  h.clock.set(extended - 1);
  h.manager->tick(extended - 1);
  CHECK(h.rank(h.stored(cap.id), 1).state == wire::RankState::kPending);
  // Rank 1 records and uploads in the extra time: its file is merged.
  h.upload(cap.id, 1, h.traceBytes(1, 2000.0));
  h.manager->tick(cap.deadlineNs + 1);
  row = h.stored(cap.id);
  CHECK(h.rank(row, 1).state == wire::RankState::kDone);
  CHECK(row.state == wire::CaptureState::kPartial);

  // Another capture: rank 1, alive at the first deadline, then silent: failed at the second.
  auto next = h.start(R"({"ranks":[1]})");
  const int64_t nextLast = next.startStep + static_cast<int64_t>(next.steps) - 1;
  report(1, nextLast - 1, next.deadlineNs - 1'000'000'000);
  h.clock.set(next.deadlineNs);
  h.manager->tick(next.deadlineNs);
  CHECK(h.stored(next.id).state == wire::CaptureState::kRunning);
  const int64_t second = next.deadlineNs + CaptureManagerOptions{}.deadlineSlackNs;
  h.clock.set(second);
  h.manager->tick(second);
  row = h.stored(next.id);
  CHECK(row.state == wire::CaptureState::kFailed);
  CHECK(h.rank(row, 1).detail == "timed out in state pending");
}
