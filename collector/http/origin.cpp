#include "collector/http/origin.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <optional>

namespace trainscope::http {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// host[:port] split; the host in lower case, a bracketed IPv6 literal keeps its brackets and
// a fully qualified name loses its final dot (browsers send both forms).
struct Authority {
  std::string host;
  std::string port;  // digits, "" when absent
};

std::optional<Authority> splitAuthority(std::string_view text) {
  Authority a;
  std::string_view rest;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    a.host = lower(text.substr(0, close + 1));
    rest = text.substr(close + 1);
  } else {
    const size_t colon = text.find(':');
    a.host = lower(text.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view() : text.substr(colon);
  }
  if (!rest.empty()) {
    if (rest.front() != ':' || rest.size() < 2 || rest.size() > 6) return std::nullopt;
    for (char c : rest.substr(1)) {
      if (c < '0' || c > '9') return std::nullopt;
    }
    const unsigned long port = std::stoul(std::string(rest.substr(1)));
    if (port == 0 || port > 65535) return std::nullopt;
    a.port = std::to_string(port);  // drops leading zeros
  }
  if (!a.host.empty() && a.host.back() == '.') a.host.pop_back();
  if (a.host.empty()) return std::nullopt;
  for (char c : a.host) {
    // Names, IPv4 and bracketed IPv6 literals; nothing that could smuggle a path or userinfo.
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
          c == '[' || c == ']' || c == ':')) {
      return std::nullopt;
    }
  }
  return a;
}

std::string defaultPort(std::string_view scheme) {
  if (scheme == "http" || scheme == "ws") return "80";
  if (scheme == "https" || scheme == "wss") return "443";
  return "";
}

bool isIpLiteral(const std::string& host) {
  unsigned char buf[16];
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    return inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), buf) == 1;
  }
  return inet_pton(AF_INET, host.c_str(), buf) == 1;
}

bool isLocalName(std::string_view host) {
  constexpr std::string_view kLocal = "localhost";
  constexpr std::string_view kLocalSuffix = ".localhost";  // browsers resolve these to loopback
  return host == kLocal || (host.size() > kLocalSuffix.size() &&
                            host.substr(host.size() - kLocalSuffix.size()) == kLocalSuffix);
}

}  // namespace

Result<std::string> parseOrigin(std::string_view text) {
  const std::string quoted = '\'' + std::string(text) + '\'';
  const size_t sep = text.find("://");
  if (sep == std::string_view::npos || sep == 0) {
    return Result<std::string>::error("origin " + quoted + " is not scheme://host[:port]");
  }
  const std::string scheme = lower(text.substr(0, sep));
  for (char c : scheme) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.')) {
      return Result<std::string>::error("origin " + quoted + " has an invalid scheme");
    }
  }
  std::string_view rest = text.substr(sep + 3);
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);  // as often copied from a URL
  auto a = splitAuthority(rest);
  if (!a) {
    return Result<std::string>::error("origin " + quoted +
                                      " is not scheme://host[:port] (no path, no user)");
  }
  std::string out = scheme + "://" + a->host;
  if (!a->port.empty() && a->port != defaultPort(scheme)) {
    out += ':';
    out += a->port;
  }
  return out;
}

namespace {

// The Host header checked (checkHost), and split when present.
Result<std::optional<Authority>> servedAuthority(const OriginPolicy& policy,
                                                 std::string_view host) {
  using R = Result<std::optional<Authority>>;
  if (host.empty()) return std::optional<Authority>();
  auto served = splitAuthority(host);
  if (!served) return R::error("invalid Host header '" + std::string(host.substr(0, 100)) + "'");
  const bool known = policy.anyHost || isIpLiteral(served->host) || isLocalName(served->host) ||
                     std::find(policy.allowedHosts.begin(), policy.allowedHosts.end(),
                               served->host) != policy.allowedHosts.end();
  if (!known) {
    return R::error("Host '" + served->host +
                    "' is not a name this collector answers to (a web page reaching it "
                    "through a rebound DNS name?); allow it with --http-allowed-host " +
                    served->host);
  }
  return std::optional<Authority>(std::move(served));
}

}  // namespace

Status checkHost(const OriginPolicy& policy, std::string_view host) {
  auto served = servedAuthority(policy, host);
  return served ? Status::ok() : served.status();
}

Status checkOrigin(const OriginPolicy& policy, std::string_view host, std::string_view origin) {
  auto checked = servedAuthority(policy, host);
  if (!checked) return checked.status();
  const std::optional<Authority>& served = *checked;
  if (origin.empty()) return Status::ok();  // not a browser, or a same-origin GET-like request
  if (origin == "null") {
    return Status::error(
        "requests from Origin 'null' (a sandboxed frame or a local file) may not change "
        "anything or open the live feed");
  }
  auto parsed = parseOrigin(origin);
  if (!parsed) return Status::error("invalid Origin header: " + parsed.message());
  if (std::find(policy.allowedOrigins.begin(), policy.allowedOrigins.end(), *parsed) !=
      policy.allowedOrigins.end()) {
    return Status::ok();
  }
  if (served) {
    // Same origin: the page was loaded from this collector under the name and port the
    // request is addressed to (a default port is implied by the page's scheme).
    const size_t sep = parsed->find("://");
    const std::string scheme = parsed->substr(0, sep);
    auto from = splitAuthority(std::string_view(*parsed).substr(sep + 3));
    const std::string servedPort = served->port.empty() ? defaultPort(scheme) : served->port;
    const std::string fromPort = from->port.empty() ? defaultPort(scheme) : from->port;
    if (from->host == served->host && fromPort == servedPort) return Status::ok();
  }
  return Status::error("cross-origin request refused: a page from '" + *parsed +
                       "' may not change anything here or open the live feed; allow it with "
                       "--http-allow-origin " +
                       *parsed);
}

bool isLoopbackAddress(std::string_view address) {
  std::string a = lower(address);
  if (a.size() > 2 && a.front() == '[' && a.back() == ']') a = a.substr(1, a.size() - 2);
  if (a == "localhost") return true;
  unsigned char buf[16];
  if (inet_pton(AF_INET, a.c_str(), buf) == 1) return buf[0] == 127;
  if (inet_pton(AF_INET6, a.c_str(), buf) == 1) {
    static const unsigned char kLoopback6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    return std::equal(buf, buf + 16, kLoopback6);
  }
  return false;
}

}  // namespace trainscope::http
