// The streaming trace reader: events come out whole with their fields, in order, across buffer
// refills and from gzip; strings are decoded; times are exact nanoseconds; every malformed or
// cut-short input fails with the byte offset and the event's index.
#include "importer/trace_reader.h"

#include <zlib.h>

#include <string>
#include <vector>

#include <catch2/catch.hpp>

using trainscope::Status;
using trainscope::importer::EventView;
using trainscope::importer::JsonValue;
using trainscope::importer::ReadOptions;
using trainscope::importer::TraceHandler;

namespace {

struct Seen {
  std::string name;
  std::string cat;
  char ph;
  int64_t tsNs;
  std::string raw;
  uint64_t offset;
  std::string args;
};

class Collect final : public TraceHandler {
 public:
  std::vector<Seen> events;
  std::vector<std::pair<std::string, std::string>> top;
  std::string failOn;  // an event name whose arrival the handler refuses
  Status onTopLevel(std::string_view key, std::string_view raw) override {
    top.emplace_back(std::string(key), std::string(raw));
    return Status::ok();
  }
  Status onEvent(const EventView& e) override {
    if (!failOn.empty() && e.name == failOn) return Status::error("refused by the handler");
    int64_t ts = -1;
    trainscope::importer::microsToNs(e.ts, &ts);
    events.push_back({std::string(e.name), std::string(e.cat), e.ph, ts, std::string(e.raw),
                      e.offset, std::string(e.args.text)});
    return Status::ok();
  }
};

std::string gzip(const std::string& text) {
  z_stream zs{};
  deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(compressBound(static_cast<uLong>(text.size())) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string readError(const std::string& text, const ReadOptions& o = {}) {
  Collect c;
  auto r = trainscope::importer::readTraceBytes(text, c, o);
  return r ? std::string("ok") : r.message();
}

}  // namespace

TEST_CASE("events come out whole, in order, with their fields, across buffer refills") {
  std::string text = R"({"schemaVersion": 1, "distributedInfo": {"rank": 3},
    "traceEvents": [)";
  for (int i = 0; i < 500; ++i) {
    if (i > 0) text += ",\n";
    text += R"({"ph": "X", "cat": "kernel", "name": "k\u00e9)" + std::to_string(i) +
            R"(", "pid": 0, "tid": 7, "ts": 1700000000000123.456, "dur": 1.5,
               "args": {"correlation": )" +
            std::to_string(i) + R"(, "grid": [1, 2, 3], "nested": {"a": [true, false, null]}}})";
  }
  text += R"(], "traceName": "x"})";
  ReadOptions o;
  o.bufferBytes = 4096;  // many refills, events cut at every position
  o.topLevelKeys = {"distributedInfo", "traceName"};
  Collect c;
  auto r = trainscope::importer::readTraceBytes(text, c, o);
  REQUIRE(r);
  CHECK(r->events == 500);
  CHECK(r->hadTraceEvents);
  REQUIRE(c.events.size() == 500);
  CHECK(c.events[0].name ==
        "k\xc3\xa9"
        "0");
  CHECK(c.events[499].name ==
        "k\xc3\xa9"
        "499");
  CHECK(c.events[7].ph == 'X');
  CHECK(c.events[7].cat == "kernel");
  CHECK(c.events[7].tsNs == 1700000000000123456);
  CHECK(c.events[7].raw.front() == '{');
  CHECK(c.events[7].raw.back() == '}');
  CHECK(text.substr(c.events[7].offset, c.events[7].raw.size()) == c.events[7].raw);
  REQUIRE(c.top.size() == 2);
  CHECK(c.top[0].first == "distributedInfo");
  CHECK(c.top[0].second == R"({"rank": 3})");
  CHECK(c.top[1].second == R"("x")");

  SECTION("the same from gzip") {
    Collect g;
    auto rg = trainscope::importer::readTraceBytes(gzip(text), g, o);
    REQUIRE(rg);
    CHECK(rg->events == 500);
    CHECK(g.events[250].raw == c.events[250].raw);
  }
}

TEST_CASE("a bare list of events (Chrome's array format) is a trace too") {
  Collect c;
  auto r = trainscope::importer::readTraceBytes(R"([{"ph":"B","name":"a","ts":0},
    {"ph":"E","ts":10}] )",
                                                c);
  REQUIRE(r);
  CHECK(r->bareArray);
  CHECK(c.events.size() == 2);
  CHECK(c.events[1].ph == 'E');
  CHECK(c.events[1].tsNs == 10000);
}

TEST_CASE("times are exact nanoseconds; strings decode every escape") {
  auto ns = [](const char* text) {
    JsonValue v{JsonValue::Type::kNumber, text};
    int64_t out = -1;
    REQUIRE(trainscope::importer::microsToNs(v, &out));
    return out;
  };
  CHECK(ns("1700000000000123.456") == 1700000000000123456);
  CHECK(ns("1700000000000123") == 1700000000000123000);
  CHECK(ns("12.3") == 12300);
  CHECK(ns("12.3456") == 12346);  // rounded at the fourth decimal
  CHECK(ns("-5.5") == -5500);
  CHECK(ns("1.7e3") == 1700000);
  CHECK(ns("1.700000000123457e+15") == 1700000000123457000);  // how a double is often dumped
  CHECK(ns("170000000012345678.9e-2") == 1700000000123456789);
  CHECK(ns("0") == 0);
  std::string scratch;
  JsonValue s{JsonValue::Type::kString, R"("a\"b\\c\/d\n\u00e9\ud83d\ude00")"};
  CHECK(trainscope::importer::stringOf(s, &scratch) == "a\"b\\c/d\n\xc3\xa9\xf0\x9f\x98\x80");
  int64_t n = 0;
  CHECK(trainscope::importer::intOf({JsonValue::Type::kString, R"("42")"}, &n));
  CHECK(n == 42);
  CHECK(trainscope::importer::intOf({JsonValue::Type::kNumber, "7.9"}, &n));
  CHECK(n == 7);
  CHECK_FALSE(trainscope::importer::intOf({JsonValue::Type::kString, R"("x")"}, &n));
}

TEST_CASE("malformed and cut-short traces fail with where and what") {
  CHECK(readError("") == "the file is empty");
  CHECK(readError("42").find("byte 0: a trace is a JSON object") != std::string::npos);
  CHECK(readError(R"({"a": 1})") == "the trace has no traceEvents list");
  CHECK(readError(R"({"traceEvents": {}})").find("it must be a list") != std::string::npos);
  CHECK(
      readError(R"({"traceEvents": [1]})").find("event #0, byte 17: an event must be an object") !=
      std::string::npos);
  const std::string twoEvents = R"({"traceEvents": [{"ph": "X"}, {"ph": "X" "ts": 1}]})";
  CHECK(readError(twoEvents) == "event #1, byte 41: expected ',' or '}' in an event");
  CHECK(readError(R"({"traceEvents": [{"name": "a\qb"}]})").find("bad escape '\\q'") !=
        std::string::npos);
  CHECK(readError("{\"traceEvents\": [{\"name\": \"a\xff\"}]}").find("invalid UTF-8") !=
        std::string::npos);
  CHECK(readError(R"({"traceEvents": [{"ts": 1.}]})").find("no digits after '.'") !=
        std::string::npos);
  CHECK(readError(R"({"traceEvents": [{"ts": tru}]})").find("unexpected character") !=
        std::string::npos);
  CHECK(readError(R"({"traceEvents": []} x)").find("unexpected data after the end") !=
        std::string::npos);
  // Cut short: inside an event, between events, inside the top-level object.
  CHECK(readError(R"({"traceEvents": [{"ph": "X", "na)") ==
        "the file ends inside an event at byte 32 (truncated or not a whole trace)");
  CHECK(readError(R"({"traceEvents": [{"ph": "X"}, )") ==
        "the file ends inside traceEvents after event #0 at byte 30 (truncated or not a whole "
        "trace)");
  CHECK(readError(R"({"traceEvents": []  )").find("the file ends inside the top-level object") !=
        std::string::npos);
  // A cut gzip stream says so.
  const std::string gz = gzip(R"({"traceEvents": [{"ph": "X", "name": "a"}]})");
  CHECK(readError(gz.substr(0, gz.size() - 12)).find("truncated") != std::string::npos);
  // Bounds: nesting and one huge event.
  std::string deep =
      R"({"traceEvents": [{"args": )" + std::string(600, '[') + std::string(600, ']') + "}]}";
  CHECK(readError(deep).find("nested deeper than 512") != std::string::npos);
  ReadOptions small;
  small.maxEventBytes = 1 << 16;
  small.bufferBytes = 4096;
  const std::string big = R"({"traceEvents": [{"name": ")" + std::string(1 << 17, 'x') + R"("}]})";
  CHECK(readError(big, small).find("an event at byte 17 is larger than 65536 bytes") !=
        std::string::npos);
}

TEST_CASE("a handler's refusal names the event and its byte") {
  Collect c;
  c.failOn = "bad";
  auto r = trainscope::importer::readTraceBytes(
      R"({"traceEvents": [{"name": "ok"}, {"name": "bad"}]})", c);
  REQUIRE_FALSE(r);
  CHECK(r.message() == "event #1 at byte 33: refused by the handler");
}

TEST_CASE("forEachMember walks an object's members and reports a malformed one") {
  std::vector<std::string> keys;
  auto s = trainscope::importer::forEachMember(R"({"a": 1, "b\u0021": [2, {"c": 3}], "d": "x"})",
                                               [&](std::string_view k, const JsonValue&) {
                                                 keys.emplace_back(k);
                                                 return true;
                                               });
  REQUIRE(s);
  CHECK(keys == std::vector<std::string>{"a", "b!", "d"});
  auto bad = trainscope::importer::forEachMember(
      R"({"a" 1})", [](std::string_view, const JsonValue&) { return true; });
  CHECK_FALSE(bad);
}
