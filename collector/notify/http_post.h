// The notify stage's HTTP client: http:// URLs checked at start-up, and one blocking POST per
// call on a fresh connection (Boost.Beast), bounded by a timeout and cancellable from another
// thread. A poster belongs to one sender thread; cancel() may be called from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace trainscope::notify {

// Where a receiver is: http://HOST[:PORT][/PATH[?QUERY]].
struct HttpUrl {
  std::string host;          // a name, an IPv4 address or an IPv6 address without brackets
  std::string port = "80";   // digits, 1-65535
  std::string target = "/";  // path and query as sent in the request line
  // "http://HOST:PORT", without the path: what logs and /metrics show, as a webhook's path may
  // hold its secret (Slack's do).
  std::string origin() const;
};

// Parses an http:// URL. https:// is refused with a message saying so (this collector speaks
// plain HTTP only: put a TLS proxy beside it); so is anything else that is not
// http://HOST[:PORT][/PATH], a user:password@ part included (use a header for secrets).
Result<HttpUrl> parseHttpUrl(const std::string& text);

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// Parses "Name: value" (a header name of token characters, the value trimmed, neither empty,
// no line breaks). Errors name what is wrong but never echo the value (it may be a secret).
Result<std::pair<std::string, std::string>> parseHeader(const std::string& text);

struct HttpReply {
  unsigned status = 0;
  std::string body;  // its first 512 bytes, for the log
};

class HttpPoster {
 public:
  HttpPoster();
  ~HttpPoster();
  HttpPoster(const HttpPoster&) = delete;
  HttpPoster& operator=(const HttpPoster&) = delete;

  // POSTs `body` (Content-Type: application/json) with `headers` to `url` on a new
  // connection and returns the reply's status: any status is a reply; an error is a transport
  // failure (refused, reset, no reply within `timeout`, cancelled). Not concurrently with
  // itself.
  Result<HttpReply> post(const HttpUrl& url, const HttpHeaders& headers, const std::string& body,
                         std::chrono::milliseconds timeout);
  // Ends the request in flight, and makes every later post() fail at once. Any thread.
  void cancel();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainscope::notify
