// Constants and helpers the agent's parts share (agent.cpp, probe_side, upstream, uploads).
// Private to agent/; pure, any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <unistd.h>

namespace trainscope::agent::internal {

constexpr std::string_view kLog = "agent";
constexpr int64_t kMs = 1'000'000;
// Messages handled per socket per loop turn, so one busy side cannot starve timers.
constexpr int kDrainLimit = 1024;

inline std::string hostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace trainscope::agent::internal
