// CaptureWorker runs one probe instance's CaptureRecorder on a short-lived thread of its own
// (alive from a capture command until that capture's final status), so neither compressing a
// trace nor copying the flight recorder's history stalls the runtime thread's draining. The
// runtime thread calls command(), offer() and close(); statuses come back through `post`,
// called on the worker thread (or on the caller's when the thread cannot start). While a
// capture runs, the folded steps it wants are moved to the worker, which writes them and then
// adds them to the flight recorder itself, so nothing is copied. Steps wait for the writer in
// a queue bounded in bytes: a writer that falls that far behind ends the trace early,
// truncated, and says so.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "agent/probe/capture.h"
#include "agent/probe/flight_recorder.h"
#include "common/thread_annotations.h"

namespace trainscope::probe {

class CaptureWorker {
 public:
  // `maxQueuedBytes`: records waiting for the writer (64 B each); more rides out a slower
  // disk, costs memory during a capture.
  CaptureWorker(CaptureIdentity identity, CaptureOptions options, FlightRecorder* flight,
                std::function<void(wire::CommandStatus)> post, uint64_t maxQueuedBytes);
  ~CaptureWorker();  // close(-1) if still running
  CaptureWorker(const CaptureWorker&) = delete;
  CaptureWorker& operator=(const CaptureWorker&) = delete;

  // Runtime thread. A capture command: the worker takes the history from the flight recorder
  // and answers `recording` or `failed` at once. (No step it needs can leave the flight
  // recorder meanwhile: newer steps are moved to the worker, see offer.)
  void command(const wire::Command& cmd, int64_t lastFinalStep);
  // Runtime thread, per folded step. True: the capture wants the step; `records` were moved
  // to the worker, which adds them to the flight recorder after writing. False (no capture,
  // a step before S-K, the writer too far behind): the caller adds them itself. An atomic
  // load when no capture runs.
  bool offer(int64_t step, int64_t startNs, int64_t endNs, std::vector<Record>& records);
  // Runtime thread: the instance closes at `lastStep`. Returns once the writer has finished
  // and posted its final status.
  void close(int64_t lastStep);
  bool running() const { return runningHint_.load(std::memory_order_acquire); }

 private:
  enum class Kind { kStart, kStep, kBehind, kClose };
  struct Msg {
    Kind kind;
    wire::Command cmd;            // kStart
    int64_t value = 0;            // kStart: last final step; kBehind, kClose: the step
    std::vector<HeldStep> steps;  // kStart: the history; kStep: the one step
    uint64_t bytes = 0;
  };

  void run();
  void push(Msg m) REQUIRES(mu_);

  CaptureRecorder recorder_;  // worker thread (or nobody while none runs)
  FlightRecorder* flight_;
  std::function<void(wire::CommandStatus)> post_;
  const uint64_t maxQueuedBytes_;
  Mutex mu_;
  CondVar cv_;
  std::deque<Msg> queue_ GUARDED_BY(mu_);
  uint64_t queuedBytes_ GUARDED_BY(mu_) = 0;
  bool running_ GUARDED_BY(mu_) = false;  // the thread is serving the queue
  bool behind_ GUARDED_BY(mu_) = false;   // a step was refused, the capture ends early
  std::atomic<bool> runningHint_{false};
  int64_t wantFrom_ = 0;  // runtime thread: steps before it (S-K) are not copied
  std::thread thread_;    // runtime thread
};

}  // namespace trainscope::probe
