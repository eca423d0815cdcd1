// GpuSampler: GPU health from NVML, loaded at run time (dlopen of libnvidia-ml.so.1, or of the
// library $TRAINSCOPE_NVML_LIB names), so the same agent runs on a node without a GPU and a test
// substitutes a fake (tests/agent/fake_nvml/). sample() is called by one owner (the agent's
// event loop, once a second); a thread of the sampler's own waits for NVML events (Xid, ECC) and
// queues them for the next sample. Thread-safe as stated per function.
//
// Every NVML function is optional: one the library lacks, or that answers NOT_SUPPORTED for a
// GPU, leaves its reading out of GpuSample.present and is logged once. A GPU that answers
// GPU_IS_LOST is reported lost (GpuSample.lost) with its index and UUID, and not read further
// in that sample. No NVML at all (no library, no driver, no GPU): sample() returns nothing,
// and the reason is logged once at start.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"
#include "schema/trainscope.pb.h"

namespace trainscope::agent {

// The library to load: $TRAINSCOPE_NVML_LIB when set, else libnvidia-ml.so.1.
std::string defaultNvmlLibrary();

class GpuSampler {
 public:
  // Loads `library` and initialises NVML; never fails (what is absent is logged once).
  // `watchEvents`: start the event thread (tests of sample() alone pass false).
  explicit GpuSampler(const std::string& library = defaultNvmlLibrary(), bool watchEvents = true);
  ~GpuSampler();
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;

  // Whether NVML loaded and initialised; false: sample() returns nothing.
  bool available() const;
  // Why NVML is not available ("" when it is).
  const std::string& absentReason() const;
  // GPUs found at start.
  size_t gpuCount() const;

  // One reading of every GPU, stamped into nothing: the caller puts them in its HostSample.
  // The loop thread only.
  std::vector<wire::GpuSample> sample();
  // The events the event thread received since the last call, oldest first (at most
  // kMaxQueuedEvents; more are counted in droppedEvents()). Any thread.
  std::vector<wire::GpuEvent> takeEvents();
  uint64_t droppedEvents() const;

  // What the sampler said it lacks, for tests: "nvmlDeviceGetPowerUsage" (a symbol absent),
  // "gpu 1 power" (NOT_SUPPORTED there). The loop thread only.
  const std::set<std::string>& absences() const;

  static constexpr size_t kMaxQueuedEvents = 256;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainscope::agent
