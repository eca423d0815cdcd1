// The parallel layout of a job (tensor x pipeline x data x context x expert parallel), derived
// from the process groups its ranks declared (ts_declare_group, carried in RankHello.groups):
// each rank's coordinates (pipeline stage, data-parallel, tensor-parallel, context-parallel and
// expert-parallel index), the size of each axis, and what the declarations disagree on. Pure
// functions of their input, safe from any thread; the http stage serves them and the detectors
// may use them to compare a rank only with the ranks that do the same work.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "schema/trainscope.pb.h"

namespace trainscope::topology {

// The axes a coordinate is taken along, in the order the API lists them; each is a GroupKind.
inline constexpr std::array<wire::GroupKind, 5> kAxes = {
    wire::GROUP_PP, wire::GROUP_DP, wire::GROUP_TP, wire::GROUP_CP, wire::GROUP_EP};
// "pp", "dp", "tp", "cp", "ep", "other": the names the API and the Python package use.
const char* kindName(wire::GroupKind kind);

// What one rank declared, the latest set it sent (RankHello.groups as of groups_declared_ns).
struct RankGroups {
  uint32_t rank = 0;
  int64_t declaredNs = 0;  // the probe's wall clock at its latest declaration
  std::vector<wire::ProcessGroup> groups;
};

// A rank's index along each axis; nullopt where no declared group of that kind holds it.
struct Coords {
  std::array<std::optional<uint32_t>, kAxes.size()> at;
  std::optional<uint32_t> along(wire::GroupKind kind) const;
  bool any() const;
  bool operator==(const Coords&) const = default;
};

// One distinct group: a name, a kind and its ranks in group order, with the ranks that declared
// exactly that group (a rank that declared the name with other members is a problem instead).
struct Group {
  std::string name;
  wire::GroupKind kind = wire::GROUP_OTHER;
  std::vector<uint32_t> ranks;
  std::vector<uint32_t> declaredBy;
};

struct Topology {
  bool declared = false;              // at least one rank declared a group
  uint32_t ranksDeclared = 0;         // ranks that declared at least one group
  std::vector<Group> groups;          // by kind (axes first), then first member, then name
  std::map<uint32_t, Coords> coords;  // ranks with at least one coordinate
  // Per axis, the size of its groups (the stage count for pp); 0 where nothing of that kind
  // was declared. Groups of one kind with different sizes give the largest and a problem.
  std::array<uint32_t, kAxes.size()> sizes{};
  // What the declarations disagree on (at most kMaxProblems, then one line with the count):
  // members that declared the same group name with other ranks or another order, a rank in
  // two groups of one kind, groups of one kind with different sizes.
  std::vector<std::string> problems;
};

inline constexpr size_t kMaxProblems = 20;

// Derives the layout. A rank's coordinate along a kind comes from the first group of that
// kind it declared itself; a rank that declared none of that kind (its probe is older, or it
// has not said hello yet) gets its index in the group of that kind other ranks declared with
// it, so one silent rank still has coordinates. Groups of kind GROUP_OTHER give no coordinate.
Topology derive(std::span<const RankGroups> ranks);

}  // namespace trainscope::topology
