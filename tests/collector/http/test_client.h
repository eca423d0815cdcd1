// A small blocking HTTP client for tests: one request per call, or several on one kept-alive
// connection, plus raw bytes for malformed requests. Compiled once (test_client.cpp, on Beast),
// so a test that includes this header does not compile Beast. Test thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace trainscope::testing {

struct TestResponse {
  unsigned status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // field name as sent -> value
  bool keepAlive = false;
};

class TestConnection {
 public:
  // Connects to 127.0.0.1:port; throws when nothing listens there.
  explicit TestConnection(uint16_t port);
  ~TestConnection();
  TestConnection(const TestConnection&) = delete;
  TestConnection& operator=(const TestConnection&) = delete;

  // send() then receive(); throws when the response cannot be read.
  TestResponse request(const std::string& method, const std::string& target,
                       const std::vector<std::pair<std::string, std::string>>& headers = {},
                       std::string body = "");
  // Writes one HTTP/1.1 request (Host: 127.0.0.1, the body's Content-Length when there is one).
  void send(const std::string& method, const std::string& target,
            const std::vector<std::pair<std::string, std::string>>& headers = {},
            std::string body = "");
  // Reads one response of at most bodyLimit body bytes; the error says why it could not.
  Result<TestResponse> receive(uint64_t bodyLimit = 64u << 20);
  // Reads only the next response's header (the server has begun answering); receive() then
  // reads the rest of that response.
  Status awaitHeader(uint64_t bodyLimit = 64u << 20);

  // Raw bytes, for what an HTTP library would not send.
  void writeRaw(std::string_view bytes);
  // What one read returns, at most `max` bytes; "" at EOF or on an error.
  std::string readSome(size_t max);

  // True if the server closed the connection (a read returns EOF within the timeout).
  bool closedByServer(int timeoutMs = 3000);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

inline TestResponse httpGet(uint16_t port, const std::string& target) {
  TestConnection c(port);
  return c.request("GET", target);
}

}  // namespace trainscope::testing
