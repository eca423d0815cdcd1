#include "collector/storage/clickhouse_http.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "collector/storage/store.h"
#include "common/percent_encode.h"
#include "common/str_cat.h"

namespace trainscope::storage::clickhouse {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;  // NOLINT(readability-identifier-naming): Asio's own spelling

// A reply larger than this is refused: the store's queries are bounded by their LIMITs.
constexpr uint64_t kMaxReplyBytes = 1ull << 30;

// The first line of ClickHouse's error text ("Code: 60, e.displayText() = DB::Exception: ...").
std::string errorText(std::string body) {
  if (auto nl = body.find('\n'); nl != std::string::npos) body.resize(nl);
  if (body.size() > 500) body.resize(500);
  return body;
}

}  // namespace

Result<Endpoint> parseUrl(const std::string& url) {
  using R = Result<Endpoint>;
  if (!isClickHouseUrl(url)) {
    return R::error(StatusCode::kInvalidArgument,
                    '\'' + url + "' is not a clickhouse://HOST:PORT/DB URL");
  }
  std::string rest = url.substr(kClickHouseScheme.size());
  size_t slash = rest.find('/');
  if (slash == std::string::npos) {
    return R::error(StatusCode::kInvalidArgument,
                    '\'' + url + "' names no database (clickhouse://HOST:PORT/DB)");
  }
  Endpoint out;
  std::string hostPort = rest.substr(0, slash);
  out.database = rest.substr(slash + 1);
  if (!hostPort.empty() && hostPort.front() == '[') {
    size_t close = hostPort.find(']');
    if (close == std::string::npos || close + 1 >= hostPort.size() || hostPort[close + 1] != ':') {
      return R::error(StatusCode::kInvalidArgument,
                      '\'' + url + "': write an IPv6 host as [ADDR]:PORT");
    }
    out.host = hostPort.substr(1, close - 1);
    out.port = hostPort.substr(close + 2);
  } else {
    size_t colon = hostPort.rfind(':');
    if (colon == std::string::npos) {
      return R::error(StatusCode::kInvalidArgument,
                      '\'' + url +
                          "' names no port (clickhouse://HOST:PORT/DB; 8123 is "
                          "ClickHouse's usual HTTP port)");
    }
    out.host = hostPort.substr(0, colon);
    out.port = hostPort.substr(colon + 1);
  }
  if (out.host.empty()) return R::error(StatusCode::kInvalidArgument, '\'' + url + "' has no host");
  const bool digits =
      !out.port.empty() && out.port.size() <= 5 &&
      std::all_of(out.port.begin(), out.port.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || std::stoul(out.port) == 0 || std::stoul(out.port) > 65535) {
    return R::error(
        StatusCode::kInvalidArgument,
        '\'' + url + "': port must be a number from 1 to 65535, got '" + out.port + '\'');
  }
  const bool nameOk =
      !out.database.empty() && std::isdigit(static_cast<unsigned char>(out.database[0])) == 0 &&
      std::all_of(out.database.begin(), out.database.end(),
                  [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
  if (!nameOk) {
    return R::error(
        StatusCode::kInvalidArgument,
        '\'' + url + "': the database name must be letters, digits and '_' (not first)");
  }
  return out;
}

Result<StoreUrl> parseStoreUrl(const std::string& url) {
  using R = Result<StoreUrl>;
  StoreUrl out;
  std::string base = url;
  if (const size_t q = url.find('?'); q != std::string::npos) {
    base = url.substr(0, q);
    const std::string query = url.substr(q + 1);
    const std::string key = "cluster=";
    if (query.rfind(key, 0) != 0 || query.size() == key.size()) {
      return R::error(StatusCode::kInvalidArgument,
                      '\'' + url + "': the only parameter is cluster=NAME, got '" + query + '\'');
    }
    out.cluster = query.substr(key.size());
    const bool nameOk = std::all_of(out.cluster.begin(), out.cluster.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
    if (!nameOk) {
      return R::error(StatusCode::kInvalidArgument,
                      '\'' + url + "': the cluster name must be letters, digits, '_' and '-'");
    }
  }
  const std::string_view scheme = kClickHouseScheme;
  const bool schemeOk = isClickHouseUrl(base);
  const size_t slash = base.find('/', schemeOk ? scheme.size() : 0);
  if (!schemeOk || slash == std::string::npos) {
    auto one = parseUrl(base);  // its message says what is wrong
    if (!one) return R::error(one.code(), one.message());
  }
  const std::string hosts = base.substr(scheme.size(), slash - scheme.size());
  const std::string database = base.substr(slash);
  for (size_t at = 0; at <= hosts.size();) {
    size_t comma = hosts.find(',', at);
    if (comma == std::string::npos) comma = hosts.size();
    auto one = parseUrl(strCat(scheme, std::string_view(hosts).substr(at, comma - at), database));
    if (!one) return R::error(one.code(), one.message());
    out.servers.push_back(std::move(*one));
    at = comma + 1;
  }
  if (out.cluster.empty() && out.servers.size() > 1) {
    return R::error(StatusCode::kInvalidArgument,
                    '\'' + url + "' lists several servers: name their cluster (?cluster=NAME)");
  }
  return out;
}

std::string quote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out.push_back('\'');
  for (char c : text) {
    if (c == '\\' || c == '\'') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

struct HttpClient::Impl {
  Endpoint endpoint;
  std::chrono::milliseconds timeout;
  asio::io_context ioc;
  beast::tcp_stream stream{ioc};
  bool connected = false;

  void close() {
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream.socket().close(ignored);
    connected = false;
  }

  // One request and its reply on the kept-alive connection; false with `error` set when the
  // transport failed (then the connection is closed).
  bool exchange(bhttp::request<bhttp::string_body>& req,
                bhttp::response_parser<bhttp::string_body>& parser, std::string* error) {
    beast::error_code failure;
    ioc.restart();
    stream.expires_after(timeout);
    auto onRead = [&](beast::error_code ec, size_t) { failure = ec; };
    auto onWritten = [&](beast::error_code ec, size_t) {
      if (ec) {
        failure = ec;
        return;
      }
      buffer.clear();
      bhttp::async_read(stream, buffer, parser, onRead);
    };
    if (!connected) {
      tcp::resolver resolver(ioc);
      auto results = resolver.resolve(endpoint.host, endpoint.port, failure);
      if (failure) {
        *error = "resolving " + endpoint.host + ": " + failure.message();
        return false;
      }
      stream.async_connect(results, [&](beast::error_code ec, const tcp::endpoint&) {
        if (ec) {
          failure = ec;
          return;
        }
        connected = true;
        bhttp::async_write(stream, req, onWritten);
      });
    } else {
      bhttp::async_write(stream, req, onWritten);
    }
    ioc.run();
    if (failure) {
      *error = failure == beast::error::timeout
                   ? "no reply within " + std::to_string(timeout.count()) + " ms"
                   : failure.message();
      close();
      return false;
    }
    if (!parser.get().keep_alive()) close();
    return true;
  }

  beast::flat_buffer buffer;
};

HttpClient::HttpClient(Endpoint endpoint, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  impl_->endpoint = std::move(endpoint);
  impl_->timeout = timeout;
}

HttpClient::~HttpClient() {
  impl_->close();
}

Result<std::string> HttpClient::query(const std::string& sql, std::optional<std::string_view> data,
                                      bool withDatabase) {
  using R = Result<std::string>;
  std::string target = "/?";
  if (withDatabase) target += "database=" + percentEncode(impl_->endpoint.database) + "&";
  if (data) target += "query=" + percentEncode(sql) + "&";
  if (!impl_->endpoint.settings.empty()) target += impl_->endpoint.settings + "&";
  target.pop_back();
  bhttp::request<bhttp::string_body> req(bhttp::verb::post, target, 11);
  req.set(bhttp::field::host, impl_->endpoint.host + ':' + impl_->endpoint.port);
  req.set(bhttp::field::user_agent, "trainscope-collector");
  req.keep_alive(true);
  req.body() = data ? std::string(*data) : sql;
  req.prepare_payload();
  const std::string where = "clickhouse " + impl_->endpoint.host + ':' + impl_->endpoint.port;
  for (int attempt = 0;; ++attempt) {
    const bool reused = impl_->connected;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(kMaxReplyBytes);
    std::string error;
    if (!impl_->exchange(req, parser, &error)) {
      // A kept-alive connection the server closed fails on first use: retry once on a fresh
      // one (see the header for inserts).
      if (reused && attempt == 0) continue;
      return R::error(StatusCode::kUnavailable, strCat(where, ": ", error));
    }
    auto& res = parser.get();
    if (res.result() != bhttp::status::ok) {
      return R::error(where + " refused the query (HTTP " + std::to_string(res.result_int()) +
                      "): " + errorText(res.body()));
    }
    return std::move(res.body());
  }
}

}  // namespace trainscope::storage::clickhouse
