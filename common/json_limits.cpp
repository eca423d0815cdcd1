#include "common/json_limits.h"

namespace trainscope {

int jsonNestingDepth(std::string_view text, int limit) {
  int depth = 0;
  int deepest = 0;
  bool inString = false;
  bool escaped = false;
  for (const char c : text) {
    if (inString) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        inString = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        inString = true;
        break;
      case '[':
      case '{':
        if (++depth > deepest) {
          deepest = depth;
          if (deepest > limit) return limit + 1;
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
  return deepest;
}

nlohmann::json parseJsonBounded(std::string_view text, int maxDepth, std::string* why) {
  if (jsonNestingDepth(text, maxDepth) > maxDepth) {
    if (why != nullptr) *why = "nested deeper than " + std::to_string(maxDepth) + " levels";
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
  auto doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() && why != nullptr) *why = "not valid JSON";
  return doc;
}

std::string shortForMessage(std::string_view text, size_t max) {
  if (text.size() <= max) return std::string(text);
  return std::string(text.substr(0, max)) + "...";
}

std::string describeJsonValue(const nlohmann::json& v) {
  using nlohmann::json;
  if (v.is_string()) return '"' + shortForMessage(v.get_ref<const std::string&>()) + '"';
  if (v.is_array() || v.is_object()) {
    return std::string(v.is_array() ? "an array of " : "an object of ") + std::to_string(v.size()) +
           (v.size() == 1 ? " entry" : " entries");
  }
  if (v.is_discarded()) return "nothing";
  // A scalar: its text is short and flat.
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace trainscope
