// The GPU parts of the API: a GPU's reading and event as JSON, and a node's GPU time series
// (GET /api/v1/nodes/{node}/gpus). Any thread, like the rest of Api.
#include <algorithm>
#include <limits>

#include "collector/http/api.h"
#include "collector/http/request_target.h"
#include "schema/wire.h"

namespace trainscope::http {

using nlohmann::json;

namespace {
// The most samples one request may ask for: an hour at the agent's 1 Hz.
constexpr uint64_t kMaxGpuSamples = 3600;
constexpr uint64_t kDefaultGpuSamples = 600;

const char* eventKind(wire::GpuEventKind kind) {
  switch (kind) {
    case wire::GPU_EVENT_XID:
      return "xid";
    case wire::GPU_EVENT_ECC_SINGLE:
      return "ecc_single_bit";
    case wire::GPU_EVENT_ECC_DOUBLE:
      return "ecc_double_bit";
    default:
      return "unknown";
  }
}
}  // namespace

json gpuSampleJson(const wire::GpuSample& g) {
  auto has = [&g](wire::GpuField f) { return (g.present() & static_cast<uint64_t>(f)) != 0; };
  auto when = [&has](wire::GpuField f, json value) { return has(f) ? std::move(value) : json(); };
  json reasons = json::array();
  if (has(wire::GPU_CLOCK_EVENTS)) {
    for (auto& name : wire::gpuClockEventNames(g.clock_event_reasons())) reasons.push_back(name);
  }
  return json{
      {"index", g.index()},
      {"uuid", g.uuid()},
      {"name", g.name()},
      {"lost", g.lost()},
      {"utilization_pct", when(wire::GPU_UTILIZATION, g.utilization_pct())},
      {"memory_utilization_pct", when(wire::GPU_UTILIZATION, g.memory_utilization_pct())},
      {"memory_used_bytes", when(wire::GPU_MEMORY, g.memory_used_bytes())},
      {"memory_total_bytes", when(wire::GPU_MEMORY, g.memory_total_bytes())},
      {"power_watts", when(wire::GPU_POWER, g.power_mw() / 1000.0)},
      {"energy_joules", when(wire::GPU_ENERGY, static_cast<double>(g.energy_mj()) / 1000.0)},
      {"temperature_c", when(wire::GPU_TEMPERATURE, g.temperature_c())},
      {"sm_clock_mhz", when(wire::GPU_CLOCKS, g.sm_clock_mhz())},
      {"mem_clock_mhz", when(wire::GPU_CLOCKS, g.mem_clock_mhz())},
      {"clock_event_reasons", when(wire::GPU_CLOCK_EVENTS, std::move(reasons))},
      {"throttling",
       when(wire::GPU_CLOCK_EVENTS, (g.clock_event_reasons() & wire::kGpuThrottleReasons) != 0)},
      {"throttle_seconds",
       when(wire::GPU_THROTTLE_TIME, static_cast<double>(g.throttle_ns()) / 1e9)},
      {"ecc_corrected", when(wire::GPU_ECC, g.ecc_corrected())},
      {"ecc_uncorrected", when(wire::GPU_ECC, g.ecc_uncorrected())},
      {"remapped_rows_corrected", when(wire::GPU_REMAPPED_ROWS, g.remapped_rows_corrected())},
      {"remapped_rows_uncorrected", when(wire::GPU_REMAPPED_ROWS, g.remapped_rows_uncorrected())},
      {"remap_pending", when(wire::GPU_REMAPPED_ROWS, g.remap_pending())},
      {"remap_failed", when(wire::GPU_REMAPPED_ROWS, g.remap_failed())},
      {"nvlink_errors", when(wire::GPU_NVLINK, g.nvlink_errors())}};
}

json gpuEventJson(const wire::GpuEvent& e) {
  return json{{"index", e.index()},
              {"uuid", e.uuid()},
              {"time_ns", e.time_ns()},
              {"kind", eventKind(e.kind())},
              {"code", e.code()}};
}

ApiResponse Api::nodeGpus(const std::string& node,
                          const std::vector<std::pair<std::string, std::string>>& query) const {
  QueryParams params(query);
  auto from = params.signedInt("from");
  if (!from) return errorResponse(400, from.message());
  auto to = params.signedInt("to");
  if (!to) return errorResponse(400, to.message());
  auto limit = params.unsignedInt("limit", kMaxGpuSamples);
  if (!limit) return errorResponse(400, limit.message());
  if (*limit && **limit == 0) return errorResponse(400, "parameter 'limit' must be at least 1");
  storage::HostSampleQuery q;
  q.node = node;
  if (*from) q.fromNs = **from;
  if (*to) q.toNs = **to;
  if (q.fromNs > q.toNs) {
    return errorResponse(400, "parameter 'from' must not be greater than parameter 'to'");
  }
  q.limit = *limit ? static_cast<size_t>(**limit) : kDefaultGpuSamples;

  auto nodes = store_.nodes();
  if (!nodes) return errorResponse(500, nodes.message());
  if (std::none_of(nodes->begin(), nodes->end(), [&](const auto& n) { return n.node == node; })) {
    return errorResponse(404, "unknown node '" + node + "'");
  }
  auto rows = store_.hostSamples(q);
  if (!rows) return errorResponse(500, rows.message());
  json samples = json::array();
  json events = json::array();
  for (const auto& h : *rows) {
    for (const auto& e : h.gpu_events()) events.push_back(gpuEventJson(e));
    if (h.gpus_size() == 0) continue;
    json gpus = json::array();
    for (const auto& g : h.gpus()) gpus.push_back(gpuSampleJson(g));
    samples.push_back(json{{"time_ns", h.time_ns()}, {"gpus", std::move(gpus)}});
  }
  return jsonResponse(
      json{{"node", node}, {"samples", std::move(samples)}, {"events", std::move(events)}});
}

}  // namespace trainscope::http
