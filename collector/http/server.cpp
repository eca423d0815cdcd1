#include "collector/http/server.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include "collector/http/api.h"
#include "collector/http/live.h"
#include "collector/http/metrics.h"
#include "collector/http/request_target.h"
#include "common/clock.h"
#include "common/log.h"

namespace trainscope::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace websocket = beast::websocket;
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
class LiveSession;

// Compares in time independent of where the strings differ, so the token cannot be guessed
// byte by byte from response times.
bool constantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

bool changesSomething(bhttp::verb method) {
  return method != bhttp::verb::get && method != bhttp::verb::head &&
         method != bhttp::verb::options;
}

// What sessions share: options, the API and the registry of live sessions (for stop()).
// Only touched on the I/O thread, except options and api, which are read-only.
struct ServerCore {
  ServerCore(HttpOptions opts, storage::Store& store)
      : options(std::move(opts)), store(store), api(options, store, clock), feed(store, clock) {}
  HttpOptions options;
  storage::Store& store;
  SystemClock clock;
  Api api;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  // WebSocket clients of the live feed, and the timer that polls the store for them (runs
  // only while at least one is connected).
  LiveFeed feed;
  std::unordered_map<LiveSession*, std::weak_ptr<LiveSession>> liveSessions;
  asio::steady_timer* liveTimer = nullptr;
  bool liveTicking = false;
  RateLimitedLog liveLog{std::chrono::seconds(10)};
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
  asio::steady_timer liveTimer{ioc};
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
    std::string_view targetView(target.data(), target.size());
    if (!server_.options.authToken.empty() && changesSomething(req.method())) {
      auto auth = req[bhttp::field::authorization];
      std::string_view given(auth.data(), auth.size());
      constexpr std::string_view kBearer = "Bearer ";
      if (given.substr(0, kBearer.size()) != kBearer ||
          !constantTimeEquals(given.substr(kBearer.size()), server_.options.authToken)) {
        ApiResponse r = errorResponse(
            401, given.empty() ? "this request needs 'Authorization: Bearer TOKEN' (the "
                                 "collector's --http-token)"
                               : "the Authorization bearer token is wrong");
        r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"trainscope\"");
        send(std::move(r), req.version(), req.keep_alive());
        return;
      }
    }
    std::string_view path = targetView.substr(0, targetView.find('?'));
    if (path == "/metrics") {
      send(metrics(req.method()), req.version(), req.keep_alive());
      return;
    }
    if (path == "/api/v1/live") {
      if (!websocket::is_upgrade(req)) {
        send(errorResponse(426, "/api/v1/live is a WebSocket: send an Upgrade request"),
             req.version(), req.keep_alive());
        return;
      }
      startLive();
      return;
    }
    auto acceptEncoding = req[bhttp::field::accept_encoding];
    bool acceptsGzip = std::string_view(acceptEncoding.data(), acceptEncoding.size()).find("gzip") !=
                       std::string_view::npos;
    ApiResponse r = server_.api.handle(std::string_view(method.data(), method.size()), targetView,
                                       req.body(), acceptsGzip);
    send(std::move(r), req.version(), req.keep_alive());
  }

  ApiResponse metrics(bhttp::verb method) {
    if (method != bhttp::verb::get) {
      ApiResponse r = errorResponse(405, "method not allowed for /metrics (allowed: GET)");
      r.headers.emplace_back("Allow", "GET");
      return r;
    }
    ApiResponse r;
    r.contentType = "text/plain; version=0.0.4; charset=utf-8";
    r.body = renderStoreMetrics(server_.store, server_.clock.nowNs(),
                                server_.options.metricsWindowSteps);
    if (server_.options.extraMetrics) r.body += server_.options.extraMetrics();
    return r;
  }

  void startLive();

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

// One WebSocket client of the live feed: gets a snapshot, then every delta. What it sends is
// ignored (reads only keep control frames flowing). I/O thread only.
class LiveSession : public std::enable_shared_from_this<LiveSession> {
 public:
  LiveSession(tcp::socket socket, ServerCore& server) : ws_(std::move(socket)), server_(server) {}
  ~LiveSession() { server_.liveSessions.erase(this); }

  void start(bhttp::request<bhttp::string_body> req) {
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws_.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(bhttp::field::server, kServerName); }));
    ws_.read_message_max(64 * 1024);
    ws_.async_accept(req,
                     [self = shared_from_this()](beast::error_code ec) { self->onAccept(ec); });
  }

  void send(std::shared_ptr<const std::string> message) {
    if (closed_) return;
    if (queue_.size() >= server_.options.liveMaxQueued) {
      // A client that stopped reading: drop it rather than hold updates without bound; it
      // reconnects and starts again from a snapshot.
      logWarn("http", "live client too slow (" + std::to_string(queue_.size()) +
                          " updates queued), disconnecting it");
      close();
      return;
    }
    queue_.push_back(std::move(message));
    if (queue_.size() == 1) doWrite();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    beast::get_lowest_layer(ws_).socket().shutdown(tcp::socket::shutdown_both, ec);
    beast::get_lowest_layer(ws_).close();
  }

 private:
  void onAccept(beast::error_code ec);

  void doRead() {
    ws_.async_read(buffer_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) {
        self->close();
        return;
      }
      self->buffer_.clear();
      self->doRead();
    });
  }

  void doWrite() {
    ws_.text(true);
    ws_.async_write(asio::buffer(*queue_.front()),
                    [self = shared_from_this()](beast::error_code ec, size_t) {
                      if (ec) {
                        self->close();
                        return;
                      }
                      self->queue_.pop_front();
                      if (!self->queue_.empty()) self->doWrite();
                    });
  }

  websocket::stream<beast::tcp_stream> ws_;
  beast::flat_buffer buffer_;
  std::deque<std::shared_ptr<const std::string>> queue_;
  ServerCore& server_;
  bool closed_ = false;
};

// Polls the store and sends what changed to every live client; re-arms itself while any
// client is connected.
void liveTick(ServerCore& core) {
  if (core.liveSessions.empty() || core.stopping || core.liveTimer == nullptr) {
    core.liveTicking = false;
    return;
  }
  auto delta = core.feed.poll();
  if (!delta) {
    core.liveLog.log(LogLevel::kWarn, "http", delta.message());
  } else if (!delta->empty()) {
    auto message = std::make_shared<const std::string>(std::move(*delta));
    std::vector<std::shared_ptr<LiveSession>> live;
    for (auto& [ptr, weak] : core.liveSessions) {
      if (auto s = weak.lock()) live.push_back(std::move(s));
    }
    for (auto& s : live) s->send(message);
  }
  core.liveTimer->expires_after(
      std::chrono::milliseconds(std::max(10, core.options.liveIntervalMs)));
  core.liveTimer->async_wait([&core](beast::error_code ec) {
    if (ec) {
      core.liveTicking = false;
      return;
    }
    liveTick(core);
  });
}

void LiveSession::onAccept(beast::error_code ec) {
  if (ec || server_.stopping) return;
  server_.liveSessions.emplace(this, weak_from_this());
  if (!server_.liveTicking && server_.liveTimer != nullptr) {
    // The first client: take the baseline now, so the first delta holds only what is new
    // after the snapshot below.
    if (auto baseline = server_.feed.poll(); !baseline) {
      server_.liveLog.log(LogLevel::kWarn, "http", baseline.message());
    }
    server_.liveTicking = true;
    server_.liveTimer->expires_after(std::chrono::milliseconds(server_.options.liveIntervalMs));
    server_.liveTimer->async_wait([&core = server_](beast::error_code wec) {
      if (wec) {
        core.liveTicking = false;
        return;
      }
      liveTick(core);
    });
  }
  auto snapshot = server_.feed.snapshot();
  if (!snapshot) {
    std::string err = nlohmann::json{{"type", "error"}, {"error", snapshot.message()}}.dump();
    send(std::make_shared<const std::string>(std::move(err)));
  } else {
    send(std::make_shared<const std::string>(std::move(*snapshot)));
  }
  doRead();
}

void Session::startLive() {
  // The WebSocket takes the socket over; this HTTP session ends when the handler returns.
  beast::get_lowest_layer(stream_).expires_never();
  auto live = std::make_shared<LiveSession>(stream_.release_socket(), server_);
  live->start(parser_->release());
}

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
  liveTimer.cancel();
  core.liveTimer = nullptr;
  std::vector<std::shared_ptr<LiveSession>> liveClients;
  for (auto& [ptr, weak] : core.liveSessions) {
    if (auto s = weak.lock()) liveClients.push_back(std::move(s));
  }
  for (auto& s : liveClients) s->close();
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
  s.core.liveTimer = &s.liveTimer;
  s.core.liveTicking = false;
  s.core.feed.reset();
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
