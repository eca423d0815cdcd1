// The CLI's HTTP client: the --server URL, one request/reply over Boost.Beast (token, gzip,
// time-out), and the JSON fetch/post helpers that report failures the CLI's way (cli.h).
#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "tools/cli/cli.h"

namespace trainscope::cli {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;  // NOLINT(readability-identifier-naming): Asio's own spelling

// Why the bytes a server sent are no HTTP reply, or nothing when they may still start one
// (nothing yet, or a prefix of "HTTP/"). The collector's ZeroMQ ingest port greets every peer
// first with ZMTP's signature: 0xFF, eight bytes, 0x7F (RFC 23); pointing --server at it is
// the likely mistake behind such bytes, so that case names the port to use instead.
std::optional<std::string> notHttp(std::string_view bytes, const ServerUrl& server) {
  const std::string_view http = "HTTP/";
  const size_t n = std::min(bytes.size(), http.size());
  if (bytes.substr(0, n) == http.substr(0, n)) return std::nullopt;
  const std::string where = server.host + ":" + server.port;
  const bool zmtp = static_cast<unsigned char>(bytes[0]) == 0xFF &&
                    (bytes.size() < 10 || static_cast<unsigned char>(bytes[9]) == 0x7F);
  if (zmtp) {
    return where +
           " is not the collector's HTTP port (it looks like the ZeroMQ ingest port; the "
           "collector serves HTTP on its --http address, default 127.0.0.1:7600)";
  }
  return where + " answered with something that is not HTTP";
}

}  // namespace

using nlohmann::json;

Result<ServerUrl> parseServerUrl(const std::string& url) {
  std::string rest = url;
  const std::string scheme = "http://";
  if (rest.rfind(scheme, 0) == 0) {
    rest = rest.substr(scheme.size());
  } else if (rest.find("://") != std::string::npos) {
    return Result<ServerUrl>::error("only http:// URLs are supported");
  }
  ServerUrl out;
  size_t slash = rest.find('/');
  std::string hostPort = rest.substr(0, slash);
  if (slash != std::string::npos) out.basePath = rest.substr(slash);
  while (!out.basePath.empty() && out.basePath.back() == '/') out.basePath.pop_back();
  if (hostPort.empty()) return Result<ServerUrl>::error("no host");
  if (hostPort.front() == '[') {  // [v6]:port
    size_t close = hostPort.find(']');
    if (close == std::string::npos) return Result<ServerUrl>::error("unclosed '[' in host");
    out.host = hostPort.substr(1, close - 1);
    if (close + 1 < hostPort.size()) {
      if (hostPort[close + 1] != ':') return Result<ServerUrl>::error("junk after ']'");
      out.port = hostPort.substr(close + 2);
    }
  } else {
    size_t colon = hostPort.rfind(':');
    out.host = hostPort.substr(0, colon);
    if (colon != std::string::npos) out.port = hostPort.substr(colon + 1);
  }
  if (out.host.empty()) return Result<ServerUrl>::error("no host");
  bool digits =
      !out.port.empty() && out.port.size() <= 5 &&
      std::all_of(out.port.begin(), out.port.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || std::stoul(out.port) == 0 || std::stoul(out.port) > 65535) {
    return Result<ServerUrl>::error("port must be a number from 1 to 65535, got '" + out.port +
                                    "'");
  }
  return out;
}

Result<HttpReply> httpRequest(const ServerUrl& server, const HttpRequest& request,
                              std::chrono::milliseconds timeout) {
  asio::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::tcp_stream stream(ioc);
  asio::steady_timer deadline(ioc, timeout);
  beast::flat_buffer buffer;
  const bhttp::verb verb = bhttp::string_to_verb(request.method);
  if (verb == bhttp::verb::unknown) {
    return Result<HttpReply>::error("unknown HTTP method '" + request.method + "'");
  }
  const bool post = verb == bhttp::verb::post || verb == bhttp::verb::put;
  bhttp::request<bhttp::string_body> req(verb, request.target, 11);
  req.set(bhttp::field::host, server.host + ":" + server.port);
  req.set(bhttp::field::user_agent, "trainscope-cli");
  req.set(bhttp::field::accept, "application/json");
  if (request.acceptGzip) req.set(bhttp::field::accept_encoding, "gzip");
  if (!request.bearerToken.empty()) {
    req.set(bhttp::field::authorization, "Bearer " + request.bearerToken);
  }
  if (post || !request.body.empty()) {
    req.set(bhttp::field::content_type, request.contentType);
    req.body() = request.body;
  }
  req.keep_alive(false);
  req.prepare_payload();
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(1024ull << 20);  // a steps query with limit=100000 is tens of MB; a merged
                                     // trace of many ranks can be hundreds

  beast::error_code failure;
  bool timedOut = false;
  bool done = false;
  auto fail = [&](beast::error_code ec) {
    if (!failure && !timedOut) failure = ec;
    deadline.cancel();
  };

  deadline.async_wait([&](beast::error_code ec) {
    if (ec || done) return;
    timedOut = true;
    resolver.cancel();
    stream.cancel();
    beast::error_code ignored;
    stream.socket().close(ignored);
  });
  resolver.async_resolve(
      server.host, server.port,
      [&](beast::error_code ec, const tcp::resolver::results_type& results) {
        if (ec) return fail(ec);
        stream.async_connect(results, [&](beast::error_code ec2, const tcp::endpoint&) {
          if (ec2) return fail(ec2);
          bhttp::async_write(stream, req, [&](beast::error_code ec3, size_t) {
            if (ec3) return fail(ec3);
            bhttp::async_read(stream, buffer, parser, [&](beast::error_code ec4, size_t) {
              if (ec4) return fail(ec4);
              done = true;
              deadline.cancel();
            });
          });
        });
      });
  ioc.run();

  if (!done) {
    // A time-out or a failed read may still have brought bytes that tell what answered.
    const auto data = buffer.data();
    const std::string_view got(static_cast<const char*>(data.data()), data.size());
    if (auto why = notHttp(got, server))
      return Result<HttpReply>::error(StatusCode::kMalformed, *why);
  }
  if (timedOut) {
    return Result<HttpReply>::error("timed out after " + std::to_string(timeout.count()) + " ms");
  }
  if (failure || !done) {
    return Result<HttpReply>::error(failure ? failure.message() : "no response");
  }
  HttpReply reply;
  auto& res = parser.get();
  reply.status = res.result_int();
  reply.contentEncoding = std::string(res[bhttp::field::content_encoding]);
  reply.location = std::string(res[bhttp::field::location]);
  reply.body = std::move(res.body());
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  return reply;
}

Result<HttpReply> httpGet(const ServerUrl& server, const std::string& target,
                          std::chrono::milliseconds timeout) {
  HttpRequest req;
  req.target = target;
  return httpRequest(server, req, timeout);
}

namespace {

// Sends `request` (its target relative to the server's base path) and reports a failure to get
// any answer on ctx.err. An HTTP error status is returned as a reply, not an error.
Result<HttpReply> send(Context& ctx, HttpRequest request, std::chrono::milliseconds timeout,
                       int* exitCode) {
  auto url = parseServerUrl(ctx.global.server);
  if (!url) {
    ctx.err << "trainscope: invalid --server URL '" << ctx.global.server << "': " << url.message()
            << "\n";
    *exitCode = kExitUsage;  // a bad argument (the flag or TRAINSCOPE_SERVER), not a collector
    return url.status();
  }
  request.target = url->basePath + request.target;
  request.bearerToken = ctx.global.token;
  auto reply = httpRequest(*url, request, timeout);
  if (!reply && reply.code() == StatusCode::kMalformed) {  // something answered, not HTTP
    ctx.err << "trainscope: --server " << ctx.global.server << ": " << reply.message() << "\n";
    *exitCode = kExitUnreachable;
    return reply.status();
  }
  if (!reply) {
    ctx.err << "trainscope: cannot reach collector at " << ctx.global.server << ": "
            << reply.message() << "\n";
    *exitCode = kExitUnreachable;
    return reply.status();
  }
  *exitCode = kExitOk;
  return reply;
}

// Prints the API's error message of a non-2xx reply (its {"error": ...}, else the status).
void reportHttpError(Context& ctx, const HttpReply& reply, const json& body) {
  if (!body.is_discarded() && body.is_object() && body.contains("error") &&
      body["error"].is_string()) {
    ctx.err << "trainscope: " << body["error"].get<std::string>() << "\n";
  } else {
    ctx.err << "trainscope: HTTP " << reply.status << " from collector at " << ctx.global.server
            << "\n";
  }
}

}  // namespace

Result<json> requestJson(Context& ctx, HttpRequest request, std::chrono::milliseconds timeout,
                         int* exitCode) {
  auto reply = send(ctx, std::move(request), timeout, exitCode);
  if (!reply) return reply.status();
  json body = json::parse(reply->body, nullptr, false);
  if (reply->status < 200 || reply->status >= 300) {
    reportHttpError(ctx, *reply, body);
    *exitCode = kExitApiError;
    return Status::error("HTTP " + std::to_string(reply->status));
  }
  if (body.is_discarded()) {
    ctx.err << "trainscope: collector at " << ctx.global.server
            << " sent a reply that is not JSON\n";
    *exitCode = kExitApiError;
    return Status::error("not JSON");
  }
  *exitCode = kExitOk;
  return body;
}

Result<json> fetchJson(Context& ctx, const std::string& target, int* exitCode) {
  HttpRequest req;
  req.target = target;
  return requestJson(ctx, std::move(req), std::chrono::milliseconds(ctx.global.timeoutMs),
                     exitCode);
}

Result<json> postJson(Context& ctx, const std::string& target, const std::string& body,
                      int* exitCode) {
  HttpRequest req;
  req.method = "POST";
  req.target = target;
  req.body = body;
  return requestJson(ctx, std::move(req), std::chrono::milliseconds(ctx.global.timeoutMs),
                     exitCode);
}

Result<HttpReply> fetchRaw(Context& ctx, const std::string& target, bool acceptGzip,
                           std::chrono::milliseconds timeout, int* exitCode) {
  HttpRequest req;
  req.target = target;
  req.acceptGzip = acceptGzip;
  auto reply = send(ctx, std::move(req), timeout, exitCode);
  if (!reply) return reply;
  if (reply->status < 200 || reply->status >= 300) {
    reportHttpError(ctx, *reply, json::parse(reply->body, nullptr, false));
    *exitCode = kExitApiError;
    return Result<HttpReply>::error("HTTP " + std::to_string(reply->status));
  }
  return reply;
}

}  // namespace trainscope::cli
