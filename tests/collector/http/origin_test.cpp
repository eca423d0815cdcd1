// The Origin and Host checks (collector/http/origin.h) as pure functions: origin parsing and
// normalisation, same-origin matching with default ports, listed origins and hosts, DNS
// rebinding, and which bind addresses count as loopback.
#include "collector/http/origin.h"

#include <catch2/catch.hpp>

using trainscope::http::checkOrigin;
using trainscope::http::isLoopbackAddress;
using trainscope::http::OriginPolicy;
using trainscope::http::parseOrigin;

TEST_CASE("origin: parsed to the form browsers send", "[http][origin]") {
  CHECK(*parseOrigin("http://127.0.0.1:7600") == "http://127.0.0.1:7600");
  CHECK(*parseOrigin("HTTPS://Dash.Example.COM:443/") == "https://dash.example.com");
  CHECK(*parseOrigin("http://example.com:80") == "http://example.com");
  CHECK(*parseOrigin("http://[::1]:7600") == "http://[::1]:7600");
  CHECK(*parseOrigin("http://example.com.:07600") == "http://example.com:7600");
  for (const char* bad :
       {"example.com", "://example.com", "http://", "http://a/b", "http://user@example.com",
        "http://example.com:0", "http://example.com:65536", "http://example.com:x", "http://[::1",
        "ht tp://example.com", "null"}) {
    INFO(bad);
    auto r = parseOrigin(bad);
    REQUIRE_FALSE(r.isOk());
    CHECK(r.message().find(bad) != std::string::npos);
  }
}

TEST_CASE("origin: same origin, listed origins and clients without Origin pass", "[http][origin]") {
  OriginPolicy p;
  CHECK(checkOrigin(p, "127.0.0.1:7600", ""));
  CHECK(checkOrigin(p, "", ""));
  CHECK(checkOrigin(p, "127.0.0.1:7600", "http://127.0.0.1:7600"));
  CHECK(checkOrigin(p, "localhost:7600", "http://LOCALHOST:7600"));
  CHECK(checkOrigin(p, "[::1]:7600", "http://[::1]:7600"));
  CHECK(checkOrigin(p, "127.0.0.1", "http://127.0.0.1:80"));  // default port implied
  CHECK(checkOrigin(p, "10.1.2.3:443", "https://10.1.2.3"));  // behind a TLS proxy
  CHECK(checkOrigin(p, "dash.localhost:7600", "http://dash.localhost:7600"));
  CHECK_FALSE(checkOrigin(p, "127.0.0.1:7600", "http://127.0.0.1:7601"));
  // One host and port is one server whatever the page's scheme (a TLS proxy passes its Host).
  CHECK(checkOrigin(p, "127.0.0.1:7600", "https://127.0.0.1:7600"));
  CHECK_FALSE(checkOrigin(p, "127.0.0.1:7600", "https://127.0.0.1"));  // 443, not 7600
  CHECK_FALSE(checkOrigin(p, "127.0.0.1:7600", "http://evil.example"));
  CHECK_FALSE(checkOrigin(p, "127.0.0.1:7600", "null"));
  CHECK_FALSE(checkOrigin(p, "127.0.0.1:7600", "not an origin"));
  CHECK_FALSE(checkOrigin(p, "", "http://127.0.0.1:7600"));  // nothing to be the same as
  p.allowedOrigins = {*parseOrigin("https://dash.example.com/")};
  CHECK(checkOrigin(p, "127.0.0.1:7600", "https://dash.example.com"));
  CHECK(checkOrigin(p, "127.0.0.1:7600", "https://dash.example.com:443"));
  CHECK_FALSE(checkOrigin(p, "127.0.0.1:7600", "http://dash.example.com"));
  auto refused = checkOrigin(p, "127.0.0.1:7600", "http://evil.example:8000");
  CHECK(refused.message().find("--http-allow-origin http://evil.example:8000") !=
        std::string::npos);
}

TEST_CASE("origin: a rebound name is refused unless listed or any host is allowed",
          "[http][origin]") {
  OriginPolicy p;
  auto rebound = checkOrigin(p, "evil.example:7600", "http://evil.example:7600");
  REQUIRE_FALSE(rebound);
  CHECK(rebound.message().find("--http-allowed-host evil.example") != std::string::npos);
  CHECK_FALSE(checkOrigin(p, "evil.example:7600", ""));  // the Host alone decides
  CHECK_FALSE(checkOrigin(p, "evil.example:7600", "http://127.0.0.1:7600"));
  CHECK_FALSE(checkOrigin(p, "localhost.evil.example", ""));
  CHECK_FALSE(checkOrigin(p, "127.0.0.1:7600/x", ""));
  CHECK_FALSE(checkOrigin(p, "127.0.0.1:99999", ""));
  p.allowedHosts = {"proxy.example"};
  CHECK(checkOrigin(p, "Proxy.Example.:8080", "http://proxy.example:8080"));
  CHECK_FALSE(checkOrigin(p, "evil.example:7600", ""));
  p.anyHost = true;
  CHECK(checkOrigin(p, "gpu-box-3:7600", "http://gpu-box-3:7600"));
  CHECK_FALSE(checkOrigin(p, "gpu-box-3:7600", "http://evil.example"));  // Origin still checked
}

TEST_CASE("origin: reads check the Host alone", "[http][origin]") {
  OriginPolicy p;
  CHECK(checkHost(p, "127.0.0.1:7600"));
  CHECK(checkHost(p, "localhost:7600"));
  CHECK(checkHost(p, "[::1]:7600"));
  CHECK(checkHost(p, ""));  // HTTP/1.0: no name to rebind
  auto rebound = checkHost(p, "evil.example:7600");
  REQUIRE_FALSE(rebound);
  CHECK(rebound.message().find("--http-allowed-host evil.example") != std::string::npos);
  p.allowedHosts = {"proxy.example"};
  CHECK(checkHost(p, "proxy.example"));
  p.anyHost = true;
  CHECK(checkHost(p, "gpu-box-3:7600"));
}

TEST_CASE("origin: loopback bind addresses", "[http][origin]") {
  for (const char* a : {"127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LocalHost"}) {
    INFO(a);
    CHECK(isLoopbackAddress(a));
  }
  for (const char* a : {"0.0.0.0", "::", "10.0.0.1", "::ffff:10.0.0.1", "example.com", ""}) {
    INFO(a);
    CHECK_FALSE(isLoopbackAddress(a));
  }
}
