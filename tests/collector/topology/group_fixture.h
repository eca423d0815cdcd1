// A declared process group for tests of the parallel layout (topology, storage, http): its
// name, kind and global ranks in group order. Header-only; tests only.
#pragma once

#include <cstdint>
#include <vector>

#include "schema/trainscope.pb.h"

namespace trainscope::testing {

inline wire::ProcessGroup group(const char* name, wire::GroupKind kind,
                                const std::vector<uint32_t>& ranks) {
  wire::ProcessGroup g;
  g.set_name(name);
  g.set_kind(kind);
  for (uint32_t r : ranks) g.add_ranks(r);
  return g;
}

}  // namespace trainscope::testing
