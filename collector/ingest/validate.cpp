#include "collector/ingest/validate.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/str_cat.h"
#include "schema/wire.h"

namespace trainscope::ingest {
namespace {

std::optional<Rejection> reject(const char* reason, std::string detail) {
  return Rejection{reason, std::move(detail)};
}

// A time a sender may set to 0 ("none"), else a wall-clock time no later than the limit.
bool isTime(int64_t ns) {
  return ns >= 0 && ns <= wire::kMaxTimeNs;
}

std::string maxTime() {
  return std::to_string(wire::kMaxTimeNs) + " (2100-01-01)";
}

std::optional<Rejection> checkJob(const std::string& job, const ValidationLimits& limits) {
  if (job.empty()) return reject("missing_job", "job is empty");
  if (job.size() > limits.maxJobBytes) {
    return reject("invalid_job", "job is " + std::to_string(job.size()) + " bytes, limit " +
                                     std::to_string(limits.maxJobBytes));
  }
  return std::nullopt;
}

// A rank below the job's world size when one is known, and always below the protocol's
// limit: a report for a job with no hello yet must not make anything per-rank grow to 2^32.
// `at()` names the item; it is called only for a rejection, so an accepted item costs no string.
template <class At>
std::optional<Rejection> checkRank(uint32_t rank, std::optional<uint32_t> worldSize, const At& at) {
  if (worldSize && rank >= *worldSize) {
    return reject("invalid_rank", "rank " + std::to_string(rank) + " >= world_size " +
                                      std::to_string(*worldSize) + at());
  }
  if (rank >= wire::kMaxWorldSize) {
    return reject("invalid_rank", "rank " + std::to_string(rank) + " >= the world size limit " +
                                      std::to_string(wire::kMaxWorldSize) + at());
  }
  return std::nullopt;
}

// A GPU UUID as NVML spells it ("GPU-..."): short, letters, digits and '-'. Empty: none.
bool isGpuUuid(const std::string& uuid) {
  return uuid.size() <= kMaxGpuUuidBytes && std::all_of(uuid.begin(), uuid.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-';
         });
}

std::optional<Rejection> checkGpus(const wire::HostSample& host) {
  if (host.gpus_size() > static_cast<int>(kMaxGpusPerNode)) {
    return reject("invalid_gpu", strCat(std::to_string(host.gpus_size()), " GPUs, limit ",
                                        std::to_string(kMaxGpusPerNode)));
  }
  if (host.gpu_events_size() > static_cast<int>(kMaxGpuEventsPerSample)) {
    return reject("invalid_gpu", strCat(std::to_string(host.gpu_events_size()),
                                        " GPU events in one sample, limit ",
                                        std::to_string(kMaxGpuEventsPerSample)));
  }
  for (const auto& g : host.gpus()) {
    auto at = [&g] { return " (gpu " + std::to_string(g.index()) + ")"; };
    if (!isGpuUuid(g.uuid())) return reject("invalid_gpu", "uuid is not a GPU UUID" + at());
    if (g.name().size() > kMaxGpuUuidBytes) return reject("invalid_gpu", "name too long" + at());
    if (g.utilization_pct() > 100 || g.memory_utilization_pct() > 100) {
      return reject("invalid_gpu", "utilization not within 0..100" + at());
    }
    if (g.memory_used_bytes() > g.memory_total_bytes()) {
      return reject("invalid_gpu", "memory_used_bytes > memory_total_bytes" + at());
    }
    if (g.throttle_ns() < 0) return reject("invalid_gpu", "throttle_ns < 0" + at());
    if (g.temperature_c() > 300) {
      return reject("invalid_gpu",
                    "temperature_c " + std::to_string(g.temperature_c()) + " above 300" + at());
    }
  }
  for (const auto& e : host.gpu_events()) {
    auto at = [&e] { return " (gpu event of gpu " + std::to_string(e.index()) + ")"; };
    if (!isGpuUuid(e.uuid())) return reject("invalid_gpu", "uuid is not a GPU UUID" + at());
    if (!isTime(e.time_ns())) {
      return reject("invalid_gpu", "time_ns must be within 0.." + maxTime() + at());
    }
  }
  return std::nullopt;
}

std::string where(const std::string& job, uint32_t rank, int64_t step) {
  return " (job " + job + " rank " + std::to_string(rank) + " step " + std::to_string(step) + ")";
}

}  // namespace

std::optional<Rejection> validateStep(const wire::StepReport& s, std::optional<uint32_t> worldSize,
                                      const ValidationLimits& limits) {
  if (auto r = checkJob(s.job(), limits)) return r;
  // Built only for a rejection: accepted reports, nearly all of them, allocate nothing here.
  auto at = [&s] { return where(s.job(), s.rank(), s.step()); };
  if (auto r = checkRank(s.rank(), worldSize, at)) return r;
  if (s.step() < 0 || s.step() > wire::kMaxStep) {
    return reject("invalid_step",
                  "step must be within 0.." + std::to_string(wire::kMaxStep) + at());
  }
  if (s.start_ns() <= 0 || s.start_ns() > wire::kMaxTimeNs) {
    return reject("invalid_time", "start_ns must be within 1.." + maxTime() + at());
  }
  if (s.end_ns() < s.start_ns()) return reject("invalid_time", "end_ns < start_ns" + at());
  if (s.end_ns() > wire::kMaxTimeNs) {
    return reject("invalid_time", "end_ns must be at most " + maxTime() + at());
  }
  if (s.duration_ns() < 0 || s.duration_ns() >= limits.maxDurationNs) {
    return reject("invalid_duration",
                  "duration_ns " + std::to_string(s.duration_ns()) + " out of range" + at());
  }
  const int64_t bound = s.duration_ns() + limits.slackNs;
  struct Part {
    const char* name;
    int64_t value;
  };
  for (const Part& p :
       {Part{"compute_ns", s.compute_ns()}, Part{"comm_ns", s.comm_ns()},
        Part{"exposed_comm_ns", s.exposed_comm_ns()}, Part{"data_ns", s.data_ns()},
        Part{"p2p_ns", s.p2p_ns()}, Part{"bubble_ns", s.bubble_ns()},
        Part{"collective_ns", s.collective_ns()},
        Part{"exposed_collective_ns", s.exposed_collective_ns()},
        Part{"all_to_all_ns", s.all_to_all_ns()}, Part{"cpu_wait_ns", s.cpu_wait_ns()},
        Part{"device_comm_ns", s.device_comm_ns()}}) {
    if (p.value < 0 || p.value > bound) {
      return reject("invalid_breakdown", std::string(p.name) + " " + std::to_string(p.value) +
                                             " not within 0..duration_ns" + at());
    }
  }
  if (s.exposed_comm_ns() > s.comm_ns() + limits.slackNs) {
    return reject("invalid_breakdown", "exposed_comm_ns > comm_ns" + at());
  }
  for (const auto& op : s.ops()) {
    if (op.name().empty() || op.total_ns() < 0 || op.max_ns() < 0 ||
        op.total_ns() >= limits.maxDurationNs) {
      return reject("invalid_op", "operator '" + op.name() +
                                      "' has an empty name or a time "
                                      "out of range" +
                                      at());
    }
  }
  for (const auto& c : s.collectives()) {
    if (c.total_ns() < 0 || c.max_ns() < 0 || c.total_ns() >= limits.maxDurationNs ||
        !std::isfinite(c.bandwidth_bps()) || c.bandwidth_bps() < 0 ||
        !isTime(c.first_arrival_ns()) || !isTime(c.last_completion_ns()) || c.host_total_ns() < 0 ||
        c.host_total_ns() >= limits.maxDurationNs) {
      return reject("invalid_collective", std::string("collective ") +
                                              wire::collectiveOpName(c.op()) +
                                              " has a time or bandwidth out of range" + at());
    }
  }
  for (const auto& l : s.links()) {
    if (l.wire_ns() < 0 || l.wire_ns() >= limits.maxDurationNs) {
      return reject("invalid_link", "link to rank " + std::to_string(l.peer()) + " has wire_ns " +
                                        std::to_string(l.wire_ns()) + " out of range" + at());
    }
  }
  for (const auto& p : s.p2p()) {
    if ((worldSize && p.peer() >= *worldSize) || p.total_ns() < 0 || p.max_ns() < 0 ||
        p.min_ns() < 0 || p.total_ns() >= limits.maxDurationNs || p.host_total_ns() < 0 ||
        p.host_total_ns() >= limits.maxDurationNs) {
      return reject("invalid_p2p", std::string("p2p ") + wire::collectiveOpName(p.op()) +
                                       " with peer " + std::to_string(p.peer()) +
                                       " has a peer or a time out of range" + at());
    }
  }
  struct Flops {
    const char* name;
    double value;
  };
  for (const Flops& f :
       {Flops{"model_flops", s.model_flops()}, Flops{"hardware_flops", s.hardware_flops()},
        Flops{"peak_flops", s.peak_flops()}}) {
    if (!std::isfinite(f.value) || f.value < 0) {
      return reject("invalid_flops", std::string(f.name) + " " + std::to_string(f.value) +
                                         " is not a finite number >= 0" + at());
    }
  }
  return std::nullopt;
}

std::optional<Rejection> validateGroups(const wire::RankHello& hello,
                                        const ValidationLimits& limits) {
  const wire::RankInfo& info = hello.rank();
  const std::string at = " (job " + info.job() + " rank " + std::to_string(info.rank()) + ")";
  if (hello.groups_declared_ns() < 0) {
    return reject("invalid_groups", "groups_declared_ns must be >= 0" + at);
  }
  if (static_cast<size_t>(hello.groups_size()) > limits.maxGroups) {
    return reject("invalid_groups", std::to_string(hello.groups_size()) + " groups, limit " +
                                        std::to_string(limits.maxGroups) + at);
  }
  std::vector<uint32_t> sorted;
  for (const auto& g : hello.groups()) {
    const std::string what = "group '" + g.name() + "'";
    if (g.name().empty() || g.name().size() > limits.maxGroupNameBytes) {
      return reject("invalid_groups", "a group name must have 1.." +
                                          std::to_string(limits.maxGroupNameBytes) +
                                          " bytes, not " + std::to_string(g.name().size()) + at);
    }
    if (!wire::GroupKind_IsValid(g.kind())) {
      return reject("invalid_groups", strCat(what, ": unknown kind ",
                                             std::to_string(static_cast<int>(g.kind())), at));
    }
    if (g.ranks_size() == 0 || static_cast<uint32_t>(g.ranks_size()) > info.world_size()) {
      return reject("invalid_groups", strCat(what, ": ", std::to_string(g.ranks_size()),
                                             " ranks; a group has 1..world_size ",
                                             std::to_string(info.world_size()), at));
    }
    // Sorted, not a bitmap of the world: world_size comes from outside and may be huge.
    sorted.assign(g.ranks().begin(), g.ranks().end());
    std::sort(sorted.begin(), sorted.end());
    if (sorted.back() >= info.world_size()) {
      return reject("invalid_groups",
                    strCat(what, ": rank ", std::to_string(sorted.back()), " >= world_size ",
                           std::to_string(info.world_size()), at));
    }
    if (auto dup = std::adjacent_find(sorted.begin(), sorted.end()); dup != sorted.end()) {
      return reject("invalid_groups", strCat(what, ": rank ", std::to_string(*dup), " twice", at));
    }
    if (!std::binary_search(sorted.begin(), sorted.end(), info.rank())) {
      return reject("invalid_groups", strCat(what, ": does not hold the declaring rank", at));
    }
  }
  return std::nullopt;
}

std::optional<Rejection> validateRankInfo(const wire::RankInfo& info,
                                          const ValidationLimits& limits) {
  if (auto r = checkJob(info.job(), limits)) return r;
  if (info.world_size() == 0) return reject("invalid_rank", "world_size must be > 0");
  if (info.world_size() > wire::kMaxWorldSize) {
    return reject("invalid_world_size",
                  "world_size " + std::to_string(info.world_size()) + " exceeds the limit of " +
                      std::to_string(wire::kMaxWorldSize) + " (job " + info.job() + ")");
  }
  if (info.rank() >= info.world_size()) {
    return reject("invalid_rank", "rank " + std::to_string(info.rank()) + " >= world_size " +
                                      std::to_string(info.world_size()));
  }
  if (!isGpuUuid(info.gpu_uuid())) {
    return reject("invalid_gpu", "gpu_uuid is not a GPU UUID (at most " +
                                     std::to_string(kMaxGpuUuidBytes) +
                                     " letters, digits or '-') (job " + info.job() + " rank " +
                                     std::to_string(info.rank()) + ")");
  }
  return std::nullopt;
}

std::optional<Rejection> validateGoodbye(const wire::RankGoodbye& bye,
                                         std::optional<uint32_t> worldSize,
                                         const ValidationLimits& limits) {
  if (auto r = checkJob(bye.job(), limits)) return r;
  auto at = [&bye] { return " (goodbye of job " + bye.job() + ")"; };
  if (auto r = checkRank(bye.rank(), worldSize, at)) return r;
  if (bye.last_step() < -1 || bye.last_step() > wire::kMaxStep) {
    return reject("invalid_step", "last_step must be within -1.." + std::to_string(wire::kMaxStep) +
                                      " (goodbye of job " + bye.job() + ")");
  }
  if (!isTime(bye.sent_ns())) {
    return reject("invalid_time",
                  "sent_ns must be within 0.." + maxTime() + " (goodbye of job " + bye.job() + ")");
  }
  return std::nullopt;
}

std::optional<Rejection> validateHost(const wire::HostSample& host) {
  if (host.node().empty()) return reject("invalid_host", "node is empty");
  if (host.time_ns() <= 0 || host.time_ns() > wire::kMaxTimeNs) {
    return reject("invalid_host", "time_ns must be within 1.." + maxTime());
  }
  if (!std::isfinite(host.cpu_percent()) || host.cpu_percent() < 0 || host.cpu_percent() > 100.5) {
    return reject("invalid_host",
                  "cpu_percent " + std::to_string(host.cpu_percent()) + " not within 0..100");
  }
  return checkGpus(host);
}

std::optional<Rejection> validateProgress(const wire::RankHello& hello) {
  const wire::RankProgress& p = hello.progress();
  const wire::RankInfo& info = hello.rank();
  const std::string at = " (job " + info.job() + " rank " + std::to_string(info.rank()) + ")";
  const std::string steps = " not within -1.." + std::to_string(wire::kMaxStep);
  if (p.last_step() < -1 || p.last_step() > wire::kMaxStep) {
    return reject("invalid_progress",
                  "progress.last_step " + std::to_string(p.last_step()) + steps + at);
  }
  if (p.open_step() < -1 || p.open_step() > wire::kMaxStep) {
    return reject("invalid_progress",
                  "progress.open_step " + std::to_string(p.open_step()) + steps + at);
  }
  if (!isTime(p.last_record_ns())) {
    return reject("invalid_progress",
                  "progress.last_record_ns must be within 0.." + maxTime() + at);
  }
  if (!isTime(p.collective_since_ns())) {
    return reject("invalid_progress",
                  "progress.collective_since_ns must be within 0.." + maxTime() + at);
  }
  if (!isTime(hello.sent_ns())) {
    return reject("invalid_progress", "sent_ns must be within 0.." + maxTime() + at);
  }
  return std::nullopt;
}

std::optional<Rejection> validateHeartbeat(const wire::Heartbeat& hb) {
  if (hb.offset_ns() < -wire::kMaxTimeNs || hb.offset_ns() > wire::kMaxTimeNs) {
    return reject("invalid_heartbeat", "offset_ns " + std::to_string(hb.offset_ns()) +
                                           " not within -" + maxTime() + ".." + maxTime());
  }
  if (!isTime(hb.rtt_ns())) {
    return reject("invalid_heartbeat", "rtt_ns must be within 0.." + maxTime());
  }
  return std::nullopt;
}

}  // namespace trainscope::ingest
