#include <catch2/catch.hpp>

#include <cstdlib>
#include <random>
#include <sstream>

#include "collector/detect/offline.h"

using namespace trainscope::detect;

namespace {
trainscope::Result<std::vector<double>> parse(const std::string& text) {
  std::istringstream in(text);
  return parseSeries(in);
}
}  // namespace

TEST_CASE("offline: parseSeries reads one value per line and CSV with or without a header") {
  auto plain = parse("1.5\n2\n\n# comment\n3e2\n");
  REQUIRE(plain.isOk());
  CHECK(*plain == std::vector<double>{1.5, 2.0, 300.0});
  auto csv = parse("step,value\n0,10\n1,11.5\n2,12\n");
  REQUIRE(csv.isOk());
  CHECK(*csv == std::vector<double>{10, 11.5, 12});
  auto noHeader = parse("0, 10\r\n1, 20\r\n");
  REQUIRE(noHeader.isOk());
  CHECK(*noHeader == std::vector<double>{10, 20});
}

TEST_CASE("offline: parseSeries rejects empty input, non-numbers and NaN/inf naming the line") {
  auto empty = parse("");
  REQUIRE_FALSE(empty.isOk());
  CHECK(empty.message().find("no values") != std::string::npos);
  CHECK_FALSE(parse("step,value\n").isOk());
  auto bad = parse("step,value\n0,1\n1,abc\n");
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.message().find("line 3") != std::string::npos);
  CHECK(bad.message().find("abc") != std::string::npos);
  auto nan = parse("1\n2\nnan\n");
  REQUIRE_FALSE(nan.isOk());
  CHECK(nan.message().find("line 3") != std::string::npos);
  auto inf = parse("1\n-inf\n");
  REQUIRE_FALSE(inf.isOk());
  CHECK(inf.message().find("line 2") != std::string::npos);
  auto trailing = parse("1\n2x\n");
  REQUIRE_FALSE(trailing.isOk());
  CHECK(trailing.message().find("line 2") != std::string::npos);
}

TEST_CASE("offline: findChangePoints places a rise and the return with their levels") {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> n(0.0, 0.05);
  std::vector<double> series;
  for (int i = 0; i < 2000; ++i)
    series.push_back((i >= 500 && i < 1200 ? 150.0 : 100.0) * (1 + n(rng)));
  auto cps = findChangePoints(series);
  REQUIRE(cps.size() == 2);
  CHECK(std::llabs(static_cast<long long>(cps[0].index) - 500) <= 3);
  CHECK(cps[0].before == Approx(100).margin(2));
  CHECK(cps[0].after == Approx(150).margin(3));
  CHECK(cps[0].ratio() == Approx(1.5).margin(0.05));
  CHECK(std::llabs(static_cast<long long>(cps[1].index) - 1200) <= 5);
  CHECK(cps[1].after == Approx(100).margin(2));
}

TEST_CASE("offline: findChangePoints finds nothing in noise with periodic spikes") {
  std::mt19937_64 rng(4);
  std::normal_distribution<double> n(0.0, 0.05);
  std::vector<double> series;
  for (int i = 0; i < 20000; ++i) series.push_back((i % 250 == 0 ? 400.0 : 100.0) * (1 + n(rng)));
  CHECK(findChangePoints(series).empty());
}

TEST_CASE("offline: findChangePoints honours the warm-up option") {
  std::vector<double> series(300, 100.0);
  for (int i = 0; i < 10; ++i) series[static_cast<size_t>(i)] = 1000.0;  // compile steps
  for (size_t i = 200; i < series.size(); ++i) series[i] = 130.0;
  auto cps = findChangePoints(series);
  REQUIRE(cps.size() == 1);
  CHECK(cps[0].index == 200);
}
