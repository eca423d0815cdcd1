// Probe instances and the one process-wide runtime thread that services all of them: it
// drains every ring, folds records into step reports, feeds the flight recorders and does all
// ZeroMQ I/O, and runs capture commands (docs/CAPTURE.md) with a short-lived writer thread
// per trace capture and per stack dump. Training threads only touch the rings (ringAt,
// registerRing); the other Instance members are the runtime thread's unless a comment says
// otherwise.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "agent/probe/capture_worker.h"
#include "agent/probe/config.h"
#include "agent/probe/flight_recorder.h"
#include "agent/probe/fold.h"
#include "agent/probe/progress.h"
#include "agent/probe/ring.h"
#include "agent/probe/trainscope_probe.h"
#include "agent/probe/transport.h"
#include "common/thread_annotations.h"

namespace trainscope::probe {

// Threads that get an O(1) ring slot; further threads use a slower thread-local map.
inline constexpr int kMaxThreadSlots = 256;
// Ranks one declared group may hold (ts_declare_group); the collector enforces the same bound.
inline constexpr size_t kMaxGroupRanks = 1u << 20;

class Instance {
 public:
  explicit Instance(ProbeConfig config);
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  // Any thread, hot path: the ring of the thread holding `slot` (see threadSlot in
  // trainscope_probe.cpp), or nullptr when that thread has none yet.
  Ring* ringAt(int slot) const { return slots_[slot].load(std::memory_order_relaxed); }
  // Any thread, slow path: registers (locks, allocates) the calling thread's ring. `slot` < 0
  // means the thread has no slot and the ring is found through a thread-local map instead.
  Ring* registerRing(int slot);

  const ProbeConfig& config() const { return config_; }
  uint64_t id() const { return id_; }

  // Any thread.
  void stats(ts_probe_stats* out) const;
  FlightRecorder& flight() { return flight_; }
  // Any thread. `fn` runs on the runtime thread with every report built (fold-only mode
  // included); keep it short, it delays every instance's draining.
  void setOnReport(std::function<void(const wire::StepReport&)> fn);
  // Any thread. `fn` runs on the runtime thread for every Command from the agent, besides
  // the probe's own handling of it (captures and stack dumps, docs/CAPTURE.md).
  void setOnCommand(std::function<void(const wire::Command&)> fn);
  // Any thread. `fn` runs on the runtime thread for every CommandStatus this instance sends
  // (also in fold-only mode, where nothing is sent).
  void setOnStatus(std::function<void(const wire::CommandStatus&)> fn);
  // Any thread. Runs `cmd` as if the agent had sent it (at the runtime thread's next pass):
  // for embedders without an agent, tests and benches.
  void submitCommand(const wire::Command& cmd);
  // Any thread, slow path (ts_declare_group): adds or replaces the group called `name` after
  // checking it (kind known, ranks in the world, no repeats, this rank a member); the runtime
  // thread sends the rank's groups to the agent in its next hello. An unchanged group is no
  // news and sends nothing.
  Status declareGroup(const std::string& name, uint32_t kind, const int32_t* ranks, int32_t count);
  // Any thread: the groups declared so far, in declaration order, and when the last one was.
  std::vector<wire::ProcessGroup> groups(int64_t* declaredNs = nullptr) const;
  // Any thread, wait-free (ts_set_flops): stamped into every report folded from now on.
  void setFlops(double model, double hardware, double peak);
  // Any thread, slow path (ts_device_group): the group an NCCL communicator of `nranks` ranks,
  // this rank at `rank`, stands for, with its ranks' global ranks in `globalRanks` (-1 where
  // not known) when that is not NULL. See trainscope_probe.h for the order of the rules.
  std::string deviceGroup(uint64_t commHash, const std::string& commName, int32_t nranks,
                          int32_t rank, int32_t* globalRanks) const;
  // Any thread, wait-free (ts_device_dropped): counted into the next report's device_dropped.
  void addDeviceDropped(uint64_t n) { deviceDropped_.fetch_add(n, std::memory_order_relaxed); }

  // Runtime thread only.
  Status open(void* zmqContext);
  void service(int64_t nowNs, bool closing);  // one drain/fold/IO pass
  bool transportIdle() const { return transport_ == nullptr || transport_->idle(); }
  std::atomic<bool> idleFlag{true};  // transportIdle() as of the last pass; any thread
  std::atomic<bool> holding{false};  // the folder holds ended steps for device records
  void closeTransport() { transport_.reset(); }
  // After fork: drops the socket without closing it (the child must not use the context).
  void abandonTransport() { (void)transport_.release(); }

  std::atomic<uint64_t> passes{0};          // completed passes; read by flush()
  std::atomic<int> flushers{0};             // flush() calls waiting: send without batching
  std::atomic<bool> closeRequested{false};  // set by Runtime::remove
  bool finished = false;                    // runtime thread: final fold and goodbye done
  int64_t closeDeadlineNs = 0;              // set before closeRequested; monotonic

 private:
  // Runtime thread: commands and statuses.
  void takeMail();
  void handleCommand(const wire::Command& cmd);
  void startStackDump(const wire::Command& cmd);
  void emitStatuses(std::vector<wire::CommandStatus> statuses);
  // Runtime thread: hands each folded step to onReport_, the transport, then a running capture
  // or the flight recorder.
  void deliverSteps(std::vector<FoldedStep>& folded, uint64_t dropped, int64_t nowNs)
      EXCLUDES(hooksMu_);
  // Any thread: queues a status for the runtime thread to send (the stack worker).
  void postStatus(wire::CommandStatus status);

  const ProbeConfig config_;
  const uint64_t id_;
  std::atomic<Ring*> slots_[kMaxThreadSlots] = {};
  Mutex ringsMu_;
  std::vector<std::unique_ptr<Ring>> rings_ GUARDED_BY(ringsMu_);  // never shrinks
  StepFolder folder_;
  ProgressTracker progress_;  // fed the folder's records; read into each RankHello
  FlightRecorder flight_;
  std::unique_ptr<Transport> transport_;
  uint64_t droppedReported_ = 0;            // ring drops already put in a report
  std::atomic<uint64_t> deviceDropped_{0};  // ts_device_dropped, any thread
  uint64_t deviceDroppedReported_ = 0;      // runtime thread: already put in a report
  int64_t lastIoNs_ = 0;
  std::vector<Ring*> ringView_;  // runtime thread's copy of rings_

  Mutex hooksMu_;
  std::function<void(const wire::StepReport&)> onReport_ GUARDED_BY(hooksMu_);
  std::function<void(const wire::Command&)> onCommand_ GUARDED_BY(hooksMu_);
  std::function<void(const wire::CommandStatus&)> onStatus_ GUARDED_BY(hooksMu_);

  CaptureWorker capture_;  // runtime thread (its writer posts statuses through postStatus)
  Mutex mailMu_;
  std::vector<wire::Command> inbox_ GUARDED_BY(mailMu_);
  std::vector<wire::CommandStatus> outbox_ GUARDED_BY(mailMu_);  // stack worker results
  std::atomic<bool> mail_{false};  // inbox_ or outbox_ may be non-empty
  std::thread stackWorker_;        // runtime thread; one stack dump at a time
  std::atomic<bool> stackBusy_{false};

  mutable Mutex groupsMu_;
  std::vector<wire::ProcessGroup> groups_ GUARDED_BY(groupsMu_);  // names are unique
  int64_t groupsDeclaredNs_ GUARDED_BY(groupsMu_) = 0;            // 0: none declared
  std::atomic<bool> groupsDirty_{false};  // groups_ changed since the runtime thread looked
  std::atomic<double> modelFlops_{0};     // ts_set_flops; read by the runtime thread
  std::atomic<double> hardwareFlops_{0};
  std::atomic<double> peakFlops_{0};

  std::atomic<uint64_t> records_{0};
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> stepsFolded_{0};
  std::atomic<uint64_t> unattributed_{0};
};

// The process-wide runtime. Any thread may call its public functions.
class Runtime {
 public:
  static Runtime& get();

  // Opens the instance's transport and starts servicing it (starts the thread if needed).
  Status add(Instance* inst);
  // Final fold, goodbye, waits up to timeoutMs for acks, then stops servicing `inst`; the
  // caller frees it afterwards.
  void remove(Instance* inst, int32_t timeoutMs);
  // 0 when every step ended before the call is folded (and acked when connected); 1 on time-out.
  int32_t flush(Instance* inst, int32_t timeoutMs);
  // Stops the thread (process exit). Instances still registered stop being serviced.
  void stop();
  bool stopped() const { return stopped_.load(); }
  // True in a child forked from a process whose probe was running: the runtime thread and
  // the ZeroMQ context did not come along, so the child records nothing and leaks rather
  // than touching them (DataLoader workers fork).
  bool forked() const { return forked_.load(); }

 private:
  Runtime();
  void loop();
  // After fork: the thread handle names a thread of the parent, and mu_ may have been held by a
  // thread that did not survive the fork; so neither is touched, and the handle is leaked.
  void leakThreadAfterFork() NO_THREAD_SAFETY_ANALYSIS;

  void* ctx_;
  Mutex mu_;
  CondVar cv_;
  std::vector<Instance*> instances_ GUARDED_BY(mu_);
  std::thread thread_ GUARDED_BY(mu_);  // started once
  std::atomic<bool> stopped_{false};
  std::atomic<bool> forked_{false};
  bool wake_ GUARDED_BY(mu_) = false;
};

// How long a process that exits now waits for its default probe's goodbye to be acknowledged
// (the wait ends at the ack): never long, and never dropping what a live agent can still take.
// kExitWaitConnectedMs when the agent acknowledged within its window; kExitWaitFirstAckMs when
// the probe recorded something and no report of it was ever acknowledged (a job shorter than
// its first round trip to the agent: without the wait it would lose everything it recorded);
// 0 otherwise (the agent was heard from once and is gone, or there is nothing to send). The C
// ABI's ts_exit_wait_ms gives it for the default probe (the Python package's exit hook asks).
inline constexpr int32_t kExitWaitConnectedMs = 200;
inline constexpr int32_t kExitWaitFirstAckMs = 500;
int32_t exitWaitMs(const ts_probe_stats& stats);

}  // namespace trainscope::probe
