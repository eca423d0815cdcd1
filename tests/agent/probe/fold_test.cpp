#include "agent/probe/fold.h"

#include <map>
#include <string>
#include <tuple>

#include <catch2/catch.hpp>

#include "agent/probe/cpu_wait.h"
#include "agent/probe/intern.h"
#include "agent/probe/trainscope_probe.h"

using namespace trainscope::probe;

namespace {

Record step(RecordType t, int64_t s, int64_t at) {
  Record r{};
  r.type = t;
  r.step = s;
  r.t0 = at;
  return r;
}
Record op(const char* name, int64_t t0, int64_t t1) {
  Record r{};
  r.type = RecordType::kOp;
  r.name = internName(name);
  r.t0 = t0;
  r.t1 = t1;
  return r;
}
Record range(uint8_t kind, int64_t t0, int64_t t1) {
  Record r{};
  r.type = RecordType::kRange;
  r.kind = kind;
  r.name = internName("range");
  r.t0 = t0;
  r.t1 = t1;
  return r;
}
Record coll(uint8_t opKind, const char* group, uint64_t bytes, int64_t t0, int64_t t1) {
  Record r{};
  r.type = RecordType::kCollective;
  r.kind = opKind;
  r.group = internName(group);
  r.bytes = bytes;
  r.t0 = t0;
  r.t1 = t1;
  return r;
}
// What ts_link_transfer records: the peer rides in `name`.
Record link(uint32_t peer, const char* group, uint64_t bytes, int64_t posted, int64_t delivered) {
  Record r{};
  r.type = RecordType::kLink;
  r.name = peer;
  r.group = internName(group);
  r.bytes = bytes;
  r.t0 = posted;
  r.t1 = delivered;
  return r;
}
// What ts_p2p records: the op in `kind`, the peer in `name`.
Record p2p(uint8_t opKind, uint32_t peer, const char* group, uint64_t bytes, int64_t posted,
           int64_t completed) {
  Record r{};
  r.type = RecordType::kP2p;
  r.kind = opKind;
  r.name = peer;
  r.group = internName(group);
  r.bytes = bytes;
  r.t0 = posted;
  r.t1 = completed;
  return r;
}
Record push(uint8_t kind, int64_t at) {
  Record r{};
  r.type = RecordType::kRangePush;
  r.kind = kind;
  r.name = internName("pushed");
  r.t0 = at;
  return r;
}
Record pop(int64_t at) {
  Record r{};
  r.type = RecordType::kRangePop;
  r.t0 = at;
  return r;
}

FoldOptions opts(uint32_t topOps = 32) {
  FoldOptions o;
  o.job = "job-x";
  o.rank = 3;
  o.topOps = topOps;
  return o;
}

}  // namespace

TEST_CASE("interval unions merge overlaps and measure intersections") {
  CHECK(unionLength({{0, 10}, {5, 15}, {20, 30}}) == 25);
  CHECK(unionLength({{0, 10}, {10, 20}}) == 20);
  CHECK(unionLength({}) == 0);
  CHECK(overlapLength({{0, 10}, {20, 30}}, {{5, 25}}) == 10);
  CHECK(overlapLength({{0, 10}}, {{10, 20}}) == 0);
}

TEST_CASE("fold computes compute, comm, exposed comm and data unions") {
  StepFolder f(opts());
  f.add(0, step(RecordType::kStepBegin, 1, 1000));
  f.add(0, op("A", 1100, 1300));
  f.add(0, op("A", 1200, 1400));                               // overlaps the first: union 300
  f.add(0, range(TS_RANGE_COMPUTE, 1500, 1600));               // compute union 400
  f.add(0, coll(TS_COLL_ALL_REDUCE, "dp", 1000, 1350, 1550));  // 100 under compute
  f.add(0, coll(TS_COLL_ALL_REDUCE, "dp", 1000, 1700, 1800));  // fully exposed
  f.add(0, coll(TS_COLL_ALL_GATHER, "dp", 64, 1760, 1790));    // inside the previous one
  f.add(0, range(TS_RANGE_DATA, 1000, 1100));
  f.add(0, range(TS_RANGE_OTHER, 1000, 2000));  // counts as neither
  f.add(0, step(RecordType::kStepEnd, 1, 2000));
  f.endPass();
  CHECK(f.take().empty());  // the end was seen in this pass: not final yet
  f.endPass();
  auto out = f.take();
  REQUIRE(out.size() == 1);
  const auto& rep = out[0].report;
  CHECK(rep.job() == "job-x");
  CHECK(rep.rank() == 3);
  CHECK(rep.step() == 1);
  CHECK(rep.start_ns() == 1000);
  CHECK(rep.end_ns() == 2000);
  CHECK(rep.duration_ns() == 1000);
  CHECK(rep.compute_ns() == 400);
  CHECK(rep.comm_ns() == 300);
  CHECK(rep.exposed_comm_ns() == 200);
  CHECK(rep.data_ns() == 100);
  CHECK(rep.records() == 8);
  CHECK(out[0].records.size() == 8);
  REQUIRE(rep.ops_size() == 1);
  CHECK(rep.ops(0).name() == "A");
  CHECK(rep.ops(0).count() == 2);
  CHECK(rep.ops(0).total_ns() == 400);
  CHECK(rep.ops(0).max_ns() == 200);

  REQUIRE(rep.collectives_size() == 2);
  const auto& ar = rep.collectives(0).op() == trainscope::wire::ALL_REDUCE ? rep.collectives(0)
                                                                           : rep.collectives(1);
  CHECK(ar.group() == "dp");
  CHECK(ar.bytes() == 1000);
  CHECK(ar.count() == 2);
  CHECK(ar.total_ns() == 300);
  CHECK(ar.max_ns() == 200);
  CHECK(ar.bandwidth_bps() == Approx(2000.0 / 300e-9));
  CHECK(ar.first_arrival_ns() == 1350);
  CHECK(ar.last_completion_ns() == 1800);
}

TEST_CASE("fold counts time blocked on communication as exposed, never as compute") {
  // DDP without the operator callback: forward and backward are compute phases; the gradient
  // all-reduce runs beside backward and the end of backward waits for it (a comm range).
  StepFolder f(opts());
  f.add(0, step(RecordType::kStepBegin, 1, 0));
  f.add(0, range(TS_RANGE_COMPUTE, 0, 300));                 // forward
  f.add(0, range(TS_RANGE_COMPUTE, 300, 900));               // backward, its wait included
  f.add(0, coll(TS_COLL_ALL_REDUCE, "dp", 4096, 500, 600));  // a bucket under compute
  f.add(0, coll(TS_COLL_ALL_REDUCE, "dp", 4096, 650, 880));  // the last bucket
  f.add(0, range(TS_RANGE_COMM, 650, 900));                  // backward's wait for it
  f.add(0, range(TS_RANGE_COMPUTE, 900, 1000));              // optimizer
  f.add(0, step(RecordType::kStepEnd, 1, 1000));
  f.finish();
  auto out = f.take();
  REQUIRE(out.size() == 1);
  const auto& rep = out[0].report;
  CHECK(rep.compute_ns() == 1000 - 250);
  CHECK(rep.comm_ns() == 100 + 250);  // the wait reaches past the last completion
  CHECK(rep.exposed_comm_ns() == 250);
  CHECK(rep.collective_ns() == 350);
  CHECK(rep.exposed_collective_ns() == 250);
  CHECK(rep.bubble_ns() == 0);
}

TEST_CASE("fold counts a wait on a pipeline receive as bubble, not as a collective") {
  StepFolder f(opts());
  f.add(0, step(RecordType::kStepBegin, 1, 0));
  f.add(0, range(TS_RANGE_COMPUTE, 0, 1000));  // the whole step a compute phase
  f.add(0, p2p(TS_COLL_RECV, 2, "pp", 64, 100, 400));
  f.add(0, range(TS_RANGE_COMM, 200, 400));  // Work.wait() on the irecv
  f.add(0, coll(TS_COLL_ALL_REDUCE, "dp", 8, 700, 800));
  f.add(0, range(TS_RANGE_COMM, 700, 800));  // a synchronous all-reduce
  f.add(0, step(RecordType::kStepEnd, 1, 1000));
  f.finish();
  auto out = f.take();
  REQUIRE(out.size() == 1);
  const auto& rep = out[0].report;
  CHECK(rep.compute_ns() == 700);
  CHECK(rep.exposed_comm_ns() == 300);
  CHECK(rep.bubble_ns() == 200);
  CHECK(rep.exposed_collective_ns() == 100);
}

TEST_CASE("fold without compute records derives compute from the step") {
  StepFolder f(opts());
  f.add(0, step(RecordType::kStepBegin, 7, 0));
  f.add(0, coll(TS_COLL_ALL_REDUCE, "world", 8, 600, 800));
  f.add(0, range(TS_RANGE_DATA, 0, 100));
  f.add(0, step(RecordType::kStepEnd, 7, 1000));
  f.finish();
  auto out = f.take();
  REQUIRE(out.size() == 1);
  CHECK(out[0].report.exposed_comm_ns() == 200);
  CHECK(out[0].report.compute_ns() == 1000 - 200 - 100);
}

TEST_CASE("fold keeps the top operators by total time and counts the rest") {
  StepFolder f(opts(2));
  f.add(0, step(RecordType::kStepBegin, 1, 0));
  f.add(0, op("small", 10, 20));
  f.add(0, op("big", 20, 520));
  f.add(0, op("mid", 600, 1000));
  f.add(0, op("tiny", 10, 11));
  f.add(0, step(RecordType::kStepEnd, 1, 2000));
  f.finish();
  auto out = f.take();
  REQUIRE(out.size() == 1);
  REQUIRE(out[0].report.ops_size() == 2);
  CHECK(out[0].report.ops(0).name() == "big");
  CHECK(out[0].report.ops(1).name() == "mid");
  CHECK(out[0].report.ops_truncated() == 2);
}

TEST_CASE("fold attributes records by start time and pairs pushes per ring") {
  StepFolder f(opts());
  f.add(0, op("before", 10, 20));  // before any step
  f.add(0, step(RecordType::kStepBegin, 1, 100));
  f.add(0, push(TS_RANGE_COMPUTE, 110));  // ring 0
  f.add(1, push(TS_RANGE_DATA, 115));     // ring 1, interleaved
  f.add(0, pop(210));                     // closes ring 0's compute range: 100
  f.add(1, pop(265));                     // closes ring 1's data range: 150
  f.add(0, step(RecordType::kStepEnd, 1, 300));
  f.add(1, op("gap", 310, 320));         // between steps
  f.add(1, op("late-start", 290, 305));  // starts inside step 1, ends after
  f.add(0, step(RecordType::kStepBegin, 2, 400));
  f.add(1, op("in2", 410, 420));
  f.add(0, step(RecordType::kStepEnd, 2, 500));
  f.endPass();
  f.endPass();
  auto out = f.take();
  REQUIRE(out.size() == 2);
  const auto& s1 = out[0].report;
  CHECK(s1.step() == 1);
  CHECK(s1.data_ns() == 150);
  // The compute range (100) and the late op clipped to the step end (290..300).
  CHECK(s1.compute_ns() == 110);
  CHECK(s1.records() == 3);
  CHECK(out[1].report.step() == 2);
  CHECK(out[1].report.records() == 1);
  CHECK(f.unattributed() == 2);  // "before" and "gap"
  // Unattributed records still reach the flight recorder, with step -1.
  size_t loose = 0;
  for (const auto& s : out) {
    for (const auto& r : s.records) loose += r.step == -1 ? 1 : 0;
  }
  CHECK(loose == 2);
}

TEST_CASE("a step that never ends does not hold records without bound") {
  FoldOptions o = opts();
  o.maxPending = 1000;
  StepFolder f(o);
  f.add(0, step(RecordType::kStepBegin, 1, 0));
  for (int i = 0; i < 10000; ++i) f.add(0, op("x", i + 1, i + 2));
  f.endPass();
  CHECK(f.take().empty());
  CHECK(f.unattributed() >= 9000);
  // A new begin abandons the open step; its records become unattributed too.
  f.add(0, step(RecordType::kStepBegin, 2, 20000));
  f.add(0, step(RecordType::kStepEnd, 2, 20010));
  f.finish();
  auto out = f.take();
  REQUIRE(out.size() == 1);
  CHECK(out[0].report.step() == 2);
  CHECK(f.unattributed() == 10000);
}

TEST_CASE("fold totals link transfers per (peer, group) in the step their posted time falls in") {
  StepFolder f(opts());
  f.add(0, step(RecordType::kStepBegin, 1, 1000));
  f.add(0, coll(TS_COLL_ALL_REDUCE, "dp", 4096, 1100, 1500));
  f.add(0, link(4, "dp", 1000, 1200, 1300));  // peer 4 on dp: 2 transfers, 100 + 150 ns
  f.add(1, link(4, "dp", 3000, 1310, 1460));  // another thread (channel), same link
  f.add(0, link(2, "dp", 500, 1250, 1260));   // another peer
  f.add(0, link(4, "tp", 64, 1400, 1401));    // the same peer in another group
  f.add(0, link(4, "dp", 7, 1990, 2100));     // posted in step 1, delivered after its end
  f.add(0, step(RecordType::kStepEnd, 1, 2000));
  f.add(0, link(4, "dp", 9, 2000, 2050));  // posted as step 1 ends: step 2
  f.add(0, step(RecordType::kStepBegin, 2, 2000));
  f.add(0, step(RecordType::kStepEnd, 2, 3000));
  f.endPass();
  f.endPass();
  auto out = f.take();
  REQUIRE(out.size() == 2);
  const auto& rep = out[0].report;
  // Transfers are part of the collective: they add nothing to comm time.
  CHECK(rep.comm_ns() == 400);
  CHECK(rep.records() == 6);
  REQUIRE(rep.links_size() == 3);
  std::map<std::pair<uint32_t, std::string>, trainscope::wire::LinkTotal> byKey;
  for (const auto& l : rep.links()) byKey[{l.peer(), l.group()}] = l;
  const auto& dp4 = byKey.at({4, "dp"});
  CHECK(dp4.bytes() == 1000 + 3000 + 7);
  CHECK(dp4.transfers() == 3);
  CHECK(dp4.wire_ns() == 100 + 150 + 110);
  CHECK(byKey.at({2, "dp"}).wire_ns() == 10);
  CHECK(byKey.at({2, "dp"}).bytes() == 500);
  CHECK(byKey.at({4, "tp"}).transfers() == 1);
  // The flight recorder keeps link records like any other, in their step.
  size_t links = 0;
  for (const auto& r : out[0].records) links += r.type == RecordType::kLink && r.step == 1;
  CHECK(links == 5);
  const auto& rep2 = out[1].report;
  REQUIRE(rep2.links_size() == 1);
  CHECK(rep2.links(0).peer() == 4);
  CHECK(rep2.links(0).bytes() == 9);
  CHECK(rep2.links(0).wire_ns() == 50);
}

TEST_CASE("fold: a link delivered before it was posted counts no negative time") {
  StepFolder f(opts());
  f.add(0, step(RecordType::kStepBegin, 1, 0));
  f.add(0, link(1, "dp", 100, 500, 400));
  f.add(0, step(RecordType::kStepEnd, 1, 1000));
  f.finish();
  auto out = f.take();
  REQUIRE(out.size() == 1);
  REQUIRE(out[0].report.links_size() == 1);
  CHECK(out[0].report.links(0).wire_ns() == 0);
  CHECK(out[0].report.links(0).transfers() == 1);
}

TEST_CASE(
    "fold totals p2p per (peer, group, op) and takes the bubble, collective and all-to-all time "
    "apart") {
  // A pipeline stage: it waits 200 for its input (the bubble), computes, sends while it
  // computes the next microbatch, and exchanges tokens in an all-to-all.
  StepFolder f(opts());
  f.add(0, step(RecordType::kStepBegin, 1, 1000));
  f.add(0, p2p(TS_COLL_RECV, 2, "pp", 4096, 1000, 1200));  // idle: bubble 200
  f.add(0, op("fwd", 1200, 1500));
  f.add(0, p2p(TS_COLL_SEND, 6, "pp", 4096, 1500, 1550));  // under the next op: no bubble
  f.add(0, op("fwd", 1500, 1700));
  f.add(0, p2p(TS_COLL_RECV, 2, "pp", 4096, 1700, 1720));     // 20 more of bubble
  f.add(0, coll(TS_COLL_ALL_TO_ALL, "ep", 512, 1720, 1800));  // exposed
  f.add(0, coll(TS_COLL_ALL_REDUCE, "tp", 256, 1790, 1850));  // overlaps the all-to-all
  f.add(0, op("bwd", 1850, 1950));
  f.add(0, p2p(TS_COLL_SEND, 6, "pp", 100, 1960, 1990));  // after compute: exposed, bubble
  f.add(0, step(RecordType::kStepEnd, 1, 2000));
  f.finish();
  auto out = f.take();
  REQUIRE(out.size() == 1);
  const auto& rep = out[0].report;
  CHECK(rep.p2p_ns() == 200 + 50 + 20 + 30);
  CHECK(rep.bubble_ns() == 200 + 20 + 30);
  CHECK(rep.collective_ns() == 130);  // 1720..1850
  CHECK(rep.exposed_collective_ns() == 130);
  CHECK(rep.all_to_all_ns() == 80);
  // comm_ns and exposed_comm_ns count both kinds, as before.
  CHECK(rep.comm_ns() == 200 + 50 + 20 + 130 + 30);
  CHECK(rep.exposed_comm_ns() == 200 + 20 + 130 + 30);
  CHECK(rep.compute_ns() == 600);
  REQUIRE(rep.p2p_size() == 2);
  std::map<std::tuple<uint32_t, std::string, int>, trainscope::wire::P2pTotal> byKey;
  for (const auto& t : rep.p2p()) byKey[{t.peer(), t.group(), t.op()}] = t;
  const auto& recv = byKey.at({2, "pp", trainscope::wire::RECV});
  CHECK(recv.count() == 2);
  CHECK(recv.bytes() == 8192);
  CHECK(recv.total_ns() == 220);
  CHECK(recv.max_ns() == 200);
  CHECK(recv.min_ns() == 20);
  const auto& send = byKey.at({6, "pp", trainscope::wire::SEND});
  CHECK(send.count() == 2);
  CHECK(send.bytes() == 4196);
  CHECK(send.min_ns() == 30);
  // The flight recorder gets the p2p records in their step.
  size_t p2ps = 0;
  for (const auto& r : out[0].records) p2ps += r.type == RecordType::kP2p && r.step == 1;
  CHECK(p2ps == 4);
}

TEST_CASE("fold: a job without p2p has no bubble and its collective fields equal its comm fields") {
  StepFolder f(opts());
  f.add(0, step(RecordType::kStepBegin, 1, 0));
  f.add(0, op("x", 0, 500));
  f.add(0, coll(TS_COLL_ALL_REDUCE, "dp", 8, 400, 700));
  f.add(0, step(RecordType::kStepEnd, 1, 1000));
  f.finish();
  auto out = f.take();
  REQUIRE(out.size() == 1);
  const auto& rep = out[0].report;
  CHECK(rep.p2p_ns() == 0);
  CHECK(rep.bubble_ns() == 0);
  CHECK(rep.p2p_size() == 0);
  CHECK(rep.collective_ns() == rep.comm_ns());
  CHECK(rep.exposed_collective_ns() == rep.exposed_comm_ns());
  CHECK(rep.all_to_all_ns() == 0);
  CHECK(rep.model_flops() == 0);
  CHECK(rep.peak_flops() == 0);
}

TEST_CASE("fold stamps the FLOPs the job stated into the steps finalized after it said so") {
  StepFolder f(opts());
  f.add(0, step(RecordType::kStepBegin, 1, 0));
  f.add(0, step(RecordType::kStepEnd, 1, 1000));
  f.endPass();
  f.endPass();
  f.setFlops(2e12, 2.5e12, 1e15);
  f.add(0, step(RecordType::kStepBegin, 2, 1000));
  f.add(0, step(RecordType::kStepEnd, 2, 2000));
  f.finish();
  auto out = f.take();
  REQUIRE(out.size() == 2);
  CHECK(out[0].report.model_flops() == 0);
  CHECK(out[1].report.model_flops() == 2e12);
  CHECK(out[1].report.hardware_flops() == 2.5e12);
  CHECK(out[1].report.peak_flops() == 1e15);
}

namespace {
// A step mark with the marking thread's run delay (record.h: t1; -1 = not measured).
Record mark(RecordType t, int64_t s, int64_t at, int64_t delay) {
  Record r = step(t, s, at);
  r.t1 = delay;
  return r;
}
}  // namespace

TEST_CASE("fold reports the run delay between a step's marks as its CPU wait") {
  StepFolder f(opts());
  f.add(0, mark(RecordType::kStepBegin, 1, 1000, 500));
  f.add(0, mark(RecordType::kStepEnd, 1, 2000, 800));
  // Begins where step 1 ended, its begin mark made later (`trainscope run` back-dates it):
  // the delay counts from step 1's end mark, so the gap between the two calls is included.
  f.add(0, mark(RecordType::kStepBegin, 2, 2000, 900));
  f.add(0, mark(RecordType::kStepEnd, 2, 3000, 1000));
  // Not measured at one mark: no figure (0).
  f.add(0, mark(RecordType::kStepBegin, 3, 3500, -1));
  f.add(0, mark(RecordType::kStepEnd, 3, 4000, 1200));
  // Marks from two threads: their delays are not comparable.
  f.add(0, mark(RecordType::kStepBegin, 4, 4000, 1200));
  f.add(1, mark(RecordType::kStepEnd, 4, 5000, 1300));
  // More delay than the step lasted (a mark made late): bounded by the duration.
  f.add(0, mark(RecordType::kStepBegin, 5, 6000, 0));
  f.add(0, mark(RecordType::kStepEnd, 5, 6100, 5000));
  f.finish();
  auto out = f.take();
  REQUIRE(out.size() == 5);
  CHECK(out[0].report.cpu_wait_ns() == 300);
  CHECK(out[1].report.cpu_wait_ns() == 200);
  CHECK(out[2].report.cpu_wait_ns() == 0);
  CHECK(out[3].report.cpu_wait_ns() == 0);
  CHECK(out[4].report.cpu_wait_ns() == 100);
}

TEST_CASE("the run delay parser reads schedstat's second field") {
  const char text[] = "7267420 8573029 4\n";
  CHECK(parseRunDelay(text, static_cast<long>(sizeof(text) - 1)) == 8573029);
  CHECK(parseRunDelay("12 0 1", 6) == 0);
  CHECK(parseRunDelay("12", 2) == -1);
  CHECK(parseRunDelay("", 0) == -1);
  CHECK(parseRunDelay("x 1 2", 5) == -1);
  CHECK(parseRunDelay("99999999999999999999999 1 2", 27) == -1);
}

TEST_CASE("a live thread's run delay is readable and never decreases") {
  const int64_t a = threadRunDelayNs();
  REQUIRE(a >= 0);  // Linux with scheduler statistics, as every supported host
  volatile uint64_t x = 0;
  for (int i = 0; i < 1'000'000; ++i) x = x + static_cast<uint64_t>(i);
  CHECK(threadRunDelayNs() >= a);
}

namespace {

// What ts_device_collective records.
Record deviceColl(uint8_t opKind, const char* group, uint64_t bytes, uint64_t seq, int64_t t0,
                  int64_t t1) {
  Record r = coll(opKind, group, bytes, t0, t1);
  r.type = RecordType::kDeviceColl;
  r.seq = seq;
  r.info = TS_DEVICE_INFO(TS_ALGO_RING, TS_PROTO_SIMPLE, TS_DTYPE_BFLOAT16, 4);
  return r;
}

}  // namespace

TEST_CASE("fold: device times replace the host's for their key, the host's stay beside them") {
  FoldOptions o = opts();
  o.deviceLagNs = 0;
  StepFolder f(o);
  f.add(0, step(RecordType::kStepBegin, 1, 1000));
  // Host: two all-reduces of 4 MB launched at 1100 and 1500, each seen complete 300 later.
  f.add(0, coll(TS_COLL_ALL_REDUCE, "world", 4'000'000, 1100, 1400));
  f.add(0, coll(TS_COLL_ALL_REDUCE, "world", 4'000'000, 1500, 1800));
  // Device: the same two ran 1200-1300 and 1600-1650.
  f.add(1, deviceColl(TS_COLL_ALL_REDUCE, "world", 4'000'000, 7, 1200, 1300));
  f.add(1, deviceColl(TS_COLL_ALL_REDUCE, "world", 4'000'000, 8, 1600, 1650));
  // A broadcast only the device saw, and a host all-gather the device did not time.
  f.add(1, deviceColl(TS_COLL_BROADCAST, "tp", 1000, 3, 1700, 1710));
  f.add(0, coll(TS_COLL_ALL_GATHER, "world", 8000, 1850, 1900));
  Record p = p2p(TS_COLL_SEND, 2, "pp", 100, 1900, 1950);
  f.add(0, p);
  p.type = RecordType::kDeviceP2p;
  p.t0 = 1910;
  p.t1 = 1920;
  f.add(1, p);
  f.add(0, step(RecordType::kStepEnd, 1, 2000));
  f.endPass();
  f.endPass();
  auto steps = f.take();
  REQUIRE(steps.size() == 1);
  const auto& rep = steps[0].report;
  REQUIRE(rep.collectives_size() == 3);
  std::map<int, trainscope::wire::CollectiveTotal> byOp;
  for (const auto& c : rep.collectives()) byOp[c.op()] = c;
  const auto& ar = byOp[TS_COLL_ALL_REDUCE];
  CHECK(ar.device_timed());
  CHECK(ar.count() == 2);
  CHECK(ar.total_ns() == 150);
  CHECK(ar.max_ns() == 100);
  CHECK(ar.first_arrival_ns() == 1200);
  CHECK(ar.last_completion_ns() == 1650);
  CHECK(ar.bandwidth_bps() == Approx(8'000'000 / 150e-9));
  CHECK(ar.host_count() == 2);
  CHECK(ar.host_total_ns() == 600);
  CHECK(ar.first_seq() == 7);
  CHECK(ar.last_seq() == 8);
  CHECK(ar.algorithm() == "ring");
  CHECK(ar.protocol() == "simple");
  CHECK(ar.datatype() == "bfloat16");
  CHECK(ar.channels() == 4);
  const auto& bc = byOp[TS_COLL_BROADCAST];
  CHECK(bc.device_timed());
  CHECK(bc.group() == "tp");
  CHECK(bc.count() == 1);
  CHECK(bc.host_count() == 0);
  const auto& ag = byOp[TS_COLL_ALL_GATHER];
  CHECK_FALSE(ag.device_timed());
  CHECK(ag.total_ns() == 50);
  REQUIRE(rep.p2p_size() == 1);
  CHECK(rep.p2p(0).device_timed());
  CHECK(rep.p2p(0).total_ns() == 10);
  CHECK(rep.p2p(0).host_total_ns() == 50);
  // Device communication: 100 + 50 + 10 (broadcast) + 10 (send); the host unions stay the
  // host's.
  CHECK(rep.device_comm_ns() == 170);
  CHECK(rep.collective_ns() == 300 + 300 + 50);
}

TEST_CASE("fold: a device record belongs to the step that launched it, which waits for it") {
  FoldOptions o = opts();
  o.deviceLagNs = 100;
  StepFolder f(o);
  f.add(0, step(RecordType::kStepBegin, 1, 1000));
  f.add(0, coll(TS_COLL_ALL_REDUCE, "world", 64, 1100, 1150));
  // A first device record: from now on ended steps wait for theirs.
  f.add(1, deviceColl(TS_COLL_BROADCAST, "world", 8, 0, 1060, 1070));
  f.add(0, step(RecordType::kStepEnd, 1, 2000));
  f.add(0, step(RecordType::kStepBegin, 2, 2000));
  f.endPass(10'000);
  f.endPass(10'050);
  CHECK(f.take().empty());  // held: the GPU has not run step 1's all-reduce yet
  CHECK(f.holding());
  // Launched at 1100 (in step 1), run by the GPU at 2500-2600 (in step 2's time).
  Record d = deviceColl(TS_COLL_ALL_REDUCE, "world", 64, 1, 2500, 2600);
  d.step = 1100;
  f.add(1, d);
  f.endPass(10'100);  // 100 after the pass that saw the end: final now
  auto steps = f.take();
  REQUIRE(steps.size() == 1);
  const auto& rep = steps[0].report;
  REQUIRE(rep.collectives_size() == 2);
  const auto& ar = rep.collectives(0);  // keys in op order: all_reduce, then broadcast
  CHECK(ar.device_timed());
  CHECK(ar.total_ns() == 100);
  CHECK(ar.host_total_ns() == 50);
  CHECK(rep.device_comm_ns() == 10 + 100);  // past the step's end on the host: not clipped
  CHECK(f.unattributed() == 0);
  // A device record later than the lag finds its step final: unattributed, counted.
  f.add(0, step(RecordType::kStepEnd, 2, 3000));
  f.endPass(20'000);
  f.endPass(20'200);
  REQUIRE(f.take().size() == 1);
  Record late = deviceColl(TS_COLL_ALL_REDUCE, "world", 64, 2, 3500, 3600);
  late.step = 2500;
  f.add(1, late);
  f.endPass(20'300);
  CHECK(f.unattributed() == 1);
}
