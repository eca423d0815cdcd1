#include "tests/e2e/harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

// The listener that prints log tails needs Catch2's reporter interfaces.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

extern char** environ;

namespace trainscope::e2e {
namespace {

// Live children, for the exit and fatal-signal handlers: a fixed array of atomics, so the
// signal handler only does async-signal-safe work.
constexpr size_t kMaxChildren = 64;
std::array<std::atomic<pid_t>, kMaxChildren> gChildren{};

void killAllChildren() {
  for (auto& c : gChildren) {
    const pid_t p = c.exchange(0);
    if (p > 0) ::kill(p, SIGKILL);
  }
}

extern "C" void onFatalSignal(int sig) {
  killAllChildren();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void installGuards() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::atexit(killAllChildren);
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGABRT, SIGSEGV, SIGBUS}) {
      struct sigaction sa {};
      struct sigaction old {};
      sigaction(sig, nullptr, &old);
      // Catch2 installs its own handlers for some; keep theirs and kill children first.
      sa.sa_handler = onFatalSignal;
      sigemptyset(&sa.sa_mask);
      if (old.sa_handler == SIG_DFL || old.sa_handler == SIG_IGN) sigaction(sig, &sa, nullptr);
    }
  });
}

void track(pid_t p) {
  for (auto& c : gChildren) {
    pid_t zero = 0;
    if (c.compare_exchange_strong(zero, p)) return;
  }
}

void untrack(pid_t p) {
  for (auto& c : gChildren) {
    pid_t v = p;
    if (c.compare_exchange_strong(v, 0)) return;
  }
}

// Log tails of processes that ended during the current test case, printed if it fails.
std::mutex gTailsMu;
std::vector<std::string> gTails;

std::string tailOf(const std::string& path, size_t bytes) {
  std::string all = readFile(path);
  if (all.size() > bytes) all = "..." + all.substr(all.size() - bytes);
  return all;
}

class LogTailListener : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    std::lock_guard<std::mutex> lock(gTailsMu);
    if (stats.totals.assertions.failed > 0) {
      for (const auto& t : gTails) std::fprintf(stderr, "%s\n", t.c_str());
    }
    gTails.clear();
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(LogTailListener)

// ---------------------------------------------------------------------------------------
Process::Process(std::string name, std::vector<std::string> argv, std::string logPath,
                 const std::vector<std::string>& extraEnv)
    : name_(std::move(name)), logPath_(std::move(logPath)) {
  installGuards();
  REQUIRE(!argv.empty());
  // Environment: ours, with the extra KEY=VALUE entries replacing same-named ones.
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (const auto& x : extraEnv) replaced |= x.substr(0, x.find('=')) == key;
    if (!replaced) env.push_back(kv);
  }
  for (const auto& x : extraEnv) env.push_back(x);
  std::vector<char*> envp;
  envp.reserve(env.size() + 1);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, logPath_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  {
    std::ofstream log(logPath_, std::ios::app);
    log << "$";
    for (const auto& a : argv) log << " " << a;
    log << "\n";
  }
  const int rc = posix_spawn(&pid_, args[0], &fa, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    pid_ = -1;
    FAIL("spawn " << name_ << " (" << argv[0] << "): " << std::strerror(rc));
  }
  track(pid_);
}

Process::~Process() {
  if (pid_ > 0 && !status_) stop(3s);
  std::lock_guard<std::mutex> lock(gTailsMu);
  gTails.push_back("----- " + name_ + " (" + logPath_ + "), last lines -----\n" + logTail(4000));
}

bool Process::running() {
  if (pid_ <= 0 || status_) return false;
  return !wait(0ms).has_value();
}

void Process::kill(int sig) {
  if (pid_ > 0 && !status_) ::kill(pid_, sig);
}

std::optional<int> Process::wait(std::chrono::milliseconds timeout) {
  if (status_) return status_;
  if (pid_ <= 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int st = 0;
    const pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      untrack(pid_);
      return status_;
    }
    if (r < 0 && errno != EINTR) {
      status_ = -1;
      untrack(pid_);
      return status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(10ms);
  }
}

int Process::stop(std::chrono::milliseconds grace) {
  if (status_) return *status_;
  kill(SIGTERM);
  if (auto st = wait(grace)) return *st;
  kill(SIGKILL);
  return wait(10s).value_or(-1);
}

std::string Process::log() const {
  return readFile(logPath_);
}
std::string Process::logTail(size_t bytes) const {
  return tailOf(logPath_, bytes);
}

// ---------------------------------------------------------------------------------------
uint16_t freePort() {
  // The kernel may give a just-closed port out again: a port is handed out once per test
  // process, so a collector's ingest and HTTP ports never collide.
  static std::mutex mu;
  static std::set<uint16_t> handedOut;
  for (;;) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    ::close(fd);
    const uint16_t port = ntohs(addr.sin_port);
    std::lock_guard lock(mu);
    if (handedOut.insert(port).second) return port;
  }
}

// ---------------------------------------------------------------------------------------
nlohmann::json HttpResponse::json() const {
  return nlohmann::json::parse(body);
}

HttpResponse httpRequest(uint16_t port, const std::string& method, const std::string& target,
                         const std::string& body, const HttpHeaders& headers,
                         std::chrono::milliseconds timeout) {
  HttpResponse out;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    out.error = std::string("socket: ") + std::strerror(errno);
    return out;
  }
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    out.error = std::string("connect: ") + std::strerror(errno);
    ::close(fd);
    return out;
  }
  std::string host = "127.0.0.1:" + std::to_string(port);
  std::string extra;
  for (const auto& [name, value] : headers) {
    if (name == "Host") {
      host = value;
    } else {
      extra += name;
      extra += ": ";
      extra += value;
      extra += "\r\n";
    }
  }
  std::string req =
      method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n" + extra;
  if (method != "GET") {
    req +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n" + body;
  size_t sent = 0;
  while (sent < req.size()) {
    const ssize_t n = ::send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      out.error = std::string("send: ") + std::strerror(errno);
      ::close(fd);
      return out;
    }
    sent += static_cast<size_t>(n);
  }
  std::string resp;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      out.error = std::string("recv: ") + std::strerror(errno);
      ::close(fd);
      return out;
    }
    resp.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  const auto headEnd = resp.find("\r\n\r\n");
  if (resp.rfind("HTTP/1.", 0) != 0 || headEnd == std::string::npos) {
    out.error = "not an HTTP response: " + resp.substr(0, 200);
    return out;
  }
  const std::string head = resp.substr(0, headEnd);
  std::string rest = resp.substr(headEnd + 4);
  std::string lower = head;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("transfer-encoding: chunked") != std::string::npos) {
    std::string decoded;
    size_t pos = 0;
    for (;;) {
      const auto eol = rest.find("\r\n", pos);
      if (eol == std::string::npos) break;
      const size_t len = std::stoul(rest.substr(pos, eol - pos), nullptr, 16);
      if (len == 0) break;
      decoded += rest.substr(eol + 2, len);
      pos = eol + 2 + len + 2;
    }
    rest = decoded;
  }
  out.status = std::atoi(head.c_str() + 9);
  out.body = std::move(rest);
  return out;
}

HttpResponse httpGet(uint16_t port, const std::string& target, std::chrono::milliseconds timeout) {
  return httpRequest(port, "GET", target, "", {}, timeout);
}

HttpResponse httpPost(uint16_t port, const std::string& target, const std::string& body,
                      std::chrono::milliseconds timeout) {
  return httpRequest(port, "POST", target, body, {}, timeout);
}

// ---------------------------------------------------------------------------------------
std::vector<std::string> pythonCommand() {
  if (const char* preload = std::getenv("TRAINSCOPE_PYTHON_PRELOAD"); preload && *preload) {
    return {"/usr/bin/env", std::string("LD_PRELOAD=") + preload, "ASAN_OPTIONS=detect_leaks=0",
            "/usr/bin/python3"};
  }
  return {"/usr/bin/python3"};
}

std::string binaryFromEnv(const char* var) {
  const char* p = std::getenv(var);
  if (p == nullptr || *p == '\0') {
    std::fprintf(stderr, "e2e: skipped: %s is not set (run through meson test)\n", var);
    std::exit(77);
  }
  if (::access(p, X_OK) != 0) {
    std::fprintf(stderr, "e2e: skipped: %s=%s is not an executable (not built yet?)\n", var, p);
    std::exit(77);
  }
  return p;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::unique_ptr<Process> startCollector(const TempDir& dir, const CollectorSpec& spec,
                                        const std::string& name,
                                        const std::vector<std::string>& extraArgs) {
  const std::string bin = binaryFromEnv("TRAINSCOPE_COLLECTOR_BIN");
  const std::string ready = dir / (name + ".ready");
  std::remove(ready.c_str());
  std::vector<std::string> argv{bin,
                                "--data-dir",
                                spec.dataDir,
                                "--ingest",
                                spec.ingest(),
                                "--http",
                                "127.0.0.1:" + std::to_string(spec.httpPort),
                                "--ready-file",
                                ready};
  argv.insert(argv.end(), extraArgs.begin(), extraArgs.end());
  auto p = std::make_unique<Process>(name, argv, dir / (name + ".log"));
  // Stops early when the collector exits: the REQUIRE below then shows its log.
  const bool up = waitFor(
      [&] {
        return !p->running() ||
               (!readFile(ready).empty() && httpGet(spec.httpPort, "/healthz", 1s).status == 200);
      },
      15s, 50ms);
  INFO(name << " log:\n" << p->logTail());
  REQUIRE(p->running());
  REQUIRE(up);
  return p;
}

std::unique_ptr<Process> startAgent(const TempDir& dir, const AgentSpec& spec,
                                    const std::string& name,
                                    const std::vector<std::string>& extraArgs) {
  const std::string bin = binaryFromEnv("TRAINSCOPE_AGENT_BIN");
  std::vector<std::string> argv{bin,          "--collector", spec.collector,
                                "--endpoint", spec.endpoint, "--node",
                                spec.node,    "--spool-dir", spec.spoolDir};
  argv.insert(argv.end(), extraArgs.begin(), extraArgs.end());
  auto p = std::make_unique<Process>(name, argv, dir / (name + ".log"));
  const std::string sock = spec.endpoint.rfind("ipc://", 0) == 0 ? spec.endpoint.substr(6) : "";
  const bool up = waitFor(
      [&] { return !p->running() || sock.empty() || ::access(sock.c_str(), F_OK) == 0; }, 10s);
  INFO(name << " log:\n" << p->logTail());
  REQUIRE(p->running());
  REQUIRE(up);
  return p;
}

OneNode startOneNode(const TempDir& dir, const std::vector<std::string>& agentArgs) {
  OneNode n;
  n.cs.dataDir = dir / "data";
  n.cs.ingestPort = freePort();
  n.cs.httpPort = freePort();
  n.collector = startCollector(dir, n.cs);
  n.as = AgentSpec{"node0", "ipc://" + (dir / "node0.sock"), dir / "spool-node0", n.cs.ingest()};
  n.agent = startAgent(dir, n.as, "agent-node0", agentArgs);
  return n;
}

void requireExitZero(const std::vector<std::unique_ptr<Process>>& procs,
                     std::chrono::milliseconds timeout) {
  for (const auto& p : procs) {
    auto rc = p->wait(timeout);
    INFO(p->name() << " log:\n" << p->logTail());
    REQUIRE(rc.has_value());
    REQUIRE(*rc == 0);
  }
}

std::unique_ptr<Process> startSim(const TempDir& dir, const std::vector<std::string>& args,
                                  const std::string& name) {
  std::vector<std::string> argv{binaryFromEnv("TRAINSCOPE_SIMTRAIN_BIN")};
  argv.insert(argv.end(), args.begin(), args.end());
  return std::make_unique<Process>(name, argv, dir / (name + ".log"));
}

nlohmann::json stepRows(uint16_t httpPort, const std::string& job, bool detail) {
  auto r = httpGet(
      httpPort,
      "/api/v1/jobs/" + percentEncode(job) + "/steps?limit=100000" + (detail ? "&detail=1" : ""),
      30s);
  if (r.status != 200) return nlohmann::json::array();
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.contains("steps")) return nlohmann::json::array();
  return j["steps"];
}

int64_t jobStepRows(uint16_t httpPort, const std::string& job) {
  auto r = httpGet(httpPort, "/api/v1/jobs", 5s);
  if (r.status != 200) return -1;
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.contains("jobs")) return -1;
  for (const auto& row : j["jobs"]) {
    if (row.value("job", "") == job) return row.value("step_rows", int64_t{0});
  }
  return 0;
}

}  // namespace trainscope::e2e
