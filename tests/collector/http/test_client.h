// A small blocking HTTP client for tests, on Beast: one request per call, or several on one
// kept-alive connection. Test thread only.
#pragma once

#include <poll.h>

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace trainscope::testing {

struct TestResponse {
  unsigned status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // field name as sent -> value
  bool keepAlive = false;
};

class TestConnection {
 public:
  explicit TestConnection(uint16_t port) : stream_(ioc_) {
    namespace asio = boost::asio;
    stream_.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }

  TestResponse request(const std::string& method, const std::string& target,
                       std::vector<std::pair<std::string, std::string>> headers = {},
                       std::string body = "") {
    namespace http = boost::beast::http;
    http::request<http::string_body> req(http::string_to_verb(method), target, 11);
    req.method_string(method);
    req.set(http::field::host, "127.0.0.1");
    for (auto& [k, v] : headers) req.set(k, v);
    if (!body.empty()) {
      req.body() = std::move(body);
      req.prepare_payload();
    }
    http::write(stream_, req);
    http::response_parser<http::string_body> parser;
    parser.body_limit(64u << 20);
    http::read(stream_, buffer_, parser);
    auto& res = parser.get();
    TestResponse out;
    out.status = res.result_int();
    out.body = res.body();
    for (const auto& f : res) out.headers[std::string(f.name_string())] = std::string(f.value());
    out.keepAlive = res.keep_alive();
    return out;
  }

  // True if the server closed the connection (a read returns EOF within the timeout).
  bool closedByServer(int timeoutMs = 3000) {
    pollfd p{stream_.socket().native_handle(), POLLIN, 0};
    if (::poll(&p, 1, timeoutMs) <= 0) return false;
    char byte = 0;
    boost::system::error_code ec;
    stream_.socket().read_some(boost::asio::buffer(&byte, 1), ec);
    return ec == boost::asio::error::eof || ec == boost::asio::error::connection_reset;
  }

  boost::beast::tcp_stream& stream() { return stream_; }

 private:
  boost::asio::io_context ioc_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
};

inline TestResponse httpGet(uint16_t port, const std::string& target) {
  TestConnection c(port);
  return c.request("GET", target);
}

}  // namespace trainscope::testing
