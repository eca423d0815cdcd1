// http_stop_bench: how long HttpServer::stop() takes (collector/http/server.h) with a client
// connected: an idle keep-alive client (target: well under 2 s), and a client that asked for a
// large page (100,000 step rows with detail, tens of MB) and stopped reading, which stop() lets
// drain for its grace period before closing (target: the grace of 2 s, and under 5 s).
// Prints the median and max over --repeat runs; asserts nothing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "collector/http/server.h"
#include "common/guarded_main.h"
#include "common/log.h"
#include "tools/bench/api_bench_common.h"

using namespace trainscope;

namespace {

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Sends one GET on a raw socket and never reads the answer.
int stalledClient(uint16_t port, const std::string& target) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -1;
  const std::string req = "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void report(const char* what, const std::vector<double>& ms) {
  std::printf("%-55s median %7.1f ms, max %7.1f ms (%zu runs)\n", what, bench::percentile(ms, 50),
              bench::percentile(ms, 100), ms.size());
}

int benchMain(int argc, char** argv) {
  int repeat = 5;
  CLI::App app{"Times HttpServer::stop() with an idle client and with one that stopped reading"};
  app.add_option("--repeat", repeat, "runs of each case")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  setLogLevel(LogLevel::kError);

  bench::FillOptions fill;
  fill.job = "train";
  fill.ranks = 1;
  fill.steps = 100000;
  fill.progress = false;
  bench::BenchStore bs;
  if (auto s = bs.open("", false, fill); !s) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }

  std::vector<double> idle;
  std::vector<double> stalled;
  for (int i = 0; i < repeat; ++i) {
    for (bool reading : {true, false}) {
      http::HttpOptions o;
      o.port = 0;
      http::HttpServer server(o, bs.store());
      if (auto s = server.start(); !s) {
        std::fprintf(stderr, "%s\n", s.message().c_str());
        return 1;
      }
      int fd = -1;
      std::optional<bench::HttpClient> client;
      if (reading) {
        client.emplace(server.port());
        if (client->get("/healthz").status != 200) return 1;
      } else {
        fd = stalledClient(server.port(), "/api/v1/jobs/train/steps?limit=100000&detail=1");
        if (fd < 0) return 1;
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // mid-write
      }
      const auto t0 = std::chrono::steady_clock::now();
      server.stop();
      (reading ? idle : stalled).push_back(msSince(t0));
      if (fd >= 0) ::close(fd);
    }
  }
  report("stop() with an idle keep-alive client", idle);
  report("stop() with a client that stopped reading a large page", stalled);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return trainscope::guardedMain("http_stop_bench", [&] { return benchMain(argc, argv); });
}
