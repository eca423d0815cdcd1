// The probe's C++ API: a thin RAII layer over the C ABI in trainscope_probe.h, plus access to
// the flight recorder and the report/command hooks for capture work. Record calls (and the
// scopes) may be used from any thread and cost what the C calls cost; Probe construction,
// destruction and Name interning lock and allocate, so keep them out of the hot loop.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "agent/probe/record.h"
#include "agent/probe/trainscope_probe.h"
#include "common/status.h"
#include "schema/trainscope.pb.h"

namespace trainscope::probe {

class FlightRecorder;

// An interned name: intern once, record by id.
class Name {
 public:
  Name() = default;
  explicit Name(std::string_view name);
  ts_name id() const { return id_; }
  const char* str() const { return ts_name_str(id_); }

 private:
  ts_name id_ = 0;
};

// Owns one probe instance (or borrows the default one). Moving transfers ownership.
class Probe {
 public:
  // Creates an instance; check ok() (the reason is in error()).
  explicit Probe(const ts_probe_config& config, int32_t destroyTimeoutMs = 1000);
  // Borrows the process's default instance (never destroyed by this object).
  static Probe defaultInstance();
  ~Probe();
  Probe(Probe&& other) noexcept;
  Probe& operator=(Probe&& other) noexcept;
  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;

  bool ok() const { return handle_ != nullptr; }
  const std::string& error() const { return error_; }
  ts_probe* handle() const { return handle_; }

  void stepBegin(int64_t step, int64_t tNs = 0) { ts_step_begin(handle_, step, tNs); }
  void stepEnd(int64_t step, int64_t tNs = 0) { ts_step_end(handle_, step, tNs); }
  void rangePush(Name name, ts_range_kind kind = TS_RANGE_OTHER, int64_t tNs = 0) {
    ts_range_push(handle_, name.id(), kind, tNs);
  }
  void rangePop(int64_t tNs = 0) { ts_range_pop(handle_, tNs); }
  void range(Name name, ts_range_kind kind, int64_t startNs, int64_t endNs) {
    ts_range(handle_, name.id(), kind, startNs, endNs);
  }
  void op(Name name, int64_t startNs, int64_t durationNs) {
    ts_op(handle_, name.id(), startNs, durationNs);
  }
  void collective(ts_collective_op op, Name group, uint64_t bytes, int64_t arriveNs,
                  int64_t completeNs) {
    ts_collective(handle_, op, group.id(), bytes, arriveNs, completeNs);
  }
  void collectiveBegin(ts_collective_op op, Name group, uint64_t bytes, int64_t tNs = 0) {
    ts_collective_begin(handle_, op, group.id(), bytes, tNs);
  }
  void collectiveEnd(int64_t tNs = 0) { ts_collective_end(handle_, tNs); }
  // One transfer to `peer` in flight from postedNs to deliveredNs (see ts_link_transfer).
  void linkTransfer(Name group, uint32_t peer, uint64_t bytes, int64_t postedNs,
                    int64_t deliveredNs) {
    ts_link_transfer(handle_, group.id(), peer, bytes, postedNs, deliveredNs);
  }

  // One pipeline send or receive with `peer` (global rank), posted at arriveNs and completed
  // at completeNs (see ts_p2p).
  void p2p(ts_collective_op op, Name group, int32_t peer, uint64_t bytes, int64_t arriveNs,
           int64_t completeNs) {
    ts_p2p(handle_, op, group.id(), peer, bytes, arriveNs, completeNs);
  }
  // Declares a process group this rank belongs to (see ts_declare_group); the reason it was
  // refused, if it was.
  Status declareGroup(Name group, ts_group_kind kind, std::span<const int32_t> ranks);
  // The groups declared so far (from any Probe on this instance).
  std::vector<wire::ProcessGroup> groups() const;
  // FLOPs per step and the device peak, for MFU/HFU (see ts_set_flops).
  void setFlops(double modelFlopsPerStep, double hardwareFlopsPerStep, double peakFlops) {
    ts_set_flops(handle_, modelFlopsPerStep, hardwareFlopsPerStep, peakFlops);
  }

  // 0 when everything ended so far is folded (and acknowledged, when connected); 1 on time-out.
  int32_t flush(int32_t timeoutMs) { return ts_probe_flush(handle_, timeoutMs); }
  ts_probe_stats stats() const;

  // The flight recorder: records of the last completed steps (capture work reads it).
  FlightRecorder& flightRecorder();
  std::vector<Record> flightSnapshot(int64_t fromStep, int64_t toStep);

  // Hooks that run on the probe's runtime thread (set from any thread): every report built
  // (also in fold-only mode), every Command from the agent (the probe runs captures and
  // stack dumps itself; this hook is extra), and every CommandStatus the probe sends (also in
  // fold-only mode). Keep them short.
  void onReport(std::function<void(const wire::StepReport&)> fn);
  void onCommand(std::function<void(const wire::Command&)> fn);
  void onStatus(std::function<void(const wire::CommandStatus&)> fn);
  // Runs a command as if the agent had sent it (any thread; handled at the next pass).
  void submitCommand(const wire::Command& cmd);

 private:
  Probe() = default;
  ts_probe* handle_ = nullptr;
  bool owned_ = false;
  int32_t destroyTimeoutMs_ = 1000;
  std::string error_;
};

// Step `step` from construction to destruction.
class StepScope {
 public:
  StepScope(Probe& probe, int64_t step) : probe_(probe), step_(step) { probe_.stepBegin(step_); }
  ~StepScope() { probe_.stepEnd(step_); }
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

 private:
  Probe& probe_;
  int64_t step_;
};

class RangeScope {
 public:
  RangeScope(Probe& probe, Name name, ts_range_kind kind = TS_RANGE_OTHER) : probe_(probe) {
    probe_.rangePush(name, kind);
  }
  ~RangeScope() { probe_.rangePop(); }
  RangeScope(const RangeScope&) = delete;
  RangeScope& operator=(const RangeScope&) = delete;

 private:
  Probe& probe_;
};

class CollectiveScope {
 public:
  CollectiveScope(Probe& probe, ts_collective_op op, Name group, uint64_t bytes) : probe_(probe) {
    probe_.collectiveBegin(op, group, bytes);
  }
  ~CollectiveScope() { probe_.collectiveEnd(); }
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;

 private:
  Probe& probe_;
};

}  // namespace trainscope::probe
