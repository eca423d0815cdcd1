#include "collector/http/server.h"

#include <atomic>
#include <chrono>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "collector/http/api.h"
#include "common/clock.h"
#include "common/log.h"

namespace trainscope::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;

// Headers are small (GET targets with a few parameters); this bounds a slow-loris header.
constexpr uint32_t kMaxHeaderBytes = 16 * 1024;
constexpr const char* kServerName = "trainscope";
// How long stop() lets responses already being written finish before closing them anyway
// (a client that stopped reading must not hold up the collector's shutdown).
constexpr auto kStopGrace = std::chrono::seconds(2);

std::string endpointText(const std::string& address, uint16_t port) {
  bool v6 = address.find(':') != std::string::npos;
  return (v6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
}

class Session;

// What sessions share: options, the API and the registry of live sessions (for stop()).
// Only touched on the I/O thread, except options and api, which are read-only.
struct ServerCore {
  ServerCore(HttpOptions opts, storage::Store& store)
      : options(std::move(opts)), api(options, store, clock) {}
  HttpOptions options;
  SystemClock clock;
  Api api;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  // Set by stop(): responses being written may finish, nothing new is read.
  bool stopping = false;
  // Bounds how long stop() waits for those responses; cancelled when the last one is done.
  asio::steady_timer* stopGrace = nullptr;
};

}  // namespace

struct HttpServer::Impl {
  Impl(HttpOptions opts, storage::Store& store) : core(std::move(opts), store) {}

  void doAccept();
  void closeAll();

  // Declared before ioc: sessions unregister themselves from their destructors, which may run
  // while ioc is destroyed.
  ServerCore core;
  HttpOptions& options = core.options;
  asio::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  asio::steady_timer acceptRetry{ioc};
  asio::steady_timer stopGrace{ioc};
  std::thread thread;
  std::atomic<uint16_t> port{0};
  bool running = false;  // owner thread only
  RateLimitedLog acceptLog{std::chrono::seconds(10)};
};

namespace {

// One client connection: read a request, answer it, repeat while keep-alive holds.
// Lives on the I/O thread only.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, ServerCore& server) : stream_(std::move(socket)), server_(server) {}
  ~Session() {
    server_.sessions.erase(this);
    if (server_.stopping && server_.sessions.empty() && server_.stopGrace != nullptr) {
      server_.stopGrace->cancel();
    }
  }

  // True while a response is being written; stop() lets it finish.
  bool busy() const { return busy_; }

  void start() {
    server_.sessions.emplace(this, weak_from_this());
    doRead();
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

 private:
  void doRead() {
    parser_.emplace();
    parser_->body_limit(server_.options.maxBodyBytes);
    parser_->header_limit(kMaxHeaderBytes);
    stream_.expires_after(std::chrono::milliseconds(server_.options.readTimeoutMs));
    bhttp::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->onRead(ec); });
  }

  void onRead(beast::error_code ec) {
    if (ec == bhttp::error::end_of_stream) {
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      return;
    }
    if (ec == bhttp::error::body_limit) {
      sendError(413, "request body larger than " + std::to_string(server_.options.maxBodyBytes) +
                         " bytes");
      return;
    }
    if (ec == bhttp::error::header_limit) {
      sendError(431, "request header larger than " + std::to_string(kMaxHeaderBytes) + " bytes");
      return;
    }
    if (ec == beast::error::timeout || ec == asio::error::operation_aborted ||
        ec == asio::error::connection_reset || ec == asio::error::eof) {
      return;  // dropping the last reference closes the socket
    }
    if (ec) {
      sendError(400, "malformed HTTP request: " + ec.message());
      return;
    }
    const auto& req = parser_->get();
    auto method = req.method_string();
    auto target = req.target();
    ApiResponse r = server_.api.handle(std::string_view(method.data(), method.size()),
                                       std::string_view(target.data(), target.size()));
    send(std::move(r), req.version(), req.keep_alive());
  }

  // An error found before a request could be parsed: answer and close, since the rest of
  // the stream cannot be trusted to start at a request boundary.
  void sendError(unsigned status, const std::string& message) {
    send(errorResponse(status, message), 11, false);
  }

  void send(ApiResponse r, unsigned version, bool keepAlive) {
    res_ = {};
    res_.version(version);
    res_.result(r.status);
    res_.set(bhttp::field::server, kServerName);
    res_.set(bhttp::field::content_type, r.contentType);
    if (r.contentType == "application/json") res_.set(bhttp::field::cache_control, "no-store");
    for (const auto& [name, value] : r.headers) res_.set(name, value);
    res_.keep_alive(keepAlive && !server_.stopping);
    res_.body() = std::move(r.body);
    res_.prepare_payload();
    stream_.expires_after(std::chrono::milliseconds(server_.options.readTimeoutMs));
    busy_ = true;
    bhttp::async_write(stream_, res_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->onWrite(ec);
    });
  }

  void onWrite(beast::error_code ec) {
    busy_ = false;
    if (ec) return;
    if (res_.need_eof() || server_.stopping) {
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      return;
    }
    doRead();
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bhttp::response<bhttp::string_body> res_;
  ServerCore& server_;
  bool busy_ = false;
};

}  // namespace

void HttpServer::Impl::doAccept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {
      // E.g. out of file descriptors: back off briefly instead of spinning.
      acceptLog.log(LogLevel::kWarn, "http", "accept failed: " + ec.message());
      acceptRetry.expires_after(std::chrono::milliseconds(100));
      acceptRetry.async_wait([this](beast::error_code wec) {
        if (!wec) doAccept();
      });
      return;
    }
    std::make_shared<Session>(std::move(socket), core)->start();
    doAccept();
  });
}

void HttpServer::Impl::closeAll() {
  beast::error_code ec;
  acceptor.close(ec);
  acceptRetry.cancel();
  core.stopping = true;
  // Copy first: closing cancels handlers, which may destroy sessions and edit the map.
  std::vector<std::shared_ptr<Session>> live;
  for (auto& [ptr, weak] : core.sessions) {
    if (auto s = weak.lock()) live.push_back(std::move(s));
  }
  bool anyBusy = false;
  for (auto& s : live) {
    if (s->busy()) {
      anyBusy = true;  // closes itself once its response is written
    } else {
      s->close();
    }
  }
  if (!anyBusy) return;
  core.stopGrace = &stopGrace;
  stopGrace.expires_after(kStopGrace);
  stopGrace.async_wait([this](beast::error_code ec) {
    core.stopGrace = nullptr;
    if (ec) return;
    std::vector<std::shared_ptr<Session>> stuck;
    for (auto& [ptr, weak] : core.sessions) {
      if (auto s = weak.lock()) stuck.push_back(std::move(s));
    }
    for (auto& s : stuck) s->close();
  });
}

HttpServer::HttpServer(HttpOptions options, storage::Store& store)
    : impl_(std::make_unique<Impl>(std::move(options), store)) {}

HttpServer::~HttpServer() {
  stop();
}

Status HttpServer::start() {
  Impl& s = *impl_;
  if (s.running) return Status::error("HTTP server already started");
  std::string where = endpointText(s.options.address, s.options.port);
  beast::error_code ec;
  auto address = asio::ip::make_address(s.options.address, ec);
  if (ec) return Status::error("invalid HTTP address '" + s.options.address + "': " + ec.message());
  tcp::endpoint endpoint(address, s.options.port);
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    beast::error_code ignored;
    s.acceptor.close(ignored);
    return Status::error("cannot bind HTTP server to " + where + ": " + ec.message());
  }
  s.port = s.acceptor.local_endpoint(ec).port();
  s.core.stopping = false;
  s.ioc.restart();
  s.doAccept();
  s.thread = std::thread([&s] {
    for (;;) {
      try {
        s.ioc.run();
        return;
      } catch (const std::exception& e) {
        logError("http", std::string("I/O loop error, continuing: ") + e.what());
      }
    }
  });
  s.running = true;
  logInfo("http", "serving on " + endpointText(s.options.address, s.port.load()));
  return Status::ok();
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (!s.running) return;
  asio::post(s.ioc, [&s] { s.closeAll(); });
  // The loop returns once every cancelled handler has run and nothing is left to wait on.
  s.thread.join();
  s.running = false;
}

uint16_t HttpServer::port() const {
  return impl_->port.load();
}

}  // namespace trainscope::http
