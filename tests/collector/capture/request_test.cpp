// Capture request validation (docs/CAPTURE.md): every field's default, the rank spec forms and
// every 400 the body itself can earn, each naming its field.
#include <string>

#include <catch2/catch.hpp>

#include "collector/capture/request.h"

using namespace trainscope::capture;

TEST_CASE("an empty body or {} takes every default") {
  for (const char* body : {"", "  ", "{}"}) {
    auto r = parseCaptureRequest(body);
    REQUIRE(r);
    CHECK(r->ranks.all);
    CHECK(r->steps == 5);
    CHECK_FALSE(r->startStep.has_value());
    CHECK(r->history == 4);
    CHECK_FALSE(r->maxBytes.has_value());
    CHECK(r->reason == "on request");
    CHECK(r->kind == "trace");
  }
}

TEST_CASE("every field is read") {
  auto r = parseCaptureRequest(
      R"({"ranks":"0,3,5-7","steps":3,"start_step":120,"history":2,"max_bytes":1000,)"
      R"("reason":"slow","kind":"stacks"})");
  REQUIRE(r);
  CHECK_FALSE(r->ranks.all);
  CHECK(r->ranks.ranks == std::vector<uint32_t>{0, 3, 5, 6, 7});
  CHECK(r->steps == 3);
  CHECK(*r->startStep == 120);
  CHECK(r->history == 2);
  CHECK(*r->maxBytes == 1000);
  CHECK(r->reason == "slow");
  CHECK(r->kind == "stacks");
}

TEST_CASE("ranks as a list, as \"all\", duplicates folded") {
  auto list = parseCaptureRequest(R"({"ranks":[5,0,5]})");
  REQUIRE(list);
  CHECK(list->ranks.ranks == std::vector<uint32_t>{0, 5});
  auto all = parseCaptureRequest(R"({"ranks":"all"})");
  REQUIRE(all);
  CHECK(all->ranks.all);
  auto spec = parseRankSpec("7, 1-2,1");
  REQUIRE(spec);
  CHECK(spec->ranks == std::vector<uint32_t>{1, 2, 7});
}

TEST_CASE("bad bodies are refused with a message naming the field") {
  struct Case {
    const char* body;
    const char* message;
  };
  const Case cases[] = {
      {"[1,2]", "body: expected a JSON object"},
      {"nonsense", "body: not valid JSON"},
      {R"("x")", "body: expected a JSON object"},
      {R"({"steps":0})", "steps: must be at least 1"},
      {R"({"steps":1001})", "steps: must be at most 1000"},
      {R"({"steps":-1})", "steps: expected a non-negative integer"},
      {R"({"steps":"3"})", "steps: expected a non-negative integer"},
      {R"({"history":1001})", "history: must be at most 1000"},
      {R"({"start_step":-5})", "start_step: must be >= 0"},
      {R"({"start_step":1.5})", "start_step: expected an integer"},
      // Past the protocol's step limit (10^12), start + steps and deadlines could overflow (fuzz:
      // api found INT64_MAX); 2^64 - 1 must not wrap to a negative step first.
      {R"({"start_step":1000000000001})", "start_step: must be at most 1000000000000"},
      {R"({"start_step":9223372036854775807})", "start_step: must be at most 1000000000000"},
      {R"({"start_step":18446744073709551615})", "start_step: must be at most 1000000000000"},
      {R"({"max_bytes":0})", "max_bytes: must be at least 1"},
      {R"({"kind":"perf"})", "kind: must be \"trace\" or \"stacks\""},
      {R"({"reason":7})", "reason: expected a string"},
      {R"({"ranks":"1-x"})", "ranks: 'x' in '1-x' is not a rank number"},
      {R"({"ranks":"5-2"})", "ranks: range '5-2' ends before it starts"},
      {R"({"ranks":"1,,2"})", "ranks: '' in '1,,2' is not a rank number"},
      {R"({"ranks":""})", "ranks: empty"},
      {R"({"ranks":[1,-2]})", "ranks: list entries must be non-negative integers"},
      {R"({"ranks":[]})", "ranks: the list is empty"},
      {R"({"ranks":3})", "ranks: expected \"all\""},
      {R"({"ranks":"0-4000000000"})", "ranks: 4000000000 is not below the world size limit 65536"},
      {R"({"ranks":"0-65536"})", "ranks: 65536 is not below the world size limit 65536"},
      {R"({"ranks":[1,65536]})", "ranks: 65536 is not below the world size limit 65536"},
      {R"({"ranks":[4294967296]})", "ranks: 4294967296 is not below the world size limit"},
      {R"({"job":"x"})", "unknown field 'job'"},
  };
  for (const auto& c : cases) {
    INFO(c.body);
    auto r = parseCaptureRequest(c.body);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.message(), Catch::Matchers::StartsWith(c.message));
  }
}

TEST_CASE("resolving ranks against the world size") {
  auto all = resolveRanks(RankSpec{}, 4, {});
  REQUIRE(all);
  CHECK(*all == std::vector<uint32_t>{0, 1, 2, 3});
  RankSpec some{false, {1, 3}};
  CHECK(*resolveRanks(some, 4, {}) == std::vector<uint32_t>{1, 3});
  RankSpec outside{false, {1, 4}};
  auto bad = resolveRanks(outside, 4, {});
  REQUIRE_FALSE(bad);
  CHECK(bad.message() == "ranks: rank 4 is outside 0..3 (world size 4)");
  // Unknown world size: "all" is the ranks seen, a named rank must be one of them.
  CHECK(*resolveRanks(RankSpec{}, 0, {2, 0}) == std::vector<uint32_t>{0, 2});
  CHECK_FALSE(resolveRanks(RankSpec{false, {1}}, 0, {2, 0}));
  CHECK_FALSE(resolveRanks(RankSpec{}, 0, {}));
}

TEST_CASE("the largest spec and world size are resolved; beyond the limit is refused") {
  auto spec = parseRankSpec("0-65535");
  REQUIRE(spec);
  CHECK(spec->ranks.size() == 65536u);
  std::vector<uint32_t> known(65536);
  for (uint32_t r = 0; r < 65536; ++r) known[r] = 65535 - r;  // unsorted, as a store may give
  auto resolved = resolveRanks(*spec, 0, known);  // unknown world size: each rank looked up
  REQUIRE(resolved);
  CHECK(resolved->size() == 65536u);
  auto all = resolveRanks(RankSpec{}, 65536, {});
  REQUIRE(all);
  CHECK(all->back() == 65535u);
  // A job stored before the limit existed (a hello claiming a million ranks).
  auto huge = resolveRanks(RankSpec{}, 1'000'000, {});
  REQUIRE_FALSE(huge);
  CHECK(huge.message() == "ranks: the job's world size 1000000 exceeds the limit of 65536");
}

TEST_CASE("capture ids are cap-<unix ms>-<4 hex>") {
  const std::string id = newCaptureId(1'700'000'000'123'456'789);
  REQUIRE(id.size() == std::string("cap-1700000000123-abcd").size());
  CHECK(id.rfind("cap-1700000000123-", 0) == 0);
  CHECK(id.substr(18).find_first_not_of("0123456789abcdef") == std::string::npos);
}

TEST_CASE("deep JSON is refused before it is read, and values are described, never dumped") {
  // nlohmann's dump() recurses once per level: one 100,000-deep body took the collector down
  // through an error message that dumped it.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  auto whole = parseCaptureRequest(deep);
  REQUIRE_FALSE(whole);
  CHECK_THAT(whole.message(), Catch::Matchers::StartsWith("body: nested deeper than 32 levels"));
  for (const char* field : {"kind", "steps", "start_step", "ranks"}) {
    INFO(field);
    auto r = parseCaptureRequest(std::string("{\"") + field + "\":" + deep + "}");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.message(), Catch::Matchers::Contains("nested deeper than 32 levels"));
  }
  // Within the bound a bad value is named by its type and size, not printed whole.
  const std::string big(100000, 'x');
  auto r = parseCaptureRequest("{\"kind\":[\"" + big + "\", 2]}");
  REQUIRE_FALSE(r);
  CHECK(r.message() == "kind: must be \"trace\" or \"stacks\", got an array of 2 entries");
  r = parseCaptureRequest("{\"kind\":\"" + big + "\"}");
  REQUIRE_FALSE(r);
  CHECK(r.message().size() < 200);
  r = parseCaptureRequest("{\"" + big + "\":1}");
  REQUIRE_FALSE(r);
  CHECK(r.message().size() < 200);
  r = parseCaptureRequest("{\"ranks\":\"1-" + big + "\"}");
  REQUIRE_FALSE(r);
  CHECK(r.message().size() < 200);
}
