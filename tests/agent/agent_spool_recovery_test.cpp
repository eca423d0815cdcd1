// The spool-recovery reports of issue 13, through a real Agent with a fake probe and a fake
// collector (tests/agent/relay_fakes.h): a stray segment file in the spool directory must not
// make the agent ack new reports and never send them, and flipped bytes in a segment must
// cost only the records they hit.
#include "agent/agent.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <zmq.hpp>

#include "agent/spool_segment.h"
#include "schema/wire.h"
#include "tests/agent/relay_fakes.h"
#include "tests/common/support.h"

namespace wire = trainscope::wire;
using namespace trainscope::agent::testing;  // NOLINT(google-build-using-namespace): the fakes
using trainscope::agent::AgentOptions;
using trainscope::agent::kHoleBit;
using trainscope::agent::kRecordHeaderBytes;
using trainscope::agent::scanSegment;

namespace {

std::string readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void writeBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace

TEST_CASE("a stray 18446744073709551615.seg does not make the agent ack reports it never sends") {
  TempDir tmp;
  zmq::context_t ctx;
  std::string collectorEp = freeTcpEndpoint(ctx);
  AgentOptions opts = testOptions(tmp, collectorEp);
  tmp.write("spool/18446744073709551615.seg", "not a segment");
  FakeCollector collector(ctx, collectorEp);
  AgentRunner agent(opts);
  FakeProbe probe(ctx, opts.endpoint);
  probe.hello();
  probe.sendSteps(1, 0, 50);
  CHECK(probe.awaitAck() == 1);
  // A new job's reports reach the collector (the report: 0 rows).
  REQUIRE(collector.pumpUntil(
      [&] { return collector.seenStep(49) && agent.stats().spoolPending == 0; }));
  std::set<int64_t> steps(collector.steps.begin(), collector.steps.end());
  CHECK(steps.size() == 50);
  CHECK(std::filesystem::exists(opts.spoolDir + "/quarantine/18446744073709551615.seg"));
}

TEST_CASE("four flipped bytes in a spool segment cost four reports, not the rest of the segment") {
  TempDir tmp;
  zmq::context_t ctx;
  std::string collectorEp = freeTcpEndpoint(ctx);
  AgentOptions opts = testOptions(tmp, collectorEp);
  const int kSteps = 1000;
  {
    // Spooled and acked to the probe while no collector listens.
    AgentRunner agent(opts);
    FakeProbe probe(ctx, opts.endpoint);
    probe.hello();
    for (int b = 0; b < kSteps / 50; ++b) {
      probe.sendSteps(static_cast<uint64_t>(b) + 1, int64_t{b} * 50, int64_t{b + 1} * 50);
      REQUIRE(probe.awaitAck() == static_cast<uint64_t>(b + 1));
    }
  }
  // Damage four step records spread over the segment: a payload byte, a length byte, a check
  // byte and a length's high byte.
  std::string segPath;
  for (const auto& e : std::filesystem::directory_iterator(opts.spoolDir)) {
    if (e.path().extension() == ".seg") segPath = e.path().string();
  }
  REQUIRE(!segPath.empty());
  std::string bytes = readBytes(segPath);
  auto scan = scanSegment(bytes, 0);
  REQUIRE(scan.lostRecords == 0);
  std::vector<std::pair<uint64_t, int64_t>> stepSlots;  // offset, step
  for (size_t i = 0; i < scan.slots.size(); ++i) {
    const uint64_t off = scan.slots[i] & ~kHoleBit;
    const uint64_t end = i + 1 < scan.slots.size() ? scan.slots[i + 1] : scan.dataEnd;
    auto env =
        wire::decode(bytes.data() + off + kRecordHeaderBytes, end - off - kRecordHeaderBytes);
    REQUIRE(env.isOk());
    if (env->has_step()) stepSlots.emplace_back(off, env->step().step());
  }
  REQUIRE(stepSlots.size() == static_cast<size_t>(kSteps));
  const size_t picks[4] = {100, 300, 500, 700};
  const uint64_t within[4] = {kRecordHeaderBytes + 20, 1, 5, 3};
  std::set<int64_t> damaged;
  for (int k = 0; k < 4; ++k) {
    bytes[stepSlots[picks[k]].first + within[k]] ^= 0x5a;
    damaged.insert(stepSlots[picks[k]].second);
  }
  writeBytes(segPath, bytes);

  FakeCollector collector(ctx, collectorEp);
  AgentRunner agent(opts);
  REQUIRE(collector.pumpUntil([&] { return agent.stats().spoolPending == 0; }, 20000));
  std::set<int64_t> steps(collector.steps.begin(), collector.steps.end());
  // The report: 4 flipped bytes cost 779 reports. Now exactly the 4 damaged ones are missing.
  CHECK(steps.size() == static_cast<size_t>(kSteps - 4));
  for (int64_t s : damaged) CHECK(steps.count(s) == 0);
}
