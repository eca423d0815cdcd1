#include "importer/span_maker.h"

#include <algorithm>
#include <utility>

#include "common/checked.h"

namespace trainscope::importer {

bool isKinetoCategory(std::string_view cat) {
  return cat == "cpu_op" || cat == "kernel" || cat == "cuda_runtime" || cat == "user_annotation" ||
         cat == "gpu_memcpy" || cat == "gpu_memset" || cat == "python_function" ||
         cat == "cuda_driver" || cat == "gpu_user_annotation";
}

bool isCaptureCategory(std::string_view cat) {
  return cat == "step" || cat == "op" || cat == "range" || cat == "collective";
}

std::string laneKey(const EventView& ev) {
  std::string key(ev.pid.text);
  key.push_back('\x1f');
  key.append(ev.tid.text);
  return key;
}

bool SpanMaker::feed(const EventView& ev, Span* out) {
  if (ev.ph == 'X') {
    int64_t ts = 0;
    if (!microsToNs(ev.ts, &ts)) return false;
    int64_t dur = 0;
    if (ev.dur.present() && (!microsToNs(ev.dur, &dur) || dur < 0)) dur = 0;
    out->name = ev.name;
    out->cat = ev.cat;
    out->args = ev.args.type == JsonValue::Type::kObject ? ev.args.text : std::string_view();
    out->pid = ev.pid;
    out->tid = ev.tid;
    // A time no int64 sum can hold is no time: the event is skipped, never wrapped.
    const auto t0 = checkedAdd(ts, baseNs_);
    const auto t1 = t0 ? checkedAdd(*t0, dur) : std::nullopt;
    if (!t1) return false;
    out->t0 = *t0;
    out->t1 = *t1;
    return true;
  }
  if (ev.ph != 'B' && ev.ph != 'E') return false;
  int64_t ts = 0;
  if (!microsToNs(ev.ts, &ts) || !checkedAdd(ts, baseNs_)) return false;
  auto& stack = open_[laneKey(ev)];
  if (ev.ph == 'B') {
    if (stack.size() >= 256) return false;  // unbalanced: do not grow without bound
    stack.push_back({std::string(ev.name), std::string(ev.cat),
                     std::string(ev.args.type == JsonValue::Type::kObject ? ev.args.text : ""),
                     std::string(ev.pid.text), std::string(ev.tid.text), ev.pid.type, ev.tid.type,
                     ts + baseNs_});
    return false;
  }
  if (stack.empty()) return false;
  closed_ = std::move(stack.back());
  stack.pop_back();
  out->name = closed_.name;
  out->cat = closed_.cat;
  out->args = closed_.args;
  out->pid = {closed_.pidType, closed_.pid};
  out->tid = {closed_.tidType, closed_.tid};
  out->t0 = closed_.t0;
  out->t1 = std::max(closed_.t0, ts + baseNs_);
  return true;
}

}  // namespace trainscope::importer
