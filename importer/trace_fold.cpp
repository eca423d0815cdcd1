// Pass 2 of a trace's import (rank_trace.h foldTrace): reads the file again and folds each
// rank's events into the StepReports a probe would have sent (the probe's own StepAccumulator),
// writing the timeline as it goes; a file whose open steps outgrow the memory bound is folded
// again a window of steps at a time.
#include "importer/rank_trace.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <utility>

#include <nlohmann/json.hpp>

#include "agent/probe/fold.h"
#include "agent/probe/intern.h"
#include "agent/probe/record.h"
#include "agent/probe/trainscope_probe.h"
#include "common/checked.h"
#include "common/str_cat.h"
#include "importer/span_maker.h"
#include "importer/timeline_writer.h"

namespace trainscope::importer {
namespace {

using nlohmann::json;

// Marks the abort of a fold pass whose open steps outgrew FoldOptions::maxUnits.
constexpr const char* kOverBudget = "trainscope-import: over the memory bound";

// What an event does to a step report in this file.
enum class Role : uint8_t { kSkip, kStep, kCompute, kCollective, kData, kRange };

Role roleOf(EventKind kind, const TraceFacts& f, std::string_view name, std::string_view cat) {
  switch (kind) {
    case EventKind::kProfilerStep:
    case EventKind::kCaptureStep:
      return Role::kStep;
    case EventKind::kDeviceKernel:
    case EventKind::kDeviceCopy:
      return Role::kCompute;
    case EventKind::kDeviceComm:
      return f.comm == CommSource::kDeviceKernels ? Role::kCollective : Role::kSkip;
    case EventKind::kCpuOp:
      return f.device ? Role::kSkip : Role::kCompute;
    case EventKind::kCommAnnotation:
      return f.comm == CommSource::kAnnotations && hostTimedAnnotation(name) ? Role::kCollective
                                                                             : Role::kSkip;
    case EventKind::kParamComms:
      return f.comm == CommSource::kParamComms ? Role::kCollective : Role::kSkip;
    case EventKind::kC10dOp:
      return f.comm == CommSource::kC10d ? Role::kCollective : Role::kSkip;
    case EventKind::kDataLoad:
      return Role::kData;
    case EventKind::kCaptureOp:
      return Role::kCompute;
    case EventKind::kCaptureRange:
      return Role::kRange;
    case EventKind::kCaptureColl:
      return Role::kCollective;
    case EventKind::kGeneric:
      if (f.format == TraceFormat::kKineto) return Role::kSkip;
      if (genericCollectiveOp(name)) {
        return f.comm == CommSource::kGeneric ? Role::kCollective : Role::kSkip;
      }
      if (genericDataName(name, cat)) return Role::kData;
      return f.device ? Role::kSkip : Role::kCompute;
    case EventKind::kOther:
      return Role::kSkip;
  }
  return Role::kSkip;
}

const char* timelineCategory(Role role) {
  switch (role) {
    case Role::kStep:
      return "step";
    case Role::kCompute:
      return "op";
    case Role::kCollective:
      return "collective";
    case Role::kData:
    case Role::kRange:
      return "range";
    default:
      return nullptr;
  }
}

uint8_t rangeKindOf(std::string_view args) {
  std::string scratch;
  uint8_t kind = TS_RANGE_OTHER;
  (void)forEachMember(args, [&](std::string_view k, const JsonValue& v) {
    if (k != "kind") return true;
    const std::string_view s = stringOf(v, &scratch);
    if (s == "compute") kind = TS_RANGE_COMPUTE;
    if (s == "data") kind = TS_RANGE_DATA;
    if (s == "comm") kind = TS_RANGE_COMM;
    return false;
  });
  return kind;
}

// The text of a member's value ("\"cat\": \"kernel\"" -> "\"kernel\"").
std::string_view memberValue(std::string_view member) {
  size_t colon = member.find(':', member.find('"', 1) + 1);
  if (colon == std::string_view::npos) return {};
  ++colon;
  while (colon < member.size() && (member[colon] == ' ' || member[colon] == '\t' ||
                                   member[colon] == '\n' || member[colon] == '\r')) {
    ++colon;
  }
  return member.substr(colon);
}

void appendInt(std::string& out, int64_t v) {
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, res.ptr);
}

// Per rank: its steps, their accumulators, its lanes and counters.
struct RankState {
  RankInFile info;
  int64_t shiftNs = 0;
  std::vector<std::unique_ptr<probe::StepAccumulator>> acc;  // by step index, lazily
  std::vector<uint64_t> records;                             // by step index
  RankFold fold;
  std::unordered_map<std::string, uint32_t> lanes;  // lane key -> timeline tid
  std::vector<std::string> laneKeys;                // timeline tid -> lane key
  std::vector<bool> laneDevice;
  std::string lastPid;  // the lane of the previous event, to skip the lookup
  std::string lastTid;
  uint32_t lastLane = 0;
};

struct Window {
  int64_t fromNs = INT64_MIN;  // steps whose begin lies in [fromNs, toNs) are folded
  int64_t toNs = INT64_MAX;
  bool contains(int64_t beginNs) const { return beginNs >= fromNs && beginNs < toNs; }
};

class Folder final : public TraceHandler {
 public:
  Folder(const TraceFacts& facts, const FoldOptions& options, Window window, bool fold,
         TimelineSink* timeline)
      : f_(facts),
        o_(options),
        window_(window),
        fold_(fold),
        timeline_(timeline),
        spans_(facts.baseNs) {
    for (const auto& r : facts.ranks) {
      RankState st;
      st.info = r;
      auto it = o_.shiftNs.find(r.rank);
      st.shiftNs = it != o_.shiftNs.end() ? it->second : 0;
      st.acc.resize(r.steps.size());
      st.records.assign(r.steps.size(), 0);
      st.fold.rank = r.rank;
      if (r.pid) byPid_[*r.pid] = ranks_.size();
      ranks_.push_back(std::move(st));
    }
  }

  // The open steps outgrew FoldOptions::maxUnits: nothing was folded (the timeline, when one is
  // written, is still whole).
  bool overBudget() const { return overBudget_; }

  Status onTopLevel(std::string_view, std::string_view) override { return Status::ok(); }

  Status onEvent(const EventView& ev) override {
    RankState* rs = rankOf(ev);
    if (rs == nullptr) return Status::ok();
    if (ev.ph == 'M') {
      noteMetadata(*rs, ev);
      return Status::ok();
    }
    Span sp;
    const bool isSpan = spans_.feed(ev, &sp);
    Role role = Role::kSkip;
    int64_t stepIdx = -1;
    EventKind kind = EventKind::kOther;
    if (isSpan) {
      kind = kindOf(sp.cat, sp.name, f_.format == TraceFormat::kTrainscope);
      role = roleOf(kind, f_, sp.name, sp.cat);
      if (!f_.stepEventName.empty() && sp.name == f_.stepEventName) role = Role::kStep;
      stepIdx = stepIndex(*rs, sp.t0);
      if (fold_ && role != Role::kSkip && role != Role::kStep) {
        if (Status s = foldSpan(*rs, sp, kind, role, stepIdx); !s) return s;
      }
      if (!f_.joinCorrelations.empty() && sp.cat == "cuda_runtime") noteLaunch(sp);
    }
    if (timeline_ != nullptr && !timelineDone_)
      writeTimeline(*rs, ev, isSpan ? role : Role::kSkip, stepIdx, kind);
    return Status::ok();
  }

  // Reports of the folded window, in step order per rank, and the lane names.
  Status finish(const std::function<Status(wire::StepReport&&)>& onReport) {
    if (fold_ && !overBudget_) {
      for (auto& p : pendingKernels_) {
        auto it = joined_.find(p.correlation);
        if (it != joined_.end()) applyJoin(p.record, it->second);
        addRecord(p.rank, p.stepIdx, p.record);
      }
      pendingKernels_.clear();
      for (auto& rs : ranks_) {
        for (size_t i = 0; i < rs.info.steps.size(); ++i) {
          const StepSpan& s = rs.info.steps[i];
          if (!window_.contains(s.beginNs)) continue;
          auto& acc = rs.acc[i];
          if (!acc) {
            acc = std::make_unique<probe::StepAccumulator>(s.beginNs + rs.shiftNs,
                                                           s.endNs + rs.shiftNs);
          }
          wire::StepReport rep =
              acc->report(o_.job, rs.info.rank, s.step, o_.topOps, rs.records[i]);
          acc.reset();
          RankFold& fo = rs.fold;
          ++fo.steps;
          if (fo.firstStep < 0 || s.step < fo.firstStep) fo.firstStep = s.step;
          fo.lastStep = std::max(fo.lastStep, s.step);
          fo.computeNs += rep.compute_ns();
          fo.commNs += rep.comm_ns();
          fo.exposedNs += rep.exposed_comm_ns();
          fo.dataNs += rep.data_ns();
          fo.durationNs += rep.duration_ns();
          if (Status st = onReport(std::move(rep)); !st) return st;
        }
      }
    }
    if (timeline_ != nullptr && !timelineDone_) writeLaneNames();
    return Status::ok();
  }

  std::vector<RankFold> folds() const {
    std::vector<RankFold> out;
    for (const auto& rs : ranks_) out.push_back(rs.fold);
    return out;
  }

 private:
  struct PendingKernel {
    RankState* rank;
    int64_t stepIdx;
    int64_t correlation;
    probe::Record record;
  };

  RankState* rankOf(const EventView& ev) {
    if (!f_.mergedCapture) return &ranks_[0];
    int64_t pid = 0;
    if (!intOf(ev.pid, &pid)) return nullptr;
    auto it = byPid_.find(pid);
    return it == byPid_.end() ? nullptr : &ranks_[it->second];
  }

  static int64_t stepIndex(const RankState& rs, int64_t t) {
    const auto& steps = rs.info.steps;
    auto it = std::upper_bound(steps.begin(), steps.end(), t,
                               [](int64_t v, const StepSpan& s) { return v < s.beginNs; });
    if (it == steps.begin()) return -1;
    --it;
    if (t >= it->endNs) return -1;
    return it - steps.begin();
  }

  Status foldSpan(RankState& rs, const Span& sp, EventKind kind, Role role, int64_t stepIdx) {
    if (stepIdx < 0) {
      ++rs.fold.outside;
      return Status::ok();
    }
    const StepSpan& inStep = rs.info.steps[static_cast<size_t>(stepIdx)];
    if (!window_.contains(inStep.beginNs)) return Status::ok();
    probe::Record r{};
    // The span starts inside its step, whose placed times are sane (import_job checked them);
    // a span that outlasts the step (however long a trace says) is cut where the step ends.
    r.t0 = sp.t0 + rs.shiftNs;
    r.t1 = std::min(std::max(sp.t1, sp.t0), inStep.endNs) + rs.shiftNs;
    switch (role) {
      case Role::kCompute:
        r.type = probe::RecordType::kOp;
        r.name = intern(reportName(sp.name));
        ++rs.fold.kernels;
        break;
      case Role::kData:
        r.type = probe::RecordType::kRange;
        r.kind = TS_RANGE_DATA;
        r.name = intern(reportName(sp.name));
        break;
      case Role::kRange:
        r.type = probe::RecordType::kRange;
        r.kind = rangeKindOf(sp.args);
        r.name = intern(reportName(sp.name));
        break;
      case Role::kCollective: {
        r.type = probe::RecordType::kCollective;
        CollectiveArgs args;
        if (Status s = readCollectiveArgs(sp.args, &args); !s) {
          return Status::error("args of collective '" + std::string(sp.name) + "': " + s.message());
        }
        if (args.op == wire::COLL_UNKNOWN) {
          args.op = kind == EventKind::kDeviceComm ? collectiveOpFromKernel(sp.name)
                    : kind == EventKind::kGeneric
                        ? genericCollectiveOp(sp.name).value_or(wire::COLL_UNKNOWN)
                        : collectiveOpFromName(sp.name);
        }
        r.kind = static_cast<uint8_t>(args.op);
        r.group = intern(args.group);
        r.bytes = args.bytes;
        if (kind == EventKind::kDeviceComm && !args.sized && !f_.joinCorrelations.empty()) {
          int64_t corr = -1;
          (void)forEachMember(sp.args, [&](std::string_view k, const JsonValue& v) {
            if (k == "correlation") intOf(v, &corr);
            return true;
          });
          auto it = joined_.find(corr);
          if (it != joined_.end()) {
            applyJoin(r, it->second);
          } else if (f_.joinCorrelations.count(corr) > 0) {
            // Its launch comes later in the file: size it at the end of the pass.
            pendingKernels_.push_back({&rs, stepIdx, corr, r});
            return Status::ok();
          }
        }
        break;
      }
      default:
        return Status::ok();
    }
    addRecord(&rs, stepIdx, r);
    if (!overBudget_) return Status::ok();
    // Give up folding in this pass. Without a timeline to finish, stop reading at once.
    fold_ = false;
    pendingKernels_.clear();
    for (auto& st : ranks_) {
      for (auto& a : st.acc) a.reset();
    }
    return timeline_ == nullptr || timelineDone_ ? Status::error(kOverBudget) : Status::ok();
  }

  void addRecord(RankState* rs, int64_t stepIdx, const probe::Record& r) {
    const size_t i = static_cast<size_t>(stepIdx);
    auto& acc = rs->acc[i];
    if (!acc) {
      const StepSpan& s = rs->info.steps[i];
      acc =
          std::make_unique<probe::StepAccumulator>(s.beginNs + rs->shiftNs, s.endNs + rs->shiftNs);
    }
    const size_t before = acc->units();
    acc->add(r);
    units_ += acc->units() - before;
    ++rs->records[i];
    ++rs->fold.records;
    if (r.type == probe::RecordType::kCollective) {
      ++rs->fold.collectives;
      rs->fold.collectiveBytes += r.bytes;
      rs->fold.collectiveNs += r.t1 - r.t0;
      if (r.bytes > 0) ++rs->fold.sizedCollectives;
    }
    if (units_ > o_.maxUnits) overBudget_ = true;
  }

  static void applyJoin(probe::Record& r, const CollectiveArgs& host) {
    if (host.sized) r.bytes = host.bytes;
    const auto kernelOp = static_cast<wire::CollectiveOp>(r.kind);
    if (host.op != wire::COLL_UNKNOWN &&
        (kernelOp == wire::COLL_UNKNOWN || kernelOp == wire::SEND)) {
      r.kind = static_cast<uint8_t>(host.op);
    }
    if (!host.group.empty()) r.group = intern(host.group);
  }

  // A launch of a kernel that needs sizing: the host call around it on its thread.
  void noteLaunch(const Span& sp) {
    int64_t corr = -1;
    (void)forEachMember(sp.args, [&](std::string_view k, const JsonValue& v) {
      if (k == "correlation") intOf(v, &corr);
      return true;
    });
    if (corr < 0 || f_.joinCorrelations.count(corr) == 0 || joined_.count(corr) > 0) return;
    auto lane = f_.hostCalls.find(std::string(sp.pid.text) + '\x1f' + std::string(sp.tid.text));
    if (lane == f_.hostCalls.end()) return;
    const HostCall* best = nullptr;
    for (const auto& c : lane->second) {
      if (c.beginNs > sp.t0) break;
      if (c.endNs < sp.t0) continue;
      // The innermost call that knows the size, else the innermost that knows the op.
      const bool better =
          best == nullptr || (c.args.sized && !best->args.sized) ||
          (c.args.sized == best->args.sized && c.endNs - c.beginNs < best->endNs - best->beginNs);
      if (better) best = &c;
    }
    if (best != nullptr) joined_[corr] = best->args;
  }

  static uint32_t intern(std::string_view name) { return probe::internName(name); }

  // ---- timeline ----

  uint32_t laneOf(RankState& rs, const EventView& ev, bool device) {
    // Consecutive events are mostly on one lane: compare before building a key.
    if (!rs.laneKeys.empty() && ev.pid.text == rs.lastPid && ev.tid.text == rs.lastTid) {
      if (device) rs.laneDevice[rs.lastLane] = true;
      return rs.lastLane;
    }
    const std::string key = laneKey(ev);
    auto [it, inserted] = rs.lanes.emplace(key, static_cast<uint32_t>(rs.laneKeys.size()));
    if (inserted) {
      rs.laneKeys.push_back(key);
      rs.laneDevice.push_back(device);
    } else if (device) {
      rs.laneDevice[it->second] = true;
    }
    rs.lastPid = ev.pid.text;
    rs.lastTid = ev.tid.text;
    rs.lastLane = it->second;
    return it->second;
  }

  void noteMetadata(RankState& rs, const EventView& ev) {
    std::string scratch;
    if (ev.name == "process_labels" || ev.name == "process_name" || ev.name == "thread_name") {
      std::string value;
      (void)forEachMember(ev.args.text, [&](std::string_view k, const JsonValue& v) {
        if (k == "labels" || k == "name") value = std::string(stringOf(v, &scratch));
        return true;
      });
      if (ev.name == "thread_name") {
        threadNames_[laneKey(ev)] = value;
      } else if (ev.name == "process_labels" || !processNames_.count(std::string(ev.pid.text))) {
        processNames_[std::string(ev.pid.text)] = value;
      }
    }
    (void)rs;
  }

  void writeTimeline(RankState& rs, const EventView& ev, Role role, int64_t stepIdx,
                     EventKind kind) {
    const bool device = kind == EventKind::kDeviceKernel || kind == EventKind::kDeviceComm ||
                        kind == EventKind::kDeviceCopy;
    out_.clear();
    out_.push_back('{');
    bool first = true;
    bool hadPid = false;
    bool hadCat = false;
    bool hadArgs = false;
    int64_t tNs = 0;
    bool hasTs = microsToNs(ev.ts, &tNs);
    if (hasTs) {
      const auto based = checkedAdd(tNs, f_.baseNs);
      const auto placed = based ? checkedAdd(*based, rs.shiftNs) : std::nullopt;
      hasTs = placed.has_value();
      tNs = placed.value_or(0);
    }
    const char* cat = timelineCategory(role);
    const bool annotate = stepIdx >= 0 || cat != nullptr;
    auto sep = [&] {
      if (!first) out_ += ", ";
      first = false;
    };
    auto addArgsFields = [&] {
      bool any = false;
      if (stepIdx >= 0) {
        out_ += "\"step\": ";
        appendInt(out_, rs.info.steps[static_cast<size_t>(stepIdx)].step);
        any = true;
      }
      if (cat != nullptr && !ev.cat.empty() && ev.cat != cat) {
        if (any) out_ += ", ";
        out_ += "\"source_cat\": ";
        out_.append(catText_);
        any = true;
      }
      return any;
    };
    catText_ = {};
    for (const auto& m : ev.members) {
      if (m.key == "cat") catText_ = memberValue(m.text);
    }
    for (const auto& m : ev.members) {
      sep();
      if (m.key == "pid") {
        out_ += "\"pid\": ";
        appendInt(out_, rs.info.rank);
        hadPid = true;
      } else if (m.key == "tid") {
        out_ += "\"tid\": ";
        appendInt(out_, laneOf(rs, ev, device));
      } else if (m.key == "ts" && hasTs) {
        out_ += "\"ts\": ";
        appendMicros(out_, tNs);
      } else if (m.key == "cat" && cat != nullptr) {
        out_ += "\"cat\": \"";
        out_ += cat;
        out_ += '"';
        hadCat = true;
      } else if (m.key == "args" && !(annotate && ev.args.type == JsonValue::Type::kObject)) {
        hadArgs = true;
        out_.append(m.text);
      } else if (m.key == "args") {
        hadArgs = true;
        const std::string_view value = memberValue(m.text);
        out_ += "\"args\": {";
        const bool added = addArgsFields();
        std::string_view rest = value.substr(1);  // after '{'
        size_t k = 0;
        while (k < rest.size() &&
               (rest[k] == ' ' || rest[k] == '\n' || rest[k] == '\t' || rest[k] == '\r')) {
          ++k;
        }
        if (added && k < rest.size() && rest[k] != '}') out_ += ", ";
        out_.append(rest);
      } else {
        out_.append(m.text);
      }
    }
    if (!hadPid) {
      sep();
      out_ += "\"pid\": ";
      appendInt(out_, rs.info.rank);
    }
    if (cat != nullptr && !hadCat) {
      sep();
      out_ += "\"cat\": \"";
      out_ += cat;
      out_ += '"';
    }
    if (annotate && !hadArgs) {
      const size_t mark = out_.size();
      sep();
      out_ += "\"args\": {";
      if (addArgsFields()) {
        out_ += '}';
      } else {
        out_.resize(mark);
      }
    }
    out_.push_back('}');
    if (!timeline_->write(rs.info.rank, out_, hasTs ? tNs : 0)) timelineDone_ = true;
  }

  // thread_name and thread_sort_index for every lane: host threads first, then device streams.
  void writeLaneNames() {
    for (auto& rs : ranks_) {
      for (size_t i = 0; i < rs.laneKeys.size(); ++i) {
        const std::string& key = rs.laneKeys[i];
        const size_t sep = key.find('\x1f');
        const std::string pid = key.substr(0, sep);
        const std::string tid = key.substr(sep + 1);
        std::string label;
        auto pn = processNames_.find(pid);
        const std::string pidLabel =
            pn != processNames_.end() && !pn->second.empty() ? pn->second : "pid " + pid;
        auto tn = threadNames_.find(key);
        if (rs.laneDevice[i]) {
          label = strCat(pidLabel, " stream ", tid);
        } else {
          label = tn != threadNames_.end() && !tn->second.empty()
                      ? strCat(pidLabel, " / ", tn->second)
                      : strCat(pidLabel, " / thread ", tid);
        }
        json name = {{"name", "thread_name"},
                     {"ph", "M"},
                     {"pid", rs.info.rank},
                     {"tid", i},
                     {"args", {{"name", label}}}};
        json order = {{"name", "thread_sort_index"},
                      {"ph", "M"},
                      {"pid", rs.info.rank},
                      {"tid", i},
                      {"args", {{"sort_index", (rs.laneDevice[i] ? 100000 : 0) + i}}}};
        const auto dump = [](const json& j) {
          return j.dump(-1, ' ', false, json::error_handler_t::replace);
        };
        if (!timeline_->write(rs.info.rank, dump(name), 0)) break;
        if (!timeline_->write(rs.info.rank, dump(order), 0)) break;
      }
    }
  }

  const TraceFacts& f_;
  const FoldOptions& o_;
  Window window_;
  bool fold_;
  TimelineSink* timeline_;
  bool timelineDone_ = false;
  SpanMaker spans_;
  std::vector<RankState> ranks_;
  std::map<int64_t, size_t> byPid_;
  uint64_t units_ = 0;
  bool overBudget_ = false;
  std::vector<PendingKernel> pendingKernels_;
  std::unordered_map<int64_t, CollectiveArgs> joined_;         // correlation -> its host call
  std::unordered_map<std::string, std::string> processNames_;  // pid text -> label
  std::unordered_map<std::string, std::string> threadNames_;   // lane key -> name
  std::string out_;
  std::string_view catText_;
};

}  // namespace

Result<std::vector<RankFold>> foldTrace(
    const std::function<Result<std::unique_ptr<ByteSource>>()>& open, const TraceFacts& facts,
    const FoldOptions& options, const std::function<Status(wire::StepReport&&)>& onReport,
    TimelineSink* timeline) {
  using R = Result<std::vector<RankFold>>;
  ReadOptions ro;
  auto pass = [&](Window window, bool fold, TimelineSink* sink,
                  std::vector<RankFold>* folds) -> Result<bool> {
    auto src = open();
    if (!src) return src.status();
    Folder folder(facts, options, window, fold, sink);
    auto read = readTrace(**src, folder, ro);
    if (!read && !folder.overBudget()) return read.status();
    // Over the bound: no reports, but a timeline being written still gets its lane names.
    if (Status s = folder.finish(onReport); !s) return s;
    if (folder.overBudget()) return false;
    *folds = folder.folds();
    return true;
  };

  std::vector<RankFold> folds;
  auto whole = pass(Window{}, true, timeline, &folds);
  if (!whole) return whole.status();
  if (*whole) return folds;

  // Too much open at once (the timeline, if any, is written): the steps a window at a time, by
  // the begins of every rank's steps in this file, halving a window that still does not fit.
  std::vector<int64_t> begins;
  for (const auto& r : facts.ranks) {
    for (const auto& s : r.steps) begins.push_back(s.beginNs);
  }
  std::sort(begins.begin(), begins.end());
  begins.erase(std::unique(begins.begin(), begins.end()), begins.end());
  std::vector<std::pair<size_t, size_t>> todo;
  const size_t half = begins.size() / 2;
  todo.push_back({half, begins.size()});  // done second
  if (half > 0) todo.push_back({0, half});
  std::map<uint32_t, RankFold> total;
  while (!todo.empty()) {
    auto [a, b] = todo.back();
    todo.pop_back();
    if (a >= b) continue;
    Window w{begins[a], b < begins.size() ? begins[b] : INT64_MAX};
    std::vector<RankFold> part;
    auto ok = pass(w, true, nullptr, &part);
    if (!ok) return ok.status();
    if (!*ok) {
      if (b - a <= 1) {
        return R::error("one step holds more than " + std::to_string(options.maxUnits) +
                        " intervals and operators (the import's memory bound)");
      }
      const size_t mid = a + (b - a) / 2;
      todo.push_back({mid, b});  // done second
      todo.push_back({a, mid});
      continue;
    }
    for (const auto& p : part) {
      auto [it, fresh] = total.emplace(p.rank, p);
      if (fresh) continue;
      RankFold& t = it->second;
      t.steps += p.steps;
      if (t.firstStep < 0 || (p.firstStep >= 0 && p.firstStep < t.firstStep)) {
        t.firstStep = p.firstStep;
      }
      t.lastStep = std::max(t.lastStep, p.lastStep);
      t.records += p.records;
      t.outside = std::max(t.outside, p.outside);  // every pass counts all of them
      t.kernels += p.kernels;
      t.collectives += p.collectives;
      t.collectiveBytes += p.collectiveBytes;
      t.collectiveNs += p.collectiveNs;
      t.sizedCollectives += p.sizedCollectives;
      t.computeNs += p.computeNs;
      t.commNs += p.commNs;
      t.exposedNs += p.exposedNs;
      t.dataNs += p.dataNs;
      t.durationNs += p.durationNs;
    }
  }
  std::vector<RankFold> out;
  out.reserve(total.size());
  for (auto& [rank, t] : total) out.push_back(t);
  return out;
}

}  // namespace trainscope::importer
