// The compact rank x step routes of the JSON API (/heatmap and /parallel): one window of steps
// checked against the request limits, and the job's ranks x steps cells written straight to
// text. Every size comes from checked arithmetic: 'from' and 'to' are any int64 a client sends.
#include <algorithm>
#include <unordered_map>

#include "collector/http/api.h"
#include "collector/http/json_writer.h"
#include "collector/http/parallel_metrics.h"
#include "collector/http/request_target.h"
#include "common/checked.h"

namespace trainscope::http {
namespace {

using Query = std::vector<std::pair<std::string, std::string>>;

// Most steps one heatmap request may cover, and most rank x step cells (values sent): a
// 65,536-rank job can still be shown over 64 steps, and the response stays under ~40 MB.
constexpr int64_t kMaxHeatmapSteps = 10000;
constexpr int64_t kMaxHeatmapCells = int64_t{1} << 22;
// /parallel parses each cell's stored detail (operators included), which the heatmap's
// compute-only read does not: it gets a quarter of the heatmap's cells (not measured at the cap).
constexpr int64_t kMaxParallelCells = int64_t{1} << 20;

}  // namespace

bool Api::stepWindow(const std::string& job, const Query& query, int64_t maxCells, StepWindow* out,
                     ApiResponse* failure) const {
  QueryParams params(query);
  auto from = params.signedInt("from");
  auto to = params.signedInt("to");
  if (!from || !to) {
    *failure = errorResponse(400, !from ? from.message() : to.message());
    return false;
  }
  if (!*from || !*to) {
    *failure = errorResponse(400, "parameters 'from' and 'to' are required");
    return false;
  }
  if (**from > **to) {
    *failure = errorResponse(400, "parameter 'from' (" + std::to_string(**from) +
                                      ") must not be greater than parameter 'to' (" +
                                      std::to_string(**to) + ")");
    return false;
  }
  const std::optional<int64_t> stepCount = inclusiveCount(**from, **to);
  if (!stepCount || *stepCount > kMaxHeatmapSteps) {
    *failure = errorResponse(
        400, "at most " + std::to_string(kMaxHeatmapSteps) + " steps ('from' to 'to') per request");
    return false;
  }
  if (!checkJob(job, failure)) return false;
  auto ranks = store_.ranks(job);
  if (!ranks) {
    *failure = errorResponse(500, ranks.message());
    return false;
  }
  const int64_t rankCount = std::max<int64_t>(1, static_cast<int64_t>(ranks->size()));
  const std::optional<int64_t> cells = checkedMul(*stepCount, rankCount);
  if (!cells || *cells > maxCells) {
    *failure = errorResponse(400, "at most " + std::to_string(maxCells) +
                                      " rank x step cells per request: job '" + job + "' has " +
                                      std::to_string(rankCount) + " ranks, so at most " +
                                      std::to_string(maxCells / rankCount) + " steps");
    return false;
  }
  out->from = **from;
  out->to = **to;
  out->steps = static_cast<size_t>(*stepCount);
  out->ranks = std::move(*ranks);
  return true;
}

namespace {

// Calls visit(rankIndex, stepIndex, row) for each row of `rows` inside the window, where
// rankIndex is the rank's place in window.ranks. A store may return rows outside the range
// it was asked for; they are never indexed with.
template <typename Visit>
void forEachCell(const StepWindow& window, const std::vector<storage::StepRow>& rows, Visit visit) {
  std::unordered_map<uint32_t, size_t> index;
  for (size_t i = 0; i < window.ranks.size(); ++i) index.emplace(window.ranks[i].rank, i);
  for (const auto& row : rows) {
    auto it = index.find(row.rank);
    if (it == index.end() || row.step < window.from || row.step > window.to) continue;
    visit(it->second, static_cast<size_t>(row.step - window.from), row);
  }
}

// "from", "to" and "ranks" of a compact rank x step response.
void writeWindowHead(JsonWriter& w, const std::string& job, const StepWindow& window) {
  w.field("job", job);
  w.field("from", window.from);
  w.field("to", window.to);
  w.key("ranks");
  w.beginArray();
  for (const auto& rank : window.ranks) w.value(static_cast<uint64_t>(rank.rank));
  w.endArray();
}

}  // namespace

// GET /api/v1/jobs/{job}/heatmap?from=F&to=T: the dashboard heatmap's data in one compact
// response, {"job","from","to","ranks":[rank ids],"compute_ns":[ranks x steps, rank-major, 0
// where a rank did not report]}, about a twentieth of the /steps page it replaces (the browser
// parsed 3.5 MB of step objects for a 64 x 250 heatmap). Reads the store; any thread. Every
// size is computed with checked arithmetic: F and T are any int64 a client sends.
ApiResponse Api::heatmap(const std::string& job, const Query& query) const {
  StepWindow window;
  ApiResponse failure;
  if (!stepWindow(job, query, kMaxHeatmapCells, &window, &failure)) return failure;
  storage::StepQuery q;
  q.job = job;
  q.fromStep = window.from;
  q.toStep = window.to;
  q.limit = std::max<size_t>(1, window.ranks.size() * window.steps);
  auto rows = store_.steps(q);
  if (!rows) return errorResponse(500, rows.message());
  std::vector<int64_t> values(window.ranks.size() * window.steps, 0);
  forEachCell(window, *rows, [&](size_t rank, size_t step, const storage::StepRow& row) {
    values[rank * window.steps + step] = row.computeNs;
  });
  ApiResponse r;
  r.body.reserve(64 + values.size() * 10);
  JsonWriter w(&r.body);
  w.beginObject();
  writeWindowHead(w, job, window);
  w.key("compute_ns");
  w.beginArray();
  for (int64_t v : values) w.value(v);
  w.endArray();
  w.endObject();
  return r;
}

// GET /api/v1/jobs/{job}/parallel?from=F&to=T: the parallel-layout figures of every rank and
// step in one compact response (parallel_metrics.h defines them): {"job","from","to","ranks",
// "bubble_ratio","comm_overlap_ratio","mfu","hfu","all_to_all_share": each [ranks x steps,
// rank-major, null where the figure has no meaning or the rank did not report], "stages":
// [{"stage","ranks":[rank ids],"bubble_ratio":[per step, null where no rank of it did p2p]}]}.
// "stages" is empty unless the job declared a pipeline-parallel group.
ApiResponse Api::parallel(const std::string& job, const Query& query) const {
  StepWindow window;
  ApiResponse failure;
  if (!stepWindow(job, query, kMaxParallelCells, &window, &failure)) return failure;
  auto declared = store_.groups(job);
  if (!declared) return errorResponse(500, declared.message());
  const topology::Topology layout = topology::derive(*declared);
  storage::StepQuery q;
  q.job = job;
  q.fromStep = window.from;
  q.toStep = window.to;
  q.limit = std::max<size_t>(1, window.ranks.size() * window.steps);
  q.detail = true;
  auto rows = store_.steps(q);
  if (!rows) return errorResponse(500, rows.message());

  const size_t cells = window.ranks.size() * window.steps;
  std::vector<StepRatios> ratios(cells);
  std::vector<std::vector<const storage::StepRow*>> perStep(window.steps);
  forEachCell(window, *rows, [&](size_t rank, size_t step, const storage::StepRow& row) {
    ratios[rank * window.steps + step] = stepRatios(row);
    perStep[step].push_back(&row);
  });
  // Stage -> its ranks, from the layout (every rank with a pipeline coordinate).
  std::map<uint32_t, std::vector<uint32_t>> stageRanks;
  for (const auto& [rank, c] : layout.coords) {
    if (auto stage = c.along(wire::GROUP_PP)) stageRanks[*stage].push_back(rank);
  }
  std::map<uint32_t, std::vector<std::optional<double>>> stageSeries;
  for (const auto& [stage, members] : stageRanks) {
    (void)members;
    stageSeries[stage].resize(window.steps);
  }
  for (size_t step = 0; step < window.steps; ++step) {
    for (const StageBubble& b : stageBubbles(perStep[step], layout)) {
      stageSeries[b.stage].resize(window.steps);
      stageSeries[b.stage][step] = b.ratio;
    }
  }

  ApiResponse r;
  r.body.reserve(128 + cells * 5 * 8);
  JsonWriter w(&r.body);
  w.beginObject();
  writeWindowHead(w, job, window);
  auto series = [&](const char* key, std::optional<double> StepRatios::*field) {
    w.key(key);
    w.beginArray();
    for (const StepRatios& cell : ratios) {
      if (const auto& v = cell.*field) {
        w.value(*v);
      } else {
        w.null();
      }
    }
    w.endArray();
  };
  series("bubble_ratio", &StepRatios::bubble);
  series("comm_overlap_ratio", &StepRatios::overlap);
  series("mfu", &StepRatios::mfu);
  series("hfu", &StepRatios::hfu);
  series("all_to_all_share", &StepRatios::allToAllShare);
  w.key("stages");
  w.beginArray();
  for (const auto& [stage, values] : stageSeries) {
    w.beginObject();
    w.field("stage", stage);
    w.key("ranks");
    w.beginArray();
    for (uint32_t rank : stageRanks[stage]) w.value(rank);
    w.endArray();
    w.key("bubble_ratio");
    w.beginArray();
    for (const auto& v : values) {
      if (v) {
        w.value(*v);
      } else {
        w.null();
      }
    }
    w.endArray();
    w.endObject();
  }
  w.endArray();
  w.endObject();
  return r;
}

}  // namespace trainscope::http
