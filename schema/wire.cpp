#include "schema/wire.h"

#include <chrono>
#include <string_view>

#include <google/protobuf/stubs/logging.h>

#include "common/log.h"

namespace trainscope::wire {

std::string encode(Envelope& env) {
  env.set_schema_version(kSchemaVersion);
  std::string out;
  env.SerializeToString(&out);
  return out;
}

Result<Envelope> decode(const void* data, size_t size) {
  if (size > kMaxFrameBytes) {
    return Result<Envelope>::error("oversized: frame of " + std::to_string(size) +
                                   " bytes exceeds the limit of " + std::to_string(kMaxFrameBytes));
  }
  Envelope env;
  if (!env.ParseFromArray(data, static_cast<int>(size))) {
    return Result<Envelope>::error("malformed: not a trainscope Envelope (" + std::to_string(size) +
                                   " bytes)");
  }
  if (env.schema_version() != kSchemaVersion) {
    return Result<Envelope>::error(
        "version: schema version " + std::to_string(env.schema_version()) +
        " is not supported; this peer speaks version " + std::to_string(kSchemaVersion));
  }
  if (env.body_case() == Envelope::BODY_NOT_SET) {
    return Result<Envelope>::error("empty: envelope carries no message");
  }
  return env;
}

void routeProtobufLogs() {
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel level, const char* file, int line, const std::string& message) {
        // One limiter per level, so a flood of errors does not hide a fatal line.
        static RateLimitedLog errors{std::chrono::seconds(10)};
        static RateLimitedLog others{std::chrono::seconds(10)};
        const bool bad = level >= google::protobuf::LOGLEVEL_ERROR;
        std::string_view text(message);
        while (!text.empty() && (text.back() == ' ' || text.back() == '\n')) text.remove_suffix(1);
        (bad ? errors : others)
            .log(bad ? LogLevel::kError : LogLevel::kWarn, "protobuf",
                 std::string(text) + " (" + (file != nullptr ? file : "?") + ":" +
                     std::to_string(line) + ")");
      });
}

std::string rejectReason(const std::string& decodeMessage) {
  auto colon = decodeMessage.find(':');
  return colon == std::string::npos ? decodeMessage : decodeMessage.substr(0, colon);
}

Envelope errorReply(const std::string& reason, const std::string& detail) {
  Envelope env;
  env.set_schema_version(kSchemaVersion);
  auto* err = env.mutable_error();
  err->set_reason(reason);
  err->set_detail(detail);
  err->set_expected_version(kSchemaVersion);
  return env;
}

namespace {
struct OpName {
  CollectiveOp op;
  const char* name;
};
constexpr OpName kOpNames[] = {
    {COLL_UNKNOWN, "unknown"},
    {ALL_REDUCE, "all_reduce"},
    {ALL_GATHER, "all_gather"},
    {REDUCE_SCATTER, "reduce_scatter"},
    {ALL_TO_ALL, "all_to_all"},
    {BROADCAST, "broadcast"},
    {REDUCE, "reduce"},
    {SEND, "send"},
    {RECV, "recv"},
    {BARRIER, "barrier"},
};
}  // namespace

const char* collectiveOpName(CollectiveOp op) {
  for (const auto& entry : kOpNames) {
    if (entry.op == op) return entry.name;
  }
  return "unknown";
}

bool parseCollectiveOp(const std::string& name, CollectiveOp* out) {
  for (const auto& entry : kOpNames) {
    if (name == entry.name) {
      *out = entry.op;
      return true;
    }
  }
  return false;
}

}  // namespace trainscope::wire
