// Encoding and decoding of wire frames: one serialized Envelope per ZeroMQ message part.
// Pure functions, safe from any thread. Every hop uses these so that the version check and
// the size limit are the same everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "schema/trainscope.pb.h"

namespace trainscope::wire {

// Bumped when a change to trainscope.proto is not backward compatible.
inline constexpr uint32_t kSchemaVersion = 1;

// The largest frame any hop accepts. A step report is a few KiB; a file chunk is at most
// kMaxChunkBytes; batches are cut well below this.
inline constexpr size_t kMaxFrameBytes = 8u << 20;
inline constexpr size_t kMaxChunkBytes = 1u << 20;

// Bounds on what a sender may name (PROTOCOL.md, "Limits"). Receivers reject larger values,
// so no per-rank array, loop or capture a sender can cause grows past them.
inline constexpr uint32_t kMaxWorldSize = 65536;  // ranks of one job; rank < world_size
// Step numbers 0..kMaxStep: 31 years at 1,000 steps/s, and far enough below INT64_MAX that
// start + steps + history never overflows.
inline constexpr int64_t kMaxStep = 1'000'000'000'000;
// Wall-clock times (ns since the Unix epoch) up to 2100-01-01T00:00:00Z, and clock offsets
// within +-kMaxTimeNs: the sum or difference of any two such values fits in an int64.
inline constexpr int64_t kMaxTimeNs = 4'102'444'800'000'000'000;

// The clock-event reason bits of GpuSample.clock_event_reasons (NVML's values) that mean the GPU
// ran below the clock it was asked for because of power or heat: software power cap (0x4),
// hardware slowdown (0x8), software thermal (0x20), hardware thermal (0x40), hardware power
// brake (0x80). Idle (0x1), application clocks (0x2), sync boost (0x10) and display clock
// (0x100) are the GPU doing as told.
inline constexpr uint64_t kGpuThrottleReasons = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;

// Names of the reason bits set in `reasons` ("sw_power_cap", "hw_thermal_slowdown", ...), for
// people; unknown bits as "0x...".
std::vector<std::string> gpuClockEventNames(uint64_t reasons);

// Serializes `env` after stamping the current schema version into it.
std::string encode(Envelope& env);

// Parses and checks one frame: size limit, protobuf well-formedness, schema version and
// that a body is set. A failure's code says which (kTooLarge, kMalformed, kUnsupported,
// kInvalidArgument), so receivers can count rejects by reason (rejectReason); its message
// starts with that reason's token followed by ": " and details.
Result<Envelope> decode(const void* data, size_t size);

// A Batch frame taken apart without decoding its items: the collector's fast path, which decodes
// each step report once, straight into the message it stores, and keeps the report's own bytes
// as the stored detail instead of encoding it again. The views point into the frame.
struct BatchFrame {
  uint64_t seq = 0;
  std::vector<std::string_view> items;  // each a serialized Envelope
};

// Splits `data` when it is exactly what agents send: an Envelope of this schema version holding a
// Batch (schema version and batch once each, Batch fields seq and items only, every length within
// the frame). Returns false for anything else (another body or version, unknown or repeated
// fields, a truncated or oversized frame), which decode() then judges: a frame split here is one
// decode() accepts, with the same seq and items. `out` is reused (its vector keeps capacity).
bool splitBatch(const void* data, size_t size, BatchFrame* out);

// The frame splitBatch takes apart: Envelope{schema_version, batch: Batch{seq, items}} built
// from already-serialized item envelopes, so a sender's stored items (the agent's spool) leave
// without being parsed again.
std::string encodeBatchFrame(uint64_t seq, const std::vector<std::string>& items);

// When a batch item (a serialized Envelope) holds a step report and nothing else (at most a
// schema_version besides), sets *version (0 when absent) and *step to the StepReport's bytes and
// returns true. False: the item holds something else or is malformed; decode it as an Envelope.
bool stepItem(std::string_view item, uint32_t* version, std::string_view* step);

// The key an agent routes a spooled item (a serialized Envelope) by when it has several
// collectors: the job of a step report, rank hello, goodbye, command status or file chunk, the
// node of a host sample. Read from the bytes without decoding the item (a few field skips).
// Returns false for anything else or a malformed item (the caller picks a fixed route).
bool itemRouteKey(std::string_view item, std::string_view* key);

// The reason token of a decode failure, from its code: "oversized", "malformed", "version",
// "empty" ("invalid" for a Status decode() does not return).
std::string rejectReason(const Status& decodeFailure);

// An ErrorReply envelope telling a peer why its frame was rejected.
Envelope errorReply(const std::string& reason, const std::string& detail);

// Sends protobuf's own log lines (e.g. "String field ... contains invalid UTF-8", one per bad
// frame) through a RateLimitedLog instead of straight to stderr: at most one line per 10 s,
// then a count of those suppressed. Process-wide; daemons call it once at start-up (not the
// probe, which lives in someone else's process).
void routeProtobufLogs();

// Human name of an op for the API and traces ("all_reduce"); parse accepts the same names.
const char* collectiveOpName(CollectiveOp op);
bool parseCollectiveOp(const std::string& name, CollectiveOp* out);

}  // namespace trainscope::wire
