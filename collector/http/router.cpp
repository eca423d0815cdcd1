#include "collector/http/router.h"

#include <cassert>

#include "collector/http/api.h"

namespace trainscope::http {

const std::string& RouteRequest::param(std::string_view name) const {
  for (const auto& [key, value] : params) {
    if (key == name) return value;
  }
  // A handler asked for a name its own pattern does not have: our bug, caught by the tests of
  // every route.
  assert(false && "route parameter not in the pattern");
  static const std::string kNone;
  return kNone;
}

Router::Router(std::vector<Route> routes, std::string_view reserved)
    : routes_(std::move(routes)), reserved_(reserved) {
  for (const auto& route : routes_) {
    std::vector<Segment> parsed;
    std::string_view p = route.pattern;
    while (!p.empty()) {
      p.remove_prefix(1);  // the '/'
      const size_t end = p.find('/');
      std::string_view text = p.substr(0, end);
      p = end == std::string_view::npos ? std::string_view() : p.substr(end);
      Segment s;
      if (text.size() >= 2 && text.front() == '{' && text.back() == '}') {
        text = text.substr(1, text.size() - 2);
        s.param = true;
        if (text.size() > 3 && text.substr(text.size() - 3) == "...") {
          text.remove_suffix(3);
          s.rest = true;
        }
      }
      s.text = text;
      if (!s.text.empty()) parsed.push_back(s);
    }
    patterns_.push_back(std::move(parsed));
  }
}

bool Router::matches(size_t route, const std::vector<std::string>& segments,
                     RouteRequest* out) const {
  const auto& pattern = patterns_[route];
  out->params.clear();
  out->rest.clear();
  for (size_t i = 0; i < pattern.size(); ++i) {
    const Segment& s = pattern[i];
    if (s.rest) {
      out->rest.assign(segments.begin() + static_cast<std::ptrdiff_t>(i), segments.end());
      return true;
    }
    if (i >= segments.size()) return false;
    if (s.param) {
      out->params.emplace_back(s.text, segments[i]);
    } else if (s.text != segments[i]) {
      return false;
    }
  }
  return pattern.size() == segments.size();
}

ApiResponse Router::dispatch(const Api& api, RouteRequest request) const {
  const auto& segments = request.target->segments;
  const bool reserved = !segments.empty() && segments[0] == reserved_;
  // Exact patterns first; "{name...}" patterns only where no exact one matched, and never
  // under the reserved prefix.
  for (const bool restPass : {false, true}) {
    if (restPass && reserved) break;
    std::string allowed;
    for (size_t i = 0; i < routes_.size(); ++i) {
      const bool hasRest = !patterns_[i].empty() && patterns_[i].back().rest;
      if (hasRest != restPass || !matches(i, segments, &request)) continue;
      const Route& route = routes_[i];
      if (route.method != request.method) {
        if (allowed.find(route.method) == std::string::npos) {
          if (!allowed.empty()) allowed += ", ";
          allowed += route.method;
        }
        continue;
      }
      if (route.query) {
        if (Status s = QueryParams(request.query()).checkAllowed(*route.query); !s) {
          return errorResponse(400, s.message());
        }
      }
      return route.handler(api, request);
    }
    if (!allowed.empty()) return notAllowed(request.method, request.path(), allowed.c_str());
  }
  return errorResponse(404, "no route for " + std::string(request.method) + ' ' + request.path());
}

std::string Router::listing() const {
  std::string out = "| method | path | serves |\n| --- | --- | --- |\n";
  for (const auto& route : routes_) {
    std::string path(route.pattern);
    if (route.query && !route.query->empty()) {
      char sep = '?';
      for (auto name : *route.query) {
        path += sep;
        path += name;
        path += '=';
        sep = '&';
      }
    }
    out += "| " + std::string(route.method) + " | `" + path + "` | " + std::string(route.summary) +
           " |\n";
  }
  return out;
}

}  // namespace trainscope::http
