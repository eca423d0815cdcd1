#include "collector/detect/p2p_link.h"

#include <algorithm>
#include <cmath>

#include "schema/wire.h"

namespace trainscope::detect {

namespace {
constexpr size_t kHistory = 64;  // steps of per-link history for the evidence

}  // namespace

P2pLinkDetector::P2pLinkDetector(std::string job, const P2pLinkOptions& options, EventLog* log)
    : job_(std::move(job)), o_(options), log_(log) {}

void P2pLinkDetector::onStep(const AssembledStep& step) {
  // This step's sends: link index and time per byte.
  struct Sample {
    size_t link;
    double perByte;
    double perCall;
  };
  std::vector<Sample> samples;
  for (const RankStep& r : step.ranks) {
    const uint32_t sender = r.report.rank();
    if (r.report.p2p_size() == 0) continue;
    if (sender >= nodes_.size()) nodes_.resize(sender + 1);
    if (nodes_[sender] != r.ctx.node) nodes_[sender] = r.ctx.node;
    for (const auto& p : r.report.p2p()) {
      if (p.op() != wire::SEND || p.count() == 0 || p.bytes() == 0 || p.peer() == sender) continue;
      const double calls = static_cast<double>(p.count());
      const double perCall = p.min_ns() > 0 ? static_cast<double>(p.min_ns())
                                            : static_cast<double>(p.total_ns()) / calls;
      if (!(perCall > 0)) continue;
      auto key = std::make_tuple(sender, p.peer(), p.group());
      auto it = index_.find(key);
      if (it == index_.end()) {
        if (links_.size() >= o_.maxLinks) continue;
        it = index_.emplace(std::move(key), links_.size()).first;
        Link l;
        l.sender = sender;
        l.peer = p.peer();
        l.group = p.group();
        l.perCall = Ring<double>(kHistory);
        l.peersPerCall = Ring<double>(kHistory);
        links_.push_back(std::move(l));
      }
      Link& l = links_[it->second];
      l.calls = calls;
      l.bytesPerCall = static_cast<double>(p.bytes()) / calls;
      samples.push_back({it->second, perCall / l.bytesPerCall, perCall});
    }
  }
  if (samples.empty()) return;

  // Peer sets: the links of one group whose ends are as far apart (one node or two).
  std::map<size_t, std::vector<size_t>> bySet;  // set -> indexes into samples
  for (size_t i = 0; i < samples.size(); ++i) {
    Link& l = links_[samples[i].link];
    const std::string& a = l.sender < nodes_.size() ? nodes_[l.sender] : std::string();
    const std::string& b = l.peer < nodes_.size() ? nodes_[l.peer] : std::string();
    const bool intra = !a.empty() && a == b;
    const std::string name = l.group + (intra ? "|intra" : "|inter");
    auto s = setIndex_.find(name);
    if (s == setIndex_.end()) {
      s = setIndex_.emplace(name, sets_.size()).first;
      sets_.push_back(std::make_unique<PeerRatioSet>(o_.persistence, o_.noiseWindow));
    }
    l.peerSet = s->second;
    bySet[s->second].push_back(i);
  }

  std::vector<double> perByte, perCall;
  std::vector<std::pair<size_t, double>> ratios;
  std::vector<PeerRatioSet::Event> events;
  for (const auto& [set, members] : bySet) {
    if (members.size() < std::max<uint32_t>(o_.minLinks, 2)) continue;
    perByte.clear();
    perCall.clear();
    for (size_t i : members) {
      perByte.push_back(samples[i].perByte);
      perCall.push_back(samples[i].perCall);
    }
    const std::vector<double> peerByte = mediansOfOthers(perByte);
    const std::vector<double> peerCall = mediansOfOthers(perCall);
    ratios.clear();
    for (size_t k = 0; k < members.size(); ++k) {
      const Sample& x = samples[members[k]];
      Link& l = links_[x.link];
      l.perCall.push(x.perCall);
      l.peersPerCall.push(peerCall[k]);
      ratios.emplace_back(x.link, peerByte[k] > 0 ? x.perByte / peerByte[k] : 1.0);
    }
    events.clear();
    PeerRatioSet& ps = *sets_[set];
    ps.push(step.step, ratios, &events);
    for (const auto& e : events) {
      Link& l = links_[e.unit];
      const PersistenceTracker& tr = ps.tracker(e.unit);
      if (e.transition == PersistenceTracker::Transition::kResolved) {
        if (l.open) log_->resolve(l.anomaly, tr.resolvedStep(), step.nowNs);
        l.open = false;
        continue;
      }
      onOpen(l, tr, ps, members.size() - 1, step);
    }
  }
}

void P2pLinkDetector::onOpen(Link& l, const PersistenceTracker& tr, const PeerRatioSet& set,
                             size_t peers, const AssembledStep& step) {
  auto withNode = [&](uint32_t rank) {
    const std::string node = rank < nodes_.size() ? nodes_[rank] : std::string();
    return "rank " + std::to_string(rank) + (node.empty() ? "" : " (" + node + ")");
  };
  Anomaly a;
  a.job = job_;
  a.kind = AnomalyKind::kSlowComm;
  a.ranks = {l.sender, l.peer};
  for (uint32_t r : a.ranks) {
    if (r < nodes_.size() && !nodes_[r].empty() &&
        std::find(a.nodes.begin(), a.nodes.end(), nodes_[r]) == a.nodes.end()) {
      a.nodes.push_back(nodes_[r]);
    }
  }
  fillOpened(tr, step, &a);
  // Medians over the steps since the onset (the history also holds healthy steps before it).
  const size_t since = static_cast<size_t>(std::max<int64_t>(1, step.step - a.onsetStep + 1));
  const double cur = median(l.perCall.latest(since));
  const double base = median(l.peersPerCall.latest(since));
  const std::string link = withNode(l.sender) + " -> " + withNode(l.peer);
  a.evidence = {{"ratio", a.magnitude},
                {"link_peer_ratio", a.magnitude},
                {"current_ms", cur / 1e6},
                {"peer_median_ms", base / 1e6},
                {"bytes", l.bytesPerCall},
                {"current_gbps", cur > 0 ? l.bytesPerCall * 8 / cur : 0.0},
                {"peer_gbps", base > 0 ? l.bytesPerCall * 8 / base : 0.0},
                {"calls_per_step", l.calls},
                {"peer_links", static_cast<double>(peers)},
                {"noise_sigma", set.noise()},
                {"exceed_level", tr.exceedLevel()},
                {"exceeding_steps", tr.exceedCount()},
                {"culprit_rank", static_cast<double>(l.sender)},
                {"peer_rank", static_cast<double>(l.peer)},
                {"added_ms_per_step", (cur - base) * l.calls / 1e6}};
  a.labels = {{"op", wire::collectiveOpName(wire::SEND)},
              {"group", l.group},
              {"scope", "link"},
              {"link", link},
              {"culprit", withNode(l.sender)}};
  a.summary = "pipeline link " + link + " (group " + (l.group.empty() ? "(default)" : l.group) +
              "): its sends take " + formatRatio(a.magnitude) + " as long as the other " +
              std::to_string(peers) + " links' (" + formatMs(cur) + " vs " + formatMs(base) +
              " per send) from step " + std::to_string(a.onsetStep);
  l.anomaly = log_->open(std::move(a), "p2p|" + l.group + "|r" + std::to_string(l.sender) + "|r" +
                                           std::to_string(l.peer));
  l.open = true;
}

}  // namespace trainscope::detect
