#include "collector/detect/slow_comm.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/median.h"
#include "schema/wire.h"

namespace trainscope::detect {

namespace {
constexpr size_t kComputeHistory = 256;
// Steps of per-link history: the steps since an onset (a key opens a few steps after it) and
// enough before it for a median.
constexpr size_t kLinkHistory = 64;
// Samples needed before an onset to judge a link against its own history.
constexpr size_t kMinBefore = 3;
// Samples needed since an onset (a key opens 3 or more steps after it).
constexpr size_t kMinSince = 2;
// Steps in a row with fewer participants than before after which a key takes the smaller
// number as its group's size (an elastic job shrank) instead of skipping them as partial.
constexpr int kShrinkAfterSteps = 64;

// Gbit/s from ns per byte.
double gbps(double nsPerByte) {
  return nsPerByte > 0 ? 8.0 / nsPerByte : 0.0;
}

// A group's name in summaries.
std::string groupName(const std::string& group) {
  return group.empty() ? "(default)" : group;
}

bool isPointToPoint(int op) {
  return op == wire::SEND || op == wire::RECV;
}

std::string formatGbps(double g) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f Gb/s", g);
  return buf;
}

// A link's time per byte and ratio to its peers since `onset`, against the steps before it.
struct LinkElevation {
  bool ok = false;       // enough samples on both sides
  double own = 1.0;      // median time per byte since / before
  double toPeers = 1.0;  // median ratio to peers since / before (1 when not known)
  double before = 0.0;   // median time per byte before (ns per byte)
  double since = 0.0;    // median time per byte since
};

template <typename History>
LinkElevation elevation(const History& h, int64_t onset, std::vector<double>* a,
                        std::vector<double>* b) {
  LinkElevation e;
  // Time per byte before/since.
  a->clear();
  b->clear();
  for (size_t i = 0; i < h.size(); ++i) (h[i].step < onset ? a : b)->push_back(h[i].perByte);
  if (a->size() < kMinBefore || b->size() < kMinSince) return e;
  e.before = median(*a);
  e.since = median(*b);
  if (!(e.before > 0)) return e;
  e.own = e.since / e.before;
  // Ratio to peers before/since, where the group had enough links to have a median.
  a->clear();
  b->clear();
  for (size_t i = 0; i < h.size(); ++i) {
    if (h[i].toPeers > 0) (h[i].step < onset ? a : b)->push_back(h[i].toPeers);
  }
  if (a->size() >= kMinBefore && b->size() >= kMinSince) {
    const double pb = median(*a);
    if (pb > 0) e.toPeers = median(*b) / pb;
  }
  e.ok = true;
  return e;
}

}  // namespace

SlowCommDetector::LinkState::LinkState(const SlowCommOptions& o)
    : tracker(o.linkPersistence), history(kLinkHistory) {}

SlowCommDetector::SlowCommDetector(std::string job, const SlowCommOptions& options, EventLog* log)
    : job_(std::move(job)), o_(options), log_(log), compute_(kComputeHistory) {}

const std::string& SlowCommDetector::nodeOf(uint32_t rank) const {
  static const std::string kUnknown;
  return rank < nodes_.size() ? nodes_[rank] : kUnknown;
}

std::string SlowCommDetector::rankWithNode(uint32_t rank) const {
  const std::string& n = nodeOf(rank);
  return "rank " + std::to_string(rank) + (n.empty() ? "" : " (" + n + ")");
}

std::string SlowCommDetector::linkLabel(uint32_t sender, uint32_t peer) const {
  return rankWithNode(sender) + " -> " + rankWithNode(peer);
}

size_t SlowCommDetector::stepsSince(int64_t onset, int64_t step) const {
  const int64_t w = std::max(1, o_.persistence.window);
  return static_cast<size_t>(std::clamp<int64_t>(step - onset + 1, 3, w));
}

double SlowCommDetector::computeRatioSince(int64_t onset, int64_t step) const {
  // Did compute rise since the onset? Then the job slowed, not its communication.
  const size_t since = stepsSince(onset, step);
  if (compute_.size() <= since + 8) return 1.0;
  std::vector<double> all = compute_.values();
  std::vector<double> before(all.begin(), all.end() - static_cast<std::ptrdiff_t>(since));
  std::vector<double> recent(all.end() - static_cast<std::ptrdiff_t>(since), all.end());
  const double b = median(std::move(before));
  return b > 0 ? median(std::move(recent)) / b : 1.0;
}

SlowCommDetector::LinkGroup* SlowCommDetector::findGroup(const std::string& name) {
  for (auto& g : groups_) {
    if (g.name == name) return &g;
  }
  return nullptr;
}

SlowCommDetector::LinkGroup* SlowCommDetector::groupFor(const std::string& name, int64_t step) {
  // The links of a job nearly always share one group: try the last one first.
  LinkGroup* g = lastGroup_ < groups_.size() && groups_[lastGroup_].name == name
                     ? &groups_[lastGroup_]
                     : findGroup(name);
  if (g != nullptr) {
    lastGroup_ = static_cast<size_t>(g - groups_.data());
  } else {
    if (groups_.size() >= o_.maxLinkGroups) return nullptr;
    groups_.emplace_back();
    groups_.back().name = name;
    lastGroup_ = groups_.size() - 1;
    g = &groups_.back();
  }
  g->lastSeenStep = step;
  return g;
}

void SlowCommDetector::setCovered(const std::string& group, int64_t sender, uint32_t peer,
                                  bool covered) {
  if (sender < 0) return;
  LinkGroup* g = findGroup(group);
  if (g == nullptr || static_cast<size_t>(sender) >= g->bySender.size()) return;
  for (LinkState& ls : g->bySender[static_cast<size_t>(sender)]) {
    if (ls.peer == peer) ls.covered = covered;
  }
}

void SlowCommDetector::observeLinks(const AssembledStep& step) {
  bool any = false;
  for (const RankStep& r : step.ranks) {
    if (r.report.links_size() == 0) continue;
    const uint32_t sender = r.report.rank();
    if (sender >= o_.maxLinkRank) continue;
    for (const auto& l : r.report.links()) {
      // Malformed totals (nothing sent, no time in flight, a link to itself) say nothing.
      if (l.bytes() == 0 || l.wire_ns() <= 0 || l.peer() == sender || l.peer() >= o_.maxLinkRank) {
        continue;
      }
      LinkGroup* g = groupFor(l.group(), step.step);
      if (g == nullptr) continue;
      if (g->bySender.size() <= sender) g->bySender.resize(sender + 1);
      std::vector<LinkState>& list = g->bySender[sender];
      uint32_t slot = 0;
      while (slot < list.size() && list[slot].peer != l.peer()) ++slot;
      if (slot == list.size()) {
        if (list.size() >= o_.maxPeersPerRank || links_ >= o_.maxLinksPerJob) continue;
        list.emplace_back(o_);
        list.back().peer = l.peer();
        ++g->links;
        ++links_;
      }
      LinkState& ls = list[slot];
      if (ls.lastSeenStep == step.step) continue;  // one sample per link and step
      ls.lastSeenStep = step.step;
      ls.lastBytes = static_cast<double>(l.bytes());
      g->batch.push_back(
          {sender, slot,
           static_cast<float>(static_cast<double>(l.wire_ns()) / static_cast<double>(l.bytes()))});
      any = true;
    }
  }
  if (!any) return;
  for (LinkGroup& g : groups_) {
    if (g.batch.empty()) continue;
    // The group's median link this step: what "its peers" means. A fabric-wide slowdown
    // moves it with every link, so only a link that departs from its peers rises against it.
    float med = 0.0f;
    if (g.batch.size() >= o_.minLinks) {
      g.scratch.clear();
      for (const auto& p : g.batch) g.scratch.push_back(p.perByte);
      med = upperMedianInPlace(g.scratch);
    }
    for (const auto& p : g.batch) {
      LinkState& ls = g.bySender[p.sender][p.slot];
      const float toPeers = med > 0.0f ? p.perByte / med : 0.0f;
      ls.history.push(LinkSample{step.step, p.perByte, toPeers});
      if (med <= 0.0f) continue;
      const auto t = ls.tracker.push(step.step, toPeers);
      if (t != PersistenceTracker::Transition::kNone) onLinkTransition(g, p.sender, ls, t, step);
    }
    g.batch.clear();
  }
}

void SlowCommDetector::onLinkTransition(LinkGroup& g, uint32_t sender, LinkState& ls,
                                        PersistenceTracker::Transition t,
                                        const AssembledStep& step) {
  if (t == PersistenceTracker::Transition::kResolved) {
    if (ls.open) log_->resolve(ls.anomaly, ls.tracker.resolvedStep(), step.nowNs);
    ls.open = false;
    return;
  }
  if (ls.covered) return;  // the key's anomaly already names this link
  const int64_t onset = ls.tracker.onsetStep();
  std::vector<double> a, b;
  const LinkElevation e = elevation(ls.history, onset, &a, &b);
  // Slower against its own history too (not only its peers getting faster), and not because
  // the whole job computes slower.
  if (!e.ok || e.own < 1.0 + o_.linkRise || e.toPeers < 1.0 + o_.linkRise) {
    ls.tracker.forgetEpisode();
    return;
  }
  const double computeRatio = computeRatioSince(onset, step.step);
  if (computeRatio > 1.0 + o_.maxComputeRise) {
    ls.tracker.forgetEpisode();
    return;
  }
  Anomaly an;
  an.job = job_;
  an.kind = AnomalyKind::kSlowComm;
  an.ranks = {sender, ls.peer};
  for (uint32_t r : an.ranks) {
    if (!nodeOf(r).empty()) an.nodes.push_back(nodeOf(r));
  }
  an.onsetStep = onset;
  an.detectedStep = step.step;
  an.detectedNs = step.nowNs;
  an.magnitude = e.own;
  an.confidence = ls.tracker.confidence();
  an.evidence = {{"link_ratio", e.own},
                 {"link_peer_ratio", e.toPeers},
                 {"baseline_gbps", gbps(e.before)},
                 {"current_gbps", gbps(e.since)},
                 {"bytes_per_step", ls.lastBytes},
                 {"added_ms_per_step", (e.since - e.before) * ls.lastBytes / 1e6},
                 {"compute_ratio", computeRatio},
                 {"culprit_rank", static_cast<double>(sender)},
                 {"peer_rank", static_cast<double>(ls.peer)},
                 {"group_links", static_cast<double>(g.links)},
                 {"noise_sigma", ls.tracker.relSigma()}};
  an.labels = {{"group", g.name},
               {"scope", "link"},
               {"link", linkLabel(sender, ls.peer)},
               {"culprit", rankWithNode(sender)}};
  an.summary = "link " + an.labels["link"] + " of group " +
               (g.name.empty() ? "(default)" : g.name) + ": in-flight time per byte " +
               formatRatio(e.own) + " its own baseline and " + formatRatio(e.toPeers) +
               " against its peers (" + formatGbps(gbps(e.before)) + " -> " +
               formatGbps(gbps(e.since)) + ") from step " + std::to_string(onset) +
               " while compute stayed at " + formatRatio(computeRatio);
  const std::string subject =
      "link|" + g.name + "|r" + std::to_string(sender) + "|r" + std::to_string(ls.peer);
  ls.anomaly = log_->open(std::move(an), subject);
  ls.open = true;
}

SlowCommDetector::LinkVerdict SlowCommDetector::judgeLinks(const LinkGroup& g, int64_t onset,
                                                           int64_t step, double rise) const {
  LinkVerdict v;
  std::vector<double> a, b;
  a.reserve(kLinkHistory);
  b.reserve(kLinkHistory);
  const int64_t recent = step - static_cast<int64_t>(kLinkHistory) / 4;
  for (size_t s = 0; s < g.bySender.size(); ++s) {
    for (const LinkState& ls : g.bySender[s]) {
      if (ls.lastSeenStep < recent) continue;  // not sending lately
      const LinkElevation e = elevation(ls.history, onset, &a, &b);
      if (!e.ok) continue;
      ++v.judged;
      if (e.own < 1.0 + rise) continue;
      ++v.ownSlowed;
      if (e.toPeers < 1.0 + rise) continue;
      ++v.slowed;
      if (v.sender < 0 || e.toPeers > v.toPeers) {
        v.sender = static_cast<int64_t>(s);
        v.peer = ls.peer;
        v.own = e.own;
        v.toPeers = e.toPeers;
        v.perByteBefore = e.before;
        v.perByteSince = e.since;
      }
    }
  }
  v.fabric = v.judged >= o_.minLinks && v.ownSlowed >= 2 &&
             static_cast<double>(v.ownSlowed) >= o_.fabricFraction * static_cast<double>(v.judged);
  return v;
}

void SlowCommDetector::evict(int64_t step) {
  for (auto it = keys_.begin(); it != keys_.end();) {
    const bool stale = step - it->second.lastSeenStep > o_.forgetAfterSteps;
    if (stale) setCovered(it->second.group, it->second.namedSender, it->second.namedPeer, false);
    it = stale ? keys_.erase(it) : std::next(it);
  }
  while (keys_.size() > o_.maxKeysPerJob) {
    auto oldest = keys_.begin();
    for (auto it = keys_.begin(); it != keys_.end(); ++it) {
      if (it->second.lastSeenStep < oldest->second.lastSeenStep) oldest = it;
    }
    setCovered(oldest->second.group, oldest->second.namedSender, oldest->second.namedPeer, false);
    keys_.erase(oldest);
  }
  for (LinkGroup& g : groups_) {
    for (auto& list : g.bySender) {
      const size_t before = list.size();
      list.erase(std::remove_if(list.begin(), list.end(),
                                [&](const LinkState& ls) {
                                  return step - ls.lastSeenStep > o_.forgetAfterSteps;
                                }),
                 list.end());
      g.links -= before - list.size();
      links_ -= before - list.size();
    }
    while (!g.bySender.empty() && g.bySender.back().empty()) g.bySender.pop_back();
  }
  groups_.erase(std::remove_if(groups_.begin(), groups_.end(),
                               [&](const LinkGroup& g) {
                                 return g.links == 0 && step - g.lastSeenStep > o_.forgetAfterSteps;
                               }),
                groups_.end());
  lastGroup_ = 0;
}

void SlowCommDetector::onStep(const AssembledStep& step) {
  rememberNodes(step);
  if (const double c = medianComputeNs(step, &computes_); c > 0) compute_.push(c);
  observeLinks(step);
  for (auto& [tuple, g] : collectivesByKey(step)) {
    const wire::CollectiveTotal& c = *g.proto;
    const std::string key = std::string(wire::collectiveOpName(c.op())) + "|" + c.group() + "|" +
                            std::to_string(c.bytes());
    KeyState& ks = keyFor(key, c, step.step);
    if (!takesSample(ks, g.list.size(), step)) continue;
    const auto t = ks.tracker.push(step.step, transferTime(ks, g.list));
    if (t == PersistenceTracker::Transition::kResolved && ks.open) {
      resolveKey(ks, step);
    } else if (t == PersistenceTracker::Transition::kOpened) {
      onKeyOpened(ks, key, g.list, step);
    }
  }
  if (step.step % 64 == 0 || keys_.size() > o_.maxKeysPerJob) evict(step.step);
}

void SlowCommDetector::rememberNodes(const AssembledStep& step) {
  for (const RankStep& r : step.ranks) {
    // Node names per rank, assigned only when they change (no string copy per report).
    const uint32_t rank = r.report.rank();
    if (rank < o_.maxLinkRank) {
      if (rank >= nodes_.size()) nodes_.resize(rank + 1);
      if (nodes_[rank] != r.ctx.node) nodes_[rank] = r.ctx.node;
    }
  }
}

SlowCommDetector::StepKeys SlowCommDetector::collectivesByKey(const AssembledStep& step) {
  // Grouped by (op, group, bytes) without building the string key per report; the key is
  // built once per distinct collective per step.
  StepKeys byKey;
  for (const RankStep& r : step.ranks) {
    for (const auto& c : r.report.collectives()) {
      if (c.count() == 0 || c.total_ns() <= 0) continue;
      double off = static_cast<double>(r.ctx.clockOffsetNs);
      KeySamples& g = byKey[{c.op(), std::string_view(c.group()), c.bytes()}];
      if (g.proto == nullptr) {
        g.proto = &c;
        g.list.reserve(step.ranks.size());
      }
      g.list.push_back(
          {r.report.rank(), static_cast<double>(c.total_ns()) / static_cast<double>(c.count()),
           static_cast<double>(c.count()), static_cast<double>(c.first_arrival_ns()) + off,
           static_cast<double>(c.last_completion_ns()) + off});
    }
  }
  return byKey;
}

SlowCommDetector::KeyState& SlowCommDetector::keyFor(const std::string& key,
                                                     const wire::CollectiveTotal& c, int64_t step) {
  auto it = keys_.find(key);
  if (it == keys_.end()) {
    it = keys_.emplace(key, KeyState(o_)).first;
    it->second.op = c.op();
    it->second.group = c.group();
    it->second.bytes = c.bytes();
  }
  it->second.lastSeenStep = step;
  return it->second;
}

bool SlowCommDetector::takesSample(KeyState& ks, size_t participants, const AssembledStep& step) {
  // The transfer time is the minimum over the participants; without some of them (a step
  // judged while one agent's reports lagged) it is the time of one that waited for a
  // missing one, which reads as a slower collective on the others. A step judged without
  // some of the job's ranks is never sampled (an agent can lag for hundreds of steps); on a
  // full step, fewer participants than before are taken as the group's size only once they
  // have been the rule for a while (the group shrank).
  if (step.partial()) return false;
  if (participants < ks.participants && ++ks.fewerInARow < kShrinkAfterSteps) return false;
  ks.participants = participants;
  ks.fewerInARow = 0;
  return true;
}

double SlowCommDetector::transferTime(KeyState& ks, const std::vector<CallSample>& list) const {
  double transfer = list.front().perCall;
  double lastArrival = list.front().arrival;
  for (const CallSample& s : list) {
    transfer = std::min(transfer, s.perCall);
    lastArrival = std::max(lastArrival, s.arrival);
  }
  if (list.size() >= 2 && transfer > 0) {
    std::vector<double> post;
    post.reserve(list.size());
    for (const CallSample& s : list) post.push_back(s.completion - lastArrival);
    double medPost = median(post);
    // A sorted flat map (binary search in one array, no node per rank); a rank's ring is
    // made on its first sample.
    const size_t w = static_cast<size_t>(std::max(1, o_.persistence.window));
    for (size_t i = 0; i < list.size(); ++i) {
      const uint32_t rank = list[i].rank;
      auto at = std::lower_bound(ks.skewRanks.begin(), ks.skewRanks.end(), rank);
      const auto pos = at - ks.skewRanks.begin();
      if (at == ks.skewRanks.end() || *at != rank) {
        ks.skewRanks.insert(at, rank);
        ks.skew.insert(ks.skew.begin() + pos, Ring<float>(w));
      }
      ks.skew[static_cast<size_t>(pos)].push(static_cast<float>((post[i] - medPost) / transfer));
    }
  }
  return transfer;
}

void SlowCommDetector::resolveKey(KeyState& ks, const AssembledStep& step) {
  log_->resolve(ks.anomaly, ks.tracker.resolvedStep(), step.nowNs);
  ks.open = false;
  setCovered(ks.group, ks.namedSender, ks.namedPeer, false);
  ks.namedSender = -1;
}

void SlowCommDetector::onKeyOpened(KeyState& ks, const std::string& key,
                                   const std::vector<CallSample>& list, const AssembledStep& step) {
  const double computeRatio = computeRatioSince(ks.tracker.onsetStep(), step.step);
  if (computeRatio > 1.0 + o_.maxComputeRise) {
    ks.tracker.forgetEpisode();
    return;
  }
  // Per-link evidence first: it tells the slow link inside a ring, or a slow fabric.
  const LinkGroup* lg = findGroup(ks.group);
  const LinkVerdict lv = judgeKeyLinks(ks, lg, step.step);
  const bool linkNamed = lv.sender >= 0 && !lv.fabric;
  if (linkNamed) {
    // The link's own anomaly, when already open, says it all; a second one would repeat it.
    const auto& peers = lg->bySender[static_cast<size_t>(lv.sender)];
    const bool alreadyOpen = std::any_of(peers.begin(), peers.end(), [&](const LinkState& ls) {
      return ls.peer == lv.peer && ls.open;
    });
    if (alreadyOpen) return;  // the tracker stays active: no reopening until resolved
  }

  std::vector<uint32_t> members;
  members.reserve(list.size());
  for (const CallSample& s : list) members.push_back(s.rank);
  const SlowEnd end = linkNamed || lv.fabric ? SlowEnd{} : slowEnd(ks, step.step);
  std::sort(members.begin(), members.end());
  Anomaly a = keyAnomaly(ks, list, members.size(), computeRatio, step);
  if (linkNamed) {
    a.ranks = {static_cast<uint32_t>(lv.sender), lv.peer};
  } else {
    // A point-to-point link names both ends (the culprit in labels and first in the link);
    // a group names its slow end(s), or every member when no end can be told.
    a.ranks =
        end.ranks.empty() || (isPointToPoint(ks.op) && members.size() == 2) ? members : end.ranks;
  }
  for (uint32_t r : a.ranks) {
    if (!nodeOf(r).empty()) a.nodes.push_back(nodeOf(r));
  }
  const char* scope = linkNamed           ? "link"
                      : lv.fabric         ? "fabric"
                      : end.ranks.empty() ? "group"
                                          : "rank";
  a.labels = {{"op", wire::collectiveOpName(static_cast<wire::CollectiveOp>(ks.op))},
              {"group", ks.group},
              {"scope", scope}};
  if (lv.judged > 0) {
    a.evidence["links_judged"] = static_cast<double>(lv.judged);
    a.evidence["links_slowed"] = static_cast<double>(lv.ownSlowed);
  }
  const std::string who = linkNamed   ? nameLink(ks, lv, &a)
                          : lv.fabric ? nameFabric(ks, lv, members.size())
                                      : nameSlowEnd(ks, members, end, &a);
  a.summary = std::string(a.labels["op"]) + " of " + std::to_string(ks.bytes) + " bytes on " + who +
              " slowed " + formatRatio(a.magnitude) + " per call (" +
              formatMs(ks.tracker.baseline()) + " -> " + formatMs(ks.tracker.level()) +
              ") from step " + std::to_string(a.onsetStep) + " while compute stayed at " +
              formatRatio(computeRatio);
  if (!linkNamed && a.labels.count("link")) a.summary += "; link " + a.labels["link"];
  ks.anomaly = log_->open(std::move(a), key);
  ks.open = true;
}

SlowCommDetector::LinkVerdict SlowCommDetector::judgeKeyLinks(const KeyState& ks,
                                                              const LinkGroup* g,
                                                              int64_t step) const {
  // A ring goes at its slowest link, so the slow link rose about as much as the collective
  // did: a small slowdown (judged over many steps by then) is looked for at half its size.
  const double keyBase = ks.tracker.baseline();
  const double keyRatio = keyBase > 0 ? ks.tracker.level() / keyBase : 1.0;
  const double rise = std::clamp(0.5 * (keyRatio - 1.0), 0.01, o_.linkRise);
  if (g == nullptr) return LinkVerdict{};
  return judgeLinks(*g, ks.tracker.onsetStep(), step, rise);
}

SlowCommDetector::SlowEnd SlowCommDetector::slowEnd(const KeyState& ks, int64_t step) const {
  // The slow end whose own completion lags its peers' the most (its own bandwidth fell
  // against theirs; compute was checked before).
  SlowEnd end;
  const size_t since = stepsSince(ks.tracker.onsetStep(), step);
  for (size_t k = 0; k < ks.skew.size(); ++k) {
    const uint32_t rank = ks.skewRanks[k];
    const Ring<float>& ring = ks.skew[k];
    // Only the steps since the onset: a link that went bad lags from then on, and the
    // healthy steps before would hide it.
    if (ring.size() < since) continue;
    const std::vector<float> latest = ring.latest(since);
    const double skew = median(std::vector<double>(latest.begin(), latest.end()));
    if (skew <= o_.rankSkew) continue;
    end.ranks.push_back(rank);
    if (end.culprit < 0 || skew > end.culpritSkew) {
      end.culprit = rank;
      end.culpritSkew = skew;
    }
  }
  return end;
}

Anomaly SlowCommDetector::keyAnomaly(const KeyState& ks, const std::vector<CallSample>& list,
                                     size_t members, double computeRatio,
                                     const AssembledStep& step) const {
  Anomaly a;
  a.job = job_;
  a.kind = AnomalyKind::kSlowComm;
  a.onsetStep = ks.tracker.onsetStep();
  a.detectedStep = step.step;
  a.detectedNs = step.nowNs;
  double base = ks.tracker.baseline();
  double level = ks.tracker.level();
  a.magnitude = base > 0 ? level / base : 1.0;
  a.confidence = ks.tracker.confidence();
  double bytes = static_cast<double>(ks.bytes);
  std::vector<double> counts;
  counts.reserve(list.size());
  for (const CallSample& s : list) counts.push_back(s.count);
  const double calls = median(std::move(counts));
  a.evidence = {{"baseline_ms", base / 1e6},
                {"current_ms", level / 1e6},
                {"ratio", a.magnitude},
                {"bytes", bytes},
                {"baseline_gbps", base > 0 ? bytes * 8 / base : 0.0},
                {"current_gbps", level > 0 ? bytes * 8 / level : 0.0},
                {"compute_ratio", computeRatio},
                {"group_ranks", static_cast<double>(members)},
                {"noise_sigma", ks.tracker.relSigma()},
                {"calls_per_step", calls},
                {"added_ms_per_step", (level - base) * calls / 1e6}};
  return a;
}

std::string SlowCommDetector::nameLink(KeyState& ks, const LinkVerdict& lv, Anomaly* a) {
  const uint32_t s = static_cast<uint32_t>(lv.sender);
  a->labels["culprit"] = rankWithNode(s);
  a->labels["link"] = linkLabel(s, lv.peer);
  a->evidence["culprit_rank"] = static_cast<double>(s);
  a->evidence["peer_rank"] = static_cast<double>(lv.peer);
  a->evidence["link_ratio"] = lv.own;
  a->evidence["link_peer_ratio"] = lv.toPeers;
  a->evidence["link_baseline_gbps"] = gbps(lv.perByteBefore);
  a->evidence["link_current_gbps"] = gbps(lv.perByteSince);
  ks.namedSender = lv.sender;
  ks.namedPeer = lv.peer;
  setCovered(ks.group, lv.sender, lv.peer, true);
  return "link " + a->labels["link"] + " (its in-flight time per byte " + formatRatio(lv.own) +
         " its own, " + formatRatio(lv.toPeers) + " against its peers) in group " +
         groupName(ks.group);
}

std::string SlowCommDetector::nameFabric(const KeyState& ks, const LinkVerdict& lv,
                                         size_t members) const {
  return "group " + groupName(ks.group) + " (" + std::to_string(members) + " ranks; " +
         std::to_string(lv.ownSlowed) + " of " + std::to_string(lv.judged) +
         " links slower: the fabric)";
}

std::string SlowCommDetector::nameSlowEnd(const KeyState& ks, const std::vector<uint32_t>& members,
                                          const SlowEnd& end, Anomaly* a) const {
  std::set<std::string> memberNodes;
  for (uint32_t r : members) {
    if (!nodeOf(r).empty()) memberNodes.insert(nodeOf(r));
  }
  if (end.culprit >= 0) {
    const uint32_t cr = static_cast<uint32_t>(end.culprit);
    a->labels["culprit"] = rankWithNode(cr);
    a->evidence["culprit_rank"] = static_cast<double>(cr);
    a->evidence["culprit_lag"] = end.culpritSkew;
  }
  if (isPointToPoint(ks.op) && members.size() == 2) {
    // Culprit first when known.
    const bool swap = end.culprit >= 0 && static_cast<uint32_t>(end.culprit) == members[1];
    a->labels["link"] = "rank " + std::to_string(members[swap ? 1 : 0]) + " <-> rank " +
                        std::to_string(members[swap ? 0 : 1]);
  } else if (memberNodes.size() == 2) {
    std::string first = *memberNodes.begin(), second = *memberNodes.rbegin();
    if (end.culprit >= 0 && nodeOf(static_cast<uint32_t>(end.culprit)) == second) {
      std::swap(first, second);
    }
    a->labels["link"] = first + " <-> " + second;
  }
  return end.ranks.empty()
             ? "group " + groupName(ks.group) + " (" + std::to_string(members.size()) + " ranks)"
             : "rank(s) " + rankSubject(end.ranks) + " (culprit " + a->labels["culprit"] + ")";
}

}  // namespace trainscope::detect
