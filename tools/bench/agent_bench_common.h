// What the benchmarks that start a real trainscope-agent share. Bench code; main thread.
#pragma once

#include <filesystem>
#include <string>

namespace trainscope::bench {

// `given`, or the trainscope-agent built beside this benchmark (build/tools/bench/ ->
// build/agent/); "" when there is none.
inline std::string findAgent(const std::string& given) {
  if (!given.empty()) return given;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  for (const auto& p : {self / "trainscope-agent", self / "../../agent/trainscope-agent"}) {
    if (std::filesystem::exists(p)) return std::filesystem::weakly_canonical(p).string();
  }
  return "";
}

}  // namespace trainscope::bench
