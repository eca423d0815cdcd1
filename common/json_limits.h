// Bounds on JSON that comes from outside (API bodies, capture and import files) before it is
// turned into an nlohmann::json or put into a message. nlohmann parses deep nesting without
// recursion, but dump() and comparison recurse once per level: a 100,000-deep array took the
// collector down with one request. Pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace trainscope {

// API request bodies are flat objects (a capture request, an import's file list): 32 levels is
// far more than any of them needs.
inline constexpr int kMaxRequestJsonDepth = 32;
// Trace files (a rank's capture or import file): events hold args of a few levels; the
// importer's reader refuses deeper files too, so what it stores the merge can read.
inline constexpr int kMaxTraceJsonDepth = 512;

// The deepest nesting of arrays and objects in `text` (0 for a scalar), counting brackets
// outside strings; the scan stops and returns limit + 1 as soon as the nesting passes `limit`.
// Linear, allocates nothing, and meaningful for any text: invalid JSON is left to the parser.
int jsonNestingDepth(std::string_view text, int limit);

// nlohmann::json::parse(text) when `text` nests at most `maxDepth` levels; otherwise, or when
// it is not JSON, a discarded value, with `*why` (when given) saying which.
nlohmann::json parseJsonBounded(std::string_view text, int maxDepth, std::string* why = nullptr);

// A value from outside, described for an error message without dumping it whole: a number,
// bool or null as its text, a string as its first 40 bytes quoted, an array or object by its
// type and size.
std::string describeJsonValue(const nlohmann::json& v);

// Text from outside (a key, a name) cut to `max` bytes for a message, "..." marking the cut.
std::string shortForMessage(std::string_view text, size_t max = 40);

}  // namespace trainscope
