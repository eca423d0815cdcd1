#include "tests/collector/http/test_client.h"

#include <poll.h>

#include <optional>
#include <stdexcept>
#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace trainscope::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

struct TestConnection::Impl {
  asio::io_context ioc;
  beast::tcp_stream stream{ioc};
  beast::flat_buffer buffer;
  // A response whose header awaitHeader() read; receive() reads on from it.
  std::optional<http::response_parser<http::string_body>> pending;
};

TestConnection::TestConnection(uint16_t port) : impl_(std::make_unique<Impl>()) {
  impl_->stream.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
}

TestConnection::~TestConnection() = default;

TestResponse TestConnection::request(
    const std::string& method, const std::string& target,
    const std::vector<std::pair<std::string, std::string>>& headers, std::string body) {
  send(method, target, headers, std::move(body));
  auto r = receive();
  if (!r) throw std::runtime_error("no response to " + method + " " + target + ": " + r.message());
  return std::move(r.value());
}

void TestConnection::send(const std::string& method, const std::string& target,
                          const std::vector<std::pair<std::string, std::string>>& headers,
                          std::string body) {
  http::request<http::string_body> req(http::string_to_verb(method), target, 11);
  req.method_string(method);
  req.set(http::field::host, "127.0.0.1");
  for (auto& [k, v] : headers) req.set(k, v);
  if (!body.empty()) {
    req.body() = std::move(body);
    req.prepare_payload();
  }
  http::write(impl_->stream, req);
}

Status TestConnection::awaitHeader(uint64_t bodyLimit) {
  impl_->pending.emplace();
  impl_->pending->body_limit(bodyLimit);
  beast::error_code ec;
  http::read_header(impl_->stream, impl_->buffer, *impl_->pending, ec);
  if (ec) {
    impl_->pending.reset();
    return Status::error(ec.message());
  }
  return Status::ok();
}

Result<TestResponse> TestConnection::receive(uint64_t bodyLimit) {
  if (!impl_->pending) {
    impl_->pending.emplace();
    impl_->pending->body_limit(bodyLimit);
  }
  auto& parser = *impl_->pending;
  beast::error_code ec;
  http::read(impl_->stream, impl_->buffer, parser, ec);
  if (ec) {
    impl_->pending.reset();
    return Status::error(ec.message());
  }
  auto& res = parser.get();
  TestResponse out;
  out.status = res.result_int();
  out.body = res.body();
  for (const auto& f : res) out.headers[std::string(f.name_string())] = std::string(f.value());
  out.keepAlive = res.keep_alive();
  impl_->pending.reset();
  return out;
}

void TestConnection::writeRaw(std::string_view bytes) {
  asio::write(impl_->stream.socket(), asio::buffer(bytes.data(), bytes.size()));
}

std::string TestConnection::readSome(size_t max) {
  std::string out(max, '\0');
  beast::error_code ec;
  const size_t n = impl_->stream.socket().read_some(asio::buffer(out), ec);
  out.resize(ec ? 0 : n);
  return out;
}

bool TestConnection::closedByServer(int timeoutMs) {
  pollfd p{impl_->stream.socket().native_handle(), POLLIN, 0};
  if (::poll(&p, 1, timeoutMs) <= 0) return false;
  char byte = 0;
  beast::error_code ec;
  impl_->stream.socket().read_some(asio::buffer(&byte, 1), ec);
  return ec == asio::error::eof || ec == asio::error::connection_reset;
}

}  // namespace trainscope::testing
