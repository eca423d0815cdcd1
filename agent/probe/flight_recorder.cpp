#include "agent/probe/flight_recorder.h"

#include <utility>

namespace trainscope::probe {

FlightRecorder::FlightRecorder(uint32_t maxSteps, uint64_t maxBytes)
    : maxSteps_(maxSteps == 0 ? 1 : maxSteps), maxBytes_(maxBytes) {}

void FlightRecorder::add(int64_t step, std::vector<Record> records, int64_t startNs,
                         int64_t endNs) {
  const uint64_t maxRecords = maxBytes_ / sizeof(Record);
  if (records.size() > maxRecords) records.resize(maxRecords);
  const uint64_t size = records.size() * sizeof(Record);
  MutexLock lock(&mu_);
  while (!entries_.empty() && (entries_.size() >= maxSteps_ || bytes_ + size > maxBytes_)) {
    bytes_ -= entries_.front().records.size() * sizeof(Record);
    entries_.pop_front();
  }
  bytes_ += size;
  entries_.push_back(HeldStep{step, startNs, endNs, std::move(records)});
}

std::vector<Record> FlightRecorder::snapshot(int64_t fromStep, int64_t toStep) const {
  MutexLock lock(&mu_);
  std::vector<Record> out;
  for (const HeldStep& e : entries_) {
    if (e.step < fromStep || e.step > toStep) continue;
    out.insert(out.end(), e.records.begin(), e.records.end());
  }
  return out;
}

std::vector<HeldStep> FlightRecorder::stepsIn(int64_t fromStep, int64_t toStep) const {
  MutexLock lock(&mu_);
  std::vector<HeldStep> out;
  for (const HeldStep& e : entries_) {
    if (e.step >= fromStep && e.step <= toStep) out.push_back(e);
  }
  return out;
}

uint64_t FlightRecorder::bytes() const {
  MutexLock lock(&mu_);
  return bytes_;
}

uint64_t FlightRecorder::steps() const {
  MutexLock lock(&mu_);
  return entries_.size();
}

std::vector<int64_t> FlightRecorder::heldSteps() const {
  MutexLock lock(&mu_);
  std::vector<int64_t> out;
  for (const HeldStep& e : entries_) out.push_back(e.step);
  return out;
}

}  // namespace trainscope::probe
