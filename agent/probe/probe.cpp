#include "agent/probe/probe.h"

#include <utility>

#include "agent/probe/intern.h"
#include "agent/probe/runtime.h"

namespace trainscope::probe {

Name::Name(std::string_view name) : id_(internName(name)) {}

Probe::Probe(const ts_probe_config& config, int32_t destroyTimeoutMs)
    : handle_(ts_probe_create(&config)), owned_(true), destroyTimeoutMs_(destroyTimeoutMs) {
  if (handle_ == nullptr) error_ = ts_last_error();
}

Probe Probe::defaultInstance() {
  Probe p;
  p.handle_ = ts_default();
  p.owned_ = false;
  return p;
}

Probe::~Probe() {
  if (owned_ && handle_ != nullptr) ts_probe_destroy(handle_, destroyTimeoutMs_);
}

Probe::Probe(Probe&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)),
      owned_(other.owned_),
      destroyTimeoutMs_(other.destroyTimeoutMs_),
      error_(std::move(other.error_)) {}

Probe& Probe::operator=(Probe&& other) noexcept {
  if (this != &other) {
    if (owned_ && handle_ != nullptr) ts_probe_destroy(handle_, destroyTimeoutMs_);
    handle_ = std::exchange(other.handle_, nullptr);
    owned_ = other.owned_;
    destroyTimeoutMs_ = other.destroyTimeoutMs_;
    error_ = std::move(other.error_);
  }
  return *this;
}

ts_probe_stats Probe::stats() const {
  ts_probe_stats s{};
  ts_probe_get_stats(handle_, &s);
  return s;
}

FlightRecorder& Probe::flightRecorder() {
  return reinterpret_cast<Instance*>(handle_)->flight();
}

std::vector<Record> Probe::flightSnapshot(int64_t fromStep, int64_t toStep) {
  if (handle_ == nullptr) return {};
  return flightRecorder().snapshot(fromStep, toStep);
}

void Probe::onReport(std::function<void(const wire::StepReport&)> fn) {
  if (handle_ != nullptr) reinterpret_cast<Instance*>(handle_)->setOnReport(std::move(fn));
}

void Probe::onCommand(std::function<void(const wire::Command&)> fn) {
  if (handle_ != nullptr) reinterpret_cast<Instance*>(handle_)->setOnCommand(std::move(fn));
}

void Probe::onStatus(std::function<void(const wire::CommandStatus&)> fn) {
  if (handle_ != nullptr) reinterpret_cast<Instance*>(handle_)->setOnStatus(std::move(fn));
}

Status Probe::declareGroup(Name group, ts_group_kind kind, std::span<const int32_t> ranks) {
  if (handle_ == nullptr) return Status::error("the probe was not created: " + error_);
  if (ranks.size() > kMaxGroupRanks) {
    return Status::error("group '" + std::string(group.str()) +
                         "': " + std::to_string(ranks.size()) + " ranks; a group has 1.." +
                         std::to_string(kMaxGroupRanks));
  }
  return reinterpret_cast<Instance*>(handle_)->declareGroup(group.str(), kind, ranks.data(),
                                                            static_cast<int32_t>(ranks.size()));
}

std::vector<wire::ProcessGroup> Probe::groups() const {
  if (handle_ == nullptr) return {};
  return reinterpret_cast<Instance*>(handle_)->groups();
}

void Probe::submitCommand(const wire::Command& cmd) {
  if (handle_ != nullptr) reinterpret_cast<Instance*>(handle_)->submitCommand(cmd);
}

}  // namespace trainscope::probe
