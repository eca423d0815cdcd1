// Helpers for the HTTP tests of jobs with a declared parallel layout, over an in-memory SQLite
// store: the store, a rank's registration in a write batch, and its groups (group_fixture.h).
// Header-only; tests only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "collector/storage/store.h"
#include "tests/collector/storage/memory_store.h"
#include "tests/collector/topology/group_fixture.h"

namespace trainscope::testing {

using storage::testing::memoryStore;

inline void addRank(storage::WriteBatch& b, const std::string& job, uint32_t rank, uint32_t world,
                    const std::string& node) {
  wire::RankInfo info;
  info.set_job(job);
  info.set_rank(rank);
  info.set_world_size(world);
  info.set_node(node);
  info.set_host("h");
  b.ranks.push_back(info);
}

}  // namespace trainscope::testing
