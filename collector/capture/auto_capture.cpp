#include "collector/capture/auto_capture.h"

#include <algorithm>
#include <cmath>

namespace trainscope::capture {
namespace {

bool isStacks(const storage::AnomalyRow& row) {
  return row.kind == "hang";
}

}  // namespace

double anomalyGain(const storage::AnomalyRow& row) {
  auto it = row.evidence.find("estimated_gain");
  double gain = it != row.evidence.end() ? it->second : row.magnitude - 1.0;
  if (!std::isfinite(gain)) gain = 0;
  return std::clamp(gain, 0.0, 1.0);
}

double anomalyScore(const storage::AnomalyRow& row) {
  const double confidence = std::isfinite(row.confidence) ? row.confidence : 0.0;
  return anomalyGain(row) * (0.5 + 0.5 * std::clamp(confidence, 0.0, 1.0));
}

void AutoCapturePolicy::offer(const storage::AnomalyRow& row, int64_t nowNs) {
  const bool candidate = row.state == storage::AnomalyState::kOpen && !row.captureId;
  auto j = jobs_.find(row.job);
  if (!candidate) {
    if (j == jobs_.end()) return;
    auto c = j->second.candidates.find(row.id);
    if (c == j->second.candidates.end()) return;
    if (row.state != storage::AnomalyState::kOpen) ++skips_.resolved;
    j->second.candidates.erase(c);
    return;
  }
  if (options_.intervalNs <= 0 || decided_.count(row.id) > 0) return;
  Job& job = jobs_[row.job];
  auto [it, fresh] = job.candidates.try_emplace(row.id, Candidate{row, nowNs});
  if (!fresh) {
    it->second.row = row;  // a refresh: the latest figures count
    return;
  }
  if (job.candidates.size() > std::max<size_t>(options_.maxCandidates, 1)) {
    auto least = std::min_element(job.candidates.begin(), job.candidates.end(),
                                  [](const auto& a, const auto& b) {
                                    return anomalyScore(a.second.row) < anomalyScore(b.second.row);
                                  });
    decided(least->first);
    job.candidates.erase(least);
    ++skips_.expired;
  }
}

std::vector<storage::AnomalyRow> AutoCapturePolicy::due(int64_t nowNs) {
  std::vector<storage::AnomalyRow> out;
  for (auto jit = jobs_.begin(); jit != jobs_.end();) {
    Job& job = jit->second;
    while (!job.spent.empty() && nowNs - job.spent.front().atNs >= options_.intervalNs) {
      job.spent.pop_front();
    }
    // The window's captures, by kind: how many, and the best trace score among them.
    uint32_t traces = 0;
    uint32_t stacks = 0;
    double bestTrace = 0;
    for (const Spent& s : job.spent) {
      if (s.stacks) {
        ++stacks;
      } else {
        ++traces;
        bestTrace = std::max(bestTrace, s.score);
      }
    }
    // Candidates whose window passed, most important first.
    std::vector<std::map<std::string, Candidate>::iterator> ready;
    for (auto c = job.candidates.begin(); c != job.candidates.end();) {
      if (nowNs - c->second.sinceNs >= options_.candidateTtlNs) {
        ++skips_.expired;
        decided(c->first);
        c = job.candidates.erase(c);
        continue;
      }
      if (nowNs - c->second.sinceNs >= options_.decisionNs) ready.push_back(c);
      ++c;
    }
    std::stable_sort(ready.begin(), ready.end(), [](const auto& a, const auto& b) {
      return anomalyScore(a->second.row) > anomalyScore(b->second.row);
    });
    bool picked = false;
    for (auto c : ready) {
      const storage::AnomalyRow& row = c->second.row;
      const bool stack = isStacks(row);
      uint64_t* skip = nullptr;
      if (!stack && anomalyGain(row) < options_.minGain) {
        skip = &skips_.smallGain;
      } else if ((stack ? stacks : traces) >= options_.budget) {
        skip = &skips_.budget;
      } else if (!stack && traces > 0 && anomalyScore(row) < options_.betterFactor * bestTrace) {
        skip = &skips_.notBetter;
      }
      if (skip != nullptr) {
        ++*skip;
        decided(c->first);
        job.candidates.erase(c);
        continue;
      }
      // One per job and call: the next call weighs the rest against this one's capture.
      if (!picked) {
        out.push_back(row);
        picked = true;
      }
    }
    if (job.candidates.empty() && job.spent.empty()) {
      jit = jobs_.erase(jit);
    } else {
      ++jit;
    }
  }
  return out;
}

void AutoCapturePolicy::decided(const std::string& id) {
  if (!decided_.insert(id).second) return;
  decidedOrder_.push_back(id);
  if (decidedOrder_.size() > kMaxDecided) {
    decided_.erase(decidedOrder_.front());
    decidedOrder_.pop_front();
  }
}

void AutoCapturePolicy::started(const storage::AnomalyRow& row, int64_t nowNs) {
  decided(row.id);
  Job& job = jobs_[row.job];
  job.candidates.erase(row.id);
  job.spent.push_back(Spent{nowNs, anomalyScore(row), isStacks(row)});
}

void AutoCapturePolicy::drop(const storage::AnomalyRow& row) {
  decided(row.id);
  auto j = jobs_.find(row.job);
  if (j != jobs_.end()) j->second.candidates.erase(row.id);
}

size_t AutoCapturePolicy::candidates() const {
  size_t n = 0;
  for (const auto& [name, job] : jobs_) n += job.candidates.size();
  return n;
}

}  // namespace trainscope::capture
