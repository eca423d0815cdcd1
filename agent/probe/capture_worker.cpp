#include "agent/probe/capture_worker.h"

#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "common/log.h"
#include "schema/capture_state.h"

namespace trainscope::probe {

CaptureWorker::CaptureWorker(CaptureIdentity identity, CaptureOptions options,
                             FlightRecorder* flight, std::function<void(wire::CommandStatus)> post,
                             uint64_t maxQueuedBytes)
    : recorder_(std::move(identity), std::move(options)),
      flight_(flight),
      post_(std::move(post)),
      maxQueuedBytes_(maxQueuedBytes) {}

CaptureWorker::~CaptureWorker() {
  close(-1);
}

void CaptureWorker::push(Msg m) {
  queuedBytes_ += m.bytes;
  queue_.push_back(std::move(m));
  cv_.notifyOne();
}

void CaptureWorker::command(const wire::Command& cmd, int64_t lastFinalStep) {
  Msg m{Kind::kStart, cmd, lastFinalStep, {}, 0};
  const int64_t from = CaptureRecorder::historyRange(cmd.capture()).first;
  UniqueLock lock(&mu_);
  if (running_) {
    push(std::move(m));  // the recorder answers "already running" (or repeats "recording")
    return;
  }
  lock.unlock();
  if (thread_.joinable()) thread_.join();  // the previous capture's thread, done
  lock.lock();
  queue_.clear();
  queuedBytes_ = 0;
  behind_ = false;
  wantFrom_ = from;
  push(std::move(m));
  running_ = true;
  runningHint_.store(true, std::memory_order_release);
  std::optional<std::string> failure;
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::exception& e) {
    running_ = false;
    runningHint_.store(false, std::memory_order_release);
    queue_.clear();
    queuedBytes_ = 0;
    failure = e.what();
  }
  lock.unlock();
  if (!failure) return;
  wire::CommandStatus st;
  st.set_command_id(cmd.id().empty() ? cmd.capture().capture_id() : cmd.id());
  wire::setCommandState(&st, wire::RankState::kFailed);
  st.set_detail("cannot start the capture writer thread: " + *failure);
  post_(std::move(st));
}

bool CaptureWorker::offer(int64_t step, int64_t startNs, int64_t endNs,
                          std::vector<Record>& records) {
  if (!runningHint_.load(std::memory_order_acquire) || step < wantFrom_) return false;
  const uint64_t bytes = records.size() * sizeof(Record);
  MutexLock lock(&mu_);
  if (!running_ || behind_) return false;
  if (queuedBytes_ + bytes > maxQueuedBytes_) {
    behind_ = true;
    push(Msg{Kind::kBehind, {}, step, {}, 0});
    return false;
  }
  Msg m{Kind::kStep, {}, 0, {}, bytes};
  m.steps.push_back(HeldStep{step, startNs, endNs, std::move(records)});
  push(std::move(m));
  return true;
}

void CaptureWorker::close(int64_t lastStep) {
  {
    MutexLock lock(&mu_);
    if (running_) push(Msg{Kind::kClose, {}, lastStep, {}, 0});
  }
  if (thread_.joinable()) thread_.join();
}

void CaptureWorker::run() {
  for (;;) {
    Msg m;
    {
      UniqueLock lock(&mu_);
      while (queue_.empty()) cv_.wait(lock);
      m = std::move(queue_.front());
      queue_.pop_front();
      queuedBytes_ -= m.bytes;
    }
    try {
      switch (m.kind) {
        case Kind::kStart: {
          const auto [from, to] = CaptureRecorder::historyRange(m.cmd.capture());
          if (from <= to && flight_ != nullptr) m.steps = flight_->stepsIn(from, to);
          bool started = false;
          const int64_t first = m.steps.empty() ? -1 : m.steps.front().step;
          post_(recorder_.begin(m.cmd, m.value, first, &started));
          if (started) {
            if (auto st = recorder_.writeHistory(m.steps)) post_(std::move(*st));
          }
          break;
        }
        case Kind::kStep: {
          HeldStep& h = m.steps.front();
          auto st = recorder_.offer(h.step, h.startNs, h.endNs, h.records);
          if (flight_ != nullptr) flight_->add(h.step, std::move(h.records), h.startNs, h.endNs);
          if (st) post_(std::move(*st));
          break;
        }
        case Kind::kBehind:
          if (auto st = recorder_.cutShort("the trace writer fell behind the training at step " +
                                           std::to_string(m.value) + " (over " +
                                           formatBound(maxQueuedBytes_) +
                                           " of records waiting); the trace ends before it")) {
            post_(std::move(*st));
          }
          break;
        case Kind::kClose:
          if (auto st = recorder_.close(m.value)) post_(std::move(*st));
          break;
      }
    } catch (const std::exception& e) {
      logOnce(LogLevel::kError, "probe", "capture-worker",
              std::string("capture writer failed; the capture is dropped: ") + e.what());
      if (auto st = recorder_.cutShort(std::string("capture writer failed: ") + e.what())) {
        post_(std::move(*st));
      }
    }
    MutexLock lock(&mu_);
    if (!recorder_.active() && queue_.empty()) {
      running_ = false;
      runningHint_.store(false, std::memory_order_release);
      return;
    }
  }
}

}  // namespace trainscope::probe
