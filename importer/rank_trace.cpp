// Both passes of an import over bytes in memory (the fuzz target's entry): scan, then fold.
#include "importer/rank_trace.h"

#include <utility>

namespace trainscope::importer {

Status importTraceBytes(std::string_view bytes,
                        const std::function<void(const wire::StepReport&)>& onReport) {
  auto facts = [&]() -> Result<TraceFacts> {
    auto src = memorySource(bytes);
    return scanTrace(*src);
  }();
  if (!facts) return facts.status();
  if (!facts->mergedCapture) facts->ranks[0].rank = facts->rank.value_or(0);
  FoldOptions fo;
  fo.job = "fuzz";
  auto folds = foldTrace(
      [&]() -> Result<std::unique_ptr<ByteSource>> { return memorySource(bytes); }, *facts, fo,
      [&](wire::StepReport&& rep) {
        if (onReport) onReport(rep);
        return Status::ok();
      },
      nullptr);
  return folds.status();
}

}  // namespace trainscope::importer
