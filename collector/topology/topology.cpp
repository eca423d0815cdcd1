#include "collector/topology/topology.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace trainscope::topology {
namespace {

// Index of `kind` in kAxes; kAxes.size() for GROUP_OTHER and unknown kinds.
size_t axisOf(wire::GroupKind kind) {
  for (size_t i = 0; i < kAxes.size(); ++i) {
    if (kAxes[i] == kind) return i;
  }
  return kAxes.size();
}

std::optional<uint32_t> indexIn(const std::vector<uint32_t>& ranks, uint32_t rank) {
  auto it = std::find(ranks.begin(), ranks.end(), rank);
  if (it == ranks.end()) return std::nullopt;
  return static_cast<uint32_t>(it - ranks.begin());
}

std::string listOf(const std::vector<uint32_t>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += ", ";
    if (i == 8 && ranks.size() > 10) {
      s += "... " + std::to_string(ranks.size() - 8) + " more";
      break;
    }
    s += std::to_string(ranks[i]);
  }
  return s + ']';
}

// Problems past kMaxProblems are counted and summed up in one last line by finish().
class Problems {
 public:
  explicit Problems(std::vector<std::string>* out) : out_(out) {}
  void add(std::string p) {
    if (out_->size() < kMaxProblems) {
      out_->push_back(std::move(p));
    } else {
      ++dropped_;
    }
  }
  void finish() {
    if (dropped_ > 0) out_->push_back("... and " + std::to_string(dropped_) + " more problems");
  }

 private:
  std::vector<std::string>* out_;
  size_t dropped_ = 0;
};

}  // namespace

const char* kindName(wire::GroupKind kind) {
  switch (kind) {
    case wire::GROUP_PP:
      return "pp";
    case wire::GROUP_DP:
      return "dp";
    case wire::GROUP_TP:
      return "tp";
    case wire::GROUP_CP:
      return "cp";
    case wire::GROUP_EP:
      return "ep";
    default:
      return "other";
  }
}

std::optional<uint32_t> Coords::along(wire::GroupKind kind) const {
  size_t a = axisOf(kind);
  return a < at.size() ? at[a] : std::nullopt;
}

bool Coords::any() const {
  return std::any_of(at.begin(), at.end(), [](const auto& c) { return c.has_value(); });
}

Topology derive(std::span<const RankGroups> ranks) {
  Topology t;
  // Distinct groups by (axis, name, members): members in order, so a reordered declaration is
  // a different group (and a problem below).
  std::map<std::tuple<size_t, std::string, std::vector<uint32_t>>, Group> distinct;
  for (const RankGroups& r : ranks) {
    if (r.groups.empty()) continue;
    t.declared = true;
    ++t.ranksDeclared;
    Coords own;
    for (const auto& g : r.groups) {
      if (g.ranks_size() == 0) continue;  // ingest refuses these; nothing to place anyway
      std::vector<uint32_t> members(g.ranks().begin(), g.ranks().end());
      const size_t axis = axisOf(g.kind());
      Group& d = distinct[{axis, g.name(), members}];
      if (d.ranks.empty()) {
        d.name = g.name();
        d.kind = axis < kAxes.size() ? g.kind() : wire::GROUP_OTHER;
        d.ranks = std::move(members);
      }
      d.declaredBy.push_back(r.rank);
      // The first group of a kind the rank declared gives its coordinate (Megatron declares
      // both "dp" and "dp_cp" as data parallel; the first is the plain one).
      if (axis < kAxes.size() && !own.at[axis]) own.at[axis] = indexIn(d.ranks, r.rank);
    }
    if (own.any()) t.coords[r.rank] = own;
  }
  if (!t.declared) return t;

  for (auto& [key, g] : distinct) t.groups.push_back(std::move(g));
  std::sort(t.groups.begin(), t.groups.end(), [](const Group& a, const Group& b) {
    return std::make_tuple(axisOf(a.kind), a.ranks.front(), a.name) <
           std::make_tuple(axisOf(b.kind), b.ranks.front(), b.name);
  });

  Problems problems(&t.problems);
  // Ranks that declared nothing of a kind take their place in a group others declared.
  for (const Group& g : t.groups) {
    const size_t axis = axisOf(g.kind);
    if (axis >= kAxes.size()) continue;
    for (size_t i = 0; i < g.ranks.size(); ++i) {
      Coords& c = t.coords[g.ranks[i]];
      if (!c.at[axis]) c.at[axis] = static_cast<uint32_t>(i);
    }
  }
  // Members that disagree about one group: the same name and kind, overlapping members, but
  // not the same list. Every tensor-parallel group may be called "tp"; disjoint ones are fine.
  // One pass over the members: which group of each (kind, name) a rank was first seen in.
  std::map<std::tuple<wire::GroupKind, std::string, uint32_t>, size_t> firstIn;
  std::set<std::pair<size_t, size_t>> reported;
  for (size_t i = 0; i < t.groups.size(); ++i) {
    const Group& b = t.groups[i];
    for (uint32_t r : b.ranks) {
      auto [it, fresh] = firstIn.try_emplace({b.kind, b.name, r}, i);
      if (fresh || it->second == i || !reported.insert({it->second, i}).second) continue;
      const Group& a = t.groups[it->second];
      problems.add(std::string(kindName(a.kind)) + " group '" + a.name + "': rank " +
                   std::to_string(a.declaredBy.front()) + " declared " + listOf(a.ranks) +
                   ", rank " + std::to_string(b.declaredBy.front()) + " declared " +
                   listOf(b.ranks));
    }
  }
  for (size_t axis = 0; axis < kAxes.size(); ++axis) {
    std::set<size_t> seen;
    for (const Group& g : t.groups) {
      if (axisOf(g.kind) == axis) seen.insert(g.ranks.size());
    }
    if (seen.empty()) continue;
    t.sizes[axis] = static_cast<uint32_t>(*seen.rbegin());
    if (seen.size() > 1) {
      std::string sizes;
      for (size_t s : seen) {
        if (!sizes.empty()) sizes += ", ";
        sizes += std::to_string(s);
      }
      problems.add(std::string(kindName(kAxes[axis])) + " groups have different sizes (" + sizes +
                   "); the layout shows the largest");
    }
  }
  problems.finish();
  return t;
}

}  // namespace trainscope::topology
