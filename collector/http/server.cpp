#include "collector/http/server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include "collector/http/api.h"
#include "collector/http/live.h"
#include "collector/http/metrics.h"
#include "collector/http/origin.h"
#include "collector/http/source_body.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/thread_annotations.h"

namespace trainscope::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;  // NOLINT(readability-identifier-naming): Asio's own spelling

// Headers are small (GET targets with a few parameters); this bounds a slow-loris header.
constexpr uint32_t kMaxHeaderBytes = 16 * 1024;
constexpr const char* kServerName = "trainscope";
// How long stop() lets responses already being written finish before closing them anyway
// (a client that stopped reading must not hold up the collector's shutdown).
constexpr auto kStopGrace = std::chrono::seconds(2);
// A live message is written in frames of at most this size, each under liveWriteTimeoutMs.
constexpr size_t kLiveWritePiece = size_t{64} * 1024;

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

// What sessions share: options, the API, the registries of sessions (for stop()) and the
// live feed. options, store and api are read-only and used from any thread; the registries
// are guarded by `mu`; the feed is used on `liveStrand` only.
struct ServerCore {
  ServerCore(HttpOptions opts, storage::Store& store)
      : options(std::move(opts)), store(store), api(options, store, clock), feed(store, clock) {
    api.setStatsSource([this] { return stats(); });
  }
  HttpOptions options;
  storage::Store& store;
  SystemClock clock;
  Api api;
  // Requests that change something run one at a time (a capture request checks what is
  // running before it starts one); reads run side by side.
  Mutex changeMu;

  Mutex mu;
  CondVar sessionsGone;  // notified when `sessions` becomes empty while stopping
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions GUARDED_BY(mu);
  std::unordered_map<LiveSession*, std::weak_ptr<LiveSession>> liveSessions GUARDED_BY(mu);
  // Set by stop(): responses being written may finish, nothing new is read. Read unlocked
  // by sessions deciding keep-alive.
  std::atomic<bool> stopping{false};

  // WebSocket clients of the live feed, and the timer that polls the store for them (runs
  // only while at least one is connected). All on liveStrand.
  asio::strand<asio::io_context::executor_type>* liveStrand = nullptr;  // set by Impl
  LiveFeed feed;
  asio::steady_timer* liveTimer = nullptr;
  bool liveTicking = false;
  RateLimitedLog liveLog{std::chrono::seconds(10)};

  // Exceptions caught at the request and live-feed boundaries (our own bug or an allocation
  // failure), for /metrics. Any thread.
  std::atomic<uint64_t> handlerErrors{0};
  RateLimitedLog errorLog{std::chrono::seconds(10)};
  RateLimitedLog streamLog{std::chrono::seconds(10)};

  ApiResponse handlerFailed(const char* what) {
    ++handlerErrors;
    errorLog.log(LogLevel::kError, "http", std::string("request handler failed: ") + what);
    return errorResponse(500, std::string("internal error: ") + what);
  }

  // Live clients dropped because a write to them did not finish within liveWriteTimeoutMs.
  std::atomic<uint64_t> liveSlowDisconnects{0};
  // Who may change things or open the live feed (from options); requests refused by it.
  OriginPolicy originPolicy;
  std::atomic<uint64_t> originRefused{0};

  HttpStats stats() {
    HttpStats out;
    out.handlerErrors = handlerErrors.load() + api.handlerErrors();
    out.liveSlowDisconnects = liveSlowDisconnects.load();
    out.originRefused = originRefused.load();
    MutexLock lock(&mu);
    out.liveClients = liveSessions.size();
    return out;
  }

  // The sessions still alive, held so they stay alive while the caller uses them.
  std::vector<std::shared_ptr<Session>> sessionsNow() EXCLUDES(mu) {
    MutexLock lock(&mu);
    return alive(sessions);
  }
  std::vector<std::shared_ptr<LiveSession>> liveSessionsNow() EXCLUDES(mu) {
    MutexLock lock(&mu);
    return alive(liveSessions);
  }

 private:
  template <typename T>
  static std::vector<std::shared_ptr<T>> alive(
      const std::unordered_map<T*, std::weak_ptr<T>>& map) {
    std::vector<std::shared_ptr<T>> out;
    for (const auto& [ptr, weak] : map) {
      if (auto s = weak.lock()) out.push_back(std::move(s));
    }
    return out;
  }
};

}  // namespace

struct HttpServer::Impl {
  Impl(HttpOptions opts, storage::Store& store)
      : core(std::move(opts), store),
        threadCount(static_cast<size_t>(std::max(1, core.options.ioThreads))),
        ioc(static_cast<int>(threadCount)) {
    core.liveStrand = &liveStrand;
  }

  void doAccept();
  void closeAll();

  // Declared before ioc: sessions unregister themselves from their destructors, which may run
  // while ioc is destroyed.
  ServerCore core;
  HttpOptions& options = core.options;
  size_t threadCount;
  asio::io_context ioc;
  // The acceptor and its retry timer live on one strand; so does closeAll().
  asio::strand<asio::io_context::executor_type> acceptStrand{asio::make_strand(ioc)};
  tcp::acceptor acceptor{acceptStrand};
  asio::steady_timer acceptRetry{acceptStrand};
  asio::strand<asio::io_context::executor_type> liveStrand{asio::make_strand(ioc)};
  asio::steady_timer liveTimer{liveStrand};
  std::vector<std::thread> threads;
  std::atomic<uint16_t> port{0};
  bool running = false;  // owner thread only
  RateLimitedLog acceptLog{std::chrono::seconds(10)};
};

namespace {

// One client connection: read a request, answer it, repeat while keep-alive holds.
// Runs on its socket's strand; close() may be posted from anywhere.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, ServerCore& server) : stream_(std::move(socket)), server_(server) {}
  ~Session() {
    MutexLock lock(&server_.mu);
    server_.sessions.erase(this);
    if (server_.stopping && server_.sessions.empty()) server_.sessionsGone.notifyAll();
  }

  void start() {
    {
      MutexLock lock(&server_.mu);
      server_.sessions.emplace(this, weak_from_this());
    }
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->doRead(); });
  }

  // For stop(): closes the connection unless a request is being answered (that one closes
  // itself once its response is written), or always when `force`. Any thread.
  void closeLater(bool force) {
    asio::post(stream_.get_executor(), [self = shared_from_this(), force] {
      if (force || !self->busy_) self->close();
    });
  }

 private:
  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  void doRead() {
    if (server_.stopping) return;
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
    // From here until the response is written, stop() lets this connection finish.
    busy_ = true;
    const auto& req = parser_->get();
    std::optional<ApiResponse> r;
    try {
      r = route(req);
    } catch (const std::exception& e) {
      // The boundary: no exception from a handler reaches the I/O loop (which would drop the
      // connection unanswered); the client gets a 500 and the error is counted.
      r = server_.handlerFailed(e.what());
    }
    if (!r) return;  // the live feed took the connection over
    send(std::move(*r), req.version(), req.keep_alive());
  }

  // Answers one parsed request; nullopt when the connection was handed to the live feed.
  std::optional<ApiResponse> route(const bhttp::request<bhttp::string_body>& req) {
    auto method = req.method_string();
    auto target = req.target();
    std::string_view targetView(target.data(), target.size());
    std::string_view path = targetView.substr(0, targetView.find('?'));
    const bool upgrade = websocket::is_upgrade(req);
    auto host = req[bhttp::field::host];
    const std::string_view hostView(host.data(), host.size());
    // Another web page the user visits must not start captures or read the live feed
    // (origin.h); checked before the token, which a browser would not send cross-origin.
    // Every WebSocket request is checked, whatever its path: the live feed is the only route
    // that takes one, and the route table (not this check) decides which path is it. A read
    // is checked for its Host only: a page on a rebound name would otherwise read it all.
    auto origin = req[bhttp::field::origin];
    const Status allowed = changesSomething(req.method()) || upgrade
                               ? checkOrigin(server_.originPolicy, hostView,
                                             std::string_view(origin.data(), origin.size()))
                               : checkHost(server_.originPolicy, hostView);
    if (!allowed) {
      ++server_.originRefused;
      server_.errorLog.log(
          LogLevel::kWarn, "http",
          "refused " + std::string(method) + ' ' + std::string(path) + ": " + allowed.message());
      return errorResponse(403, allowed.message());
    }
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
        return r;
      }
    }
    auto acceptEncoding = req[bhttp::field::accept_encoding];
    bool acceptsGzip =
        std::string_view(acceptEncoding.data(), acceptEncoding.size()).find("gzip") !=
        std::string_view::npos;
    std::string_view methodView(method.data(), method.size());
    ApiResponse r;
    if (changesSomething(req.method())) {
      MutexLock lock(&server_.changeMu);
      r = server_.api.handle(methodView, targetView, req.body(), acceptsGzip, upgrade);
    } else {
      r = server_.api.handle(methodView, targetView, req.body(), acceptsGzip, upgrade);
    }
    if (r.liveFeed) {
      busy_ = false;
      startLive();
      return std::nullopt;
    }
    return r;
  }

  void startLive();

  // An error found before a request could be parsed: answer and close, since the rest of
  // the stream cannot be trusted to start at a request boundary.
  void sendError(unsigned status, const std::string& message) {
    busy_ = true;
    send(errorResponse(status, message), 11, false);
  }

  void send(ApiResponse r, unsigned version, bool keepAlive) {
    if (r.stream) {
      sendStream(std::move(r), version, keepAlive);
      return;
    }
    res_ = {};
    res_.version(version);
    res_.result(r.status);
    setHeaders(res_, r, keepAlive);
    res_.body() = std::move(r.body);
    res_.prepare_payload();
    stream_.expires_after(std::chrono::milliseconds(server_.options.readTimeoutMs));
    bhttp::async_write(stream_, res_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->onWrite(ec, self->res_.need_eof());
    });
  }

  template <typename Response>
  void setHeaders(Response& res, const ApiResponse& r, bool keepAlive) {
    res.set(bhttp::field::server, kServerName);
    res.set(bhttp::field::content_type, r.contentType);
    if (r.contentType == "application/json") res.set(bhttp::field::cache_control, "no-store");
    for (const auto& [name, value] : r.headers) res.set(name, value);
    res.keep_alive(keepAlive && !server_.stopping);
  }

  // A file response: Content-Length when the size is known, else chunked (HTTP/1.1) or closed
  // at the end (1.0). Written piece by piece, each piece under the read timeout, so a slow but
  // steady download goes on while a client that stopped reading is dropped.
  void sendStream(ApiResponse r, unsigned version, bool keepAlive) {
    streamRes_.emplace();
    auto& res = *streamRes_;
    res.version(version);
    res.result(r.status);
    setHeaders(res, r, keepAlive);
    const std::optional<uint64_t> size = r.stream->size();
    res.body().source = std::move(r.stream);
    if (size) {
      res.content_length(*size);
    } else if (version >= 11) {
      res.chunked(true);
    } else {
      res.keep_alive(false);
    }
    streamWriter_.emplace(res);
    writeSomeOfStream();
  }

  void writeSomeOfStream() {
    stream_.expires_after(std::chrono::milliseconds(server_.options.readTimeoutMs));
    bhttp::async_write_some(
        stream_, *streamWriter_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->onStreamWritten(ec); });
  }

  void onStreamWritten(beast::error_code ec) {
    if (!ec && !streamWriter_->is_done()) {
      writeSomeOfStream();
      return;
    }
    if (ec && !streamRes_->body().error->empty()) {
      // The file broke mid-way (corrupt, or past its decompression bound): the client sees a
      // cut response, the connection closes.
      server_.streamLog.log(LogLevel::kWarn, "http",
                            "download cut short: " + *streamRes_->body().error);
    }
    const bool needEof = streamRes_->need_eof();
    streamWriter_.reset();
    streamRes_.reset();  // releases the file
    onWrite(ec, needEof);
  }

  void onWrite(beast::error_code ec, bool needEof) {
    busy_ = false;
    if (ec) return;
    if (needEof || server_.stopping) {
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
  std::optional<bhttp::response<SourceBody>> streamRes_;  // a file being sent (strand only)
  std::optional<bhttp::response_serializer<SourceBody>> streamWriter_;
  ServerCore& server_;
  bool busy_ = false;  // a request is being answered (strand only)
};

// One WebSocket client of the live feed: gets a snapshot, then every delta. What it sends is
// ignored (reads only keep control frames flowing). Runs on its socket's strand; send() and
// closeLater() may be called from any thread.
class LiveSession : public std::enable_shared_from_this<LiveSession> {
 public:
  LiveSession(tcp::socket socket, ServerCore& server) : ws_(std::move(socket)), server_(server) {}
  ~LiveSession() {
    MutexLock lock(&server_.mu);
    server_.liveSessions.erase(this);
  }

  void start(const bhttp::request<bhttp::string_body>& req) {
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws_.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(bhttp::field::server, kServerName); }));
    ws_.read_message_max(size_t{64} * 1024);
    ws_.async_accept(req,
                     [self = shared_from_this()](beast::error_code ec) { self->onAccept(ec); });
  }

  void send(std::shared_ptr<const std::string> message) {
    asio::post(ws_.get_executor(), [self = shared_from_this(), m = std::move(message)]() mutable {
      self->queue(std::move(m));
    });
  }

  void closeLater() {
    asio::post(ws_.get_executor(), [self = shared_from_this()] { self->close(); });
  }

 private:
  void onAccept(beast::error_code ec);

  void queue(std::shared_ptr<const std::string> message) {
    if (closed_) return;
    if (queue_.size() >= server_.options.liveMaxQueued) {
      // A client that stopped reading: drop it rather than hold updates without bound; it
      // reconnects and starts again from a snapshot.
      dropSlow(std::to_string(queue_.size()) + " updates queued");
      return;
    }
    queue_.push_back(std::move(message));
    if (queue_.size() == 1) doWrite();
  }

  void dropSlow(const std::string& why) {
    ++server_.liveSlowDisconnects;
    server_.liveLog.log(LogLevel::kWarn, "http",
                        "live client too slow (" + why + "), disconnecting it");
    close();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    writeTimer_.cancel();
    beast::error_code ec;
    beast::get_lowest_layer(ws_).socket().shutdown(tcp::socket::shutdown_both, ec);
    beast::get_lowest_layer(ws_).close();
  }

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

  // Sends the front message a piece at a time, each piece under its own deadline: a slow but
  // steady client gets a large snapshot, while one that stopped reading leaves a piece pending
  // once the socket buffers are full; with no new updates the queue bound above never trips,
  // so the deadline drops it, which ends the write and frees what it held (a snapshot can be
  // megabytes).
  void doWrite() {
    const std::string& message = *queue_.front();
    const size_t piece = std::min(kLiveWritePiece, message.size() - sent_);
    const bool last = sent_ + piece == message.size();
    if (sent_ == 0) ws_.text(true);
    const uint64_t write = ++writes_;
    writeTimer_.expires_after(std::chrono::milliseconds(server_.options.liveWriteTimeoutMs));
    writeTimer_.async_wait([self = shared_from_this(), write](beast::error_code ec) {
      // Only for this piece, still in flight: an expiry queued just before the piece was
      // taken must not drop the client.
      if (!ec && !self->closed_ && write == self->writes_ && !self->writeDone_) {
        self->dropSlow("no part of a message taken within " +
                       std::to_string(self->server_.options.liveWriteTimeoutMs) + " ms");
      }
    });
    writeDone_ = false;
    ws_.async_write_some(last, asio::buffer(message.data() + sent_, piece),
                         [self = shared_from_this()](beast::error_code ec, size_t written) {
                           self->writeDone_ = true;
                           self->writeTimer_.cancel();
                           if (ec) {
                             self->close();
                             return;
                           }
                           self->sent_ += written;
                           if (self->sent_ < self->queue_.front()->size()) {
                             self->doWrite();
                             return;
                           }
                           self->sent_ = 0;
                           self->queue_.pop_front();
                           if (!self->queue_.empty()) self->doWrite();
                         });
  }

  websocket::stream<beast::tcp_stream> ws_;
  beast::flat_buffer buffer_;
  std::deque<std::shared_ptr<const std::string>> queue_;  // strand only
  asio::steady_timer writeTimer_{ws_.get_executor()};     // the piece in flight's deadline
  size_t sent_ = 0;        // bytes of the front message already written (strand only)
  uint64_t writes_ = 0;    // pieces begun (strand only)
  bool writeDone_ = true;  // the latest piece was written (strand only)
  ServerCore& server_;
  bool closed_ = false;  // strand only
};

void armLiveTimer(ServerCore& core, int delayMs);

// Polls the store and sends what changed to every live client; re-arms itself while any
// client is connected. On liveStrand.
void liveTick(ServerCore& core) {
  auto clients = core.liveSessionsNow();
  if (clients.empty() || core.stopping || core.liveTimer == nullptr) {
    core.liveTicking = false;
    return;
  }
  try {
    auto messages = core.feed.poll();
    if (!messages) {
      core.liveLog.log(LogLevel::kWarn, "http", messages.message());
    } else {
      for (auto& text : *messages) {
        auto message = std::make_shared<const std::string>(std::move(text));
        for (auto& s : clients) s->send(message);
      }
    }
  } catch (const std::exception& e) {
    // Counted like a request's handler; the feed keeps ticking (the next poll retries).
    core.handlerFailed(e.what());
  }
  armLiveTimer(core, std::max(10, core.options.liveIntervalMs));
}

void armLiveTimer(ServerCore& core, int delayMs) {
  core.liveTimer->expires_after(std::chrono::milliseconds(delayMs));
  core.liveTimer->async_wait(asio::bind_executor(*core.liveStrand, [&core](beast::error_code ec) {
    if (ec) {
      core.liveTicking = false;
      return;
    }
    liveTick(core);
  }));
}

void LiveSession::onAccept(beast::error_code ec) {
  if (ec || server_.stopping) return;
  doRead();
  // Registering, the baseline and the snapshot happen on the feed's strand, so the snapshot
  // and the deltas after it reach this client in order.
  asio::post(*server_.liveStrand, [self = shared_from_this()] {
    ServerCore& core = self->server_;
    {
      MutexLock lock(&core.mu);
      if (core.stopping) return;
      core.liveSessions.emplace(self.get(), self->weak_from_this());
    }
    if (!core.liveTicking && core.liveTimer != nullptr) {
      // The first client: take the baseline now, so the first delta holds only what is new
      // after the snapshot below.
      if (auto baseline = core.feed.poll(); !baseline) {
        core.liveLog.log(LogLevel::kWarn, "http", baseline.message());
      }
      core.liveTicking = true;
      armLiveTimer(core, core.options.liveIntervalMs);
    }
    Result<std::string> snapshot = Status::error("no snapshot");
    try {
      snapshot = core.feed.snapshot();
    } catch (const std::exception& e) {
      core.handlerFailed(e.what());
      snapshot = Status::error(std::string("internal error: ") + e.what());
    }
    if (!snapshot) {
      std::string err = nlohmann::json{{"type", "error"}, {"error", snapshot.message()}}.dump();
      self->send(std::make_shared<const std::string>(std::move(err)));
    } else {
      self->send(std::make_shared<const std::string>(std::move(*snapshot)));
    }
  });
}

void Session::startLive() {
  // The WebSocket takes the socket over (and its strand); this HTTP session ends when the
  // handler returns.
  beast::get_lowest_layer(stream_).expires_never();
  auto live = std::make_shared<LiveSession>(stream_.release_socket(), server_);
  live->start(parser_->release());
}

}  // namespace

void HttpServer::Impl::doAccept() {
  // Each connection gets its own strand: its handlers never run at the same time, while
  // different connections are served by different threads.
  acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
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

// On acceptStrand: stops accepting and closes every idle connection and live client.
void HttpServer::Impl::closeAll() {
  beast::error_code ec;
  acceptor.close(ec);
  acceptRetry.cancel();
  asio::post(*core.liveStrand, [this] {
    liveTimer.cancel();
    core.liveTimer = nullptr;
  });
  for (auto& s : core.liveSessionsNow()) s->closeLater();
  for (auto& s : core.sessionsNow()) s->closeLater(false);
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
  OriginPolicy policy;
  for (const auto& o : s.options.allowedOrigins) {
    auto parsed = parseOrigin(o);
    if (!parsed) return Status::error("allowed origins: " + parsed.message());
    policy.allowedOrigins.push_back(*parsed);
  }
  for (const auto& h : s.options.allowedHosts) {
    // The same normal form as a Host header's name: lower case, no final dot.
    auto parsed = parseOrigin("http://" + h);
    if (!parsed || parsed->find(':', 7) != std::string::npos) {
      return Status::error("allowed hosts: '" + h + "' is not a host name (no port)");
    }
    policy.allowedHosts.push_back(parsed->substr(7));
  }
  policy.anyHost = policy.allowedHosts.empty() && !isLoopbackAddress(s.options.address);
  s.core.originPolicy = std::move(policy);
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
  for (size_t i = 0; i < s.threadCount; ++i) {
    s.threads.emplace_back([&s] {
      for (;;) {
        try {
          s.ioc.run();
          return;
        } catch (const std::exception& e) {
          logError("http", std::string("I/O loop error, continuing: ") + e.what());
        }
      }
    });
  }
  s.running = true;
  logInfo("http", "serving on " + endpointText(s.options.address, s.port.load()) + " with " +
                      std::to_string(s.threadCount) + " I/O threads");
  return Status::ok();
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (!s.running) return;
  {
    MutexLock lock(&s.core.mu);
    s.core.stopping = true;
  }
  asio::post(s.acceptStrand, [&s] { s.closeAll(); });
  // Responses being written may finish within the grace; then whoever is left is closed.
  {
    UniqueLock lock(&s.core.mu);
    const auto deadline = std::chrono::steady_clock::now() + kStopGrace;
    while (!s.core.sessions.empty() && s.core.sessionsGone.waitUntil(lock, deadline)) {
    }
  }
  for (auto& session : s.core.sessionsNow()) session->closeLater(true);
  // Each loop returns once every cancelled handler has run and nothing is left to wait on.
  for (auto& t : s.threads) t.join();
  s.threads.clear();
  s.running = false;
}

bool HttpServer::stopping() const {
  MutexLock lock(&impl_->core.mu);
  return impl_->core.stopping;
}

uint16_t HttpServer::port() const {
  return impl_->port.load();
}

}  // namespace trainscope::http
