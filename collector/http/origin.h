// Which browsers may read, change something or open the live feed: the Host and Origin checks that
// stop another web page the user visits from starting captures (cross-site request forgery)
// or reading and reaching the collector through a name rebound to 127.0.0.1 (DNS rebinding). Pure
// functions over header values; any thread.
//
// Why both: a browser sends Origin with every cross-origin POST and WebSocket handshake, so a
// foreign Origin is refused. A rebound name makes the attacker's page same-origin (Origin and
// Host both say evil.example:7600), so the Host must also be a name the collector answers to:
// localhost, an IP literal (no DNS involved) or one the operator listed. Clients that are not
// browsers (curl, scripts, Prometheus) send no Origin and pass.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace trainscope::http {

struct OriginPolicy {
  // Origins besides the collector's own that may change things and open the live feed,
  // normalised by parseOrigin ("https://dash.example.com:8443"), e.g. a dashboard served
  // elsewhere. Empty: same-origin only.
  std::vector<std::string> allowedOrigins;
  // Host names (lower case, no port) accepted besides localhost and IP literals: the names of
  // a reverse proxy or of this machine the dashboard is opened under.
  std::vector<std::string> allowedHosts;
  // Accept any Host name: set when the server listens on a non-loopback address and no
  // allowedHosts are given (its names are unknown); the Origin check still applies.
  bool anyHost = false;
};

// "scheme://host[:port]" in the form browsers send (lower case, no default port, no path):
// the normalised origin, or why `text` is not one. For flags and the policy.
Result<std::string> parseOrigin(std::string_view text);

// Checks the Host header of any request, reads too: a page on a rebound name is same-origin
// with it, and would otherwise read the whole API. "" (HTTP/1.0) passes. The error, for a 403,
// names the flag that would allow the name.
Status checkHost(const OriginPolicy& policy, std::string_view host);

// Checks a request that changes something or opens the live feed: checkHost, then the Origin.
// `host` is its Host header and `origin` its Origin header ("" when absent). The error, for a 403,
// names the header and the flag that would allow it.
Status checkOrigin(const OriginPolicy& policy, std::string_view host, std::string_view origin);

// True for addresses only this machine can reach (127.0.0.0/8, ::1, "localhost"): a server
// bound there knows every name a browser may use for it.
bool isLoopbackAddress(std::string_view address);

}  // namespace trainscope::http
