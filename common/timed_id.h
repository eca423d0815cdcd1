// Ids of things the collector creates over time (captures, imports): "<prefix>-<unix ms>-<4
// hex>", sortable by creation and unlikely to collide within a millisecond. Any thread.
#pragma once

#include <cstdint>
#include <string>

namespace trainscope {

// "<prefix>-<nowNs in ms>-<4 random hex digits>".
std::string timedId(const std::string& prefix, int64_t nowNs);

}  // namespace trainscope
