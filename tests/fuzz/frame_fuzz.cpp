// libFuzzer target: one frame as it arrives on the ingest port, through wire::decode and the
// ingest stage's item checks (collector/ingest/validate.h), the way IngestServer reads a Batch.
// Properties beyond "no crash, leak or UB": a decode failure carries a reason token, and a
// decoded frame encodes back to bytes that decode again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "collector/ingest/validate.h"
#include "schema/wire.h"
#include "tests/fuzz/fuzz_util.h"

using namespace trainscope;

namespace {

using fuzz::check;

void validateItem(const wire::Envelope& item, std::optional<uint32_t> worldSize) {
  const ingest::ValidationLimits limits;
  std::optional<ingest::Rejection> r;
  switch (item.body_case()) {
    case wire::Envelope::kStep:
      r = ingest::validateStep(item.step(), worldSize, limits);
      break;
    case wire::Envelope::kRankHello:
      r = ingest::validateRankInfo(item.rank_hello().rank(), limits);
      if (!r) r = ingest::validateProgress(item.rank_hello());
      if (!r) r = ingest::validateGroups(item.rank_hello(), limits);
      break;
    case wire::Envelope::kHeartbeat:
      r = ingest::validateHeartbeat(item.heartbeat());
      break;
    case wire::Envelope::kRankGoodbye:
      r = ingest::validateGoodbye(item.rank_goodbye(), worldSize, limits);
      break;
    case wire::Envelope::kHost:
      r = ingest::validateHost(item.host());
      break;
    default:
      return;
  }
  // Every rejection is counted under a reason token and names what is wrong.
  if (r) check(!r->reason.empty() && !r->detail.empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto env = wire::decode(data, size);
  if (!env) {
    check(wire::rejectReason(env.status()) != "invalid");
    return 0;
  }
  if (env->has_batch()) {
    // The first hello of a job fixes its world size for the items after it, as in ingest.
    std::optional<uint32_t> worldSize;
    for (const auto& item : env->batch().items()) {
      validateItem(item, worldSize);
      if (item.has_rank_hello() && !worldSize) worldSize = item.rank_hello().rank().world_size();
    }
  } else {
    validateItem(*env, std::nullopt);
  }
  wire::Envelope copy = *env;
  const std::string again = wire::encode(copy);
  auto back = wire::decode(again.data(), again.size());
  check(back.isOk() && back->body_case() == env->body_case());
  return 0;
}
