#include "importer/trace_reader.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "importer/json_lexer.h"

namespace trainscope::importer {
namespace {

using json_lexer::isWs;
using json_lexer::Lexer;
using json_lexer::Res;

// The reader's first buffer: a small file is read whole into it; a large one doubles it up to
// ReadOptions::bufferBytes, read by read.
constexpr size_t kFirstBufferBytes = size_t{64} * 1024;

class Reader {
 public:
  Reader(ByteSource& src, TraceHandler& handler, const ReadOptions& options)
      : src_(src), handler_(handler), o_(options) {
    buf_.resize(std::clamp<size_t>(o_.bufferBytes, 4096, kFirstBufferBytes));
  }

  Result<ReadSummary> run() {
    if (Status s = topLevel(); !s) return s;
    summary_.bytes = base_ + end_;
    return summary_;
  }

 private:
  uint64_t offsetOf(const char* p) const { return base_ + static_cast<uint64_t>(p - buf_.data()); }

  std::string at(uint64_t offset) const { return "byte " + std::to_string(offset); }

  // Moves [keep, end) to the front and reads more. False at the end of the data.
  Result<bool> refill(size_t keep, size_t unitLimit, const char* what) {
    if (keep > 0) {
      std::memmove(buf_.data(), buf_.data() + keep, end_ - keep);
      base_ += keep;
      end_ -= keep;
      pos_ -= std::min(pos_, keep);
    }
    if (end_ == buf_.size()) {
      if (buf_.size() >= unitLimit + 8) {
        const std::string bound = unitLimit % (1u << 20) == 0
                                      ? std::to_string(unitLimit >> 20) + " MiB"
                                      : std::to_string(unitLimit) + " bytes";
        return Result<bool>::error(std::string(what) + " at " + at(base_) + " is larger than " +
                                   bound);
      }
      buf_.resize(std::min(buf_.size() * 2, unitLimit + 8));
    } else if (lastReadFull_ && buf_.size() < o_.bufferBytes) {
      buf_.resize(std::min(buf_.size() * 2, o_.bufferBytes));
    }
    if (eof_) return false;
    const size_t want = buf_.size() - end_;
    auto n = src_.read(buf_.data() + end_, want);
    if (!n) return n.status();
    if (*n == 0) {
      eof_ = true;
      return false;
    }
    end_ += *n;
    lastReadFull_ = *n == want;
    return true;
  }

  Status truncated(const std::string& where) {
    return Status::error("the file ends " + where + " at " + at(base_ + end_) +
                         " (truncated or not a whole trace)");
  }

  // Whitespace, refilling as needed; false at the end of the data.
  Result<bool> skipWs() {
    while (true) {
      while (pos_ < end_ && isWs(buf_[pos_])) ++pos_;
      if (pos_ < end_) return true;
      auto more = refill(pos_, o_.maxEventBytes, "whitespace");
      if (!more) return more.status();
      if (!*more) return false;
    }
  }

  // Runs `unit` (a Lexer member parse starting at pos_) until it completes, refilling when it
  // needs more; on success pos_ is past it. `limit` bounds the unit's size.
  // `eventIndex` >= 0 names the event in errors.
  template <typename Fn>
  Status parseUnit(Fn&& unit, size_t limit, const char* what, int64_t eventIndex = -1) {
    auto where = [&] {
      return eventIndex < 0 ? std::string() : "event #" + std::to_string(eventIndex) + ", ";
    };
    while (true) {
      Lexer lx{buf_.data() + pos_, buf_.data() + end_, o_.maxDepth};
      const Res r = unit(lx);
      if (r == Res::kOk) {
        pos_ = static_cast<size_t>(lx.p - buf_.data());
        lexer_ = std::move(lx);
        return Status::ok();
      }
      if (r == Res::kError) {
        return Status::error(where() + at(offsetOf(lx.errAt)) + ": " + lx.err);
      }
      auto more = refill(pos_, limit, what);
      if (!more) return Status::error(where() + more.message());
      if (!*more) return truncated(std::string("inside ") + what);
    }
  }

  Status expectChar(char c, const char* context) {
    auto more = skipWs();
    if (!more) return more.status();
    if (!*more) return truncated(context);
    if (buf_[pos_] != c) {
      return Status::error(at(offsetOf(buf_.data() + pos_)) + ": expected '" + std::string(1, c) +
                           "' " + context + ", found '" + Lexer::printable(buf_[pos_]) + "'");
    }
    ++pos_;
    return Status::ok();
  }

  Status topLevel() {
    auto more = skipWs();
    if (!more) return more.status();
    if (!*more) return Status::error("the file is empty");
    const char first = buf_[pos_];
    Status s;
    if (first == '[') {
      summary_.bareArray = true;
      ++pos_;
      s = events(1);
    } else if (first == '{') {
      ++pos_;
      s = object();
    } else {
      return Status::error(at(offsetOf(buf_.data() + pos_)) +
                           ": a trace is a JSON object with traceEvents (or a list of events); "
                           "found '" +
                           Lexer::printable(first) + "'");
    }
    if (!s) return s;
    more = skipWs();
    if (!more) return more.status();
    if (*more) {
      return Status::error(at(offsetOf(buf_.data() + pos_)) +
                           ": unexpected data after the end of the trace");
    }
    return Status::ok();
  }

  Status object() {
    auto more = skipWs();
    if (!more) return more.status();
    if (!*more) return truncated("inside the top-level object");
    if (buf_[pos_] == '}') {
      ++pos_;
      return Status::error("the trace has no traceEvents list");
    }
    while (true) {
      more = skipWs();
      if (!more) return more.status();
      if (!*more) return truncated("inside the top-level object");
      if (buf_[pos_] != '"') {
        return Status::error(at(offsetOf(buf_.data() + pos_)) +
                             ": expected a member name in quotes at the top level");
      }
      JsonValue key;
      if (Status s = parseUnit([&](Lexer& lx) { return lx.string(&key); }, o_.maxTopLevelBytes,
                               "a member name");
          !s) {
        return s;
      }
      std::string scratch;
      const std::string name(stringOf(key, &scratch));
      if (Status s = expectChar(':', "after a top-level member name"); !s) return s;
      if (name == "traceEvents") {
        if (Status s = expectChar('[', "to open traceEvents (it must be a list)"); !s) return s;
        summary_.hadTraceEvents = true;
        if (Status s = events(2); !s) return s;
      } else {
        more = skipWs();
        if (!more) return more.status();
        if (!*more) return truncated("inside the top-level object");
        JsonValue v;
        const std::string what = "the top-level member \"" + name + "\"";
        if (Status s = parseUnit([&](Lexer& lx) { return lx.value(1, &v); }, o_.maxTopLevelBytes,
                                 what.c_str());
            !s) {
          return s;
        }
        if (std::find(o_.topLevelKeys.begin(), o_.topLevelKeys.end(), name) !=
            o_.topLevelKeys.end()) {
          if (Status s = handler_.onTopLevel(name, v.text); !s) {
            return Status::error(what + ": " + s.message());
          }
        }
      }
      more = skipWs();
      if (!more) return more.status();
      if (!*more) return truncated("inside the top-level object");
      if (buf_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (buf_[pos_] == '}') {
        ++pos_;
        break;
      }
      return Status::error(at(offsetOf(buf_.data() + pos_)) +
                           ": expected ',' or '}' in the top-level object");
    }
    if (!summary_.hadTraceEvents) return Status::error("the trace has no traceEvents list");
    return Status::ok();
  }

  Status events(int depth) {
    auto more = skipWs();
    if (!more) return more.status();
    if (!*more) return truncated("inside traceEvents");
    if (buf_[pos_] == ']') {
      ++pos_;
      return Status::ok();
    }
    EventView ev;
    std::string nameScratch;
    std::string catScratch;
    while (true) {
      more = skipWs();
      if (!more) return more.status();
      if (!*more) {
        // Here only after a ',' (an empty list was handled above).
        return truncated("inside traceEvents after event #" + std::to_string(summary_.events - 1));
      }
      if (Status s = parseUnit([&](Lexer& lx) { return lx.event(depth, &ev); }, o_.maxEventBytes,
                               "an event", static_cast<int64_t>(summary_.events));
          !s) {
        return s;
      }
      ev.index = summary_.events;
      ev.offset = offsetOf(ev.raw.data());
      ev.name = stringOf(lexer_.nameValue, &nameScratch);
      ev.cat = stringOf(lexer_.catValue, &catScratch);
      if (Status s = handler_.onEvent(ev); !s) {
        return Status::error("event #" + std::to_string(ev.index) + " at " + at(ev.offset) + ": " +
                             s.message());
      }
      ++summary_.events;
      more = skipWs();
      if (!more) return more.status();
      if (!*more) {
        return truncated("inside traceEvents after event #" + std::to_string(summary_.events - 1));
      }
      if (buf_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (buf_[pos_] == ']') {
        ++pos_;
        return Status::ok();
      }
      return Status::error(at(offsetOf(buf_.data() + pos_)) +
                           ": expected ',' or ']' after event #" +
                           std::to_string(summary_.events - 1));
    }
  }

  ByteSource& src_;
  TraceHandler& handler_;
  const ReadOptions& o_;
  std::vector<char> buf_;
  size_t pos_ = 0;
  size_t end_ = 0;
  uint64_t base_ = 0;  // stream offset of buf_[0]
  bool eof_ = false;
  bool lastReadFull_ = false;  // the last read filled the buffer: the file goes on, read more
  Lexer lexer_{nullptr, nullptr, 0};  // the last completed unit's lexer (name/cat values)
  ReadSummary summary_;
};

}  // namespace

Result<ReadSummary> readTrace(ByteSource& source, TraceHandler& handler,
                              const ReadOptions& options) {
  Reader reader(source, handler, options);
  return reader.run();
}

Result<ReadSummary> readTraceBytes(std::string_view bytes, TraceHandler& handler,
                                   const ReadOptions& options) {
  auto src = memorySource(bytes);
  return readTrace(*src, handler, options);
}

}  // namespace trainscope::importer
