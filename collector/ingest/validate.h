// Field checks for the telemetry items an agent sends in a Batch (and its heartbeats). Pure
// functions, safe from any thread. A failed check names the reason token it is counted under
// and the field at fault. The bounds are the protocol's (schema/wire.h, PROTOCOL.md "Limits").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "schema/trainscope.pb.h"

namespace trainscope::ingest {

struct Rejection {
  std::string reason;  // token the reject is counted under, e.g. "invalid_step"
  std::string detail;  // names the field and the value at fault
};

struct ValidationLimits {
  int64_t maxDurationNs = 24LL * 3600 * 1'000'000'000;  // longer steps are not sane
  int64_t slackNs = 1'000'000;     // compute/comm/data may exceed the duration by this much
                                   // (their unions are measured with a different clock read)
  size_t maxJobBytes = 256;        // a longer job id is rejected, not truncated
  size_t maxGroups = 1024;         // process groups one rank may declare (a rank is in a few)
  size_t maxGroupNameBytes = 256;  // a longer group name is rejected, not truncated
};

// GPU bounds (HostSample.gpus, gpu_events; RankInfo.gpu_uuid): a node has a few GPUs, NVML's
// UUID buffer is 96 bytes, and an agent sends its events every second.
inline constexpr size_t kMaxGpusPerNode = 64;
inline constexpr size_t kMaxGpuEventsPerSample = 1024;
inline constexpr size_t kMaxGpuUuidBytes = 96;

// `worldSize` is the job's size when a rank of it has registered, so rank can be checked.
std::optional<Rejection> validateStep(const wire::StepReport& step,
                                      std::optional<uint32_t> worldSize,
                                      const ValidationLimits& limits);
std::optional<Rejection> validateRankInfo(const wire::RankInfo& info,
                                          const ValidationLimits& limits);
std::optional<Rejection> validateGoodbye(const wire::RankGoodbye& bye,
                                         std::optional<uint32_t> worldSize,
                                         const ValidationLimits& limits);
std::optional<Rejection> validateHost(const wire::HostSample& host);
// A RankHello's declared process groups (RankHello.groups): each named, of a known kind, with
// 1..world_size distinct ranks below the world size, the declaring rank among them. The rank
// info must have passed validateRankInfo. Rejected groups are dropped whole, the rest of the
// hello is kept.
std::optional<Rejection> validateGroups(const wire::RankHello& hello,
                                        const ValidationLimits& limits);
// A RankHello's progress (the hang detector's input) and its sent_ns: steps within
// -1..wire::kMaxStep, times within 0..wire::kMaxTimeNs. The hello's rank is named in the detail.
std::optional<Rejection> validateProgress(const wire::RankHello& hello);
// A heartbeat's clock estimate: |offset_ns| and rtt_ns within wire::kMaxTimeNs, so a time
// shifted by the offset cannot overflow.
std::optional<Rejection> validateHeartbeat(const wire::Heartbeat& heartbeat);

}  // namespace trainscope::ingest
