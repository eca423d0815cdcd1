// Capture files through a real Agent (docs/CAPTURE.md steps 2 and 4): a fake probe reports an
// "uploading" status naming a file; the fake collector must get the status, then FileChunks
// that reassemble to the file's bytes with valid CRCs, and the file must be gone. Files
// outside the capture directory are refused, and ranks with no probe are answered failed.
// The agent trusts no file a probe names (issue 13 item 4): FIFOs, links, hard links, other
// users' files and oversized files are refused without blocking, and a file never pushes
// telemetry already acked to the probes out of a small spool.
#include "agent/agent.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>
#include <catch2/catch.hpp>
#include <zmq.hpp>

#include "schema/wire.h"
#include "tests/agent/relay_fakes.h"
#include "tests/common/support.h"

namespace wire = trainscope::wire;
using namespace trainscope::agent::testing;  // NOLINT(google-build-using-namespace): the fakes
using trainscope::agent::Agent;
using trainscope::agent::AgentOptions;
using trainscope::agent::AgentStats;

namespace {

std::string randomBytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string out(n, '\0');
  for (auto& c : out) c = static_cast<char>(gen() & 0xff);
  return out;
}

void writeFile(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

wire::Envelope uploadingStatus(const std::string& captureId, uint32_t rank, const std::string& path,
                               uint64_t bytes) {
  wire::Envelope e;
  e.set_schema_version(wire::kSchemaVersion);
  auto* cs = e.mutable_command_status();
  cs->set_command_id(captureId);
  cs->set_job("jobA");
  cs->set_rank(rank);
  cs->set_state("uploading");
  cs->set_file_path(path);
  cs->set_file_bytes(bytes);
  cs->set_first_step(10);
  cs->set_last_step(14);
  return e;
}

// What the fake collector got for one capture: its statuses in order and the file rebuilt
// from its chunks (checked for order, offsets, CRCs and the last flag as they come).
struct Received {
  std::vector<wire::CommandStatus> statuses;
  std::string data;
  int chunks = 0;
  bool complete = false;
  uint64_t totalBytes = 0;
  std::vector<std::string> problems;
  bool chunkBeforeStatus = false;
};

// Folds the collector's items into one Received per capture id as they arrive (each item is
// looked at once, so waiting on a 64 MiB file stays linear).
class Assembler {
 public:
  const Received& get(const FakeCollector& c, const std::string& captureId) {
    for (; seen_ < c.others.size(); ++seen_) add(c.others[seen_]);
    return byId_[captureId];
  }

 private:
  void add(const wire::Envelope& e) {
    if (e.has_command_status())
      byId_[e.command_status().command_id()].statuses.push_back(e.command_status());
    if (!e.has_file_chunk()) return;
    const auto& fc = e.file_chunk();
    Received& r = byId_[fc.command_id()];
    if (r.statuses.empty()) r.chunkBeforeStatus = true;
    if (r.complete) return;                   // a resend after the last chunk
    if (fc.offset() < r.data.size()) return;  // a resend of a chunk we have
    ++r.chunks;
    if (fc.offset() != r.data.size()) {
      r.problems.push_back("chunk at offset " + std::to_string(fc.offset()) + " after " +
                           std::to_string(r.data.size()) + " bytes");
    }
    if (fc.data().size() > wire::kMaxChunkBytes) {
      r.problems.push_back("chunk of " + std::to_string(fc.data().size()) + " bytes");
    }
    uint32_t crc = static_cast<uint32_t>(::crc32(
        0L, reinterpret_cast<const Bytef*>(fc.data().data()), static_cast<uInt>(fc.data().size())));
    if (crc != fc.crc32()) r.problems.push_back("bad crc at offset " + std::to_string(fc.offset()));
    if (fc.job() != "jobA" || fc.rank() != 3) r.problems.push_back("chunk names another job/rank");
    r.data += fc.data();
    if (fc.last()) {
      r.complete = true;
      r.totalBytes = fc.total_bytes();
    }
  }

  size_t seen_ = 0;
  std::map<std::string, Received> byId_;
};

bool hasFailure(const FakeCollector& c, const std::string& id, uint32_t rank,
                const std::string& detailPart) {
  for (const auto& e : c.others) {
    if (!e.has_command_status()) continue;
    const auto& cs = e.command_status();
    if (cs.command_id() == id && cs.rank() == rank && cs.state() == "failed" &&
        cs.detail().find(detailPart) != std::string::npos) {
      return true;
    }
  }
  return false;
}

// A real agent with a fake collector and a fake probe (rank 3 of jobA) that said hello.
struct Rig {
  TempDir tmp;
  zmq::context_t ctx;
  std::string collectorEp = freeTcpEndpoint(ctx);
  AgentOptions opts = testOptions(tmp, collectorEp);
  FakeCollector collector{ctx, collectorEp};
  AgentRunner agent{opts};
  FakeProbe probe{ctx, opts.endpoint};
  Rig() { probe.hello(); }
};

}  // namespace

TEST_CASE(
    "agent ships a probe's capture file as checksummed chunks after its status, then deletes it") {
  Rig rig;
  const AgentOptions& opts = rig.opts;
  FakeCollector& collector = rig.collector;
  AgentRunner& agent = rig.agent;
  FakeProbe& probe = rig.probe;

  const std::string bytes = randomBytes((3u << 20) + 12345, 7);  // 3 MiB and a bit: 4 chunks
  const std::string path = opts.captureDir + "/cap-1/rank-3.json.gz";
  writeFile(path, bytes);
  probe.sendItems(1, {uploadingStatus("cap-1", 3, path, bytes.size())});
  CHECK(probe.awaitAck() == 1);

  Assembler files;
  REQUIRE(collector.pumpUntil([&] { return files.get(collector, "cap-1").complete; }, 20000));
  const Received& r = files.get(collector, "cap-1");
  INFO("problems: " << (r.problems.empty() ? "" : r.problems.front()));
  CHECK(r.problems.empty());
  CHECK_FALSE(r.chunkBeforeStatus);
  REQUIRE(r.statuses.size() >= 1);
  CHECK(r.statuses.front().state() == "uploading");
  CHECK(r.chunks == 4);
  CHECK(r.totalBytes == bytes.size());
  CHECK(r.data == bytes);
  CHECK(waitFor([&] { return !std::filesystem::exists(path); }));
  CHECK_FALSE(std::filesystem::exists(opts.captureDir + "/cap-1"));  // its empty directory too
  CHECK(std::filesystem::exists(opts.captureDir));                   // the root stays
  CHECK(waitFor([&] { return agent.stats().filesShipped == 1; }));
  CHECK(agent.stats().fileBytesShipped == bytes.size());

  SECTION("a resent status for a file already shipped is not answered with a failure") {
    probe.sendItems(2, {uploadingStatus("cap-1", 3, path, bytes.size())});
    CHECK(probe.awaitAck() == 2);
    probe.sendSteps(3, 0, 1);
    CHECK(probe.awaitAck() == 3);
    REQUIRE(collector.pumpUntil([&] { return collector.seenStep(0); }));
    CHECK_FALSE(hasFailure(collector, "cap-1", 3, ""));
    CHECK(agent.stats().filesFailed == 0);
  }
}

TEST_CASE("heartbeats keep flowing while a 64 MiB file is shipped") {
  // The collector acknowledges the agent's batches only when a heartbeat arrives, and the
  // file's share of the spool (8 MiB) holds an eighth of it: the file can only get through if
  // the agent keeps sending heartbeats while it ships.
  TempDir tmp;
  zmq::context_t ctx;
  const std::string collectorEp = freeTcpEndpoint(ctx);
  AgentOptions opts = testOptions(tmp, collectorEp);
  opts.spoolMaxBytes = 32u << 20;
  FakeCollector collector{ctx, collectorEp};
  collector.ackOnHeartbeat = true;
  AgentRunner agent{opts};
  FakeProbe probe{ctx, opts.endpoint};
  probe.hello();
  const std::string big = randomBytes(64u << 20, 9);
  const std::string bigPath = opts.captureDir + "/cap-big/rank-3.json.gz";
  writeFile(bigPath, big);
  REQUIRE(collector.pumpUntil([&] { return collector.heartbeats > 0; }));
  probe.sendItems(2, {uploadingStatus("cap-big", 3, bigPath, big.size())});
  CHECK(probe.awaitAck() == 2);
  const int before = collector.heartbeats;
  Assembler files;
  REQUIRE(collector.pumpUntil([&] { return files.get(collector, "cap-big").complete; }, 120000));
  const Received& rb = files.get(collector, "cap-big");
  CHECK(rb.problems.empty());
  CHECK(rb.chunks == 64);
  CHECK(rb.data == big);
  // At least one heartbeat (and its acks) for each 8 MiB the share let through.
  CHECK(collector.heartbeats - before >= 7);
  CHECK(waitFor([&] { return !std::filesystem::exists(bigPath); }));
}

TEST_CASE("agent refuses files outside the capture directory and unreadable files, keeping them") {
  Rig rig;
  const AgentOptions& opts = rig.opts;
  FakeCollector& collector = rig.collector;
  AgentRunner& agent = rig.agent;
  FakeProbe& probe = rig.probe;
  const TempDir& tmp = rig.tmp;
  std::filesystem::create_directories(opts.captureDir);

  const std::string secret = tmp.sub("secret.txt");
  writeFile(secret, "not for the collector");
  // A link inside the capture directory that points outside it is refused too.
  const std::string link = opts.captureDir + "/cap-2/rank-3.json.gz";
  std::filesystem::create_directories(opts.captureDir + "/cap-2");
  std::filesystem::create_symlink(secret, link);
  const std::string dotdot = opts.captureDir + "/../secret.txt";
  const std::string missing = opts.captureDir + "/cap-4/rank-3.json.gz";

  probe.sendItems(
      1, {uploadingStatus("cap-1", 3, secret, 21), uploadingStatus("cap-2", 3, link, 21),
          uploadingStatus("cap-3", 3, dotdot, 21), uploadingStatus("cap-4", 3, missing, 21)});
  CHECK(probe.awaitAck() == 1);
  REQUIRE(collector.pumpUntil([&] {
    return hasFailure(collector, "cap-1", 3, "not under the capture directory") &&
           hasFailure(collector, "cap-2", 3, "it is a symbolic link") &&
           hasFailure(collector, "cap-3", 3, "not under the capture directory") &&
           hasFailure(collector, "cap-4", 3, "cannot read " + missing);
  }));
  CHECK(hasFailure(collector, "cap-1", 3, secret));  // the detail names the path
  for (const auto& e : collector.others) CHECK_FALSE(e.has_file_chunk());
  CHECK(std::filesystem::exists(secret));
  CHECK(std::filesystem::is_symlink(link));
  CHECK(waitFor([&] { return agent.stats().filesFailed == 4; }));
  CHECK(agent.stats().filesShipped == 0);
}

TEST_CASE("agent answers the ranks of a command it has no probe for with failed statuses") {
  Rig rig;
  FakeCollector& collector = rig.collector;
  AgentRunner& agent = rig.agent;
  FakeProbe& probe = rig.probe;
  REQUIRE(waitFor([&] { return agent.stats().ranks == 1; }));
  REQUIRE(collector.pumpUntil([&] { return collector.heartbeats > 0; }));

  wire::Envelope cmd;
  cmd.mutable_command()->set_id("cap-9");
  cmd.mutable_command()->set_job("jobA");
  for (uint32_t r : {3u, 5u, 7u}) cmd.mutable_command()->add_ranks(r);
  auto* cap = cmd.mutable_command()->mutable_capture();
  cap->set_capture_id("cap-9");
  cap->set_start_step(20);
  cap->set_steps(3);
  collector.sendToAgent(cmd);

  wire::Envelope got;
  bool gotCommand = false;
  while (!gotCommand && probe.recv(&got)) gotCommand = got.has_command();
  REQUIRE(gotCommand);  // rank 3 is here
  CHECK(got.command().capture().capture_id() == "cap-9");
  REQUIRE(collector.pumpUntil([&] {
    return hasFailure(collector, "cap-9", 5, "rank 5 is not connected to agent test-node") &&
           hasFailure(collector, "cap-9", 7, "rank 7 is not connected to agent test-node");
  }));
  CHECK_FALSE(hasFailure(collector, "cap-9", 3, ""));
  CHECK(agent.stats().commandsUnmatched == 0);
}

TEST_CASE("a file's chunks survive an agent restart, and a half-shipped file is resumed") {
  TempDir tmp;
  zmq::context_t ctx;
  std::string collectorEp = freeTcpEndpoint(ctx);
  AgentOptions opts = testOptions(tmp, collectorEp);
  const std::string bytes = randomBytes(32u << 20, 11);
  const std::string path = opts.captureDir + "/cap-5/rank-3.json.gz";
  writeFile(path, bytes);
  {
    // No collector yet; the agent stops right after acking the status, usually with part of
    // the file spooled (its journal entry resumes the rest), sometimes with all of it.
    AgentRunner agent(opts);
    FakeProbe probe(ctx, opts.endpoint);
    probe.hello();
    probe.sendItems(1, {uploadingStatus("cap-5", 3, path, bytes.size())});
    CHECK(probe.awaitAck() == 1);
  }
  const bool halfShipped = std::filesystem::exists(opts.spoolDir + "/uploads/cap-5-rank-3");
  INFO("the first agent stopped " << (halfShipped ? "mid-file" : "after the whole file"));
  FakeCollector collector(ctx, collectorEp);
  AgentRunner agent(opts);
  Assembler files;
  REQUIRE(collector.pumpUntil([&] { return files.get(collector, "cap-5").complete; }, 30000));
  const Received& r = files.get(collector, "cap-5");
  INFO("problems: " << (r.problems.empty() ? "" : r.problems.front()));
  CHECK(r.problems.empty());
  CHECK(r.data == bytes);
  CHECK_FALSE(hasFailure(collector, "cap-5", 3, ""));
  CHECK(waitFor([&] { return !std::filesystem::exists(path); }));
  CHECK(waitFor([&] { return !std::filesystem::exists(opts.spoolDir + "/uploads/cap-5-rank-3"); }));
}

namespace {

// Refuses `path` (named in capture `id`'s status) with a detail containing `why`, keeps the
// file, ships no chunk, and keeps acking the probe's next batch.
void expectRefused(Rig& rig, const std::string& id, const std::string& path, const std::string& why,
                   uint64_t seq) {
  rig.probe.sendItems(seq, {uploadingStatus(id, 3, path, 100)});
  CHECK(rig.probe.awaitAck() == seq);
  REQUIRE(rig.collector.pumpUntil([&] { return hasFailure(rig.collector, id, 3, why); }));
  for (const auto& e : rig.collector.others) {
    if (e.has_file_chunk()) CHECK(e.file_chunk().command_id() != id);
  }
  CHECK(std::filesystem::symlink_status(path).type() != std::filesystem::file_type::not_found);
  // The loop is not stuck in open(): the next batch is acked and relayed.
  rig.probe.sendSteps(seq + 1, static_cast<int64_t>(seq), static_cast<int64_t>(seq) + 1);
  CHECK(rig.probe.awaitAck() == seq + 1);
}

}  // namespace

TEST_CASE("agent refuses FIFOs, links and oversized files without blocking") {
  Rig rig;
  const std::string dir = rig.opts.captureDir + "/cap";
  std::filesystem::create_directories(dir);

  SECTION("a FIFO does not block the loop in open()") {
    const std::string fifo = dir + "/fifo.json.gz";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    expectRefused(rig, "cap-fifo", fifo, "it is a FIFO", 1);
  }
  SECTION("a symbolic link is refused even when it points inside the capture directory") {
    const std::string target = dir + "/target.json.gz";
    writeFile(target, randomBytes(100, 1));
    const std::string link = dir + "/link.json.gz";
    std::filesystem::create_symlink(target, link);
    expectRefused(rig, "cap-link", link, "it is a symbolic link", 1);
    CHECK(std::filesystem::exists(target));
  }
  SECTION("a hard link to a file elsewhere is refused") {
    const std::string secret = rig.tmp.sub("secret.txt");
    writeFile(secret, "not for the collector");
    const std::string hard = dir + "/hard.json.gz";
    std::filesystem::create_hard_link(secret, hard);
    expectRefused(rig, "cap-hard", hard, "2 hard links", 1);
    CHECK(std::filesystem::exists(secret));
  }
  SECTION("a file over --max-file-bytes is refused") {
    // The bound is the agent's option; this rig's agent keeps the 1 GiB default, so use a
    // sparse file past it.
    const std::string huge = dir + "/huge.json.gz";
    writeFile(huge, "");
    std::filesystem::resize_file(huge, (1ull << 30) + 1);
    expectRefused(rig, "cap-huge", huge, "more than --max-file-bytes (1073741824)", 1);
  }
}

TEST_CASE("agent refuses a file owned by another user and keeps it", "[root]") {
  trainscope::tests::requireRoot("cannot give a file to another user");
  Rig rig;
  const std::string dir = rig.opts.captureDir + "/cap";
  std::filesystem::create_directories(dir);
  const std::string theirs = dir + "/theirs.json.gz";
  writeFile(theirs, randomBytes(100, 2));
  REQUIRE(::chown(theirs.c_str(), 65534, 65534) == 0);
  expectRefused(rig, "cap-owner", theirs, "owned by uid 65534, not by the probe's uid 0", 1);
  CHECK(std::filesystem::exists(theirs));
}

TEST_CASE("a file larger than a small spool never evicts telemetry acked to the probes") {
  // The report: a 200 MB file with a 64 MiB spool and the collector down evicted 200 reports
  // the probes had been acked for. Here: a 4 MiB spool, a 20 MiB file, no collector.
  TempDir tmp;
  zmq::context_t ctx;
  std::string collectorEp = freeTcpEndpoint(ctx);
  AgentOptions opts = testOptions(tmp, collectorEp);
  opts.spoolMaxBytes = 4u << 20;
  opts.spoolSegmentBytes = 256u << 10;
  opts.sampleIntervalMs = 1000;
  AgentRunner agent(opts);
  FakeProbe probe(ctx, opts.endpoint);
  probe.hello();
  uint64_t seq = 0;
  for (int b = 0; b < 4; ++b) {
    probe.sendSteps(++seq, int64_t{b} * 50, int64_t{b + 1} * 50);
    REQUIRE(probe.awaitAck() == seq);
  }
  const std::string big = randomBytes(20u << 20, 5);
  const std::string path = opts.captureDir + "/cap-big/rank-3.json.gz";
  writeFile(path, big);
  probe.sendItems(++seq, {uploadingStatus("cap-big", 3, path, big.size())});
  REQUIRE(probe.awaitAck() == seq);
  // The upload takes its share (a quarter of the spool) and waits for the collector.
  REQUIRE(waitFor([&] { return agent.stats().uploadWaiting; }));
  AgentStats s = agent.stats();
  CHECK(s.spoolDropped == 0);
  CHECK(s.fileBytesHeld <= (1u << 20) + 8192);
  CHECK(s.uploadsActive == 1);
  // More telemetry while the file waits: acked, and still nothing dropped.
  for (int b = 4; b < 8; ++b) {
    probe.sendSteps(++seq, int64_t{b} * 50, int64_t{b + 1} * 50);
    REQUIRE(probe.awaitAck() == seq);
  }
  CHECK(agent.stats().spoolDropped == 0);

  FakeCollector collector(ctx, collectorEp);
  Assembler files;
  REQUIRE(collector.pumpUntil([&] { return files.get(collector, "cap-big").complete; }, 60000));
  const Received& r = files.get(collector, "cap-big");
  CHECK(r.problems.empty());
  CHECK(r.data == big);
  REQUIRE(collector.pumpUntil([&] { return agent.stats().spoolPending == 0; }, 20000));
  std::set<int64_t> steps(collector.steps.begin(), collector.steps.end());
  CHECK(steps.size() == 400);  // every report the probe was acked for
  CHECK(agent.stats().spoolDropped == 0);
  CHECK(waitFor([&] { return !std::filesystem::exists(path); }));
}

TEST_CASE(
    "a shipped file is deleted only in the directory it was opened in, never through a link") {
  // Issue 33 item 11: the deletion resolved the path again, so a capture directory swapped for
  // a link after the file was opened made a root agent unlink through that link, outside the
  // capture directory. Here the swap happens while the upload waits for the collector (a
  // small spool holds one chunk), and the file moved outside must survive its shipping.
  TempDir tmp;
  zmq::context_t ctx;
  std::string collectorEp = freeTcpEndpoint(ctx);
  AgentOptions opts = testOptions(tmp, collectorEp);
  opts.spoolMaxBytes = 4u << 20;
  opts.spoolSegmentBytes = 256u << 10;
  AgentRunner agent(opts);
  FakeProbe probe(ctx, opts.endpoint);
  probe.hello();
  const std::string bytes = randomBytes(3u << 20, 13);
  const std::string capDir = opts.captureDir + "/cap-swap";
  const std::string path = capDir + "/rank-3.json.gz";
  writeFile(path, bytes);
  probe.sendItems(1, {uploadingStatus("cap-swap", 3, path, bytes.size())});
  REQUIRE(probe.awaitAck() == 1);
  REQUIRE(waitFor([&] { return agent.stats().fileBytesHeld > 0; }));
  REQUIRE(agent.stats().uploadsActive == 1);  // waiting for acks, the file still open

  const std::string outside = tmp.sub("outside");
  std::filesystem::create_directories(outside);
  std::filesystem::rename(capDir, outside + "/cap-swap");
  std::filesystem::create_directory_symlink(outside + "/cap-swap", capDir);

  FakeCollector collector(ctx, collectorEp);
  Assembler files;
  REQUIRE(collector.pumpUntil([&] { return files.get(collector, "cap-swap").complete; }, 30000));
  CHECK(files.get(collector, "cap-swap").data == bytes);
  REQUIRE(waitFor([&] { return agent.stats().filesShipped == 1; }));
  REQUIRE(waitFor([&] { return agent.stats().uploadsActive == 0; }));
  CHECK(std::filesystem::exists(outside + "/cap-swap/rank-3.json.gz"));
  CHECK(std::filesystem::is_symlink(capDir));
}
