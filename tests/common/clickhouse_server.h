// A clickhouse-server for tests: Debian's binary started in a fresh temp dir with its own
// config (tools/clickhouse/config.xml and users.xml filled in), listening on free loopback
// ports (HTTP, and the native TCP port a Distributed table uses between servers), and stopped
// (SIGTERM, then SIGKILL) with its files removed when the object goes; a server whose test
// process dies gets SIGKILL from the kernel (PR_SET_PDEATHSIG). startCluster() starts several
// that know each other as the shards of one cluster (remote_servers). Test thread only. Needs
// clickhouse_test_dep (the templates' directory; its HTTP client tells when a server answers).
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collector/storage/clickhouse_http.h"

namespace trainscope::testing {

class ClickHouseServer {
 public:
  // The server binary: $TRAINSCOPE_CLICKHOUSE_SERVER, else /usr/sbin/clickhouse-server or
  // /usr/bin/clickhouse-server; "" when there is none (the caller skips).
  static std::string binary() {
    if (const char* env = getenv("TRAINSCOPE_CLICKHOUSE_SERVER"); env != nullptr && *env != 0) {
      return ::access(env, X_OK) == 0 ? env : "";
    }
    for (const char* path : {"/usr/sbin/clickhouse-server", "/usr/bin/clickhouse-server"}) {
      if (::access(path, X_OK) == 0) return path;
    }
    return "";
  }

  // Prints why and exits 77 (skipped) when no binary is installed.
  static void skipUnlessInstalled() {
    if (binary().empty()) {
      std::printf(
          "skipped: clickhouse-server is not installed (apt-get install "
          "clickhouse-server; tools/dev/deps.sh test)\n");
      std::fflush(stdout);
      std::_Exit(77);
    }
  }

  // Starts a server and waits (up to 60 s) until it answers; nullptr and *error when not.
  static std::unique_ptr<ClickHouseServer> start(std::string* error) {
    std::unique_ptr<ClickHouseServer> server(new ClickHouseServer());
    if (!server->launch("", error)) return nullptr;
    return server;
  }

  // Starts `count` servers, each with <remote_servers> naming all of them (in this order) as
  // the one-replica shards of `cluster`; empty and *error when one does not come up.
  static std::vector<std::unique_ptr<ClickHouseServer>> startCluster(size_t count,
                                                                     const std::string& cluster,
                                                                     std::string* error) {
    std::vector<std::unique_ptr<ClickHouseServer>> servers;
    for (size_t i = 0; i < count; ++i) servers.emplace_back(new ClickHouseServer());
    std::string remote = "  <remote_servers><" + cluster + ">";
    for (const auto& s : servers) {
      remote += "<shard><replica><host>127.0.0.1</host><port>" + std::to_string(s->tcpPort_) +
                "</port></replica></shard>";
    }
    remote += "</" + cluster + "></remote_servers>";
    for (auto& s : servers) {
      if (!s->launch(remote, error)) return {};
    }
    return servers;
  }

  ~ClickHouseServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      bool gone = false;
      for (int i = 0; i < 200 && !gone; ++i) {  // up to 10 s for a clean shutdown
        gone = ::waitpid(pid_, &status, WNOHANG) == pid_;
        if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (!gone) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
      }
    }
    if (!dir_.empty() && getenv("TRAINSCOPE_TEST_KEEP") == nullptr) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }
  ClickHouseServer(const ClickHouseServer&) = delete;
  ClickHouseServer& operator=(const ClickHouseServer&) = delete;

  // clickhouse://127.0.0.1:PORT,.../DATABASE?cluster=NAME for servers from startCluster().
  static std::string clusterUrl(const std::vector<std::unique_ptr<ClickHouseServer>>& servers,
                                const std::string& database, const std::string& cluster) {
    std::string hosts;
    for (const auto& s : servers) {
      if (!hosts.empty()) hosts += ',';
      hosts += "127.0.0.1:" + std::to_string(s->port());
    }
    return "clickhouse://" + hosts + "/" + database + "?cluster=" + cluster;
  }

  uint16_t port() const { return port_; }
  uint16_t tcpPort() const { return tcpPort_; }
  const std::string& dir() const { return dir_; }
  // clickhouse://127.0.0.1:PORT/DATABASE
  std::string url(const std::string& database) const {
    return "clickhouse://127.0.0.1:" + std::to_string(port_) + "/" + database;
  }
  // The server's log, for a failure report.
  std::string log() const {
    std::ifstream in(dir_ + "/server.err.log");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  ClickHouseServer() : port_(freePort()), tcpPort_(freePort()) {}

  // tools/clickhouse/NAME with every {KEY} replaced; "" when the file cannot be read.
  static std::string fillTemplate(const std::string& name,
                                  const std::vector<std::pair<std::string, std::string>>& values) {
    std::ifstream in(std::string(TRAINSCOPE_CLICKHOUSE_TEMPLATES) + "/" + name);
    std::string text(std::istreambuf_iterator<char>(in), {});
    for (const auto& [key, value] : values) {
      const std::string mark = "{" + key + "}";
      for (size_t at; (at = text.find(mark)) != std::string::npos;) {
        text.replace(at, mark.size(), value);
      }
    }
    return text;
  }

  static uint16_t freePort() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    uint16_t port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port = ntohs(addr.sin_port);
    }
    ::close(fd);
    return port;
  }

  bool launch(const std::string& remoteServers, std::string* error) {
    const std::string bin = binary();
    if (bin.empty()) {
      *error = "clickhouse-server is not installed";
      return false;
    }
    // A server writes a part (a few files per column) for every insert: on a disk mounted with
    // discard, unlinking a test's parts took minutes here. /dev/shm (memory) where it exists;
    // $TRAINSCOPE_CLICKHOUSE_TMPDIR, then $TMPDIR, then /tmp otherwise.
    const char* own = getenv("TRAINSCOPE_CLICKHOUSE_TMPDIR");
    const char* tmp = getenv("TMPDIR");
    std::string base = own != nullptr && *own != 0              ? own
                       : ::access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm"
                       : tmp != nullptr && *tmp != 0            ? tmp
                                                                : "/tmp";
    std::string tmpl = base + "/trainscope-clickhouse-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      *error = "mkdtemp failed";
      return false;
    }
    dir_ = tmpl;
    // Small caches and two threads a query, so a test's server stays light on a shared machine.
    const std::string config = fillTemplate("config.xml", {{"DIR", dir_},
                                                           {"HTTP_PORT", std::to_string(port_)},
                                                           {"TCP_PORT", std::to_string(tcpPort_)},
                                                           {"CACHE_BYTES", "67108864"},
                                                           {"REMOTE_SERVERS", remoteServers}});
    const std::string users = fillTemplate("users.xml", {{"MAX_MEMORY", "2000000000"}});
    if (config.empty() || users.empty()) {
      *error =
          std::string("cannot read the config templates in ") + TRAINSCOPE_CLICKHOUSE_TEMPLATES;
      return false;
    }
    std::ofstream(dir_ + "/config.xml") << config;
    std::ofstream(dir_ + "/users.xml") << users;
    const std::string configFlag = "--config-file=" + dir_ + "/config.xml";
    const std::string out = dir_ + "/stdout.log";
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) {
      *error = "fork failed";
      return false;
    }
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the test died before prctl took effect
      int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        ::close(fd);
      }
      ::execl(bin.c_str(), "clickhouse-server", configFlag.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    storage::clickhouse::Endpoint endpoint;
    endpoint.port = std::to_string(port_);
    storage::clickhouse::HttpClient client(endpoint, std::chrono::milliseconds(2000));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        *error = "clickhouse-server exited at start: " + log();
        return false;
      }
      if (client.query("SELECT 1", std::nullopt, false)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    *error = "clickhouse-server did not answer within 60 s: " + log();
    return false;
  }

  std::string dir_;
  uint16_t port_ = 0;
  uint16_t tcpPort_ = 0;
  pid_t pid_ = -1;
};

}  // namespace trainscope::testing
