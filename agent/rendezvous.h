// Rendezvous (highest-random-weight) hashing: which of several collectors a job's data goes
// to. Every (key, collector) pair gets a pseudo-random weight and the key goes to the collector
// of highest weight among those that are up. Why this scheme: each agent decides alone, with no
// coordination, and all agents with the same collector list agree; when a collector goes away
// only the keys it held move (each to its runner-up), and when it comes back exactly those keys
// return to it, so a job's detection stays on one collector except around such changes.
// The weights come from our own hash, not std::hash, so agents built differently agree.
// Pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trainscope::agent {

// The weight of `key` on `collector`: 64 bits, the same on every machine.
uint64_t rendezvousWeight(std::string_view key, std::string_view collector);

// The index in `collectors` of the owner of `key` among those with up[i] true (`up` empty:
// all are up); collectors.size() when none is up. Ties (equal weights) go to the lower index.
size_t rendezvousOwner(std::string_view key, const std::vector<std::string>& collectors,
                       const std::vector<bool>& up = {});

}  // namespace trainscope::agent
