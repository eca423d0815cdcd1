#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <zmq.hpp>

#include "collector/ingest/ingest.h"
#include "collector/storage/store.h"
#include "common/clock.h"
#include "schema/wire.h"
#include "tests/collector/ingest/ingest_fixture.h"

using namespace trainscope;
using namespace std::chrono_literals;
using namespace trainscope::ingest::testing;  // NOLINT(google-build-using-namespace): the fixture

namespace {

// A Store whose writes wait until the test opens the gate, to show acks wait for commits.
class GatedStore final : public storage::Store {
 public:
  explicit GatedStore(storage::Store& inner) : inner_(inner) {}
  void close() {
    std::lock_guard lock(mu_);
    open_ = false;
  }
  void open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  // Writes waiting at the closed gate.
  int held() {
    std::lock_guard lock(mu_);
    return held_;
  }
  Status write(const storage::WriteBatch& batch) override {
    std::unique_lock lock(mu_);
    ++held_;
    cv_.wait(lock, [&] { return open_; });
    --held_;
    lock.unlock();
    return inner_.write(batch);
  }
  Result<std::vector<storage::JobRow>> jobs() override { return inner_.jobs(); }
  Result<bool> jobExists(const std::string& j) override { return inner_.jobExists(j); }
  Result<std::vector<storage::RankRow>> ranks(const std::string& j) override {
    return inner_.ranks(j);
  }
  Result<std::vector<storage::StepRow>> steps(const storage::StepQuery& q) override {
    return inner_.steps(q);
  }
  Result<std::vector<storage::StepSummaryRow>> summary(const storage::SummaryQuery& q) override {
    return inner_.summary(q);
  }
  Result<std::vector<storage::NodeRow>> nodes() override { return inner_.nodes(); }
  Result<uint64_t> applyRetention(int64_t now) override { return inner_.applyRetention(now); }
  storage::StoreStats stats() override { return inner_.stats(); }

 private:
  storage::Store& inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  int held_ = 0;
};

}  // namespace

TEST_CASE("ingest: port 0 binds a free port and endpoint() reports it") {
  Fixture f;
  auto ep = f.server->endpoint();
  CHECK(ep.rfind("tcp://127.0.0.1:", 0) == 0);
  CHECK(ep != "tcp://127.0.0.1:0");
  CHECK(std::stoi(ep.substr(ep.rfind(':') + 1)) > 0);
}

TEST_CASE("ingest: a batch is acked only after its rows are committed and queryable") {
  TempDir dir;
  storage::SqliteOptions so;
  so.path = dir.path() + "/gated.db";
  auto inner = storage::openSqliteStore(so);
  REQUIRE(inner.isOk());
  GatedStore gated(**inner);
  Fixture f(&gated);
  Client c(f.ctx, f.server->endpoint());

  gated.close();
  c.send(batchFrame(1, {report("j", 0, 1), report("j", 1, 1), report("j", 0, 2)}));
  // The commit is held: no ack may arrive.
  CHECK_FALSE(c.recvKind(wire::Envelope::kAck, 300ms).has_value());
  storage::StepQuery q;
  q.job = "j";
  CHECK((*inner)->steps(q)->empty());
  gated.open();
  auto ack = c.recvKind(wire::Envelope::kAck);
  REQUIRE(ack.has_value());
  CHECK(ack->ack().seq() == 1);
  // The moment the ack is here, the rows are.
  CHECK((*inner)->steps(q)->size() == 3);

  // A resend of the same batch is acked again and stores nothing new.
  c.send(batchFrame(1, {report("j", 0, 1), report("j", 1, 1), report("j", 0, 2)}));
  ack = c.recvKind(wire::Envelope::kAck);
  REQUIRE(ack.has_value());
  CHECK(ack->ack().seq() == 1);
  CHECK((*inner)->stats().duplicateSteps == 3);
  CHECK((*inner)->steps(q)->size() == 3);
  auto st = f.server->stats();
  CHECK(st.batches == 2);
  CHECK(st.acksSent == 2);
  CHECK(st.stepsStored == 6);
}

TEST_CASE("ingest: with a minimum commit gap, batches arriving within it share one commit") {
  Fixture f(nullptr, 20ms, {}, 1000ms);
  Client c(f.ctx, f.server->endpoint());
  // The first commit goes at once (no commit before it).
  c.send(batchFrame(1, {report("g", 0, 1)}));
  REQUIRE(c.recvKind(wire::Envelope::kAck).has_value());
  const auto firstAck = std::chrono::steady_clock::now();
  CHECK(f.server->stats().commits == 1);
  // The next ones wait out the gap, and go as one commit, in order.
  for (uint64_t seq = 2; seq <= 9; ++seq) {
    c.send(batchFrame(seq, {report("g", 0, static_cast<int64_t>(seq))}));
  }
  for (uint64_t seq = 2; seq <= 9; ++seq) {
    auto ack = c.recvKind(wire::Envelope::kAck);
    REQUIRE(ack.has_value());
    CHECK(ack->ack().seq() == seq);
  }
  // A lower bound only: a loaded machine makes it longer, never shorter.
  CHECK(std::chrono::steady_clock::now() - firstAck >= 900ms);
  CHECK(f.server->stats().commits == 2);
  CHECK(f.rows("g") == 9);
}

TEST_CASE("ingest: invalid items are rejected by reason and the good items of the batch kept") {
  Fixture f;
  Client c(f.ctx, f.server->endpoint());

  wire::Envelope env;
  auto* b = env.mutable_batch();
  b->set_seq(7);
  // Registration tells ingest the world size, so a rank past it is caught.
  auto* hello = b->add_items()->mutable_rank_hello()->mutable_rank();
  hello->set_job("v");
  hello->set_rank(0);
  hello->set_world_size(2);
  *b->add_items()->mutable_step() = report("v", 0, 1);  // good
  *b->add_items()->mutable_step() = report("v", 1, 1);  // good
  auto bad = report("v", 5, 1);
  *b->add_items()->mutable_step() = bad;  // invalid_rank
  bad = report("v", 0, -3);
  *b->add_items()->mutable_step() = bad;  // invalid_step
  bad = report("", 0, 2);
  *b->add_items()->mutable_step() = bad;  // missing_job
  bad = report("v", 0, 3);
  bad.set_end_ns(bad.start_ns() - 1);
  *b->add_items()->mutable_step() = bad;  // invalid_time
  bad = report("v", 0, 4);
  bad.set_duration_ns(-5);
  *b->add_items()->mutable_step() = bad;  // invalid_duration
  bad = report("v", 0, 5);
  bad.set_duration_ns(2LL * 24 * 3600 * 1'000'000'000);
  bad.set_end_ns(bad.start_ns() + bad.duration_ns());
  *b->add_items()->mutable_step() = bad;  // invalid_duration (not sane)
  bad = report("v", 0, 6);
  bad.set_compute_ns(bad.duration_ns() + 5'000'000);   // beyond any clock slack
  *b->add_items()->mutable_step() = bad;               // invalid_breakdown
  b->add_items()->mutable_heartbeat()->set_node("x");  // invalid_item_type
  b->add_items()->mutable_batch()->set_seq(1);         // invalid_item_type (nested batch)
  auto* host = b->add_items()->mutable_host();
  host->set_node("n");
  host->set_time_ns(0);  // invalid_host
  c.sendEnv(env);

  auto err = c.recvKind(wire::Envelope::kError);
  REQUIRE(err.has_value());
  CHECK(err->error().detail().find("10 of 13 items rejected") != std::string::npos);
  auto ack = c.recvKind(wire::Envelope::kAck);
  REQUIRE(ack.has_value());
  CHECK(ack->ack().seq() == 7);

  CHECK(f.rows("v") == 2);
  CHECK(f.rejects("invalid_rank") == 1);
  CHECK(f.rejects("invalid_step") == 1);
  CHECK(f.rejects("missing_job") == 1);
  CHECK(f.rejects("invalid_time") == 1);
  CHECK(f.rejects("invalid_duration") == 2);
  CHECK(f.rejects("invalid_breakdown") == 1);
  CHECK(f.rejects("invalid_item_type") == 2);
  CHECK(f.rejects("invalid_host") == 1);
  auto ranks = f.store->ranks("v");
  REQUIRE(ranks.isOk());
  CHECK(ranks->size() == 2);  // rank 0 registered, rank 1 seen through its step
  CHECK(f.server->stats().itemsStored == 3);
}

TEST_CASE("ingest: bad frames are rejected and counted; ingest keeps serving, rows intact") {
  Fixture f;
  Client c(f.ctx, f.server->endpoint());
  c.send(batchFrame(1, {report("g", 0, 1), report("g", 0, 2)}));
  REQUIRE(c.recvKind(wire::Envelope::kAck).has_value());

  auto expectError = [&](const std::string& reason) {
    auto err = c.recvKind(wire::Envelope::kError);
    REQUIRE(err.has_value());
    CHECK(err->error().reason() == reason);
    CHECK(err->error().expected_version() == wire::kSchemaVersion);
  };

  // Random bytes.
  std::mt19937 rng(42);
  std::string noise(300, '\0');
  for (auto& ch : noise) ch = static_cast<char>(rng());
  noise[0] = '\xff';  // an invalid tag, so it cannot parse by chance
  c.send(noise);
  expectError("malformed");

  // A truncated protobuf: a batch cut in the middle of an item.
  std::string whole = batchFrame(2, {report("g", 0, 3), report("g", 0, 4)});
  c.send(whole.substr(0, whole.size() / 2));
  expectError("malformed");

  // A schema version this collector does not speak.
  wire::Envelope future;
  future.mutable_heartbeat()->set_node("n");
  future.set_schema_version(99);
  std::string futureFrame;
  future.SerializeToString(&futureFrame);
  c.send(futureFrame);
  expectError("version");

  // An envelope with no body.
  wire::Envelope nothing;
  c.send(wire::encode(nothing));
  expectError("empty");

  // A frame over the wire limit but under the socket's: decoded, rejected, answered.
  c.send(std::string(wire::kMaxFrameBytes + 1000, 'x'));
  expectError("oversized");

  // Two frames in one message.
  c.sock.send(zmq::str_buffer("a"), zmq::send_flags::sndmore);
  c.sock.send(zmq::str_buffer("b"), zmq::send_flags::none);
  expectError("multipart");

  // A message the collector never accepts from an agent.
  wire::Envelope ack;
  ack.mutable_ack()->set_seq(1);
  c.sendEnv(ack);
  expectError("unexpected_message");

  CHECK(f.rejects("malformed") == 2);
  CHECK(f.rejects("version") == 1);
  CHECK(f.rejects("empty") == 1);
  CHECK(f.rejects("oversized") == 1);
  CHECK(f.rejects("multipart") == 1);
  CHECK(f.rejects("unexpected_message") == 1);

  // Far over the socket limit: libzmq drops the connection before the frame is in memory.
  {
    Client big(f.ctx, f.server->endpoint());
    big.send(batchFrame(1, {report("g", 0, 9)}));
    REQUIRE(big.recvKind(wire::Envelope::kAck).has_value());
    big.send(std::string(wire::kMaxFrameBytes * 2, 'x'));
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (f.server->stats().disconnects == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    CHECK(f.server->stats().disconnects >= 1);
  }

  // Still serving, and what was stored before is intact.
  c.send(batchFrame(3, {report("g", 1, 1)}));
  auto okAck = c.recvKind(wire::Envelope::kAck);
  REQUIRE(okAck.has_value());
  CHECK(okAck->ack().seq() == 3);
  CHECK(f.rows("g") == 4);
}

TEST_CASE("ingest: heartbeats are answered at once and hello/heartbeat update the node") {
  Fixture f;
  Client c(f.ctx, f.server->endpoint());
  wire::Envelope hello;
  auto* h = hello.mutable_agent_hello();
  h->set_node("node-a");
  h->set_host("host-a");
  h->set_agent_version("0.1.0");
  h->set_pid(1234);
  c.sendEnv(hello);

  wire::Envelope beat;
  auto* hb = beat.mutable_heartbeat();
  hb->set_node("node-a");
  hb->set_t1_ns(12345);
  hb->set_offset_ns(-77);
  hb->set_rtt_ns(900);
  hb->set_spool_bytes(4096);
  hb->set_spool_dropped(2);
  hb->set_ranks(8);
  const int64_t before = wallNowNs();
  c.sendEnv(beat);
  auto reply = c.recvKind(wire::Envelope::kHeartbeatReply);
  const int64_t after = wallNowNs();
  REQUIRE(reply.has_value());
  CHECK(reply->heartbeat_reply().t1_ns() == 12345);
  CHECK(reply->heartbeat_reply().t2_ns() >= before);
  CHECK(reply->heartbeat_reply().t3_ns() >= reply->heartbeat_reply().t2_ns());
  CHECK(reply->heartbeat_reply().t3_ns() <= after);

  std::optional<storage::NodeRow> node;
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto nodes = f.store->nodes();
    REQUIRE(nodes.isOk());
    if (!nodes->empty() && (*nodes)[0].spoolBytes == 4096) {
      node = (*nodes)[0];
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  REQUIRE(node.has_value());
  CHECK(node->node == "node-a");
  CHECK(node->host == "host-a");
  CHECK(node->pid == 1234);
  CHECK(node->offsetNs == -77);
  CHECK(node->rttNs == 900);
  CHECK(node->spoolDropped == 2);
  CHECK(node->ranks == 8);
  auto st = f.server->stats();
  CHECK(st.heartbeats == 1);
  CHECK(st.hellos == 1);

  // A host sample without a node name is credited to the agent that sent it.
  wire::Envelope env;
  env.mutable_batch()->set_seq(1);
  auto* sample = env.mutable_batch()->add_items()->mutable_host();
  sample->set_time_ns(wallNowNs());
  sample->set_cpu_percent(12.5);
  c.sendEnv(env);
  REQUIRE(c.recvKind(wire::Envelope::kAck).has_value());
  auto nodes = f.store->nodes();
  REQUIRE(nodes.isOk());
  REQUIRE(nodes->size() == 1);
  REQUIRE((*nodes)[0].latestHost.has_value());
  CHECK((*nodes)[0].latestHost->cpu_percent() == 12.5);
}

TEST_CASE("ingest: stop commits what is pending and acks it before closing") {
  TempDir dir;
  storage::SqliteOptions so;
  so.path = dir.path() + "/stop.db";
  auto inner = storage::openSqliteStore(so);
  REQUIRE(inner.isOk());
  GatedStore gated(**inner);
  // A long interval: batch 2 would wait 60 s for its commit if stop did not flush it, well
  // past the acks' 20 s wait, which only a badly loaded machine comes near.
  Fixture f(&gated, 60000ms);
  Client c(f.ctx, f.server->endpoint());
  gated.close();
  auto eventually = [](const std::function<bool()>& done) {
    for (int i = 0; i < 2000 && !done(); ++i) std::this_thread::sleep_for(10ms);
    return done();
  };
  c.send(batchFrame(1, {report("s", 0, 1)}));
  REQUIRE(eventually([&] { return gated.held() == 1; }));  // batch 1 is held in the writer
  c.send(batchFrame(2, {report("s", 0, 2)}));
  REQUIRE(eventually([&] { return f.server->stats().batches == 2; }));  // batch 2 behind it
  std::thread stopper([&] { f.server->stop(); });
  // The gate opens once stop() has begun; the flush of batch 2 has to come from stop(), as
  // the interval is far away.
  REQUIRE(eventually([&] { return f.server->stopping(); }));
  gated.open();
  auto a1 = c.recvKind(wire::Envelope::kAck, 20000ms);
  auto a2 = c.recvKind(wire::Envelope::kAck, 20000ms);
  stopper.join();
  REQUIRE(a1.has_value());
  REQUIRE(a2.has_value());
  CHECK(a1->ack().seq() == 1);
  CHECK(a2->ack().seq() == 2);
  storage::StepQuery q;
  q.job = "s";
  CHECK((*inner)->steps(q)->size() == 2);
}

TEST_CASE(
    "ingest: a hello's progress reaches onRankProgress with its node and clock offset; bad "
    "progress is counted, the rank kept") {
  std::mutex mu;
  std::vector<ingest::RankProgressUpdate> got;
  Fixture f(nullptr, 20ms, [&](const ingest::RankProgressUpdate& u) {
    std::lock_guard lock(mu);
    got.push_back(u);
  });
  Client c(f.ctx, f.server->endpoint());
  wire::Envelope hello;
  hello.mutable_agent_hello()->set_node("node-p");
  c.sendEnv(hello);
  wire::Envelope beat;
  beat.mutable_heartbeat()->set_node("node-p");
  beat.mutable_heartbeat()->set_offset_ns(-4242);
  c.sendEnv(beat);
  REQUIRE(c.recvKind(wire::Envelope::kHeartbeatReply).has_value());

  auto helloBatch = [](uint64_t seq, uint32_t rank, int64_t lastStep) {
    wire::Envelope env;
    env.mutable_batch()->set_seq(seq);
    auto* rh = env.mutable_batch()->add_items()->mutable_rank_hello();
    auto* info = rh->mutable_rank();
    info->set_job("prog");
    info->set_rank(rank);
    info->set_world_size(4);
    info->set_host("h");
    info->set_pid(100 + rank);
    rh->set_sent_ns(7'000'000'000);
    auto* p = rh->mutable_progress();
    p->set_last_step(lastStep);
    p->set_open_step(lastStep + 1);
    p->set_last_record_ns(6'900'000'000);
    p->set_collective_since_ns(6'800'000'000);
    p->set_collectives_begun(31);
    return env;
  };
  const int64_t before = wallNowNs();
  c.sendEnv(helloBatch(1, 1, 9));
  REQUIRE(c.recvKind(wire::Envelope::kAck).has_value());
  {
    std::lock_guard lock(mu);
    REQUIRE(got.size() == 1);
    const auto& u = got[0];
    CHECK(u.job == "prog");
    CHECK(u.rank == 1);
    CHECK(u.node == "node-p");  // filled from the agent's hello
    CHECK(u.clockOffsetNs == -4242);
    CHECK(u.sentNs == 7'000'000'000);
    CHECK(u.receivedNs >= before);
    CHECK(u.progress.last_step() == 9);
    CHECK(u.progress.open_step() == 10);
    CHECK(u.progress.collective_since_ns() == 6'800'000'000);
    CHECK(u.progress.collectives_begun() == 31);
  }
  // A progress with a step below -1: counted and dropped; the registration is still stored.
  c.sendEnv(helloBatch(2, 2, -7));
  REQUIRE(c.recvKind(wire::Envelope::kAck).has_value());
  CHECK(f.rejects("invalid_progress") == 1);
  {
    std::lock_guard lock(mu);
    CHECK(got.size() == 1);
  }
  auto ranks = f.store->ranks("prog");
  REQUIRE(ranks.isOk());
  CHECK(ranks->size() == 2);
}

TEST_CASE(
    "ingest: a hello's declared groups are stored, the latest set per rank; bad groups are "
    "counted and dropped, the rank kept") {
  Fixture f;
  Client c(f.ctx, f.server->endpoint());
  auto helloBatch = [](uint64_t seq, uint32_t rank, int64_t declaredNs,
                       const std::vector<uint32_t>& tp) {
    wire::Envelope env;
    env.mutable_batch()->set_seq(seq);
    auto* rh = env.mutable_batch()->add_items()->mutable_rank_hello();
    auto* info = rh->mutable_rank();
    info->set_job("layout");
    info->set_rank(rank);
    info->set_world_size(4);
    info->set_node("n");
    rh->set_groups_declared_ns(declaredNs);
    auto* g = rh->add_groups();
    g->set_name("tp");
    g->set_kind(wire::GROUP_TP);
    for (uint32_t r : tp) g->add_ranks(r);
    return env;
  };
  c.sendEnv(helloBatch(1, 1, 2000, {0, 1}));
  REQUIRE(c.recvKind(wire::Envelope::kAck).has_value());
  auto groups = f.store->groups("layout");
  REQUIRE(groups.isOk());
  REQUIRE(groups->size() == 1);
  CHECK((*groups)[0].rank == 1);
  CHECK((*groups)[0].declaredNs == 2000);
  REQUIRE((*groups)[0].groups.size() == 1);
  CHECK((*groups)[0].groups[0].kind() == wire::GROUP_TP);
  CHECK((*groups)[0].groups[0].ranks(1) == 1);

  // A replayed older set changes nothing; a newer one replaces it.
  c.sendEnv(helloBatch(2, 1, 1000, {1, 0}));
  REQUIRE(c.recvKind(wire::Envelope::kAck).has_value());
  CHECK(f.store->groups("layout")->at(0).groups[0].ranks(0) == 0);
  c.sendEnv(helloBatch(3, 1, 3000, {1, 0}));
  REQUIRE(c.recvKind(wire::Envelope::kAck).has_value());
  CHECK(f.store->groups("layout")->at(0).groups[0].ranks(0) == 1);

  // Groups that do not hold the declaring rank, or name a rank outside the world: counted
  // and dropped; the registration is stored.
  c.sendEnv(helloBatch(4, 2, 4000, {0, 1}));
  REQUIRE(c.recvKind(wire::Envelope::kAck).has_value());
  c.sendEnv(helloBatch(5, 3, 4000, {3, 4}));
  REQUIRE(c.recvKind(wire::Envelope::kAck).has_value());
  CHECK(f.rejects("invalid_groups") == 2);
  CHECK(f.store->groups("layout")->size() == 1);
  CHECK(f.store->ranks("layout")->size() == 3);

  // A step whose p2p names a peer outside the world, or states negative FLOPs, is rejected;
  // a good one with p2p and a bubble is stored.
  wire::StepReport good = report("layout", 1, 0);
  good.set_p2p_ns(100'000);
  good.set_bubble_ns(80'000);
  auto* p = good.add_p2p();
  p->set_peer(3);
  p->set_op(wire::RECV);
  p->set_total_ns(100'000);
  wire::StepReport badPeer = report("layout", 1, 1);
  *badPeer.add_p2p() = *p;
  badPeer.mutable_p2p(0)->set_peer(4);
  wire::StepReport badFlops = report("layout", 1, 2);
  badFlops.set_model_flops(-1);
  c.send(batchFrame(6, {good, badPeer, badFlops}));
  REQUIRE(c.recvKind(wire::Envelope::kAck).has_value());
  CHECK(f.rejects("invalid_p2p") == 1);
  CHECK(f.rejects("invalid_flops") == 1);
  CHECK(f.rows("layout") == 1);
}

TEST_CASE(
    "ingest: a batch frame with one undecodable item is rejected whole; stored details are "
    "the reports as sent") {
  Fixture f;
  Client c(f.ctx, f.server->endpoint());
  // Envelope{version, Batch{seq 5, [a good step item, a step item whose report is garbage]}}:
  // the shape agents send, so it takes ingest's fast path.
  wire::Envelope good;
  *good.mutable_step() = report("m", 0, 1);
  const std::string badItem = std::string("\x62\x03", 2) + "\xff\xff\xff";  // field 12, 3 bytes
  const std::string frame = wire::encodeBatchFrame(5, {good.SerializeAsString(), badItem});
  REQUIRE_FALSE(wire::decode(frame.data(), frame.size()).isOk());
  c.send(frame);
  auto err = c.recvKind(wire::Envelope::kError);
  REQUIRE(err.has_value());
  CHECK(err->error().reason() == "malformed");
  CHECK(f.rejects("malformed") == 1);

  // The next frame is stored, and its detail is the report as sent.
  wire::StepReport sent = report("m", 0, 2);
  auto* coll = sent.add_collectives();
  coll->set_op(wire::ALL_GATHER);
  coll->set_group("tp");
  coll->set_bytes(4096);
  coll->set_count(3);
  c.send(batchFrame(6, {sent}));
  auto ack = c.recvKind(wire::Envelope::kAck);
  REQUIRE(ack.has_value());
  CHECK(ack->ack().seq() == 6);
  CHECK(f.rows("m") == 1);  // nothing of the malformed frame
  storage::StepQuery q;
  q.job = "m";
  q.detail = true;
  auto rows = f.store->steps(q);
  REQUIRE(rows.isOk());
  REQUIRE(rows->size() == 1);
  const auto& row = rows->front();
  CHECK(row.step == 2);
  REQUIRE(row.ops.size() == 1);
  CHECK(row.ops[0].name() == "aten::mm");
  CHECK(row.ops[0].total_ns() == 1000);
  REQUIRE(row.collectives.size() == 1);
  CHECK(row.collectives[0].group() == "tp");
  CHECK(row.collectives[0].bytes() == 4096);
  CHECK(row.collectives[0].count() == 3);
}

TEST_CASE("ingest: a step item of a foreign schema version is rejected by reason, its batch kept") {
  Fixture f;
  Client c(f.ctx, f.server->endpoint());
  wire::Envelope env;
  auto* b = env.mutable_batch();
  b->set_seq(9);
  *b->add_items()->mutable_step() = report("fv", 0, 1);
  auto* future = b->add_items();
  future->set_schema_version(99);
  *future->mutable_step() = report("fv", 0, 2);
  c.sendEnv(env);
  auto err = c.recvKind(wire::Envelope::kError);
  REQUIRE(err.has_value());
  CHECK(err->error().reason() == "version");
  CHECK(err->error().detail().find("1 of 2 items rejected") != std::string::npos);
  auto ack = c.recvKind(wire::Envelope::kAck);
  REQUIRE(ack.has_value());
  CHECK(ack->ack().seq() == 9);
  CHECK(f.rows("fv") == 1);
  CHECK(f.rejects("version") == 1);
}

TEST_CASE(
    "ingest: a late or foreign hello cannot change a job's world size, before or after a "
    "restart; its ranks keep being stored") {
  Fixture f;
  auto helloItem = [](wire::Batch* b, uint32_t rank, uint32_t worldSize) {
    auto* info = b->add_items()->mutable_rank_hello()->mutable_rank();
    info->set_job("ws");
    info->set_rank(rank);
    info->set_world_size(worldSize);
  };
  auto stepsOf = [](uint64_t seq, int64_t step) {
    wire::Envelope env;
    env.mutable_batch()->set_seq(seq);
    for (uint32_t r = 0; r < 4; ++r)
      *env.mutable_batch()->add_items()->mutable_step() = report("ws", r, step);
    return env;
  };
  Client agent(f.ctx, f.server->endpoint());
  wire::Envelope first = stepsOf(1, 1);
  for (uint32_t r = 0; r < 4; ++r) helloItem(first.mutable_batch(), r, 4);
  agent.sendEnv(first);
  REQUIRE(agent.recvKind(wire::Envelope::kAck));

  // Another sender claims the job is one rank wide: refused, counted, and said so.
  auto forge = [&](ingest::IngestServer& server) {
    Client forger(f.ctx, server.endpoint());
    wire::Envelope env;
    env.mutable_batch()->set_seq(1);
    helloItem(env.mutable_batch(), 0, 1);
    forger.sendEnv(env);
    wire::ErrorReply err;  // none: empty
    for (;;) {
      auto reply = forger.recv();
      REQUIRE(reply);
      if (reply->body_case() == wire::Envelope::kError) err = reply->error();
      if (reply->body_case() == wire::Envelope::kAck) break;
    }
    CHECK(err.reason() == "world_size_conflict");
    CHECK(err.detail().find("has world_size 4; the hello of rank 0 claims 1") != std::string::npos);
  };
  forge(*f.server);
  agent.sendEnv(stepsOf(2, 2));
  REQUIRE(agent.recvKind(wire::Envelope::kAck));
  CHECK(f.rows("ws") == 8);
  CHECK(f.rejects("world_size_conflict") == 1);
  CHECK(f.rejects("invalid_rank") == 0);

  // After a restart the stored world size is the first claim.
  f.server->stop();
  ingest::IngestOptions io;
  io.endpoint = "tcp://127.0.0.1:0";
  ingest::IngestServer again(io, *f.store);
  REQUIRE(again.start().isOk());
  forge(again);
  Client agent2(f.ctx, again.endpoint());
  agent2.sendEnv(stepsOf(1, 3));
  REQUIRE(agent2.recvKind(wire::Envelope::kAck));
  again.stop();
  CHECK(f.rows("ws") == 12);
  auto jobs = f.store->jobs();
  REQUIRE(jobs.isOk());
  REQUIRE(jobs->size() == 1);
  CHECK(jobs->front().worldSize == 4);
}

TEST_CASE("ingest: a job silent past the idle timeout leaves memory, and its world size holds") {
  // Issue 33 item 8: jobs and world sizes grew without bound. A forgotten job's world size is
  // read again from the store when it speaks again, so a forged hello still meets it.
  Fixture f;
  f.server->stop();
  ingest::IngestOptions io;
  io.endpoint = "tcp://127.0.0.1:0";
  io.jobIdleTimeout = std::chrono::milliseconds(50);
  ingest::IngestServer server(io, *f.store);
  REQUIRE(server.start().isOk());
  Client agent(f.ctx, server.endpoint());
  wire::Envelope env;
  env.mutable_batch()->set_seq(1);
  auto* info = env.mutable_batch()->add_items()->mutable_rank_hello()->mutable_rank();
  info->set_job("idle");
  info->set_rank(0);
  info->set_world_size(4);
  agent.sendEnv(env);
  REQUIRE(agent.recvKind(wire::Envelope::kAck));
  CHECK(server.stats().jobsHeld == 1);
  for (int i = 0; i < 100 && server.stats().jobsHeld != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(server.stats().jobsHeld == 0);

  wire::Envelope forged;
  forged.mutable_batch()->set_seq(2);
  auto* claim = forged.mutable_batch()->add_items()->mutable_rank_hello()->mutable_rank();
  claim->set_job("idle");
  claim->set_rank(0);
  claim->set_world_size(1);
  agent.sendEnv(forged);
  REQUIRE(agent.recvKind(wire::Envelope::kAck));
  server.stop();
  CHECK(server.stats().rejects["world_size_conflict"] == 1);
  CHECK(server.stats().jobsHeld == 1);
}
