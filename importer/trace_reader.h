// A streaming reader of Chrome-trace JSON (the PyTorch profiler's, our captures', any tool's):
// it walks `{"traceEvents": [...], ...}` (or a bare event array) once, from a byte source, and
// hands each event to a handler as a view into its buffer, never building a document. Memory
// is one read buffer plus the largest single event (bounded by maxEventBytes); gzip input is
// inflated as it is read. Errors name the byte offset (of the decompressed text) and the
// event's index. Pure apart from the source it reads; one reader per thread.
//
// readTraceBytes() is the entry for fuzzing: any bytes in, a Status out, no files touched.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_limits.h"
#include "common/status.h"

namespace trainscope::importer {

// Where the bytes come from. read() fills up to `cap` bytes and returns how many; 0 is the end.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual Result<size_t> read(char* buffer, size_t cap) = 0;
};

// A file, plain or gzip (detected by its magic bytes; concatenated members are read through).
// Errors name the path.
Result<std::unique_ptr<ByteSource>> openFileSource(const std::string& path);
// Bytes in memory, plain or gzip (detected the same way); `bytes` must outlive the source.
std::unique_ptr<ByteSource> memorySource(std::string_view bytes);

// One JSON value as text. `text` is the raw JSON (a string's quotes and escapes included).
struct JsonValue {
  enum class Type : uint8_t { kNone, kString, kNumber, kObject, kArray, kTrue, kFalse, kNull };
  Type type = Type::kNone;
  std::string_view text;
  bool present() const { return type != Type::kNone; }
};

// The decoded content of a JSON string value (escapes resolved, UTF-8); empty for another
// type. `scratch` holds the result when the text had escapes.
std::string_view stringOf(const JsonValue& v, std::string* scratch);
// An integer from a number value (a fractional one truncated toward zero) or from a string
// of digits ("0"); false when the value is neither or does not fit.
bool intOf(const JsonValue& v, int64_t* out);
// A number value as a double (strings of a number too); false otherwise.
bool doubleOf(const JsonValue& v, double* out);
// Microseconds (a JSON number such as 1700000000123456.789) as integer nanoseconds, exactly
// for up to three fractional digits (a double would lose the nanoseconds of epoch times).
bool microsToNs(const JsonValue& v, int64_t* ns);

// Calls `fn(key, value)` for each member of a JSON object text (an event's args), in order; the
// key is decoded. Stops early when fn returns false. A malformed object fails with the reason.
Status forEachMember(std::string_view objectText,
                     const std::function<bool(std::string_view key, const JsonValue&)>& fn);

// One event of traceEvents. Views point into the reader's buffer and are valid only during
// the handler call.
struct EventView {
  uint64_t index = 0;     // position in traceEvents, from 0
  uint64_t offset = 0;    // byte offset of its '{' in the (decompressed) text
  std::string_view raw;   // the whole object
  char ph = 0;            // first character of "ph"; 0 when absent
  std::string_view name;  // decoded; "" when absent
  std::string_view cat;   // decoded; "" when absent
  JsonValue ts, dur, pid, tid, args;
  // Raw text of each member ("key": value) in order, for writing the event back changed.
  struct Member {
    std::string_view key;   // as written, without quotes (undecoded)
    std::string_view text;  // from the key's opening quote to the end of its value
  };
  std::vector<Member> members;
};

class TraceHandler {
 public:
  virtual ~TraceHandler() = default;
  // A top-level member other than traceEvents whose key is in ReadOptions::topLevelKeys, with
  // its raw JSON value (bounded by maxTopLevelBytes). Any order relative to the events.
  virtual Status onTopLevel(std::string_view key, std::string_view rawValue) = 0;
  // One event object. A failure stops reading; the reader prefixes it with where it was.
  virtual Status onEvent(const EventView& event) = 0;
};

struct ReadOptions {
  std::vector<std::string> topLevelKeys;  // members the handler wants besides traceEvents
  size_t maxEventBytes = 64u << 20;       // one event larger than this is refused (a corrupt
                                          // file must not grow the buffer without bound)
  size_t maxTopLevelBytes = 64u << 20;    // the same for a wanted top-level value
  size_t bufferBytes = 1u << 20;          // read size; larger reads fewer times
  int maxDepth = kMaxTraceJsonDepth;      // nesting deeper than this is refused
};

struct ReadSummary {
  uint64_t events = 0;          // event objects handed to onEvent
  uint64_t bytes = 0;           // decompressed bytes read
  bool bareArray = false;       // the file was a bare array of events
  bool hadTraceEvents = false;  // an object with a traceEvents member
};

// Reads the whole trace. Fails on malformed JSON, a truncated file, a top level that is not an
// object or array, an object without a traceEvents array, an event that is not an object, or
// the handler's failure; the message says where (byte offset, event index).
Result<ReadSummary> readTrace(ByteSource& source, TraceHandler& handler,
                              const ReadOptions& options = {});
// The same over bytes in memory (plain or gzip): the fuzzing entry.
Result<ReadSummary> readTraceBytes(std::string_view bytes, TraceHandler& handler,
                                   const ReadOptions& options = {});

}  // namespace trainscope::importer
