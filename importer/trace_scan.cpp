// Pass 1 of a trace's import (rank_trace.h scanTrace): reads the whole file once to learn its
// format, ranks, clock base, steps (ProfilerStep marks, or a step-numbered event chosen among
// candidates) and where its collectives come from, before anything is folded.
#include "importer/rank_trace.h"

#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "agent/probe/trainscope_probe.h"
#include "common/checked.h"
#include "importer/span_maker.h"
#include "schema/wire.h"

namespace trainscope::importer {
namespace {

using nlohmann::json;

// Top-level members read besides traceEvents: identity, the clock base, format hints.
const std::vector<std::string> kTopLevelKeys = {"distributedInfo", "baseTimeNanoseconds",
                                                "trainscope",      "host_name",
                                                "schemaVersion",   "traceName"};

// Candidate step events of a trace without ProfilerStep marks: one name whose events each carry
// a different step number.
struct Candidate {
  std::vector<StepSpan> spans;
  std::unordered_set<int64_t> seen;
  int64_t totalNs = 0;
  bool unique = true;
};

// Sorts spans, drops repeats of a step number and zero-length spans, and clips overlaps so
// every time belongs to at most one step.
std::vector<StepSpan> tidySteps(std::vector<StepSpan> spans, std::vector<std::string>* notes) {
  std::sort(spans.begin(), spans.end(), [](const StepSpan& a, const StepSpan& b) {
    return a.beginNs != b.beginNs ? a.beginNs < b.beginNs : a.endNs > b.endNs;
  });
  std::vector<StepSpan> out;
  std::unordered_set<int64_t> seen;
  uint64_t repeats = 0;
  uint64_t clipped = 0;
  for (const auto& s : spans) {
    if (s.endNs <= s.beginNs) continue;
    if (!seen.insert(s.step).second) {
      ++repeats;
      continue;
    }
    if (!out.empty() && out.back().endNs > s.beginNs) {
      out.back().endNs = s.beginNs;
      ++clipped;
      if (out.back().endNs <= out.back().beginNs) out.pop_back();
    }
    out.push_back(s);
  }
  if (repeats > 0) {
    notes->push_back(std::to_string(repeats) + " step events repeat a step number; the first kept");
  }
  if (clipped > 0) {
    notes->push_back(std::to_string(clipped) +
                     " steps overlapped the next one and were cut where it begins");
  }
  return out;
}

class Scanner final : public TraceHandler {
 public:
  explicit Scanner(const ScanOptions& options) : o_(options), spans_(0) {}

  Status onTopLevel(std::string_view key, std::string_view raw) override {
    kinetoHint_ |= key == "schemaVersion" || key == "distributedInfo" || key == "traceName";
    auto doc = json::parse(raw, nullptr, false);
    if (doc.is_discarded()) return Status::ok();  // the reader validated it; not ours to judge
    if (key == "distributedInfo" && doc.is_object()) {
      if (auto it = doc.find("rank"); it != doc.end() && it->is_number_integer() &&
                                      it->get<int64_t>() >= 0 && it->get<int64_t>() < (1 << 24)) {
        facts_.rank = it->get<uint32_t>();
        rankFromDistributedInfo_ = true;
      }
      if (auto it = doc.find("world_size"); it != doc.end() && it->is_number_integer() &&
                                            it->get<int64_t>() > 0 &&
                                            it->get<int64_t>() <= (1 << 24)) {
        facts_.worldSize = it->get<uint32_t>();
      }
      if (auto it = doc.find("backend"); it != doc.end() && it->is_string()) {
        facts_.backend = it->get<std::string>();
      }
    } else if (key == "baseTimeNanoseconds" && doc.is_number_integer()) {
      baseNs_ = doc.get<int64_t>();
      if (baseNs_ < 0 || baseNs_ > wire::kMaxTimeNs) {
        return Status::error("baseTimeNanoseconds " + std::to_string(baseNs_) +
                             " is not a Unix time before 2100");
      }
      if (baseNs_ != 0) baseSeenInTopLevel_ = true;
    } else if (key == "host_name" && doc.is_string()) {
      facts_.host = doc.get<std::string>();
    } else if (key == "trainscope" && doc.is_object()) {
      trainscopeHeader_ = true;
      if (auto it = doc.find("rank"); it != doc.end() && it->is_number_unsigned()) {
        if (!facts_.rank) facts_.rank = it->get<uint32_t>();
      }
      if (auto it = doc.find("host"); it != doc.end() && it->is_string() && facts_.host.empty()) {
        facts_.host = it->get<std::string>();
      }
      if (auto it = doc.find("job"); it != doc.end() && it->is_string()) {
        facts_.job = it->get<std::string>();
      }
      if (auto it = doc.find("pid"); it != doc.end() && it->is_number_unsigned()) {
        facts_.pid = it->get<uint32_t>();
      }
      // A merged capture names its ranks in "ranks" (the capture JSON).
      if (auto it = doc.find("ranks"); it != doc.end() && it->is_array()) mergedHint_ = true;
    }
    return Status::ok();
  }

  Status onEvent(const EventView& ev) override {
    ++facts_.events;
    if (ev.ph == 'M') {
      if (ev.name == "process_labels" && ev.args.present()) {
        // "GPU 0": the pid is a device; only a hint for messages.
      }
      return Status::ok();
    }
    // The base may come after the events in the file: spans are kept in the file's ts and the
    // base is added at the end.
    Span sp;
    if (!spans_.feed(ev, &sp)) return Status::ok();
    kinetoEvents_ += isKinetoCategory(sp.cat) ? 1 : 0;
    if (isCaptureCategory(sp.cat)) {
      ++captureEvents_;
      if (sp.cat == "step") {
        auto n = stepArg(sp.args);
        if (!n) n = profilerStepNumber(sp.name);
        int64_t pid = 0;
        if (n && intOf(sp.pid, &pid)) captureSteps_[pid].push_back({*n, sp.t0, sp.t1});
      }
    }
    if (!o_.stepEvent.empty() && sp.name == o_.stepEvent) {
      auto n = sp.args.empty() ? std::nullopt : stepArg(sp.args);
      if (!n) n = trailingNumber(sp.name);
      if (!n) n = static_cast<int64_t>(namedSteps_.size());
      namedSteps_.push_back({*n, sp.t0, sp.t1});
    }
    const EventKind kind = kindOf(sp.cat, sp.name, false);
    switch (kind) {
      case EventKind::kProfilerStep:
        profilerSteps_.push_back({*profilerStepNumber(sp.name), sp.t0, sp.t1});
        break;
      case EventKind::kDeviceKernel:
        ++facts_.kernels;
        break;
      case EventKind::kDeviceCopy:
        ++facts_.copies;
        break;
      case EventKind::kDeviceComm: {
        ++facts_.commKernels;
        CollectiveArgs args;
        int64_t corr = -1;
        (void)readCollectiveArgs(sp.args, &args);
        (void)forEachMember(sp.args, [&](std::string_view k, const JsonValue& v) {
          if (k == "correlation") intOf(v, &corr);
          return true;
        });
        if (!args.sized && corr >= 0) facts_.joinCorrelations.insert(corr);
        break;
      }
      case EventKind::kCpuOp:
        ++facts_.cpuOps;
        break;
      case EventKind::kCommAnnotation:
      case EventKind::kParamComms: {
        CollectiveArgs args;
        (void)readCollectiveArgs(sp.args, &args);
        if (kind == EventKind::kCommAnnotation) {
          ++(hostTimedAnnotation(sp.name) ? annotations_ : deviceAnnotations_);
          if (args.op == wire::COLL_UNKNOWN) args.op = collectiveOpFromName(sp.name);
        } else if (args.op != wire::COLL_UNKNOWN) {
          ++paramComms_;
        }
        if (args.sized || args.op != wire::COLL_UNKNOWN) {
          hostCalls_[std::string(sp.pid.text) + '\x1f' + std::string(sp.tid.text)].push_back(
              {sp.t0, sp.t1, std::move(args)});
        }
        break;
      }
      case EventKind::kC10dOp:
        if (collectiveOpFromName(sp.name) != wire::COLL_UNKNOWN) ++c10d_;
        break;
      case EventKind::kDataLoad:
        ++facts_.dataLoads;
        break;
      case EventKind::kGeneric:
        if (genericCollectiveOp(sp.name)) ++genericComm_;
        break;
      default:
        break;
    }
    // Steps of a trace without ProfilerStep marks: events with a step argument.
    if (kind == EventKind::kGeneric || kind == EventKind::kOther || kind == EventKind::kCpuOp) {
      if (!sp.args.empty() && (sp.args.find("\"step\"") != std::string_view::npos ||
                               sp.args.find("\"iteration\"") != std::string_view::npos)) {
        if (auto n = stepArg(sp.args)) noteCandidate(sp, *n);
      }
    }
    return Status::ok();
  }

  Result<TraceFacts> finish() {
    TraceFacts& f = facts_;
    f.baseNs = baseNs_;
    const bool captureFormat =
        (trainscopeHeader_ || kinetoEvents_ == 0) && captureEvents_ > 0 && !captureSteps_.empty();
    f.format = captureFormat                        ? TraceFormat::kTrainscope
               : (kinetoHint_ || kinetoEvents_ > 0) ? TraceFormat::kKineto
                                                    : TraceFormat::kChrome;
    f.device = f.kernels + f.copies + f.commKernels > 0;

    // Steps, by the first rule that finds any.
    std::vector<StepSpan> steps;
    if (!o_.stepEvent.empty()) {
      steps = std::move(namedSteps_);
      f.stepRule = "events named '" + o_.stepEvent + "'";
      f.stepEventName = o_.stepEvent;
      if (steps.empty()) {
        return Result<TraceFacts>::error("no events named '" + o_.stepEvent +
                                         "' (--step-event) with a time and duration");
      }
    } else if (captureFormat) {
      f.stepRule = "trainscope step events";
      f.mergedCapture = captureSteps_.size() > 1 || mergedHint_;
    } else if (!profilerSteps_.empty()) {
      steps = std::move(profilerSteps_);
      f.stepRule = "ProfilerStep#N";
    } else {
      const Candidate* best = nullptr;
      std::string bestName;
      for (const auto& [name, c] : candidates_) {
        if (!c.unique || c.spans.empty()) continue;
        if (best == nullptr || c.totalNs > best->totalNs) {
          best = &c;
          bestName = name;
        }
      }
      if (best == nullptr) {
        return Result<TraceFacts>::error(
            "no steps found: no ProfilerStep#N events (call the profiler's step() each "
            "iteration), no trainscope step events, and no events with a \"step\" argument; "
            "name the step event with --step-event NAME");
      }
      steps = best->spans;
      f.stepRule = "events named '" + bestName + "' with a step argument";
      f.stepEventName = bestName;
    }
    auto shifted = [&](std::vector<StepSpan> v) {
      // A step no int64 holds once the base is added is dropped, never wrapped.
      std::erase_if(v, [&](StepSpan& s) {
        const auto b = checkedAdd(s.beginNs, baseNs_);
        const auto e = checkedAdd(s.endNs, baseNs_);
        if (!b || !e) return true;
        s.beginNs = *b;
        s.endNs = *e;
        return false;
      });
      return tidySteps(std::move(v), &f.notes);
    };
    if (captureFormat && o_.stepEvent.empty()) {
      for (auto& [pid, spans] : captureSteps_) {
        RankInFile r;
        if (pid < 0 || pid >= (1 << 24)) {
          return Result<TraceFacts>::error("a step event has pid " + std::to_string(pid) +
                                           ", which is not a rank");
        }
        r.rank = static_cast<uint32_t>(pid);
        if (f.mergedCapture) r.pid = pid;
        r.steps = shifted(std::move(spans));
        if (!r.steps.empty()) f.ranks.push_back(std::move(r));
      }
      if (!f.mergedCapture && !f.ranks.empty() && !f.rank) f.rank = f.ranks[0].rank;
    } else {
      RankInFile r;
      r.steps = shifted(std::move(steps));
      if (!r.steps.empty()) f.ranks.push_back(std::move(r));
    }
    if (f.ranks.empty()) {
      return Result<TraceFacts>::error("the step events (" + f.stepRule + ") all have zero length");
    }

    // Collectives: device kernels when there are any, else the host's calls.
    if (f.format == TraceFormat::kTrainscope) {
      f.comm = CommSource::kCapture;
    } else if (f.commKernels > 0) {
      f.comm = CommSource::kDeviceKernels;
    } else if (annotations_ > 0) {
      f.comm = CommSource::kAnnotations;
      f.hostCollectives = annotations_;
    } else if (deviceAnnotations_ > 0 || deviceBackend(f.backend)) {
      // The host only enqueued these collectives; their time is on device streams this trace
      // did not record. Their launch times would read as absurd bandwidths: left out.
      if (deviceAnnotations_ + paramComms_ + c10d_ > 0) {
        f.notes.push_back("collectives of a device backend (" +
                          (f.backend.empty() ? std::string("nccl") : f.backend) +
                          ") appear only as host launches, the trace has no device kernels for "
                          "them: communication time is unknown and left out");
      }
    } else if (paramComms_ > 0) {
      f.comm = CommSource::kParamComms;
      f.hostCollectives = paramComms_;
    } else if (c10d_ > 0) {
      f.comm = CommSource::kC10d;
      f.hostCollectives = c10d_;
    } else if (f.format == TraceFormat::kChrome && genericComm_ > 0) {
      f.comm = CommSource::kGeneric;
      f.hostCollectives = genericComm_;
    }
    if (f.comm == CommSource::kDeviceKernels && !f.joinCorrelations.empty()) {
      for (auto& [lane, calls] : hostCalls_) {
        std::sort(calls.begin(), calls.end(),
                  [](const HostCall& a, const HostCall& b) { return a.beginNs < b.beginNs; });
        for (auto& c : calls) {
          c.beginNs += baseNs_;
          c.endNs += baseNs_;
        }
      }
      f.hostCalls = std::move(hostCalls_);
    } else {
      f.joinCorrelations.clear();
    }
    if (rankFromDistributedInfo_ && f.format == TraceFormat::kTrainscope) {
      f.notes.push_back("distributedInfo and a trainscope header both present");
    }
    (void)baseSeenInTopLevel_;
    return std::move(facts_);
  }

 private:
  void noteCandidate(const Span& sp, int64_t step) {
    auto it = candidates_.find(sp.name);
    if (it == candidates_.end()) {
      if (candidates_.size() >= 4096) return;  // names beyond this are not step events
      it = candidates_.emplace(std::string(sp.name), Candidate{}).first;
    }
    Candidate& c = it->second;
    if (!c.unique) return;
    if (!c.seen.insert(step).second) {
      c.unique = false;  // two events of this name in one step: an operator, not the step
      c.spans = {};
      c.seen = {};
      return;
    }
    c.spans.push_back({step, sp.t0, sp.t1});
    c.totalNs += sp.t1 - sp.t0;
  }

  const ScanOptions& o_;
  SpanMaker spans_;
  TraceFacts facts_;
  int64_t baseNs_ = 0;
  bool baseSeenInTopLevel_ = false;
  bool kinetoHint_ = false;
  bool trainscopeHeader_ = false;
  bool mergedHint_ = false;
  bool rankFromDistributedInfo_ = false;
  uint64_t kinetoEvents_ = 0;
  uint64_t captureEvents_ = 0;
  uint64_t annotations_ = 0;        // host-timed ones (gloo, mpi, ucc)
  uint64_t deviceAnnotations_ = 0;  // launches of device collectives (nccl, hccl, ...)
  uint64_t paramComms_ = 0;
  uint64_t c10d_ = 0;
  uint64_t genericComm_ = 0;
  std::vector<StepSpan> profilerSteps_;
  std::vector<StepSpan> namedSteps_;
  std::map<int64_t, std::vector<StepSpan>> captureSteps_;  // pid -> step events
  std::map<std::string, Candidate, std::less<>> candidates_;
  std::unordered_map<std::string, std::vector<HostCall>> hostCalls_;
};

}  // namespace

const char* formatName(TraceFormat format) {
  switch (format) {
    case TraceFormat::kKineto:
      return "kineto";
    case TraceFormat::kTrainscope:
      return "trainscope";
    case TraceFormat::kChrome:
      return "chrome";
  }
  return "chrome";
}

const char* commSourceName(CommSource source) {
  switch (source) {
    case CommSource::kNone:
      return "none";
    case CommSource::kDeviceKernels:
      return "NCCL kernels";
    case CommSource::kAnnotations:
      return "host annotations";
    case CommSource::kParamComms:
      return "record_param_comms";
    case CommSource::kC10d:
      return "c10d operators";
    case CommSource::kCapture:
      return "capture collectives";
    case CommSource::kGeneric:
      return "named events";
  }
  return "none";
}

Result<TraceFacts> scanTrace(ByteSource& source, const ScanOptions& options) {
  Scanner scanner(options);
  ReadOptions ro;
  ro.topLevelKeys = kTopLevelKeys;
  auto read = readTrace(source, scanner, ro);
  if (!read) return read.status();
  auto facts = scanner.finish();
  if (facts) facts->inputBytes = read->bytes;
  return facts;
}

}  // namespace trainscope::importer
