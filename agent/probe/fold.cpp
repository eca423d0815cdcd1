#include "agent/probe/fold.h"

#include <algorithm>
#include <climits>
#include <iterator>
#include <map>
#include <tuple>
#include <utility>

#include "agent/probe/intern.h"
#include "agent/probe/trainscope_probe.h"
#include "common/log.h"

namespace trainscope::probe {
namespace {

using Intervals = std::vector<std::pair<int64_t, int64_t>>;

Intervals merged(Intervals v) {
  std::sort(v.begin(), v.end());
  Intervals out;
  for (const auto& iv : v) {
    if (iv.second <= iv.first) continue;
    if (!out.empty() && iv.first <= out.back().second) {
      out.back().second = std::max(out.back().second, iv.second);
    } else {
      out.push_back(iv);
    }
  }
  return out;
}

// Merged intervals `a` less merged intervals `b`.
Intervals subtracted(const Intervals& a, const Intervals& b) {
  Intervals out;
  size_t j = 0;
  for (auto [lo, hi] : a) {
    while (j < b.size() && b[j].second <= lo) ++j;
    for (size_t k = j; k < b.size() && b[k].first < hi; ++k) {
      if (b[k].first > lo) out.emplace_back(lo, b[k].first);
      lo = std::max(lo, b[k].second);
    }
    if (hi > lo) out.emplace_back(lo, hi);
  }
  return out;
}

// Whether interval `w` overlaps any of merged (sorted, disjoint) intervals `m`.
bool meets(const Intervals& m, const std::pair<int64_t, int64_t>& w) {
  auto it = std::upper_bound(m.begin(), m.end(), w.first,
                             [](int64_t t, const auto& iv) { return t < iv.second; });
  return it != m.end() && it->first < w.second;
}

// Names of what NCCL chose (TS_DEVICE_INFO), as the step report spells them.
const char* ncclAlgoName(uint32_t code) {
  static constexpr const char* kNames[] = {
      "", "tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"};
  return code < std::size(kNames) ? kNames[code] : "";
}

const char* ncclProtoName(uint32_t code) {
  static constexpr const char* kNames[] = {"", "ll", "ll128", "simple"};
  return code < std::size(kNames) ? kNames[code] : "";
}

const char* dtypeName(uint32_t code) {
  static constexpr const char* kNames[] = {
      "",        "int8",    "uint8",   "int32",    "uint32",     "int64",     "uint64",
      "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  return code < std::size(kNames) ? kNames[code] : "";
}

int64_t lengthOf(const Intervals& m) {
  int64_t total = 0;
  for (const auto& iv : m) total += iv.second - iv.first;
  return total;
}

// The time a record is attributed by: its start, except for a device record, which belongs to
// the step in which the host launched it (its `step` field on the way in; record.h), as the
// GPU runs behind the host.
int64_t attributedAt(const Record& r) {
  const bool device = r.type == RecordType::kDeviceColl || r.type == RecordType::kDeviceP2p;
  return device && r.step > 0 ? r.step : r.t0;
}

}  // namespace

int64_t unionLength(Intervals intervals) {
  return lengthOf(merged(std::move(intervals)));
}

int64_t overlapLength(Intervals a, Intervals b) {
  const Intervals ma = merged(std::move(a));
  const Intervals mb = merged(std::move(b));
  int64_t total = 0;
  size_t i = 0;
  size_t j = 0;
  while (i < ma.size() && j < mb.size()) {
    const int64_t lo = std::max(ma[i].first, mb[j].first);
    const int64_t hi = std::min(ma[i].second, mb[j].second);
    if (hi > lo) total += hi - lo;
    if (ma[i].second < mb[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return total;
}

StepFolder::StepFolder(FoldOptions options) : options_(std::move(options)) {}

void StepFolder::markUnattributed(Record r) {
  ++unattributed_;
  r.step = -1;
  if (loose_.size() < options_.maxLooseRecords) loose_.push_back(r);
}

void StepFolder::addComplete(const Record& r) {
  if (pending_.size() >= options_.maxPending) {
    // A step that never ends (or records with no step at all): give up on the oldest half.
    std::sort(pending_.begin(), pending_.end(),
              [](const Record& a, const Record& b) { return a.t0 < b.t0; });
    const size_t drop = pending_.size() / 2;
    for (size_t i = 0; i < drop; ++i) markUnattributed(pending_[i]);
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(drop));
    logOnce(LogLevel::kWarn, "probe", "pending-cap",
            "too many records wait for a step that has not ended; the oldest are counted as "
            "unattributed");
  }
  pending_.push_back(r);
}

void StepFolder::add(uint32_t ring, const Record& in) {
  ++records_;
  // Captures name each event's thread by its ring; pairs take the ring of their push/begin.
  Record r = in;
  r.ring = ring;
  switch (r.type) {
    case RecordType::kStepBegin: {
      if (!spans_.empty() && spans_.back().end < 0) {
        // Steps do not overlap: an open step that sees another begin never ended. Dropping
        // it bounds open-step state; its records are swept as unattributed.
        logOnce(LogLevel::kWarn, "probe", "step-no-end",
                "step " + std::to_string(spans_.back().step) +
                    " began but never ended before the next step began; its records are "
                    "counted as unattributed");
        spans_.pop_back();
      }
      Span span{r.step, r.t0};
      span.beginRing = ring;
      span.beginDelay = r.t1;
      if (lastMarkEnd_ == r.t0 && lastMarkRing_ == ring && lastMarkDelay_ >= 0) {
        span.beginDelay = lastMarkDelay_;
      }
      spans_.push_back(span);
      return;
    }
    case RecordType::kStepEnd: {
      if (spans_.empty() || spans_.back().end >= 0 || spans_.back().step != r.step) {
        logOnce(
            LogLevel::kWarn, "probe", "step-end-unmatched",
            "step_end(" + std::to_string(r.step) + ") does not match an open step_begin; ignored");
        return;
      }
      Span& span = spans_.back();
      span.end = std::max(r.t0, span.begin);
      span.endPass = pass_;
      span.endDelay = r.t1;
      span.endRing = ring;
      lastMarkEnd_ = r.t0;
      lastMarkDelay_ = r.t1;
      lastMarkRing_ = ring;
      return;
    }
    case RecordType::kRangePush: {
      auto& stack = pairing_[ring].ranges;
      if (stack.size() >= options_.maxPairDepth) {
        logOnce(LogLevel::kWarn, "probe", "range-depth", "ranges nested too deep; dropped");
        markUnattributed(r);
        return;
      }
      stack.push_back(r);
      return;
    }
    case RecordType::kRangePop: {
      auto& stack = pairing_[ring].ranges;
      if (stack.empty()) {
        logOnce(LogLevel::kWarn, "probe", "range-pop", "range_pop without a range_push; ignored");
        ++unattributed_;
        return;
      }
      Record done = stack.back();
      stack.pop_back();
      done.type = RecordType::kRange;
      done.t1 = std::max(r.t0, done.t0);
      addComplete(done);
      return;
    }
    case RecordType::kCollBegin: {
      auto& stack = pairing_[ring].collectives;
      if (stack.size() >= options_.maxPairDepth) {
        logOnce(LogLevel::kWarn, "probe", "coll-depth", "collectives nested too deep; dropped");
        markUnattributed(r);
        return;
      }
      stack.push_back(r);
      return;
    }
    case RecordType::kCollEnd: {
      auto& stack = pairing_[ring].collectives;
      if (stack.empty()) {
        logOnce(LogLevel::kWarn, "probe", "coll-end",
                "collective_end without a collective_begin; ignored");
        ++unattributed_;
        return;
      }
      Record done = stack.back();
      stack.pop_back();
      done.type = RecordType::kCollective;
      done.t1 = std::max(r.t0, done.t0);
      addComplete(done);
      return;
    }
    case RecordType::kRange:
    case RecordType::kOp:
    case RecordType::kCollective:
    case RecordType::kLink:
    case RecordType::kP2p: {
      Record done = r;
      done.t1 = std::max(done.t1, done.t0);
      addComplete(done);
      return;
    }
    case RecordType::kDeviceColl:
    case RecordType::kDeviceP2p: {
      deviceSeen_ = true;
      Record done = r;
      done.t1 = std::max(done.t1, done.t0);
      addComplete(done);
      return;
    }
    case RecordType::kWaitHint:  // where the rank is (ProgressTracker), not what a step did
      return;
  }
  logOnce(LogLevel::kWarn, "probe", "record-type", "unknown record type; ignored");
}

void StepFolder::endPass(int64_t nowNs) {
  for (Span& span : spans_) {
    if (span.end >= 0 && span.endPassNs < 0) span.endPassNs = nowNs;
  }
  while (!spans_.empty() && spans_.front().end >= 0 && spans_.front().endPass < pass_ &&
         (!deviceSeen_ || nowNs - spans_.front().endPassNs >= options_.deviceLagNs)) {
    const Span span = spans_.front();
    spans_.pop_front();
    finalize(span);
  }
  sweepUnattributed();
  ++pass_;
}

void StepFolder::finish() {
  while (!spans_.empty() && spans_.front().end >= 0) {
    const Span span = spans_.front();
    spans_.pop_front();
    finalize(span);
  }
  spans_.clear();
  for (const Record& r : pending_) markUnattributed(r);
  pending_.clear();
  for (auto& [ring, p] : pairing_) {
    for (const Record& r : p.ranges) markUnattributed(r);
    for (const Record& r : p.collectives) markUnattributed(r);
  }
  pairing_.clear();
}

void StepFolder::sweepUnattributed() {
  // Records before the first step still waiting, or (no step waiting) before the end of the
  // last final step, can no longer belong to any step.
  const int64_t horizon = spans_.empty() ? lastEnd_ : spans_.front().begin;
  if (horizon == INT64_MIN) return;
  auto keep = std::partition(pending_.begin(), pending_.end(),
                             [&](const Record& r) { return attributedAt(r) >= horizon; });
  for (auto it = keep; it != pending_.end(); ++it) markUnattributed(*it);
  pending_.erase(keep, pending_.end());
}

void StepFolder::finalize(const Span& span) {
  FoldedStep out;
  out.records = std::move(loose_);
  loose_.clear();
  StepAccumulator acc(span.begin, span.end);
  out.records.reserve(out.records.size() + pending_.size());
  size_t kept = 0;
  uint64_t attributed = 0;
  for (Record& r : pending_) {
    const int64_t at = attributedAt(r);
    if (at < span.begin) {
      // Earlier steps are final, so it belongs to none; it still goes to the flight recorder.
      ++unattributed_;
      r.step = -1;
      out.records.push_back(r);
      continue;
    }
    if (at >= span.end) {
      // Steps are half-open, [begin, end): a record that starts as one step ends belongs to
      // the next one (a loop that records data loading right after step_end).
      pending_[kept++] = r;
      continue;
    }
    r.step = span.step;
    out.records.push_back(r);
    acc.add(r);
    ++attributed;
  }
  pending_.resize(kept);
  // Loose records carried into this entry are unattributed (step -1), so only this pass's
  // attributed ones count.
  out.report = acc.report(options_.job, options_.rank, span.step, options_.topOps, attributed);
  out.report.set_model_flops(modelFlops_);
  out.report.set_hardware_flops(hardwareFlops_);
  out.report.set_peak_flops(peakFlops_);
  if (span.beginDelay >= 0 && span.endDelay >= span.beginDelay && span.beginRing == span.endRing) {
    out.report.set_cpu_wait_ns(std::min(span.endDelay - span.beginDelay, out.report.duration_ns()));
  }
  lastEnd_ = span.end;
  lastStep_ = span.step;
  ready_.push_back(std::move(out));
}

void StepAccumulator::push(Intervals& v, int64_t a, int64_t b) {
  v.emplace_back(std::max(a, begin_), std::min(b, end_));
  // A step with very many intervals (a long trace's step) is merged in place whenever its
  // count reaches a power of two past 64 Ki, so memory follows the union, not the records.
  const size_t n = v.size();
  if (n >= (size_t{1} << 16) && (n & (n - 1)) == 0) v = merged(std::move(v));
}

void StepAccumulator::add(const Record& r) {
  const int64_t len = r.t1 - r.t0;
  switch (r.type) {
    case RecordType::kOp: {
      push(compute_, r.t0, r.t1);
      anyCompute_ = true;
      OpAcc& a = ops_[r.name];
      ++a.count;
      a.total += len;
      a.max = std::max(a.max, len);
      break;
    }
    case RecordType::kRange:
      if (r.kind == TS_RANGE_COMPUTE) {
        push(compute_, r.t0, r.t1);
        anyCompute_ = true;
      }
      if (r.kind == TS_RANGE_DATA) push(data_, r.t0, r.t1);
      if (r.kind == TS_RANGE_COMM) push(waits_, r.t0, r.t1);
      break;
    case RecordType::kCollective: {
      push(comm_, r.t0, r.t1);
      push(coll_, r.t0, r.t1);
      if (r.kind == TS_COLL_ALL_TO_ALL) push(a2a_, r.t0, r.t1);
      CollAcc& a = colls_[{r.kind, r.group, r.bytes}];
      ++a.count;
      a.total += len;
      a.max = std::max(a.max, len);
      a.first = std::min(a.first, r.t0);
      a.last = std::max(a.last, r.t1);
      break;
    }
    case RecordType::kLink: {
      // In-flight time only; a link's transfers are part of a collective already counted
      // in comm, so they add nothing to the step's unions.
      LinkAcc& a = links_[{r.name, r.group}];
      a.bytes += r.bytes;
      ++a.transfers;
      a.wire += len;
      break;
    }
    case RecordType::kP2p: {
      push(comm_, r.t0, r.t1);
      push(p2p_, r.t0, r.t1);
      P2pAcc& a = p2ps_[{r.name, r.group, r.kind}];
      ++a.count;
      a.bytes += r.bytes;
      a.total += len;
      a.max = std::max(a.max, len);
      a.min = std::min(a.min, len);
      break;
    }
    case RecordType::kDeviceColl: {
      devComm_.emplace_back(r.t0, r.t1);  // not clipped: the GPU runs behind the step
      DevCollAcc& a = devColls_[{r.kind, r.group, r.bytes}];
      ++a.times.count;
      a.times.total += len;
      a.times.max = std::max(a.times.max, len);
      a.times.first = std::min(a.times.first, r.t0);
      a.times.last = std::max(a.times.last, r.t1);
      a.firstSeq = std::min(a.firstSeq, r.seq);
      a.lastSeq = std::max(a.lastSeq, r.seq);
      a.info = r.info;
      break;
    }
    case RecordType::kDeviceP2p: {
      devComm_.emplace_back(r.t0, r.t1);
      P2pAcc& a = devP2ps_[{r.name, r.group, r.kind}];
      ++a.count;
      a.bytes += r.bytes;
      a.total += len;
      a.max = std::max(a.max, len);
      a.min = std::min(a.min, len);
      break;
    }
    default:
      break;
  }
}

size_t StepAccumulator::units() const {
  return compute_.size() + comm_.size() + waits_.size() + data_.size() + coll_.size() +
         p2p_.size() + a2a_.size() + devComm_.size() +
         4 * (ops_.size() + colls_.size() + links_.size() + p2ps_.size() + devColls_.size() +
              devP2ps_.size());
}

wire::StepReport StepAccumulator::report(const std::string& job, uint32_t rank, int64_t step,
                                         uint32_t topOps, uint64_t records) {
  wire::StepReport rep;
  rep.set_job(job);
  rep.set_rank(rank);
  rep.set_step(step);
  rep.set_start_ns(begin_);
  rep.set_end_ns(end_);
  const int64_t duration = end_ - begin_;
  rep.set_duration_ns(duration);
  // Time blocked on communication (TS_RANGE_COMM: a synchronous collective, Work.wait(),
  // DDP's wait for its gradient buckets at the end of backward) is never compute, even inside
  // a compute phase, and is communication the step is exposed to. A wait counts with the
  // collectives unless it meets no collective and some p2p transfer (a pipeline's recv wait).
  const Intervals waitU = merged(std::move(waits_));
  const Intervals computeU = subtracted(merged(std::move(compute_)), waitU);
  Intervals collU = merged(std::move(coll_));
  Intervals p2pU = merged(std::move(p2p_));
  Intervals collWaits;
  Intervals p2pWaits;
  for (const auto& w : waitU) {
    const bool p2pOnly = !meets(collU, w) && meets(p2pU, w);
    (p2pOnly ? p2pWaits : collWaits).push_back(w);
  }
  comm_.insert(comm_.end(), waitU.begin(), waitU.end());
  collU.insert(collU.end(), collWaits.begin(), collWaits.end());
  p2pU.insert(p2pU.end(), p2pWaits.begin(), p2pWaits.end());
  const Intervals commU = merged(std::move(comm_));
  collU = merged(std::move(collU));
  p2pU = merged(std::move(p2pU));
  const int64_t commNs = lengthOf(commU);
  const int64_t exposed = commNs - overlapLength(computeU, commU);
  const int64_t dataNs = unionLength(std::move(data_));
  // The same split for collectives alone and for p2p alone: what the overlap ratio and the
  // pipeline bubble are made of.
  const int64_t collNs = lengthOf(collU);
  const int64_t p2pNs = lengthOf(p2pU);
  rep.set_collective_ns(collNs);
  rep.set_exposed_collective_ns(collNs - overlapLength(computeU, collU));
  rep.set_p2p_ns(p2pNs);
  rep.set_bubble_ns(p2pNs - overlapLength(computeU, p2pU));
  rep.set_all_to_all_ns(unionLength(std::move(a2a_)));
  int64_t computeNs = lengthOf(computeU);
  if (!anyCompute_) computeNs = std::max<int64_t>(0, duration - exposed - dataNs);
  rep.set_compute_ns(computeNs);
  rep.set_comm_ns(commNs);
  rep.set_exposed_comm_ns(exposed);
  rep.set_data_ns(dataNs);

  std::vector<std::pair<uint32_t, OpAcc>> sorted(ops_.begin(), ops_.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.second.total != b.second.total ? a.second.total > b.second.total : a.first < b.first;
  });
  const size_t top = std::min<size_t>(sorted.size(), topOps);
  for (size_t i = 0; i < top; ++i) {
    auto* op = rep.add_ops();
    op->set_name(nameString(sorted[i].first));
    op->set_count(sorted[i].second.count);
    op->set_total_ns(sorted[i].second.total);
    op->set_max_ns(sorted[i].second.max);
  }
  rep.set_ops_truncated(sorted.size() - top);

  auto setTimes = [](wire::CollectiveTotal* c, uint64_t bytes, const CollAcc& a) {
    c->set_count(a.count);
    c->set_total_ns(a.total);
    c->set_max_ns(a.max);
    c->set_bandwidth_bps(a.total > 0 ? static_cast<double>(bytes) * static_cast<double>(a.count) /
                                           (static_cast<double>(a.total) * 1e-9)
                                     : 0.0);
    c->set_first_arrival_ns(a.first);
    c->set_last_completion_ns(a.last);
  };
  auto setDevice = [&](wire::CollectiveTotal* c, uint64_t bytes, const DevCollAcc& d) {
    setTimes(c, bytes, d.times);
    c->set_device_timed(true);
    c->set_first_seq(d.firstSeq);
    c->set_last_seq(d.lastSeq);
    c->set_algorithm(ncclAlgoName(d.info & 0xff));
    c->set_protocol(ncclProtoName((d.info >> 8) & 0xff));
    c->set_datatype(dtypeName((d.info >> 16) & 0xff));
    c->set_channels(d.info >> 24);
  };
  for (const auto& [key, a] : colls_) {
    auto* c = rep.add_collectives();
    c->set_op(static_cast<wire::CollectiveOp>(std::get<0>(key)));
    c->set_group(nameString(std::get<1>(key)));
    c->set_bytes(std::get<2>(key));
    auto dev = devColls_.find(key);
    if (dev == devColls_.end()) {
      setTimes(c, std::get<2>(key), a);
      continue;
    }
    // The device's times replace the host's (which include launch and, for async work, the
    // time until the host noticed completion); the host's stay beside them.
    setDevice(c, std::get<2>(key), dev->second);
    c->set_host_count(a.count);
    c->set_host_total_ns(a.total);
  }
  for (const auto& [key, d] : devColls_) {
    if (colls_.count(key) != 0) continue;
    auto* c = rep.add_collectives();
    c->set_op(static_cast<wire::CollectiveOp>(std::get<0>(key)));
    c->set_group(nameString(std::get<1>(key)));
    c->set_bytes(std::get<2>(key));
    setDevice(c, std::get<2>(key), d);
  }
  // The device's communication of the operations the step launched, which may run past the
  // step's end on the host; at most the step's duration (what a step report may carry).
  rep.set_device_comm_ns(std::min(unionLength(std::move(devComm_)), duration));
  for (const auto& [key, a] : links_) {
    auto* l = rep.add_links();
    l->set_peer(key.first);
    l->set_group(nameString(key.second));
    l->set_bytes(a.bytes);
    l->set_transfers(a.transfers);
    l->set_wire_ns(a.wire);
  }
  auto addP2p = [&](const std::tuple<uint32_t, uint32_t, uint8_t>& key, const P2pAcc& a) {
    auto* p = rep.add_p2p();
    p->set_peer(std::get<0>(key));
    p->set_group(nameString(std::get<1>(key)));
    p->set_op(static_cast<wire::CollectiveOp>(std::get<2>(key)));
    p->set_count(a.count);
    p->set_bytes(a.bytes);
    p->set_total_ns(a.total);
    p->set_max_ns(a.max);
    p->set_min_ns(a.min);
    return p;
  };
  for (const auto& [key, a] : p2ps_) {
    auto dev = devP2ps_.find(key);
    if (dev == devP2ps_.end()) {
      addP2p(key, a);
      continue;
    }
    auto* p = addP2p(key, dev->second);
    p->set_device_timed(true);
    p->set_host_count(a.count);
    p->set_host_total_ns(a.total);
  }
  for (const auto& [key, d] : devP2ps_) {
    if (p2ps_.count(key) == 0) addP2p(key, d)->set_device_timed(true);
  }
  rep.set_records(records);
  return rep;
}

std::vector<FoldedStep> StepFolder::take() {
  std::vector<FoldedStep> out;
  out.swap(ready_);
  return out;
}

}  // namespace trainscope::probe
