// The machinery of the HTTP route table (routes.cpp): a route is a method, a path pattern whose
// "{name}" segments each match one decoded path segment ("{name...}" as the last one matches
// the rest), the query parameters it takes, a handler and a line saying what it serves.
// Router::dispatch picks a request's route: 404 when no pattern matches, 405 naming the allowed
// methods when a pattern matches but not the method, 400 naming an unknown or repeated query
// parameter. A Router is built once and then only read: safe from any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collector/http/request_target.h"

namespace trainscope::http {

class Api;
struct ApiResponse;

// One request as a handler sees it: the parsed target, the values of the pattern's named
// segments, the body, and what the transport learned from the headers.
struct RouteRequest {
  std::string_view method;
  const RequestTarget* target = nullptr;
  std::vector<std::pair<std::string_view, std::string>> params;  // {name} -> decoded segment
  std::vector<std::string> rest;  // what a "{name...}" segment matched, decoded
  std::string_view body;
  bool acceptsGzip = false;       // Accept-Encoding allows gzip
  bool webSocketUpgrade = false;  // the request asks to become a WebSocket

  // The value of the pattern's {name}; the route's own pattern guarantees it is there.
  const std::string& param(std::string_view name) const;
  const std::string& path() const { return target->rawPath; }
  const std::vector<std::pair<std::string, std::string>>& query() const { return target->query; }
};

using RouteHandler = ApiResponse (*)(const Api& api, const RouteRequest& request);

struct Route {
  std::string_view method;   // "GET", "POST", "PUT", "DELETE"
  std::string_view pattern;  // "/api/v1/jobs/{job}/steps"
  // The query parameters the route takes; any other is refused with 400 before the handler
  // runs. nullopt: not checked (the handler or the transport ignores the query).
  std::optional<std::vector<std::string_view>> query;
  RouteHandler handler = nullptr;
  std::string_view summary;  // one line for the route listing (docs/API.md, --list-routes)
};

class Router {
 public:
  // `reserved`: a first path segment under which only exact patterns match ("api": an unknown
  // API path is a 404, never a dashboard file served by a "{file...}" route).
  Router(std::vector<Route> routes, std::string_view reserved);

  // Routes one request to its handler. `request.target` must be set; params and rest are
  // filled here.
  ApiResponse dispatch(const Api& api, RouteRequest request) const;

  // The routes in table order.
  const std::vector<Route>& routes() const { return routes_; }

  // A Markdown table of the routes: method, path with its query parameters, what it serves.
  std::string listing() const;

 private:
  struct Segment {
    std::string_view text;  // the literal, or the parameter's name
    bool param = false;
    bool rest = false;  // "{name...}": matches every remaining segment (last only)
  };
  // Whether `route`'s pattern matches `segments`; fills the request's params and rest if so.
  bool matches(size_t route, const std::vector<std::string>& segments, RouteRequest* out) const;

  std::vector<Route> routes_;
  std::vector<std::vector<Segment>> patterns_;  // parsed routes_[i].pattern
  std::string reserved_;
};

}  // namespace trainscope::http
