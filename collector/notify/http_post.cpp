#include "collector/notify/http_post.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "common/thread_annotations.h"

namespace trainscope::notify {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;  // NOLINT(readability-identifier-naming): Asio's own spelling

// A reply body past this ends the exchange as a failure: receivers answer in a few bytes.
constexpr uint64_t kMaxReplyBytes = 1u << 20;
// What HttpReply::body keeps of a reply, for a log line.
constexpr size_t kReplyHeadBytes = 512;

bool isTokenChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

}  // namespace

std::string HttpUrl::origin() const {
  const bool v6 = host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host + "]" : host) + ":" + port;
}

Result<HttpUrl> parseHttpUrl(const std::string& text) {
  using R = Result<HttpUrl>;
  auto refuse = [&](const std::string& why) {
    return R::error(StatusCode::kInvalidArgument, "'" + text + "': " + why);
  };
  const std::string lower = [&] {
    std::string s = text.substr(0, std::min<size_t>(text.size(), 8));
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
  }();
  if (lower.rfind("https://", 0) == 0) {
    return refuse(
        "https is not supported: the collector sends plain http:// only (put a TLS-terminating "
        "proxy on this host in front of the receiver)");
  }
  if (lower.rfind("http://", 0) != 0) return refuse("expected http://HOST[:PORT][/PATH]");
  if (std::any_of(text.begin(), text.end(),
                  [](unsigned char c) { return c <= 0x20 || c >= 0x7f; })) {
    return refuse("spaces and control characters are not allowed in a URL");
  }
  const std::string rest = text.substr(7);
  const size_t slash = rest.find_first_of("/?");
  const std::string authority = rest.substr(0, slash);
  HttpUrl out;
  if (slash != std::string::npos) {
    out.target = rest.substr(slash);
    if (out.target[0] == '?') out.target = "/" + out.target;
  }
  if (const size_t hash = out.target.find('#'); hash != std::string::npos) out.target.resize(hash);
  if (authority.find('@') != std::string::npos) {
    return refuse("user:password@ is not supported (send a secret with a header instead)");
  }
  std::string portText;
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos) return refuse("unclosed [ in the IPv6 host");
    out.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return refuse("expected :PORT after the IPv6 host");
      portText = authority.substr(close + 2);
      if (portText.empty()) return refuse("empty port");
    }
  } else {
    const size_t colon = authority.find(':');
    out.host = authority.substr(0, colon);
    if (colon != std::string::npos) {
      portText = authority.substr(colon + 1);
      if (portText.empty()) return refuse("empty port");
    }
  }
  if (out.host.empty()) return refuse("no host");
  if (!portText.empty()) {
    const bool digits =
        portText.size() <= 5 && std::all_of(portText.begin(), portText.end(),
                                            [](unsigned char c) { return std::isdigit(c) != 0; });
    if (!digits || std::stoul(portText) == 0 || std::stoul(portText) > 65535) {
      return refuse("port must be a number from 1 to 65535, got '" + portText + "'");
    }
    out.port = std::to_string(std::stoul(portText));
  }
  return out;
}

Result<std::pair<std::string, std::string>> parseHeader(const std::string& text) {
  using R = Result<std::pair<std::string, std::string>>;
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    return R::error(StatusCode::kInvalidArgument, "expected 'Name: value' (no ':' found)");
  }
  std::string name = trim(text.substr(0, colon));
  std::string value = trim(text.substr(colon + 1));
  if (name.empty() || !std::all_of(name.begin(), name.end(), isTokenChar)) {
    return R::error(StatusCode::kInvalidArgument,
                    "header name '" + name + "' is empty or has characters a header name cannot");
  }
  if (value.empty())
    return R::error(StatusCode::kInvalidArgument, "header " + name + " has no value");
  if (value.find_first_of("\r\n") != std::string::npos || value.find('\0') != std::string::npos) {
    return R::error(StatusCode::kInvalidArgument, "header " + name + "'s value has a line break");
  }
  return std::make_pair(std::move(name), std::move(value));
}

struct HttpPoster::Impl {
  asio::io_context ioc;
  Mutex mu;
  bool cancelled GUARDED_BY(mu) = false;
};

HttpPoster::HttpPoster() : impl_(std::make_unique<Impl>()) {}
HttpPoster::~HttpPoster() = default;

void HttpPoster::cancel() {
  MutexLock lock(&impl_->mu);
  impl_->cancelled = true;
  impl_->ioc.stop();
}

Result<HttpReply> HttpPoster::post(const HttpUrl& url, const HttpHeaders& headers,
                                   const std::string& body, std::chrono::milliseconds timeout) {
  asio::io_context& ioc = impl_->ioc;
  {
    MutexLock lock(&impl_->mu);
    if (impl_->cancelled) return Status::error("cancelled");
    // After cancel() from here on, ioc.stop() ends run() below (or makes it return at once).
    ioc.restart();
  }
  bhttp::request<bhttp::string_body> req{bhttp::verb::post, url.target, 11};
  const bool v6 = url.host.find(':') != std::string::npos;
  req.set(bhttp::field::host, (v6 ? "[" + url.host + "]" : url.host) + ":" + url.port);
  req.set(bhttp::field::user_agent, "trainscope-collector");
  req.set(bhttp::field::content_type, "application/json");
  req.set(bhttp::field::connection, "close");
  for (const auto& [name, value] : headers) req.set(name, value);
  req.body() = body;
  req.prepare_payload();

  tcp::resolver resolver(ioc);
  tcp::socket socket(ioc);
  asio::steady_timer deadline(ioc, timeout);
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(kMaxReplyBytes);
  beast::error_code failure;
  bool timedOut = false;
  bool done = false;
  auto finish = [&](beast::error_code ec) {
    if (done) return;
    done = true;
    failure = ec;
    deadline.cancel();
    beast::error_code ignored;
    socket.close(ignored);
  };
  deadline.async_wait([&](beast::error_code ec) {
    if (ec || done) return;
    timedOut = true;
    resolver.cancel();
    finish(asio::error::timed_out);
  });
  resolver.async_resolve(
      url.host, url.port, [&](beast::error_code ec, const tcp::resolver::results_type& results) {
        if (ec || done) return finish(ec ? ec : asio::error::operation_aborted);
        asio::async_connect(socket, results, [&](beast::error_code ec2, const tcp::endpoint&) {
          if (ec2 || done) return finish(ec2 ? ec2 : asio::error::operation_aborted);
          bhttp::async_write(socket, req, [&](beast::error_code ec3, size_t) {
            if (ec3 || done) return finish(ec3 ? ec3 : asio::error::operation_aborted);
            bhttp::async_read(socket, buffer, parser,
                              [&](beast::error_code ec4, size_t) { finish(ec4); });
          });
        });
      });
  ioc.run();
  if (!done) {
    // Stopped by cancel(): the handlers left behind are destroyed with the io_context, never
    // run (it is never restarted once cancelled).
    return Status::error("cancelled");
  }
  if (timedOut) return Status::error("no reply within " + std::to_string(timeout.count()) + " ms");
  if (failure) return Status::error(failure.message());
  HttpReply reply;
  reply.status = parser.get().result_int();
  reply.body = parser.get().body().substr(0, kReplyHeadBytes);
  return reply;
}

}  // namespace trainscope::notify
