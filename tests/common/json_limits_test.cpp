// Bounds on JSON from outside (common/json_limits.h): nesting is counted outside strings and
// the scan stops at the bound; a bounded parse refuses deep text before parsing it; a value in
// an error message is described in a few bytes whatever its size.
#include "common/json_limits.h"

#include <string>

#include <catch2/catch.hpp>

using namespace trainscope;
using nlohmann::json;

TEST_CASE("nesting is counted outside strings, escapes included, and the scan stops at the bound") {
  CHECK(jsonNestingDepth("1", 8) == 0);
  CHECK(jsonNestingDepth(R"({"a":[1,{"b":[]}]})", 8) == 4);
  CHECK(jsonNestingDepth(R"(["[[[[", "\"[[[[", {}])", 8) == 2);
  CHECK(jsonNestingDepth(R"("\\" [[[)", 8) == 3);  // an escaped backslash ends no string
  CHECK(jsonNestingDepth("[[][][]]", 8) == 2);
  CHECK(jsonNestingDepth(std::string(100000, '['), 32) == 33);
}

TEST_CASE("a bounded parse refuses deep text, says why, and parses the rest") {
  std::string why;
  CHECK(parseJsonBounded(std::string(33, '[') + std::string(33, ']'), 32, &why).is_discarded());
  CHECK(why == "nested deeper than 32 levels");
  CHECK(parseJsonBounded("{nope", 32, &why).is_discarded());
  CHECK(why == "not valid JSON");
  auto ok = parseJsonBounded(std::string(32, '[') + std::string(32, ']'), 32, &why);
  CHECK(ok.is_array());
}

TEST_CASE("values are described in a few bytes, never dumped whole") {
  CHECK(describeJsonValue(json(7)) == "7");
  CHECK(describeJsonValue(json(nullptr)) == "null");
  CHECK(describeJsonValue(json("short")) == "\"short\"");
  CHECK(describeJsonValue(json(std::string(1000, 'x'))) == "\"" + std::string(40, 'x') + "...\"");
  CHECK(describeJsonValue(json::array({1, 2, 3})) == "an array of 3 entries");
  CHECK(describeJsonValue(json::object({{"a", 1}})) == "an object of 1 entry");
  CHECK(shortForMessage(std::string(100, 'k'), 10) == "kkkkkkkkkk...");
}
