#include "collector/detect/slow_comm.h"

#include <algorithm>
#include <cstdio>
#include <string_view>
#include <tuple>
#include <vector>

#include "schema/wire.h"

namespace trainscope::detect {

namespace {
constexpr size_t kComputeHistory = 256;
}  // namespace

SlowCommDetector::SlowCommDetector(std::string job, const SlowCommOptions& options,
                                   EventLog* log)
    : job_(std::move(job)), o_(options), log_(log), compute_(kComputeHistory) {}

void SlowCommDetector::evict(int64_t step) {
  for (auto it = keys_.begin(); it != keys_.end();) {
    bool stale = step - it->second.lastSeenStep > o_.forgetAfterSteps;
    it = stale ? keys_.erase(it) : std::next(it);
  }
  while (keys_.size() > o_.maxKeysPerJob) {
    auto oldest = keys_.begin();
    for (auto it = keys_.begin(); it != keys_.end(); ++it) {
      if (it->second.lastSeenStep < oldest->second.lastSeenStep) oldest = it;
    }
    keys_.erase(oldest);
  }
}

void SlowCommDetector::onStep(const AssembledStep& step) {
  std::vector<double> computes;
  for (const RankStep& r : step.ranks) {
    if (r.report.compute_ns() > 0) computes.push_back(static_cast<double>(r.report.compute_ns()));
  }
  if (!computes.empty()) compute_.push(median(computes));

  struct Sample {
    uint32_t rank;
    double perCall;
    double count;
    double arrival;
    double completion;
    const std::string* node;
  };
  // Grouped by (op, group, bytes) without building the string key per report; the key is
  // built once per distinct collective per step.
  struct Group {
    std::vector<Sample> list;
    const wire::CollectiveTotal* proto = nullptr;
  };
  std::map<std::tuple<int, std::string_view, uint64_t>, Group> byKey;
  for (const RankStep& r : step.ranks) {
    for (const auto& c : r.report.collectives()) {
      if (c.count() == 0 || c.total_ns() <= 0) continue;
      double off = static_cast<double>(r.ctx.clockOffsetNs);
      Group& g = byKey[{c.op(), std::string_view(c.group()), c.bytes()}];
      if (g.proto == nullptr) {
        g.proto = &c;
        g.list.reserve(step.ranks.size());
      }
      g.list.push_back({r.report.rank(),
                        static_cast<double>(c.total_ns()) / static_cast<double>(c.count()),
                        static_cast<double>(c.count()),
                        static_cast<double>(c.first_arrival_ns()) + off,
                        static_cast<double>(c.last_completion_ns()) + off, &r.ctx.node});
    }
  }

  for (auto& [tuple, g] : byKey) {
    std::vector<Sample>& list = g.list;
    const wire::CollectiveTotal* c = g.proto;
    std::string key = std::string(wire::collectiveOpName(c->op())) + "|" + c->group() + "|" +
                      std::to_string(c->bytes());
    auto it = keys_.find(key);
    if (it == keys_.end()) {
      it = keys_.emplace(key, KeyState(o_)).first;
      it->second.op = c->op();
      it->second.group = c->group();
      it->second.bytes = c->bytes();
    }
    KeyState& ks = it->second;
    ks.lastSeenStep = step.step;
    double transfer = list.front().perCall;
    double lastArrival = list.front().arrival;
    for (const Sample& s : list) {
      transfer = std::min(transfer, s.perCall);
      lastArrival = std::max(lastArrival, s.arrival);
      ks.nodes[s.rank] = *s.node;
    }
    if (list.size() >= 2 && transfer > 0) {
      std::vector<double> post;
      for (const Sample& s : list) post.push_back(s.completion - lastArrival);
      double medPost = median(post);
      for (size_t i = 0; i < list.size(); ++i) {
        auto [sit, inserted] = ks.skew.try_emplace(
            list[i].rank, static_cast<size_t>(std::max(1, o_.persistence.window)));
        sit->second.push((post[i] - medPost) / transfer);
      }
    }

    auto t = ks.tracker.push(step.step, transfer);
    if (t == PersistenceTracker::Transition::kResolved && ks.open) {
      log_->resolve(ks.anomaly, ks.tracker.resolvedStep(), step.nowNs);
      ks.open = false;
      continue;
    }
    if (t != PersistenceTracker::Transition::kOpened) continue;

    // Did compute rise since the onset? Then the job slowed, not its communication.
    size_t w = static_cast<size_t>(std::max(1, o_.persistence.window));
    size_t since = static_cast<size_t>(std::clamp<int64_t>(
        step.step - ks.tracker.onsetStep() + 1, 3, static_cast<int64_t>(w)));
    double computeRatio = 1.0;
    if (compute_.size() > since + 8) {
      std::vector<double> all = compute_.values();
      std::vector<double> before(all.begin(), all.end() - static_cast<std::ptrdiff_t>(since));
      std::vector<double> recent(all.end() - static_cast<std::ptrdiff_t>(since), all.end());
      double b = median(before);
      if (b > 0) computeRatio = median(recent) / b;
    }
    if (computeRatio > 1.0 + o_.maxComputeRise) {
      ks.tracker.forgetEpisode();
      continue;
    }

    std::vector<uint32_t> members;
    std::vector<uint32_t> slowEnd;
    for (const Sample& s : list) members.push_back(s.rank);
    // The culprit: the slow end whose own completion lags its peers' the most (its own
    // bandwidth fell against theirs; compute was checked above).
    int64_t culprit = -1;
    double culpritSkew = 0.0;
    for (auto& [rank, ring] : ks.skew) {
      // Only the steps since the onset: a link that went bad lags from then on, and the
      // healthy steps before would hide it.
      if (ring.size() < since) continue;
      const double skew = median(ring.latest(since));
      if (skew <= o_.rankSkew) continue;
      slowEnd.push_back(rank);
      if (culprit < 0 || skew > culpritSkew) {
        culprit = rank;
        culpritSkew = skew;
      }
    }
    std::sort(members.begin(), members.end());
    const bool p2p = ks.op == wire::SEND || ks.op == wire::RECV;
    Anomaly a;
    a.job = job_;
    a.kind = AnomalyKind::kSlowComm;
    // A point-to-point link names both ends (the culprit in labels and first in the link);
    // a group names its slow end(s), or every member when no end can be told.
    a.ranks = slowEnd.empty() || (p2p && members.size() == 2) ? members : slowEnd;
    for (uint32_t r : a.ranks) a.nodes.push_back(ks.nodes[r]);
    a.onsetStep = ks.tracker.onsetStep();
    a.detectedStep = step.step;
    a.detectedNs = step.nowNs;
    double base = ks.tracker.baseline();
    double level = ks.tracker.level();
    a.magnitude = base > 0 ? level / base : 1.0;
    a.confidence = ks.tracker.confidence();
    double bytes = static_cast<double>(ks.bytes);
    std::vector<double> counts;
    for (const Sample& s : list) counts.push_back(s.count);
    const double calls = median(std::move(counts));
    a.evidence = {{"baseline_ms", base / 1e6},
                  {"current_ms", level / 1e6},
                  {"ratio", a.magnitude},
                  {"bytes", bytes},
                  {"baseline_gbps", base > 0 ? bytes * 8 / base : 0.0},
                  {"current_gbps", level > 0 ? bytes * 8 / level : 0.0},
                  {"compute_ratio", computeRatio},
                  {"group_ranks", static_cast<double>(members.size())},
                  {"noise_sigma", ks.tracker.relSigma()},
                  {"calls_per_step", calls},
                  {"added_ms_per_step", (level - base) * calls / 1e6}};
    a.labels = {{"op", wire::collectiveOpName(static_cast<wire::CollectiveOp>(ks.op))},
                {"group", ks.group},
                {"scope", slowEnd.empty() ? "group" : "rank"}};
    std::set<std::string> memberNodes;
    for (uint32_t r : members) {
      if (!ks.nodes[r].empty()) memberNodes.insert(ks.nodes[r]);
    }
    if (culprit >= 0) {
      const uint32_t c = static_cast<uint32_t>(culprit);
      a.labels["culprit"] = "rank " + std::to_string(c) +
                            (ks.nodes[c].empty() ? "" : " (" + ks.nodes[c] + ")");
      a.evidence["culprit_rank"] = static_cast<double>(c);
      a.evidence["culprit_lag"] = culpritSkew;
    }
    if (p2p && members.size() == 2) {
      // Culprit first when known.
      const bool swap = culprit >= 0 && static_cast<uint32_t>(culprit) == members[1];
      a.labels["link"] = "rank " + std::to_string(members[swap ? 1 : 0]) + " <-> rank " +
                         std::to_string(members[swap ? 0 : 1]);
    } else if (memberNodes.size() == 2) {
      std::string first = *memberNodes.begin(), second = *memberNodes.rbegin();
      if (culprit >= 0 && ks.nodes[static_cast<uint32_t>(culprit)] == second) std::swap(first, second);
      a.labels["link"] = first + " <-> " + second;
    }
    std::string who = slowEnd.empty() ? "group " + (ks.group.empty() ? "(default)" : ks.group) + " (" +
                                            std::to_string(members.size()) + " ranks)"
                                      : "rank(s) " + rankSubject(slowEnd) + " (culprit " +
                                            a.labels["culprit"] + ")";
    a.summary = std::string(a.labels["op"]) + " of " + std::to_string(ks.bytes) + " bytes on " +
                who + " slowed " + formatRatio(a.magnitude) + " per call (" + formatMs(base) +
                " -> " + formatMs(level) + ") from step " + std::to_string(a.onsetStep) +
                " while compute stayed at " + formatRatio(computeRatio);
    if (a.labels.count("link")) a.summary += "; link " + a.labels["link"];
    ks.anomaly = log_->open(std::move(a), key);
    ks.open = true;
  }
  if (step.step % 64 == 0 || keys_.size() > o_.maxKeysPerJob) evict(step.step);
}

}  // namespace trainscope::detect
