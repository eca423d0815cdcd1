// libFuzzer target: the capture stage's chunk assembler. A capture of the seeded 4-rank job
// is started, then the input drives what agents may send back: rank statuses,
// file chunks (right or wrong offsets, CRCs, ids, jobs, totals; raw bytes or a gzip of JSON
// from the input, so the merge reads it), goodbyes, and clock ticks past deadlines; a last
// tick far in the future ends the capture and merges whatever ranks finished.
// Properties beyond "no crash, leak or UB": the capture always ends in a final state, and the
// manager's byte count never exceeds what arrived in chunks.
#include <fuzzer/FuzzedDataProvider.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "collector/capture/manager.h"
#include "collector/capture/request.h"
#include "schema/capture_state.h"
#include "tests/collector/capture/seed_job.h"
#include "tests/collector/http/fake_store.h"
#include "tests/common/support.h"
#include "tests/fuzz/fuzz_util.h"

using namespace trainscope;

namespace {

using fuzz::check;
using fuzz::gzipOf;

constexpr int64_t kStartNs = 1'700'000'000'000'000'000;

uint32_t crcOf(const std::string& s) {
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size())));
}

// The seeded job of the capture tests (seed_job.h: "j", ranks 0, 1 on n0 and 2, 3 on n1 at
// step 10, 100 ms steps, n1 5 ms behind) in an in-memory FakeStore: a SQLite store made the
// target spend most of its time in SQLite rather than in the assembler. Built afresh for every
// input, so a crash reproduces from its input alone.
struct Fixture {
  tests::TempDir dir;
  testing::FakeStore store;
  ManualClock clock{kStartNs};
  std::unique_ptr<capture::CaptureManager> manager;

  Fixture() {
    storage::JobRow job;
    job.job = "j";
    job.worldSize = 4;
    job.ranksSeen = 4;
    job.latestStep = 10;
    store.jobRows.push_back(job);
    for (uint32_t r = 0; r < 4; ++r) {
      storage::RankRow rank;
      rank.job = "j";
      rank.rank = r;
      rank.worldSize = 4;
      rank.node = r < 2 ? "n0" : "n1";
      rank.latestStep = 10;
      store.rankRows.push_back(rank);
    }
    for (int64_t step = 0; step <= 10; ++step) {
      storage::StepSummaryRow row;
      row.step = step;
      row.ranks = 4;
      row.minNs = row.medianNs = row.maxNs = 100'000'000;
      store.summaryRows.push_back(row);
    }
    for (const char* n : {"n0", "n1"}) {
      storage::NodeRow node;
      node.node = n;
      node.offsetNs = std::string(n) == "n1" ? testing::kN1OffsetNs : 0;
      store.nodeRows.push_back(node);
    }
    capture::CaptureManagerOptions o;
    o.dir = dir.sub("captures");
    o.chunkSlackBytes = 4096;
    manager = std::make_unique<capture::CaptureManager>(
        o, store, clock, [](const std::string&, const wire::Command&) { return Status::ok(); });
  }
};

const char* const kStates[] = {"recording", "uploading", "failed", "done", "pending", "bogus"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture f;
  FuzzedDataProvider in(data, size);

  capture::CaptureRequest req;
  req.kind = in.ConsumeBool() ? "trace" : "stacks";
  req.steps = in.ConsumeIntegralInRange<uint32_t>(1, 4);
  req.history = in.ConsumeIntegralInRange<uint32_t>(0, 4);
  req.maxBytes = in.ConsumeIntegralInRange<uint64_t>(1, 1 << 16);
  auto started = f.manager->start("j", req);
  check(started.isOk());
  const std::string id = started->id;

  std::vector<std::string> files(5);  // what each rank (and one outside the job) has sent
  uint64_t sent = 0;
  while (in.remaining_bytes() > 0) {
    const uint32_t rank = in.ConsumeIntegralInRange<uint32_t>(0, 4);
    wire::Envelope item;
    switch (in.ConsumeIntegralInRange<int>(0, 4)) {
      case 0: {
        auto* st = item.mutable_command_status();
        st->set_command_id(in.ConsumeBool() ? id : in.ConsumeRandomLengthString(32));
        st->set_job("j");
        st->set_rank(rank);
        st->set_state(in.PickValueInArray(kStates));
        st->set_detail(in.ConsumeRandomLengthString(64));
        st->set_truncated(in.ConsumeBool());
        st->set_first_step(in.ConsumeIntegral<int64_t>());
        st->set_last_step(in.ConsumeIntegral<int64_t>());
        break;
      }
      case 1:
      case 2: {
        std::string bytes = in.ConsumeRandomLengthString(2048);
        if (in.ConsumeBool()) bytes = gzipOf(bytes);
        auto* c = item.mutable_file_chunk();
        c->set_command_id(in.ConsumeBool() ? id : in.ConsumeRandomLengthString(32));
        c->set_job(in.ConsumeBool() ? "j" : in.ConsumeRandomLengthString(8));
        c->set_rank(rank);
        c->set_offset(in.ConsumeBool() ? files[rank].size() : in.ConsumeIntegral<uint64_t>());
        c->set_crc32(in.ConsumeBool() ? crcOf(bytes) : in.ConsumeIntegral<uint32_t>());
        c->set_last(in.ConsumeBool());
        c->set_total_bytes(in.ConsumeBool() ? files[rank].size() + bytes.size()
                                            : in.ConsumeIntegral<uint64_t>());
        sent += bytes.size();
        files[rank] += bytes;
        c->set_data(std::move(bytes));
        break;
      }
      case 3: {
        storage::WriteBatch b;
        wire::RankGoodbye bye;
        bye.set_job("j");
        bye.set_rank(rank);
        bye.set_last_step(in.ConsumeIntegral<int64_t>());
        b.goodbyes.push_back(bye);
        f.manager->onCommitted(b);
        continue;
      }
      default:
        f.clock.advance(in.ConsumeIntegralInRange<int64_t>(0, 120'000'000'000));
        f.manager->tick(f.clock.nowNs());
        continue;
    }
    f.manager->onCommandItem(rank < 2 ? "n0" : "n1", item);
  }

  f.clock.advance(24LL * 3600 * 1'000'000'000);
  f.manager->tick(f.clock.nowNs());
  auto row = f.store.capture(id);
  check(row.isOk() && row.value().has_value());
  check(row.value()->state != wire::CaptureState::kRunning);
  check(f.manager->stats().bytes <= sent);
  return 0;
}
