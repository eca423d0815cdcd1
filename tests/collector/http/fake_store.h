// An in-memory Store for HTTP and CLI tests and the capture fuzz target: rows are set by the
// test (captures are also written, by a CaptureManager), queries are recorded so a test can
// check what the API passed through, and `failWith` makes every query fail. Guarded
// by a mutex, since the server calls it from its I/O thread while the test thread inspects it.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "collector/storage/store.h"

namespace trainscope::testing {

class FakeStore final : public storage::Store {
 public:
  Status write(const storage::WriteBatch&) override {
    return Status::error("fake store is read-only");
  }

  Result<std::vector<storage::JobRow>> jobs() override {
    std::lock_guard lock(mu_);
    if (failWith) return Result<std::vector<storage::JobRow>>::error(*failWith);
    return jobRows;
  }
  Result<bool> jobExists(const std::string& job) override {
    std::lock_guard lock(mu_);
    if (failWith) return Result<bool>::error(*failWith);
    return std::any_of(jobRows.begin(), jobRows.end(), [&](const auto& j) { return j.job == job; });
  }
  Result<std::vector<storage::RankRow>> ranks(const std::string& job) override {
    std::lock_guard lock(mu_);
    if (failWith) return Result<std::vector<storage::RankRow>>::error(*failWith);
    std::vector<storage::RankRow> out;
    for (const auto& r : rankRows) {
      if (r.job == job) out.push_back(r);
    }
    return out;
  }
  // Filters like the real store, so the API's limit+1 / truncated logic is exercised.
  Result<std::vector<storage::StepRow>> steps(const storage::StepQuery& q) override {
    std::unique_lock lock(mu_);
    lastStepQuery = q;
    if (holdSteps) {
      stepsHeld = true;
      heldCv_.notify_all();
      heldCv_.wait(lock, [&] { return !holdSteps; });
    }
    if (throwOnSteps) throw std::length_error("fake store: steps() threw");
    if (failWith) return Result<std::vector<storage::StepRow>>::error(*failWith);
    std::vector<storage::StepRow> out;
    for (const auto& s : stepRows) {
      if (s.job != q.job) continue;
      if (q.rank && s.rank != *q.rank) continue;
      if (q.fromStep && s.step < *q.fromStep) continue;
      if (q.toStep && s.step > *q.toStep) continue;
      if (out.size() >= q.limit) break;
      storage::StepRow row = s;
      if (!q.detail) {
        row.ops.clear();
        row.collectives.clear();
      }
      out.push_back(std::move(row));
    }
    return out;
  }
  Result<std::vector<storage::StepSummaryRow>> summary(const storage::SummaryQuery& q) override {
    std::lock_guard lock(mu_);
    lastSummaryQuery = q;
    ++summaryCalls;
    if (failWith) return Result<std::vector<storage::StepSummaryRow>>::error(*failWith);
    std::vector<storage::StepSummaryRow> out;
    for (const auto& s : summaryRows) {
      if (q.fromStep && s.step < *q.fromStep) continue;
      if (q.toStep && s.step > *q.toStep) continue;
      if (out.size() >= q.limit) break;
      out.push_back(s);
    }
    return out;
  }
  Result<std::vector<storage::NodeRow>> nodes() override {
    std::lock_guard lock(mu_);
    if (failWith) return Result<std::vector<storage::NodeRow>>::error(*failWith);
    return nodeRows;
  }
  Result<uint64_t> applyRetention(int64_t) override { return uint64_t{0}; }
  Status writeAnomalies(const std::vector<storage::AnomalyRow>&) override {
    return Status::error("fake store is read-only");
  }
  Result<std::vector<storage::AnomalyRow>> anomalies(const std::string& job) override {
    std::lock_guard lock(mu_);
    if (failWith) return Result<std::vector<storage::AnomalyRow>>::error(*failWith);
    std::vector<storage::AnomalyRow> out;
    for (const auto& a : anomalyRows) {
      if (a.job == job) out.push_back(a);
    }
    return out;
  }
  Result<std::vector<storage::AnomalyRow>> anomaliesSince(int64_t sinceNs) override {
    std::lock_guard lock(mu_);
    lastAnomaliesSince = sinceNs;
    if (failWith) return Result<std::vector<storage::AnomalyRow>>::error(*failWith);
    std::vector<storage::AnomalyRow> out;
    for (const auto& a : anomalyRows) {
      if (a.updatedNs >= sinceNs) out.push_back(a);
    }
    return out;
  }
  // Captures are kept (upsert by id), so a CaptureManager can run on this store.
  Status writeCapture(const storage::CaptureRow& row) override {
    std::lock_guard lock(mu_);
    if (failWith) return Status::error(*failWith);
    for (auto& c : captureRows) {
      if (c.id == row.id) {
        c = row;
        return Status::ok();
      }
    }
    captureRows.push_back(row);
    return Status::ok();
  }
  Result<std::optional<storage::CaptureRow>> capture(const std::string& id) override {
    std::lock_guard lock(mu_);
    if (failWith) return Result<std::optional<storage::CaptureRow>>::error(*failWith);
    for (const auto& c : captureRows) {
      if (c.id == id) return std::optional<storage::CaptureRow>(c);
    }
    return std::optional<storage::CaptureRow>();
  }
  Result<std::vector<storage::CaptureRow>> captures(const std::string& job) override {
    std::lock_guard lock(mu_);
    if (failWith) return Result<std::vector<storage::CaptureRow>>::error(*failWith);
    std::vector<storage::CaptureRow> out;
    for (auto it = captureRows.rbegin(); it != captureRows.rend(); ++it) {
      if (it->job == job) out.push_back(*it);
    }
    return out;
  }
  Result<std::vector<storage::CaptureRow>> capturesSince(int64_t sinceNs) override {
    std::lock_guard lock(mu_);
    if (failWith) return Result<std::vector<storage::CaptureRow>>::error(*failWith);
    std::vector<storage::CaptureRow> out;
    for (const auto& c : captureRows) {
      if (c.updatedNs >= sinceNs) out.push_back(c);
    }
    return out;
  }
  storage::StoreStats stats() override { return {}; }

  // Set by the test before the server starts (or under lock()).
  std::vector<storage::JobRow> jobRows;
  std::vector<storage::RankRow> rankRows;
  std::vector<storage::StepRow> stepRows;            // all jobs; ordered by (step, rank) as stored
  std::vector<storage::StepSummaryRow> summaryRows;  // for any job
  std::vector<storage::NodeRow> nodeRows;
  std::vector<storage::AnomalyRow> anomalyRows;  // all jobs, ordered by detected_ns as stored
  std::vector<storage::CaptureRow> captureRows;  // in the order first written
  std::optional<std::string> failWith;
  bool throwOnSteps = false;  // steps() throws, like a handler bug or an allocation failure
  // steps() waits while holdSteps is set (having set stepsHeld): a handler stays busy for as
  // long as the test wants, with no sleep or timing.
  bool holdSteps = false;
  bool stepsHeld = false;

  std::optional<storage::StepQuery> lastStepQuery;
  std::optional<storage::SummaryQuery> lastSummaryQuery;
  size_t summaryCalls = 0;
  std::optional<int64_t> lastAnomaliesSince;

  std::unique_lock<std::mutex> lock() { return std::unique_lock(mu_); }
  // Waits until a steps() call is held (holdSteps), then returns.
  void awaitStepsHeld() {
    std::unique_lock lock(mu_);
    heldCv_.wait(lock, [&] { return stepsHeld; });
  }
  // Lets held steps() calls (and later ones) return.
  void releaseSteps() {
    std::lock_guard lock(mu_);
    holdSteps = false;
    heldCv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable heldCv_;
};

}  // namespace trainscope::testing
