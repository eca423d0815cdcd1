// A real HTTP receiver for the notify tests: listens on 127.0.0.1 (a free port, or one given),
// records every request and answers each with the next status of its script (200 once the
// script is used up). Status 0 means "never answer": the connection is held open until
// release() or the receiver's end. Runs its own I/O thread; every method is safe from the
// test's thread.
#pragma once

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace trainscope::tests {

namespace bhttp = boost::beast::http;

class HttpReceiver {
 public:
  struct Request {
    std::string method;
    std::string target;
    std::map<std::string, std::string> headers;  // names lower-cased
    std::string body;
    std::chrono::steady_clock::time_point at;  // when it was read
    nlohmann::json json() const { return nlohmann::json::parse(body); }
  };

  explicit HttpReceiver(uint16_t port = 0) : acceptor_(ioc_) {
    const Tcp::endpoint ep(boost::asio::ip::make_address("127.0.0.1"), port);
    acceptor_.open(ep.protocol());
    acceptor_.set_option(boost::asio::socket_base::reuse_address(true));
    acceptor_.bind(ep);
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    accept();
    thread_ = std::thread([this] { ioc_.run(); });
  }
  ~HttpReceiver() {
    ioc_.stop();
    thread_.join();
  }
  HttpReceiver(const HttpReceiver&) = delete;
  HttpReceiver& operator=(const HttpReceiver&) = delete;

  uint16_t port() const { return port_; }
  std::string url(const std::string& path = "") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  // The statuses the next requests get, in order (0: no answer, the connection held).
  void script(const std::vector<unsigned>& statuses) {
    std::lock_guard<std::mutex> lock(mu_);
    script_.assign(statuses.begin(), statuses.end());
  }
  // Closes every held connection (their clients see it end) and answers 200 from now on.
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      script_.clear();
    }
    boost::asio::post(ioc_, [this] { held_.clear(); });
  }
  std::vector<Request> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  size_t count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_.size();
  }

 private:
  using Tcp = boost::asio::ip::tcp;

  struct Connection {
    explicit Connection(Tcp::socket s) : socket(std::move(s)) {}
    Tcp::socket socket;
    boost::beast::flat_buffer buffer;
    bhttp::request<bhttp::string_body> request;
    bhttp::response<bhttp::string_body> response;
  };

  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, Tcp::socket socket) {
      if (ec) return;
      auto c = std::make_shared<Connection>(std::move(socket));
      bhttp::async_read(c->socket, c->buffer, c->request,
                        [this, c](boost::system::error_code rec, size_t) { onRequest(c, rec); });
      accept();
    });
  }

  void onRequest(const std::shared_ptr<Connection>& c, boost::system::error_code ec) {
    if (ec) return;
    Request r;
    r.method = std::string(c->request.method_string());
    r.target = std::string(c->request.target());
    for (const auto& field : c->request) {
      std::string name(field.name_string());
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
      r.headers[name] = std::string(field.value());
    }
    r.body = c->request.body();
    r.at = std::chrono::steady_clock::now();
    unsigned status = 200;
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(std::move(r));
      if (!script_.empty()) {
        status = script_.front();
        script_.pop_front();
      }
    }
    if (status == 0) {
      held_.push_back(c);
      return;
    }
    c->response.result(status);
    c->response.version(11);
    c->response.set(bhttp::field::content_type, "text/plain");
    c->response.body() = status < 300 ? "ok" : "no";
    c->response.keep_alive(false);
    c->response.prepare_payload();
    bhttp::async_write(c->socket, c->response, [c](boost::system::error_code, size_t) {
      boost::system::error_code ignored;
      c->socket.shutdown(Tcp::socket::shutdown_both, ignored);
    });
  }

  boost::asio::io_context ioc_;
  Tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::thread thread_;
  std::vector<std::shared_ptr<Connection>> held_;  // the I/O thread only
  mutable std::mutex mu_;
  std::deque<unsigned> script_;    // guarded by mu_
  std::vector<Request> requests_;  // guarded by mu_
};

}  // namespace trainscope::tests
