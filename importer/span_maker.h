// Interval events of a Chrome trace as spans, for both passes of the import (trace_scan.cpp
// finds the steps, trace_fold.cpp folds them): an 'X' event, or a 'B'..'E' pair on one lane, and
// the categories and lane keys both passes read the same way. Internal to importer/; one
// SpanMaker per pass, on the thread reading the trace.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "importer/trace_reader.h"

namespace trainscope::importer {

// The PyTorch profiler's (Kineto's) event categories.
bool isKinetoCategory(std::string_view cat);
// The categories of a trainscope capture's events.
bool isCaptureCategory(std::string_view cat);

// A lane's identity: the raw JSON of its pid and tid.
std::string laneKey(const EventView& ev);

// An interval event: an 'X', or a 'B'..'E' pair on one lane (strings then owned here).
struct Span {
  std::string_view name;
  std::string_view cat;
  std::string_view args;
  JsonValue pid;
  JsonValue tid;
  int64_t t0 = 0;  // file clock, ns
  int64_t t1 = 0;
};

class SpanMaker {
 public:
  explicit SpanMaker(int64_t baseNs) : baseNs_(baseNs) {}

  // True with *out filled when `ev` completes an interval.
  bool feed(const EventView& ev, Span* out);

 private:
  struct Open {
    std::string name, cat, args, pid, tid;
    JsonValue::Type pidType, tidType;
    int64_t t0;
  };
  int64_t baseNs_;
  std::unordered_map<std::string, std::vector<Open>> open_;
  Open closed_;
};

}  // namespace trainscope::importer
