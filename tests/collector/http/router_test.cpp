// The route table's machinery (collector/http/router.h) on a small table of its own, the real
// table through Api::handle (every route reaches its handler), and docs/API.md's route table
// being the table's listing.
#include "collector/http/router.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "collector/http/api.h"
#include "common/clock.h"
#include "tests/collector/http/fake_store.h"

using nlohmann::json;
using trainscope::ManualClock;
using trainscope::http::Api;
using trainscope::http::ApiResponse;
using trainscope::http::HttpOptions;
using trainscope::http::parseRequestTarget;
using trainscope::http::Route;
using trainscope::http::Router;
using trainscope::http::RouteRequest;
using trainscope::testing::FakeStore;

namespace {

// Each handler answers with what it saw, so a test reads the match back from the body.
ApiResponse echo(const char* name, const RouteRequest& r) {
  json params = json::object();
  for (const auto& [key, value] : r.params) params[std::string(key)] = value;
  ApiResponse out;
  out.body = json{{"route", name}, {"params", params}, {"rest", r.rest}}.dump();
  return out;
}

const Router& testRouter() {
  using Q = std::vector<std::string_view>;
  static const Router kRouter(
      {
          {"GET", "/api/v1/jobs/{job}", Q{},
           [](const Api&, const RouteRequest& r) { return echo("job", r); }, "one job"},
          {"POST", "/api/v1/jobs/{job}", Q{"force"},
           [](const Api&, const RouteRequest& r) { return echo("post job", r); }, "change it"},
          {"DELETE", "/api/v1/jobs/{job}", std::nullopt,
           [](const Api&, const RouteRequest& r) { return echo("delete job", r); }, "drop it"},
          {"GET", "/api/v1/jobs/{job}/ranks/{rank}", Q{"from", "to"},
           [](const Api&, const RouteRequest& r) { return echo("rank", r); }, "one rank"},
          {"GET", "/{file...}", std::nullopt,
           [](const Api&, const RouteRequest& r) { return echo("file", r); }, "files"},
      },
      "api");
  return kRouter;
}

struct Fixture {
  FakeStore store;
  ManualClock clock{1000};
  Api api{HttpOptions{}, store, clock};

  ApiResponse send(std::string_view method, std::string_view target) {
    auto parsed = parseRequestTarget(target);
    REQUIRE(parsed);
    RouteRequest r;
    r.method = method;
    r.target = &*parsed;
    return testRouter().dispatch(api, r);
  }
  json body(std::string_view method, std::string_view target) {
    ApiResponse r = send(method, target);
    INFO(r.body);
    REQUIRE(r.status == 200);
    return json::parse(r.body);
  }
  std::string error(std::string_view method, std::string_view target, unsigned status) {
    ApiResponse r = send(method, target);
    INFO(r.body);
    CHECK(r.status == status);
    return json::parse(r.body)["error"].get<std::string>();
  }
};

}  // namespace

TEST_CASE("named segments are matched and decoded, literals must be equal", "[router]") {
  Fixture f;
  auto j = f.body("GET", "/api/v1/jobs/a%2Fb%20c/ranks/7?from=1");
  CHECK(j["route"] == "rank");
  CHECK(j["params"] == json{{"job", "a/b c"}, {"rank", "7"}});
  CHECK(f.body("GET", "/api/v1/jobs/train")["params"]["job"] == "train");
  // Empty segments are dropped by the target parser, so a doubled slash is the same path.
  CHECK(f.body("GET", "/api//v1/jobs/train/")["route"] == "job");
  CHECK(f.error("GET", "/api/v1/jobs/train/nope", 404) ==
        "no route for GET /api/v1/jobs/train/nope");
  CHECK(f.error("GET", "/api/v1/jobs", 404) == "no route for GET /api/v1/jobs");
}

TEST_CASE("a pattern matched with the wrong method is 405 naming every allowed method",
          "[router]") {
  Fixture f;
  ApiResponse r = f.send("PUT", "/api/v1/jobs/train");
  CHECK(r.status == 405);
  REQUIRE(r.headers.size() == 1);
  CHECK(r.headers[0] == std::pair<std::string, std::string>("Allow", "GET, POST, DELETE"));
  CHECK(json::parse(r.body)["error"] ==
        "method PUT not allowed for /api/v1/jobs/train (allowed: GET, POST, DELETE)");
  CHECK(f.body("DELETE", "/api/v1/jobs/train")["route"] == "delete job");
  CHECK(f.error("POST", "/api/v1/jobs/x/ranks/1", 405).find("(allowed: GET)") != std::string::npos);
}

TEST_CASE("query parameters a route does not declare are 400 naming them", "[router]") {
  Fixture f;
  CHECK(f.body("GET", "/api/v1/jobs/x/ranks/1?from=1&to=2")["route"] == "rank");
  CHECK(f.error("GET", "/api/v1/jobs/x/ranks/1?form=1", 400).find("'form'") != std::string::npos);
  CHECK(f.error("GET", "/api/v1/jobs/x/ranks/1?from=1&from=2", 400).find("more than once") !=
        std::string::npos);
  CHECK(f.error("GET", "/api/v1/jobs/x?a=1", 400).find("accepted: none") != std::string::npos);
  CHECK(f.body("POST", "/api/v1/jobs/x?force=1")["route"] == "post job");
  // Not declared (nullopt): not checked.
  CHECK(f.body("DELETE", "/api/v1/jobs/x?anything=1")["route"] == "delete job");
}

TEST_CASE("a rest segment takes the remaining path, but never under the reserved prefix",
          "[router]") {
  Fixture f;
  CHECK(f.body("GET", "/")["rest"] == json::array());
  CHECK(f.body("GET", "/js/app.js")["rest"] == json{"js", "app.js"});
  CHECK(f.error("POST", "/js/app.js", 405) ==
        "method POST not allowed for /js/app.js (allowed: GET)");
  CHECK(f.error("GET", "/api/v2/x", 404) == "no route for GET /api/v2/x");
  CHECK(f.error("POST", "/api", 404) == "no route for POST /api");
}

TEST_CASE("the listing is a Markdown table with query parameters", "[router]") {
  std::string listing = testRouter().listing();
  CHECK(listing.rfind("| method | path | serves |\n| --- | --- | --- |\n", 0) == 0);
  CHECK(listing.find("| GET | `/api/v1/jobs/{job}/ranks/{rank}?from=&to=` | one rank |\n") !=
        std::string::npos);
  CHECK(listing.find("| DELETE | `/api/v1/jobs/{job}` | drop it |\n") != std::string::npos);
}

TEST_CASE("every route of the collector's table reaches its handler", "[router]") {
  FakeStore store;
  ManualClock clock{1000};
  HttpOptions options;
  options.webRoot = "/nonexistent-web-root";  // files: 404 "no file", not "no route"
  Api api(options, store, clock);
  for (const Route& route : Api::router().routes()) {
    // The pattern with each {name} filled in, no query: the handler may refuse it (unknown
    // job, a required parameter, 503), but the router must not (404 "no route", 405).
    std::string path;
    std::string_view p = route.pattern;
    while (!p.empty()) {
      const size_t open = p.find('{');
      if (open == std::string_view::npos) {
        path += p;
        break;
      }
      path += p.substr(0, open);
      path += "x1";
      p = p.substr(p.find('}', open) + 1);
    }
    INFO(route.method << ' ' << path);
    ApiResponse r = api.handle(route.method, path);
    CHECK(r.status != 405);
    if (r.status == 404) CHECK(r.body.find("no route") == std::string::npos);
    CHECK(r.status != 500);
  }
}

TEST_CASE("docs/API.md's route table is the route table's listing", "[router]") {
  const char* root = std::getenv("TRAINSCOPE_SOURCE_ROOT");
  REQUIRE(root != nullptr);
  std::ifstream in(std::string(root) + "/docs/API.md");
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const std::string begin = "<!-- routes: begin -->\n";
  const std::string end = "<!-- routes: end -->";
  const size_t from = doc.find(begin);
  REQUIRE(from != std::string::npos);
  const size_t to = doc.find(end, from);
  REQUIRE(to != std::string::npos);
  INFO("regenerate it with tools/dev/api_routes.sh");
  CHECK(doc.substr(from + begin.size(), to - from - begin.size()) ==
        trainscope::http::routeListing());
}
