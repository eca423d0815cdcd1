// A clickhouse-server for tests: Debian's binary started in a fresh temp dir with its own
// config, listening on a free loopback HTTP port only, and stopped (SIGTERM, then SIGKILL) with
// its files removed when the object goes; a server whose test process dies gets SIGKILL from
// the kernel (PR_SET_PDEATHSIG). Test thread only. Needs storage_clickhouse_dep (its HTTP
// client tells when the server answers).
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
    if (!server->launch(error)) return nullptr;
    return server;
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
    if (!dir_.empty() && getenv("TRAINSCOPE_E2E_KEEP") == nullptr) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }
  ClickHouseServer(const ClickHouseServer&) = delete;
  ClickHouseServer& operator=(const ClickHouseServer&) = delete;

  uint16_t port() const { return port_; }
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
  ClickHouseServer() = default;

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

  bool launch(std::string* error) {
    const std::string bin = binary();
    if (bin.empty()) {
      *error = "clickhouse-server is not installed";
      return false;
    }
    const char* tmp = getenv("TMPDIR");
    std::string tmpl =
        std::string(tmp != nullptr && *tmp != 0 ? tmp : "/tmp") + "/trainscope-clickhouse-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      *error = "mkdtemp failed";
      return false;
    }
    dir_ = tmpl;
    port_ = freePort();
    // HTTP on loopback only (no native TCP, no interserver port); small caches and two
    // threads a query, so a test's server stays light on a shared machine.
    std::ofstream(dir_ + "/config.xml") << R"(<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>)" << dir_
                                        << R"(/server.log</log>
    <errorlog>)" << dir_ << R"(/server.err.log</errorlog><console>0</console></logger>
  <http_port>)" << port_ << R"(</http_port>
  <listen_host>127.0.0.1</listen_host>
  <path>)" << dir_ << R"(/data/</path>
  <tmp_path>)" << dir_ << R"(/tmp/</tmp_path>
  <user_files_path>)" << dir_ << R"(/user_files/</user_files_path>
  <format_schema_path>)" << dir_ << R"(/format_schemas/</format_schema_path>
  <users_config>)" << dir_ << R"(/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>67108864</mark_cache_size>
  <uncompressed_cache_size>67108864</uncompressed_cache_size>
  <max_concurrent_queries>32</max_concurrent_queries>
</yandex>
)";
    std::ofstream(dir_ + "/users.xml") << R"(<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>2000000000</max_memory_usage>
    <max_threads>2</max_threads></default></profiles>
  <users><default><password></password>
    <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
    <profile>default</profile><quota>default</quota></default></users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>
    <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time>
  </interval></default></quotas>
</yandex>
)";
    const std::string config = "--config-file=" + dir_ + "/config.xml";
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
      ::execl(bin.c_str(), "clickhouse-server", config.c_str(), static_cast<char*>(nullptr));
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
  pid_t pid_ = -1;
};

}  // namespace trainscope::testing
