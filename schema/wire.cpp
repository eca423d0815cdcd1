#include "schema/wire.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string_view>
#include <utility>

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
    return Result<Envelope>::error(
        StatusCode::kTooLarge, "oversized: frame of " + std::to_string(size) +
                                   " bytes exceeds the limit of " + std::to_string(kMaxFrameBytes));
  }
  Envelope env;
  if (!env.ParseFromArray(data, static_cast<int>(size))) {
    return Result<Envelope>::error(
        StatusCode::kMalformed,
        "malformed: not a trainscope Envelope (" + std::to_string(size) + " bytes)");
  }
  if (env.schema_version() != kSchemaVersion) {
    return Result<Envelope>::error(
        StatusCode::kUnsupported,
        "version: schema version " + std::to_string(env.schema_version()) +
            " is not supported; this peer speaks version " + std::to_string(kSchemaVersion));
  }
  if (env.body_case() == Envelope::BODY_NOT_SET) {
    return Result<Envelope>::error(StatusCode::kInvalidArgument,
                                   "empty: envelope carries no message");
  }
  return env;
}

namespace {

// Protobuf wire primitives, enough to walk an Envelope's top-level fields. Each returns false on
// a truncated or over-long value, leaving the walk to fail.
bool readVarint(const uint8_t*& p, const uint8_t* end, uint64_t* out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64 && p < end; shift += 7) {
    const uint8_t b = *p++;
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) {
      *out = v;
      return true;
    }
  }
  return false;
}

bool readLength(const uint8_t*& p, const uint8_t* end, std::string_view* out) {
  uint64_t n = 0;
  if (!readVarint(p, end, &n) || n > static_cast<uint64_t>(end - p)) return false;
  *out = std::string_view(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
  p += n;
  return true;
}

void putVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

size_t varintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

constexpr uint64_t kVarint = 0;
constexpr uint64_t kLength = 2;
constexpr uint64_t tag(uint64_t field, uint64_t type) {
  return (field << 3) | type;
}

}  // namespace

std::string encodeBatchFrame(uint64_t seq, const std::vector<std::string>& items) {
  size_t body = 1 + varintSize(seq);
  for (const auto& it : items) body += 1 + varintSize(it.size()) + it.size();
  std::string out;
  out.reserve(body + 16);
  putVarint(out, tag(1, kVarint));
  putVarint(out, kSchemaVersion);
  putVarint(out, tag(17, kLength));
  putVarint(out, body);
  putVarint(out, tag(1, kVarint));  // Batch.seq
  putVarint(out, seq);
  for (const auto& it : items) {
    putVarint(out, tag(2, kLength));  // Batch.items
    putVarint(out, it.size());
    out.append(it);
  }
  return out;
}

bool splitBatch(const void* data, size_t size, BatchFrame* out) {
  if (size > kMaxFrameBytes) return false;
  out->seq = 0;
  out->items.clear();
  const auto* p = static_cast<const uint8_t*>(data);
  const uint8_t* end = p + size;
  uint64_t version = 0;
  bool haveVersion = false;
  std::string_view batch;
  bool haveBatch = false;
  while (p < end) {
    uint64_t t = 0;
    if (!readVarint(p, end, &t)) return false;
    if (t == tag(1, kVarint) && !haveVersion) {
      if (!readVarint(p, end, &version)) return false;
      haveVersion = true;
    } else if (t == tag(17, kLength) && !haveBatch) {
      if (!readLength(p, end, &batch)) return false;
      haveBatch = true;
    } else {
      return false;
    }
  }
  if (!haveBatch || version != kSchemaVersion) return false;
  p = reinterpret_cast<const uint8_t*>(batch.data());
  end = p + batch.size();
  bool haveSeq = false;
  while (p < end) {
    uint64_t t = 0;
    if (!readVarint(p, end, &t)) return false;
    if (t == tag(1, kVarint) && !haveSeq) {
      if (!readVarint(p, end, &out->seq)) return false;
      haveSeq = true;
    } else if (t == tag(2, kLength)) {
      std::string_view item;
      if (!readLength(p, end, &item)) return false;
      out->items.push_back(item);
    } else {
      return false;
    }
  }
  return true;
}

bool stepItem(std::string_view item, uint32_t* version, std::string_view* step) {
  const auto* p = reinterpret_cast<const uint8_t*>(item.data());
  const uint8_t* end = p + item.size();
  uint64_t v = 0;
  bool haveVersion = false;
  bool haveStep = false;
  while (p < end) {
    uint64_t t = 0;
    if (!readVarint(p, end, &t)) return false;
    if (t == tag(1, kVarint) && !haveVersion) {
      // Past 32 bits protobuf would truncate it; let the Envelope decode say what it is.
      if (!readVarint(p, end, &v) || v > UINT32_MAX) return false;
      haveVersion = true;
    } else if (t == tag(12, kLength) && !haveStep) {
      if (!readLength(p, end, step)) return false;
      haveStep = true;
    } else {
      return false;
    }
  }
  if (!haveStep) return false;
  *version = static_cast<uint32_t>(v);
  return true;
}

namespace {

// Walks a message's fields one at a time; length-delimited ones come with their bytes, the
// others are skipped. next() is false at the end or on a malformed field.
class FieldWalker {
 public:
  explicit FieldWalker(std::string_view msg)
      : p_(reinterpret_cast<const uint8_t*>(msg.data())), end_(p_ + msg.size()) {}
  bool next(uint64_t* field, std::string_view* bytes) {
    while (p_ < end_) {
      uint64_t t = 0;
      uint64_t skipped = 0;
      if (!readVarint(p_, end_, &t)) return false;
      switch (t & 7) {
        case kVarint:
          if (!readVarint(p_, end_, &skipped)) return false;
          break;
        case 1:  // fixed64
          if (end_ - p_ < 8) return false;
          p_ += 8;
          break;
        case kLength:
          if (!readLength(p_, end_, bytes)) return false;
          *field = t >> 3;
          return true;
        case 5:  // fixed32
          if (end_ - p_ < 4) return false;
          p_ += 4;
          break;
        default:
          return false;
      }
    }
    return false;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// The first length-delimited field `field` of a message.
bool findString(std::string_view msg, uint64_t field, std::string_view* out) {
  FieldWalker walk(msg);
  uint64_t f = 0;
  while (walk.next(&f, out)) {
    if (f == field) return true;
  }
  return false;
}

}  // namespace

bool itemRouteKey(std::string_view item, std::string_view* key) {
  FieldWalker walk(item);
  uint64_t field = 0;
  std::string_view body;
  while (walk.next(&field, &body)) {
    // Envelope body fields and where the key lies in each (trainscope.proto).
    switch (field) {
      case 11:  // RankGoodbye.job
      case 12:  // StepReport.job
      case 13:  // HostSample.node
        return findString(body, 1, key);
      case 20:  // CommandStatus.job
      case 21:  // FileChunk.job
        return findString(body, 2, key);
      case 10: {  // RankHello.rank (RankInfo) .job
        std::string_view info;
        return findString(body, 1, &info) && findString(info, 1, key);
      }
      default:
        break;
    }
  }
  return false;
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

std::string rejectReason(const Status& decodeFailure) {
  switch (decodeFailure.code()) {
    case StatusCode::kTooLarge:
      return "oversized";
    case StatusCode::kMalformed:
      return "malformed";
    case StatusCode::kUnsupported:
      return "version";
    case StatusCode::kInvalidArgument:
      return "empty";
    default:
      return "invalid";
  }
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

std::vector<std::string> gpuClockEventNames(uint64_t reasons) {
  static constexpr std::pair<uint64_t, const char*> kNames[] = {{0x1, "gpu_idle"},
                                                                {0x2, "applications_clocks"},
                                                                {0x4, "sw_power_cap"},
                                                                {0x8, "hw_slowdown"},
                                                                {0x10, "sync_boost"},
                                                                {0x20, "sw_thermal_slowdown"},
                                                                {0x40, "hw_thermal_slowdown"},
                                                                {0x80, "hw_power_brake"},
                                                                {0x100, "display_clock"}};
  std::vector<std::string> out;
  for (const auto& [bit, name] : kNames) {
    if ((reasons & bit) != 0) out.emplace_back(name);
    reasons &= ~bit;
  }
  for (uint64_t bit = 1; reasons != 0; bit <<= 1) {
    if ((reasons & bit) == 0) continue;
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(bit));
    out.emplace_back(buf);
    reasons &= ~bit;
  }
  return out;
}

}  // namespace trainscope::wire
