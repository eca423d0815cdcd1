#include "collector/capture/manager.h"

#include <zlib.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <system_error>
#include <utility>

#include "collector/capture/gzip_file.h"
#include "collector/capture/manager_internal.h"
#include "common/checked.h"
#include "common/median.h"
#include "common/prometheus_text.h"

namespace trainscope::capture {
namespace {

using namespace internal;  // this stage's own helpers

using nlohmann::json;
namespace fs = std::filesystem;

using wire::CaptureState;
using wire::RankState;

// Steps of the latest summary rows whose median step time sets a trace capture's deadline.
constexpr int64_t kMedianWindowSteps = 20;

// The request's own fields, before the job is looked at.
Status checkRequest(const CaptureRequest& request) {
  if (request.kind != "trace" && request.kind != "stacks") {
    return Status::error(StatusCode::kInvalidArgument,
                         "kind: must be \"trace\" or \"stacks\", got \"" + request.kind + "\"");
  }
  if (request.kind == "trace" && (request.steps == 0 || request.steps > kMaxSteps)) {
    return Status::error(StatusCode::kInvalidArgument, "steps: must be 1.." +
                                                           std::to_string(kMaxSteps) + ", got " +
                                                           std::to_string(request.steps));
  }
  if (request.history > kMaxHistory) {
    return Status::error(StatusCode::kInvalidArgument, "history: must be at most " +
                                                           std::to_string(kMaxHistory) + ", got " +
                                                           std::to_string(request.history));
  }
  return Status::ok();
}

// Every selected rank starts pending, or failed when it cannot answer: never registered,
// ended, or on no known node.
std::vector<storage::CaptureRankRow> initialRankStatus(
    const std::vector<uint32_t>& ranks, const std::map<uint32_t, const storage::RankRow*>& byRank,
    int64_t nowNs) {
  std::vector<storage::CaptureRankRow> out;
  for (uint32_t r : ranks) {
    storage::CaptureRankRow rs;
    rs.rank = r;
    rs.updatedNs = nowNs;
    auto it = byRank.find(r);
    if (it != byRank.end()) rs.node = it->second->node;
    if (it == byRank.end()) {
      rs.state = RankState::kFailed;
      rs.detail = "rank " + std::to_string(r) + " never registered with the collector";
    } else if (it->second->ended) {
      rs.state = RankState::kFailed;
      rs.detail =
          "rank " + std::to_string(r) + " ended at step " + std::to_string(it->second->endedStep);
    } else if (rs.node.empty()) {
      rs.state = RankState::kFailed;
      rs.detail = "rank " + std::to_string(r) + " has no known node";
    }
    out.push_back(std::move(rs));
  }
  return out;
}

}  // namespace

namespace internal {

storage::CaptureRow finalRow(storage::CaptureRow row,
                             const std::map<uint32_t, std::string>& failures, int64_t nowNs) {
  size_t done = 0;
  for (auto& r : row.rankStatus) {
    if (auto it = failures.find(r.rank); it != failures.end() && r.state == RankState::kDone) {
      r.state = RankState::kFailed;
      r.detail = it->second;
      r.updatedNs = nowNs;
    }
    if (r.state == RankState::kDone) ++done;
  }
  row.state = done == row.rankStatus.size() && done > 0 ? CaptureState::kComplete
              : done > 0                                ? CaptureState::kPartial
                                                        : CaptureState::kFailed;
  row.finishedNs = nowNs;
  row.updatedNs = nowNs;
  row.summary = captureSummary(row);
  return row;
}

}  // namespace internal

std::string captureSummary(const storage::CaptureRow& row) {
  size_t done = 0;
  size_t failed = 0;
  // A trace whose file begins after the history it asked for: the probe's flight recorder held
  // fewer steps (its step or byte bound), or the rank began later. Said, so a reader does not
  // take a missing onset for a healthy one.
  const int64_t askedFrom = std::max<int64_t>(row.startStep - row.history, 0);
  std::vector<uint32_t> shortRanks;
  int64_t shortFrom = -1;
  for (const auto& r : row.rankStatus) {
    if (r.state == RankState::kDone) ++done;
    if (r.state == RankState::kFailed) ++failed;
    if (row.kind == "trace" && row.history > 0 && r.state == RankState::kDone &&
        r.firstStep > askedFrom) {
      shortRanks.push_back(r.rank);
      shortFrom = std::max(shortFrom, r.firstStep);
    }
  }
  std::string out = summaryOf(done, failed, row.rankStatus.size());
  if (!shortRanks.empty()) {
    out += "; history short on " + std::to_string(shortRanks.size()) +
           (shortRanks.size() == 1 ? " rank" : " ranks") + " (rank " +
           std::to_string(shortRanks.front()) + (shortRanks.size() > 1 ? ", ..." : "") +
           "): from step " + std::to_string(shortFrom) + ", asked from " +
           std::to_string(askedFrom) + " (the probe held fewer steps)";
  }
  return out;
}

std::string captureMetricsText(const CaptureStats& s) {
  MetricsText m;
  m.family("trainscope_captures_started_total", "counter",
           "Captures started, by kind (trace, stacks, import) and trigger (request, anomaly).");
  for (const char* kind : {"trace", "stacks", "import"}) {
    for (const char* trigger : {"request", "anomaly"}) {
      if (std::string_view(kind) == "import" && std::string_view(trigger) == "anomaly") continue;
      auto it = s.started.find({kind, trigger});
      m.sample({{"kind", kind}, {"trigger", trigger}},
               static_cast<double>(it == s.started.end() ? 0 : it->second));
    }
  }
  m.family("trainscope_captures_finished_total", "counter",
           "Captures finished, by final state (complete, partial, failed).");
  for (CaptureState state :
       {CaptureState::kComplete, CaptureState::kPartial, CaptureState::kFailed}) {
    auto it = s.finished.find(state);
    m.sample({{"state", wire::toString(state)}},
             static_cast<double>(it == s.finished.end() ? 0 : it->second));
  }
  auto counter = [&](const char* name, const char* help, uint64_t value) {
    m.single(name, "counter", help, static_cast<double>(value));
  };
  counter("trainscope_capture_bytes_total", "Bytes of rank files received in chunks.", s.bytes);
  counter("trainscope_capture_chunks_total", "File chunks written.", s.chunks);
  counter("trainscope_capture_chunks_ignored_total",
          "File chunks skipped: repeats, or for ranks no longer running.", s.chunksIgnored);
  counter("trainscope_capture_auto_skipped_total",
          "Anomalies without an automatic capture (the policy's choice or a refusal).",
          s.autoSkipped);
  m.family("trainscope_capture_auto_skips_total", "counter",
           "Anomalies the automatic-capture policy passed over, by reason: small_gain (estimated "
           "gain below the floor), budget (the job's captures for the interval spent), "
           "not_better (not clearly more important than the interval's capture), resolved "
           "(resolved or ended while waiting), expired.");
  for (const auto& [reason, n] :
       {std::pair{"small_gain", s.autoSkips.smallGain}, std::pair{"budget", s.autoSkips.budget},
        std::pair{"not_better", s.autoSkips.notBetter}, std::pair{"resolved", s.autoSkips.resolved},
        std::pair{"expired", s.autoSkips.expired}}) {
    m.sample({{"reason", reason}}, static_cast<double>(n));
  }
  m.single("trainscope_capture_auto_candidates", "gauge",
           "Open anomalies waiting for the automatic-capture decision.",
           static_cast<double>(s.autoCandidates));
  counter("trainscope_capture_store_failures_total", "Capture rows the store refused.",
          s.storeFailures);
  return m.text();
}

CaptureManager::CaptureManager(CaptureManagerOptions options, storage::Store& store,
                               const Clock& clock, CommandSink sink)
    : options_(std::move(options)),
      store_(store),
      clock_(clock),
      sink_(std::move(sink)),
      policy_(options_.autoCapture) {}

CaptureManager::~CaptureManager() {
  flush();
}

json CaptureManager::describe(const storage::CaptureRow& row) const {
  if (options_.describe) return options_.describe(row);
  return json{
      {"id", row.id}, {"job", row.job}, {"kind", row.kind}, {"state", wire::toString(row.state)}};
}

void CaptureManager::failRankLocked(Active& a, storage::CaptureRankRow& r,
                                    const std::string& detail) {
  r.state = RankState::kFailed;
  r.detail = detail;
  r.updatedNs = clock_.nowNs();
  changedLocked(a, r);
  std::error_code ec;
  fs::remove(fs::path(directory(a.row.id)) / (rankFileName(r.rank) + ".part"), ec);
  logWarn(kComponent,
          "capture " + a.row.id + ": rank " + std::to_string(r.rank) + " failed: " + detail);
}

void CaptureManager::finalizeLocked(Active& a, const std::map<uint32_t, std::string>& failures,
                                    std::optional<uint64_t> traceBytes) {
  a.row = finalRow(std::move(a.row), failures, clock_.nowNs());
  a.row.traceBytes = a.row.state == CaptureState::kFailed ? std::nullopt : traceBytes;
  ++stats_.finished[a.row.state];
  logInfo(kComponent, "capture " + a.row.id + " of job " + a.row.job + " " +
                          wire::toString(a.row.state) + ": " + a.row.summary);
}

int64_t CaptureManager::medianStepNs(const std::string& job, int64_t latest) {
  storage::SummaryQuery q;
  q.job = job;
  q.limit = 100000;
  if (latest >= 0) q.fromStep = std::max<int64_t>(0, latest - kMedianWindowSteps);
  auto rows = store_.summary(q);
  if (!rows || rows->empty()) return options_.fallbackStepNs;
  std::vector<int64_t> medians;
  for (const auto& r : *rows) medians.push_back(r.medianNs);
  const int64_t m = upperMedianInPlace(medians);
  return m > 0 ? m : options_.fallbackStepNs;
}

Result<storage::CaptureRow> CaptureManager::start(const std::string& job,
                                                  const CaptureRequest& request,
                                                  const std::optional<std::string>& anomalyId,
                                                  const std::string& trigger) {
  if (Status s = checkRequest(request); !s) return s;
  auto found = jobRanks(job);
  if (!found) return found.status();
  const JobRanks& jr = *found;
  auto ranks = resolveRanks(request.ranks, jr.worldSize, jr.known);
  if (!ranks) return Status::error(StatusCode::kInvalidArgument, ranks.message());

  const bool trace = request.kind == "trace";
  const int64_t now = clock_.nowNs();
  storage::CaptureRow row;
  row.id = newCaptureId(now);
  row.job = job;
  row.kind = request.kind;
  row.state = CaptureState::kRunning;
  row.reason = request.reason.empty() ? kDefaultReason : request.reason;
  row.anomalyId = anomalyId;
  row.ranks = *ranks;
  row.maxBytes = request.maxBytes.value_or(options_.defaultMaxBytes);
  row.createdNs = now;
  row.updatedNs = now;
  if (trace) {
    if (Status s = scheduleTrace(request, jr, now, &row); !s) return s;
  } else {
    row.deadlineNs = now + options_.stacksDeadlineNs;
  }
  row.rankStatus = initialRankStatus(*ranks, jr.byRank, now);
  std::error_code ec;
  fs::create_directories(directory(row.id), ec);
  if (ec) {
    return Status::error(StatusCode::kError,
                         "cannot create " + directory(row.id) + ": " + ec.message());
  }

  MutexLock lock(&mu_);
  if (Status s = overlapLocked(row); !s) return s;
  row.summary = captureSummary(row);
  if (Status s = store_.writeCapture(row); !s)
    return Status::error(StatusCode::kError, s.message());

  Active a;
  a.row = std::move(row);
  const bool changed = sendCommandsLocked(a);
  ++stats_.started[{a.row.kind, trigger}];
  logInfo(kComponent, "capture " + a.row.id + " of job " + job + " started (" + a.row.kind + ", " +
                          std::to_string(a.row.ranks.size()) + " ranks" +
                          (trace ? ", steps " + std::to_string(a.row.startStep) + ".." +
                                       std::to_string(a.row.startStep + a.row.steps - 1)
                                 : std::string()) +
                          "): " + a.row.reason);
  const bool nothingDone = std::none_of(a.row.rankStatus.begin(), a.row.rankStatus.end(),
                                        [](const auto& r) { return r.state == RankState::kDone; });
  if (allFinal(a.row) && nothingDone) {
    finalizeLocked(a, {}, std::nullopt);  // no rank can answer: failed at once
    persistLocked(a.row);                 // never running: no flush holds a copy of it
    return a.row;
  }
  if (changed) persistLocked(a.row);
  takeChangedLocked(a, nullptr);  // stored whole just now
  storage::CaptureRow out = a.row;
  active_.emplace(a.row.id, std::move(a));
  return out;
}

Result<CaptureManager::JobRanks> CaptureManager::jobRanks(const std::string& job) {
  auto exists = store_.jobExists(job);
  if (!exists) return Status::error(StatusCode::kError, exists.message());
  if (!*exists) return Status::error(StatusCode::kNotFound, "unknown job '" + job + "'");
  auto rankRows = store_.ranks(job);
  if (!rankRows) return Status::error(StatusCode::kError, rankRows.message());
  JobRanks jr;
  jr.rows = std::move(*rankRows);
  for (const auto& r : jr.rows) {
    jr.worldSize = std::max(jr.worldSize, r.worldSize);
    jr.latest = std::max(jr.latest, r.latestStep);
    jr.byRank[r.rank] = &r;
    jr.known.push_back(r.rank);
  }
  return Result<JobRanks>(std::move(jr));  // moved: byRank points into rows
}

Status CaptureManager::scheduleTrace(const CaptureRequest& request, const JobRanks& jr,
                                     int64_t nowNs, storage::CaptureRow* row) {
  const int64_t latest = jr.latest;
  const int64_t stepNs = medianStepNs(row->job, latest);
  const int64_t leadSteps =
      std::max<int64_t>(2, (options_.minLeadNs + stepNs - 1) / std::max<int64_t>(stepNs, 1) + 1);
  // Checked: a database from before the step limit may hold a latest step near INT64_MAX.
  const std::optional<int64_t> start =
      request.startStep ? request.startStep : checkedAdd(latest, leadSteps);
  if (!start || *start > wire::kMaxStep) {
    return Status::error(StatusCode::kConflict, "the job's latest step " + std::to_string(latest) +
                                                    " leaves no start step within the step limit " +
                                                    std::to_string(wire::kMaxStep));
  }
  row->startStep = *start;
  row->steps = request.steps;
  row->history = request.history;
  if (request.onsetStep) {
    // The history reaches back to a few steps before the onset, as far as the limit allows:
    // detection, the decision window and the lead put the start step tens to hundreds of steps
    // after the onset at fast steps, far beyond the default K.
    const int64_t onset = std::max<int64_t>(*request.onsetStep, 0);
    const int64_t from = std::max<int64_t>(onset - kOnsetLeadSteps, 0);
    const int64_t limit =
        std::min<int64_t>(std::max(request.history, request.historyLimit), kMaxHistory);
    const int64_t want = *start - from;
    row->history = static_cast<uint32_t>(std::max<int64_t>(request.history, std::min(want, limit)));
    const int64_t heldFrom = *start - static_cast<int64_t>(row->history);
    row->reason += heldFrom <= onset ? "; history from step " + std::to_string(heldFrom) +
                                           " covers the onset (step " + std::to_string(onset) + ")"
                                     : "; the onset (step " + std::to_string(onset) +
                                           ") is out of reach: history capped at " +
                                           std::to_string(row->history) + " steps (from step " +
                                           std::to_string(heldFrom) + ")";
  }
  for (uint32_t r : row->ranks) {
    auto it = jr.byRank.find(r);
    if (it != jr.byRank.end() && it->second->latestStep >= row->startStep) {
      return Status::error(StatusCode::kConflict, "start step " + std::to_string(row->startStep) +
                                                      " already passed: rank " + std::to_string(r) +
                                                      " is at step " +
                                                      std::to_string(it->second->latestStep));
    }
  }
  const int64_t ahead = row->startStep + row->steps - std::max<int64_t>(latest, 0);
  const double waitNs =
      static_cast<double>(std::max<int64_t>(ahead, 1)) * static_cast<double>(stepNs) * 3.0;
  // A start step far ahead still gets a finite deadline (about 100 years at most).
  row->deadlineNs = nowNs + static_cast<int64_t>(std::min(waitNs, 3e18)) + options_.deadlineSlackNs;
  return Status::ok();
}

Status CaptureManager::overlapLocked(const storage::CaptureRow& row) const {
  for (const auto& [id, a] : active_) {
    if (a.row.job != row.job || allFinal(a.row)) continue;
    for (const auto& r : a.row.rankStatus) {
      if (wire::isFinal(r.state)) continue;
      // row.ranks is sorted (resolveRanks): a capture of 65,536 ranks checks in O(n log n).
      if (std::binary_search(row.ranks.begin(), row.ranks.end(), r.rank)) {
        return Status::error(StatusCode::kConflict,
                             "capture " + id + " is already running on rank " +
                                 std::to_string(r.rank) + " of job " + row.job);
      }
    }
  }
  return Status::ok();
}

bool CaptureManager::sendCommandsLocked(Active& a) {
  std::map<std::string, std::vector<uint32_t>> byNode;
  for (const auto& r : a.row.rankStatus) {
    if (!wire::isFinal(r.state)) byNode[r.node].push_back(r.rank);
  }
  const bool trace = a.row.kind == "trace";
  bool changed = false;
  for (const auto& [node, nodeRanks] : byNode) {
    wire::Command cmd;
    cmd.set_id(a.row.id);
    cmd.set_job(a.row.job);
    for (uint32_t r : nodeRanks) cmd.add_ranks(r);
    if (trace) {
      auto* c = cmd.mutable_capture();
      c->set_capture_id(a.row.id);
      c->set_start_step(a.row.startStep);
      c->set_steps(a.row.steps);
      c->set_history(a.row.history);
      c->set_max_bytes(a.row.maxBytes);
    } else {
      cmd.mutable_stacks()->set_capture_id(a.row.id);
    }
    Status sent = sink_ ? sink_(node, cmd) : Status::error("captures cannot send commands");
    if (!sent) {
      for (uint32_t r : nodeRanks) {
        if (auto* rs = rankOf(a, r)) failRankLocked(a, *rs, sent.message());
      }
      changed = true;
    }
  }
  return changed;
}

void CaptureManager::offerAnomaly(const storage::AnomalyRow& anomaly) {
  MutexLock lock(&autoMu_);
  policy_.offer(anomaly, clock_.nowNs());
}

std::vector<storage::AnomalyRow> CaptureManager::pickAutoCaptures(int64_t nowNs) {
  MutexLock lock(&autoMu_);
  std::vector<storage::AnomalyRow> out;
  for (auto& row : policy_.due(nowNs)) {
    auto started = startForAnomaly(row);
    if (!started) {
      // A capture still running on its ranks, or a start step the ranks passed meanwhile: the
      // candidate stays and is tried again next time. Anything else is final.
      if (started.code() != StatusCode::kConflict) {
        policy_.drop(row);
        ++autoRefused_;
      }
      logWarn(kComponent,
              "no automatic capture for anomaly " + row.id + " now: " + started.message());
      continue;
    }
    policy_.started(row, nowNs);
    logInfo(kComponent, "automatic capture " + started->id + " for anomaly " + row.id +
                            " (estimated gain " + std::to_string(anomalyGain(row)) + ", score " +
                            std::to_string(anomalyScore(row)) + ")");
    row.captureId = started->id;
    out.push_back(std::move(row));
  }
  return out;
}

Result<storage::CaptureRow> CaptureManager::startForAnomaly(const storage::AnomalyRow& anomaly) {
  if (options_.autoCapture.intervalNs <= 0) {
    return Status::error(StatusCode::kUnavailable, "automatic captures are off");
  }
  if (anomaly.state != storage::AnomalyState::kOpen) {
    return Status::error(StatusCode::kUnavailable,
                         "anomaly " + anomaly.id + " is " + storage::toString(anomaly.state));
  }
  CaptureRequest req;
  std::set<uint32_t> named(anomaly.ranks.begin(), anomaly.ranks.end());
  // One healthy reference rank: the lowest rank the anomaly does not name.
  auto rankRows = store_.ranks(anomaly.job);
  uint32_t worldSize = 0;
  std::set<uint32_t> known;
  std::set<uint32_t> ended;
  if (rankRows) {
    for (const auto& r : *rankRows) {
      worldSize = std::max(worldSize, r.worldSize);
      known.insert(r.rank);
      if (r.ended) ended.insert(r.rank);
    }
  }
  // Ranks that ended (an imported job, or one that finished before the anomaly was judged)
  // can record nothing: a capture would only fail.
  if (!named.empty() &&
      std::all_of(named.begin(), named.end(), [&](uint32_t r) { return ended.count(r) > 0; })) {
    return Status::error(StatusCode::kUnavailable, "the anomaly's ranks all ended");
  }
  const uint32_t limit = worldSize > 0 ? worldSize : (known.empty() ? 0 : *known.rbegin() + 1);
  for (uint32_t r = 0; r < limit; ++r) {
    if (named.count(r) == 0 && (worldSize > 0 || known.count(r) > 0)) {
      named.insert(r);
      break;
    }
  }
  if (named.empty()) return Status::error(StatusCode::kUnavailable, "the job has no known rank");
  req.ranks.all = false;
  req.ranks.ranks.assign(named.begin(), named.end());
  req.kind = anomaly.kind == "hang" ? "stacks" : "trace";
  req.steps = options_.autoSteps;
  req.history = options_.autoHistory;
  if (anomaly.onsetStep >= 0) req.onsetStep = anomaly.onsetStep;
  req.historyLimit = options_.autoMaxHistory;
  req.reason = "anomaly " + anomaly.id + ": " + anomaly.kind;
  return start(anomaly.job, req, anomaly.id, "anomaly");
}

Result<storage::CaptureRow> CaptureManager::adoptImport(const storage::CaptureRow& row) {
  if (!safeId(row.id) || row.kind != "import") {
    return Result<storage::CaptureRow>::error("capture id '" + row.id + "' is not an import's");
  }
  MutexLock lock(&mu_);
  Active a;
  a.row = row;
  a.row.summary = captureSummary(a.row);
  if (Status s = store_.writeCapture(a.row); !s) return s;
  ++stats_.started[{"import", "request"}];
  logInfo(kComponent, "import " + a.row.id + " of job " + a.row.job + ": " +
                          std::to_string(a.row.ranks.size()) + " rank timelines to merge");
  storage::CaptureRow out = a.row;
  active_.emplace(a.row.id, std::move(a));
  return out;
}

void CaptureManager::onCommandItem(const std::string& node, const wire::Envelope& item) {
  // Statuses and chunks name their capture and rank. With CURVE, ingest passes only those
  // from the node the rank lives on (collector/ingest/ingest.h, "Ranks and nodes").
  (void)node;
  MutexLock lock(&mu_);
  if (item.has_command_status()) onStatusLocked(item.command_status());
  if (item.has_file_chunk()) onChunkLocked(item.file_chunk());
}

void CaptureManager::onStatusLocked(const wire::CommandStatus& st) {
  auto it = active_.find(st.command_id());
  if (it == active_.end() || it->second.merging) return;
  Active& a = it->second;
  auto* r = rankOf(a, st.rank());
  if (r == nullptr || wire::isFinal(r->state)) return;
  const int64_t now = clock_.nowNs();
  const std::optional<RankState> state = wire::commandState(st);
  if (state == RankState::kFailed) {
    failRankLocked(a, *r, st.detail().empty() ? std::string("failed") : st.detail());
  } else if (state == RankState::kRecording) {
    if (r->state != RankState::kPending) return;  // a late repeat after the upload began
    r->state = RankState::kRecording;
    r->detail = st.detail();
    r->updatedNs = now;
  } else if (state == RankState::kUploading) {
    r->state = RankState::kUploading;
    r->detail = st.detail();
    r->truncated = st.truncated();
    r->firstStep = st.first_step();
    r->lastStep = st.last_step();
    r->updatedNs = now;
  } else {
    return;  // pending and done are the collector's to decide
  }
  changedLocked(a, *r);
}

void CaptureManager::onChunkLocked(const wire::FileChunk& chunk) {
  auto it = active_.find(chunk.command_id());
  if (it == active_.end() || it->second.merging ||
      (!chunk.job().empty() && chunk.job() != it->second.row.job)) {
    ++stats_.chunksIgnored;
    return;
  }
  Active& a = it->second;
  auto* r = rankOf(a, chunk.rank());
  if (r == nullptr || wire::isFinal(r->state)) {
    ++stats_.chunksIgnored;
    return;
  }
  const std::string& data = chunk.data();
  uint64_t& written = a.written[r->rank];
  const uint32_t crc = static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
  if (crc != chunk.crc32()) {
    failRankLocked(a, *r,
                   "chunk at offset " + std::to_string(chunk.offset()) + " failed its checksum");
    return;
  }
  if (chunk.offset() < written) {
    ++stats_.chunksIgnored;  // an agent resend: that part is on disk already
    return;
  }
  if (chunk.offset() > written) {
    failRankLocked(a, *r,
                   "chunk at offset " + std::to_string(chunk.offset()) +
                       " leaves a gap: the file has " + std::to_string(written) + " bytes");
    return;
  }
  if (written + data.size() > a.row.maxBytes + options_.chunkSlackBytes) {
    failRankLocked(a, *r, "file exceeds max_bytes (" + std::to_string(a.row.maxBytes) + ")");
    return;
  }
  const fs::path dir = directory(a.row.id);
  const fs::path part = dir / (rankFileName(r->rank) + ".part");
  {
    std::error_code ec;
    fs::create_directories(dir, ec);
    std::ofstream out(part, std::ios::binary | (written == 0 ? std::ios::trunc : std::ios::app));
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    out.flush();
    if (!out) {
      failRankLocked(a, *r, "cannot write " + part.string());
      return;
    }
  }
  written += data.size();
  stats_.bytes += data.size();
  ++stats_.chunks;
  bool changed = false;
  if (r->state == RankState::kPending || r->state == RankState::kRecording) {
    r->state = RankState::kUploading;
    r->updatedNs = clock_.nowNs();
    changed = true;
  }
  if (chunk.last()) {
    if (chunk.total_bytes() != 0 && chunk.total_bytes() != written) {
      failRankLocked(a, *r,
                     "file has " + std::to_string(written) + " bytes, its last chunk said " +
                         std::to_string(chunk.total_bytes()));
    } else {
      std::error_code ec;
      fs::rename(part, dir / rankFileName(r->rank), ec);
      if (ec) {
        failRankLocked(a, *r, "cannot store " + part.string() + ": " + ec.message());
      } else {
        r->state = RankState::kDone;
        r->bytes = written;
        r->updatedNs = clock_.nowNs();
      }
    }
    changed = true;
  }
  if (changed) changedLocked(a, *r);
}

void CaptureManager::onCommitted(const storage::WriteBatch& batch) {
  if (batch.goodbyes.empty() && batch.hosts.empty()) return;
  MutexLock lock(&mu_);
  if (active_.empty()) return;
  // Only ranks that have not begun their upload fail: an uploading rank's file is on its way.
  auto stillWaiting = [](const storage::CaptureRankRow& r) {
    return r.state == RankState::kPending || r.state == RankState::kRecording;
  };
  for (const auto& bye : batch.goodbyes) {
    for (auto& [id, a] : active_) {
      if (a.merging || a.row.job != bye.job()) continue;
      auto* r = rankOf(a, bye.rank());
      if (r == nullptr || !stillWaiting(*r)) continue;
      if (a.row.kind == "trace" && bye.last_step() >= a.row.startStep + a.row.steps - 1) continue;
      failRankLocked(a, *r,
                     "rank exited at step " + std::to_string(bye.last_step()) +
                         " before the capture finished");
    }
  }
  for (const auto& host : batch.hosts) {
    for (const auto& proc : host.procs()) {
      if (proc.alive()) continue;
      for (auto& [id, a] : active_) {
        if (a.merging || a.row.job != proc.job()) continue;
        auto* r = rankOf(a, proc.rank());
        if (r == nullptr || !stillWaiting(*r)) continue;
        failRankLocked(a, *r,
                       "the process of rank " + std::to_string(proc.rank()) + " (pid " +
                           std::to_string(proc.pid()) + ") is gone, reported by agent " +
                           host.node());
      }
    }
  }
}

CaptureStats CaptureManager::stats() const {
  CaptureStats out;
  {
    MutexLock lock(&mu_);
    out = stats_;
  }
  MutexLock lock(&autoMu_);
  out.autoSkips = policy_.skips();
  out.autoSkipped = out.autoSkips.total() + autoRefused_;
  out.autoCandidates = policy_.candidates();
  return out;
}

}  // namespace trainscope::capture
