#include "common/timed_id.h"

#include <cstdio>
#include <random>

namespace trainscope {

std::string timedId(const std::string& prefix, int64_t nowNs) {
  static thread_local std::mt19937 rng{std::random_device{}()};
  char hex[8];
  std::snprintf(hex, sizeof hex, "%04x", static_cast<unsigned>(rng() & 0xffffu));
  return prefix + '-' + std::to_string(nowNs / 1'000'000) + '-' + hex;
}

}  // namespace trainscope
