// Direct tests of ingest's field checks (collector/ingest/validate.h): what a sender may name is
// bounded by the protocol's limits (schema/wire.h, PROTOCOL.md "Limits"), and each reject is
// counted under a reason token with a detail naming the field.
#include "collector/ingest/validate.h"

#include <cstdint>
#include <limits>
#include <string>

#include <catch2/catch.hpp>

#include "schema/wire.h"

using namespace trainscope;
using trainscope::ingest::ValidationLimits;

namespace {

constexpr int64_t kT0 = 1'700'000'000'000'000'000;  // 2023-11-14, a sane wall-clock time

wire::StepReport goodStep() {
  wire::StepReport s;
  s.set_job("j");
  s.set_rank(1);
  s.set_step(10);
  s.set_start_ns(kT0);
  s.set_end_ns(kT0 + 100);
  s.set_duration_ns(100);
  s.set_compute_ns(60);
  s.set_comm_ns(30);
  s.set_exposed_comm_ns(10);
  return s;
}

wire::RankInfo goodInfo() {
  wire::RankInfo info;
  info.set_job("j");
  info.set_rank(3);
  info.set_world_size(4);
  return info;
}

std::string reasonOf(const std::optional<ingest::Rejection>& r) {
  return r ? r->reason : std::string("accepted");
}

}  // namespace

TEST_CASE("validate: a sane step, hello and goodbye are accepted") {
  const ValidationLimits limits;
  CHECK(reasonOf(ingest::validateStep(goodStep(), 4u, limits)) == "accepted");
  CHECK(reasonOf(ingest::validateStep(goodStep(), std::nullopt, limits)) == "accepted");
  CHECK(reasonOf(ingest::validateRankInfo(goodInfo(), limits)) == "accepted");
  wire::RankGoodbye bye;
  bye.set_job("j");
  bye.set_rank(3);
  bye.set_last_step(-1);
  CHECK(reasonOf(ingest::validateGoodbye(bye, 4u, limits)) == "accepted");
}

TEST_CASE("validate: world_size is bounded by the protocol's limit, ranks below it") {
  const ValidationLimits limits;
  wire::RankInfo info = goodInfo();
  info.set_world_size(wire::kMaxWorldSize);
  info.set_rank(wire::kMaxWorldSize - 1);
  CHECK(reasonOf(ingest::validateRankInfo(info, limits)) == "accepted");
  info.set_world_size(wire::kMaxWorldSize + 1);
  auto r = ingest::validateRankInfo(info, limits);
  CHECK(reasonOf(r) == "invalid_world_size");
  REQUIRE(r);
  CHECK(r->detail == "world_size 65537 exceeds the limit of 65536 (job j)");
  info.set_world_size(20'000'000);
  CHECK(reasonOf(ingest::validateRankInfo(info, limits)) == "invalid_world_size");

  // A step or goodbye of a job with no hello yet: the rank is still bounded.
  wire::StepReport s = goodStep();
  s.set_rank(wire::kMaxWorldSize);
  auto sr = ingest::validateStep(s, std::nullopt, limits);
  CHECK(reasonOf(sr) == "invalid_rank");
  REQUIRE(sr);
  CHECK(sr->detail.find("the world size limit 65536") != std::string::npos);
  s.set_rank(std::numeric_limits<uint32_t>::max());
  CHECK(reasonOf(ingest::validateStep(s, std::nullopt, limits)) == "invalid_rank");
  s.set_rank(4);
  CHECK(reasonOf(ingest::validateStep(s, 4u, limits)) == "invalid_rank");
  wire::RankGoodbye bye;
  bye.set_job("j");
  bye.set_rank(wire::kMaxWorldSize);
  CHECK(reasonOf(ingest::validateGoodbye(bye, std::nullopt, limits)) == "invalid_rank");
}

TEST_CASE("validate: step numbers and times are bounded to sane ranges") {
  const ValidationLimits limits;
  wire::StepReport s = goodStep();
  s.set_step(wire::kMaxStep);
  CHECK(reasonOf(ingest::validateStep(s, 4u, limits)) == "accepted");
  s.set_step(wire::kMaxStep + 1);
  CHECK(reasonOf(ingest::validateStep(s, 4u, limits)) == "invalid_step");
  s.set_step(std::numeric_limits<int64_t>::max());
  CHECK(reasonOf(ingest::validateStep(s, 4u, limits)) == "invalid_step");

  s = goodStep();
  s.set_start_ns(std::numeric_limits<int64_t>::max() - 100);
  s.set_end_ns(std::numeric_limits<int64_t>::max());
  CHECK(reasonOf(ingest::validateStep(s, 4u, limits)) == "invalid_time");
  s.set_start_ns(wire::kMaxTimeNs - 100);
  s.set_end_ns(wire::kMaxTimeNs);
  CHECK(reasonOf(ingest::validateStep(s, 4u, limits)) == "accepted");
  s.set_end_ns(wire::kMaxTimeNs + 1);
  s.set_duration_ns(101);
  CHECK(reasonOf(ingest::validateStep(s, 4u, limits)) == "invalid_time");

  s = goodStep();
  auto* c = s.add_collectives();
  c->set_first_arrival_ns(std::numeric_limits<int64_t>::max());
  CHECK(reasonOf(ingest::validateStep(s, 4u, limits)) == "invalid_collective");
  c->set_first_arrival_ns(kT0);
  c->set_last_completion_ns(-5);
  CHECK(reasonOf(ingest::validateStep(s, 4u, limits)) == "invalid_collective");
  c->set_last_completion_ns(kT0 + 50);
  CHECK(reasonOf(ingest::validateStep(s, 4u, limits)) == "accepted");
  // Device-timed (NCCL's profiler plugin): the host's own sum beside the device's.
  c->set_device_timed(true);
  c->set_host_total_ns(-1);
  CHECK(reasonOf(ingest::validateStep(s, 4u, limits)) == "invalid_collective");
  c->set_host_total_ns(80);
  CHECK(reasonOf(ingest::validateStep(s, 4u, limits)) == "accepted");
  s.set_device_comm_ns(100 + limits.slackNs + 1);
  CHECK(reasonOf(ingest::validateStep(s, 4u, limits)) == "invalid_breakdown");
  s.set_device_comm_ns(40);
  s.set_device_dropped(3);
  CHECK(reasonOf(ingest::validateStep(s, 4u, limits)) == "accepted");
  auto* p = s.add_p2p();
  p->set_peer(2);
  p->set_host_total_ns(-1);
  CHECK(reasonOf(ingest::validateStep(s, 4u, limits)) == "invalid_p2p");
  s.clear_p2p();
  auto* l = s.add_links();
  l->set_peer(2);
  l->set_wire_ns(-1);
  CHECK(reasonOf(ingest::validateStep(s, 4u, limits)) == "invalid_link");

  wire::RankGoodbye bye;
  bye.set_job("j");
  bye.set_last_step(wire::kMaxStep + 1);
  CHECK(reasonOf(ingest::validateGoodbye(bye, 4u, limits)) == "invalid_step");
  bye.set_last_step(5);
  bye.set_sent_ns(-1);
  CHECK(reasonOf(ingest::validateGoodbye(bye, 4u, limits)) == "invalid_time");

  wire::HostSample host;
  host.set_node("n");
  host.set_time_ns(std::numeric_limits<int64_t>::max());
  CHECK(reasonOf(ingest::validateHost(host)) == "invalid_host");
}

TEST_CASE("validate: GPU samples and events in a host sample, a rank's GPU UUID") {
  wire::HostSample host;
  host.set_node("n");
  host.set_time_ns(kT0);
  auto* g = host.add_gpus();
  g->set_uuid("GPU-11111111-2222-3333-4444-555555555555");
  g->set_utilization_pct(100);
  g->set_memory_used_bytes(10);
  g->set_memory_total_bytes(100);
  g->set_temperature_c(90);
  auto* e = host.add_gpu_events();
  e->set_uuid(g->uuid());
  e->set_time_ns(kT0);
  CHECK(reasonOf(ingest::validateHost(host)) == "accepted");
  g->set_utilization_pct(101);
  CHECK(reasonOf(ingest::validateHost(host)) == "invalid_gpu");
  g->set_utilization_pct(50);
  g->set_memory_used_bytes(101);
  CHECK(reasonOf(ingest::validateHost(host)) == "invalid_gpu");
  g->set_memory_used_bytes(10);
  g->set_uuid("GPU 1; drop");
  CHECK(reasonOf(ingest::validateHost(host)) == "invalid_gpu");
  g->set_uuid("GPU-1");
  g->set_throttle_ns(-1);
  CHECK(reasonOf(ingest::validateHost(host)) == "invalid_gpu");
  g->set_throttle_ns(0);
  e->set_time_ns(-5);
  CHECK(reasonOf(ingest::validateHost(host)) == "invalid_gpu");
  e->set_time_ns(kT0);
  for (size_t i = 0; i < ingest::kMaxGpusPerNode; ++i) host.add_gpus()->set_uuid("GPU-x");
  CHECK(reasonOf(ingest::validateHost(host)) == "invalid_gpu");

  ingest::ValidationLimits limits;
  wire::RankInfo info = goodInfo();
  info.set_gpu_uuid("GPU-11111111-2222-3333-4444-555555555555");
  CHECK(reasonOf(ingest::validateRankInfo(info, limits)) == "accepted");
  info.set_gpu_uuid(std::string(97, 'a'));
  CHECK(reasonOf(ingest::validateRankInfo(info, limits)) == "invalid_gpu");
  info.set_gpu_uuid("GPU-<script>");
  CHECK(reasonOf(ingest::validateRankInfo(info, limits)) == "invalid_gpu");
}

TEST_CASE("validate: a hello's progress and sent_ns, a heartbeat's offset and rtt") {
  wire::RankHello hello;
  *hello.mutable_rank() = goodInfo();
  hello.set_sent_ns(kT0);
  auto* p = hello.mutable_progress();
  p->set_last_step(5);
  p->set_open_step(6);
  p->set_last_record_ns(kT0);
  CHECK(reasonOf(ingest::validateProgress(hello)) == "accepted");
  p->set_open_step(std::numeric_limits<int64_t>::max());
  CHECK(reasonOf(ingest::validateProgress(hello)) == "invalid_progress");
  p->set_open_step(-2);
  CHECK(reasonOf(ingest::validateProgress(hello)) == "invalid_progress");
  p->set_open_step(-1);
  p->set_collective_since_ns(std::numeric_limits<int64_t>::max());
  CHECK(reasonOf(ingest::validateProgress(hello)) == "invalid_progress");
  p->set_collective_since_ns(0);
  hello.set_sent_ns(std::numeric_limits<int64_t>::min());
  auto r = ingest::validateProgress(hello);
  REQUIRE(r);
  CHECK(r->detail.find("sent_ns") != std::string::npos);
  CHECK(r->detail.find("(job j rank 3)") != std::string::npos);

  wire::Heartbeat hb;
  hb.set_offset_ns(-5'000'000);
  hb.set_rtt_ns(80'000);
  CHECK(reasonOf(ingest::validateHeartbeat(hb)) == "accepted");
  hb.set_offset_ns(std::numeric_limits<int64_t>::min());
  CHECK(reasonOf(ingest::validateHeartbeat(hb)) == "invalid_heartbeat");
  hb.set_offset_ns(wire::kMaxTimeNs);
  CHECK(reasonOf(ingest::validateHeartbeat(hb)) == "accepted");
  hb.set_rtt_ns(-1);
  CHECK(reasonOf(ingest::validateHeartbeat(hb)) == "invalid_heartbeat");
}
