// The whole-system test harness: a temp dir, child processes that never outlive the test,
// free ports, polling, a tiny blocking HTTP client, and helpers that start the trainscope
// daemons from the binaries meson passes in the environment. For the e2e tests' main thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/percent_encode.h"
#include "common/status.h"
#include "tests/common/support.h"

namespace trainscope::e2e {

using namespace std::chrono_literals;

using trainscope::tests::TempDir;
using trainscope::tests::waitFor;

// A child process started with posix_spawn; stdout and stderr go to `logPath`. The destructor
// sends SIGTERM, then SIGKILL after `grace`, and reaps it; on exit or a fatal signal of the
// test process every live child is SIGKILLed. Its log tail is kept for the failure report.
class Process {
 public:
  Process(std::string name, std::vector<std::string> argv, std::string logPath,
          const std::vector<std::string>& extraEnv = {});
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  const std::string& name() const { return name_; }
  pid_t pid() const { return pid_; }
  bool running();  // not yet reaped and still alive
  void kill(int sig);
  // The exit status (a code, or 128 + signal), or nothing if it is still running at timeout.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  // SIGTERM, then SIGKILL after `grace`; returns the exit status.
  int stop(std::chrono::milliseconds grace = 5s);
  std::string log() const;  // the whole log so far
  std::string logTail(size_t bytes = 3000) const;
  const std::string& logPath() const { return logPath_; }

 private:
  std::string name_;
  std::string logPath_;
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// A TCP port on 127.0.0.1 that was free a moment ago.
uint16_t freePort();

struct HttpResponse {
  int status = 0;  // 0 when the connection failed
  std::string body;
  std::string error;            // why status is 0
  nlohmann::json json() const;  // parses body; throws on bad JSON (the test fails)
};

// Blocking HTTP/1.1 to 127.0.0.1:port with Connection: close; `headers` are sent as given, a
// "Host" among them in place of 127.0.0.1:port. A body other than a GET's is sent as JSON.
using HttpHeaders = std::vector<std::pair<std::string, std::string>>;
HttpResponse httpRequest(uint16_t port, const std::string& method, const std::string& target,
                         const std::string& body = "", const HttpHeaders& headers = {},
                         std::chrono::milliseconds timeout = 5s);
HttpResponse httpGet(uint16_t port, const std::string& target,
                     std::chrono::milliseconds timeout = 5s);
HttpResponse httpPost(uint16_t port, const std::string& target, const std::string& body,
                      std::chrono::milliseconds timeout = 5s);

// The path in environment variable `var` (set by meson); exits 77 (skip) with a message when
// it is unset or the file is not executable: the part of the system it names is not built.
std::string binaryFromEnv(const char* var);

// The command that starts /usr/bin/python3. In a sanitizer build our probe library leaves the
// sanitizer runtime to the program that loads it, so python3 gets it preloaded (leak checks
// off: CPython keeps memory until exit by design) through `env` — and only python3: a
// sanitized binary in between (`trainscope run`) carries its own and refuses a second.
std::vector<std::string> pythonCommand();

// Reads a whole file; "" when it cannot.
std::string readFile(const std::string& path);

// The collector, started on fixed ports so a restart can reuse them.
struct CollectorSpec {
  std::string dataDir;
  uint16_t ingestPort = 0;
  uint16_t httpPort = 0;
  std::string ingest() const { return "tcp://127.0.0.1:" + std::to_string(ingestPort); }
};
// Starts trainscope-collector and waits (up to 15 s) for its ready file and /healthz.
// `extraArgs` go after the ones the spec makes.
std::unique_ptr<Process> startCollector(const TempDir& dir, const CollectorSpec& spec,
                                        const std::string& name = "collector",
                                        const std::vector<std::string>& extraArgs = {});

struct AgentSpec {
  std::string node;
  std::string endpoint;  // ipc://...
  std::string spoolDir;
  std::string collector;  // tcp://...
};
// Starts trainscope-agent and waits (up to 10 s) for its ipc socket file to appear.
// `extraArgs` go after the ones the spec makes.
std::unique_ptr<Process> startAgent(const TempDir& dir, const AgentSpec& spec,
                                    const std::string& name,
                                    const std::vector<std::string>& extraArgs = {});

// A collector on free ports (data in <dir>/data) and one agent, node "node0" at
// ipc://<dir>/node0.sock (with `agentArgs` after its own), both started and ready: what most
// whole-system tests begin with.
struct OneNode {
  CollectorSpec cs;
  AgentSpec as;
  std::unique_ptr<Process> collector;
  std::unique_ptr<Process> agent;  // named "agent-node0"
};
OneNode startOneNode(const TempDir& dir, const std::vector<std::string>& agentArgs = {});

// Waits up to `timeout` for each process to exit and requires that each exited with 0 (the
// failure names it and shows its log's tail).
void requireExitZero(const std::vector<std::unique_ptr<Process>>& procs,
                     std::chrono::milliseconds timeout);

// Starts trainscope-simtrain with `args`; its log is <dir>/<name>.log.
std::unique_ptr<Process> startSim(const TempDir& dir, const std::vector<std::string>& args,
                                  const std::string& name = "simtrain");

// GET /api/v1/jobs/{job}/steps with limit=100000 (`detail`: with detail=1, operators,
// collectives and the parallel detail); the rows, or an empty array when the request fails.
nlohmann::json stepRows(uint16_t httpPort, const std::string& job, bool detail = false);

// Number of step rows the collector reports for `job` (from /api/v1/jobs), -1 on error.
int64_t jobStepRows(uint16_t httpPort, const std::string& job);

// Percent-encodes a path segment or query value (common/percent_encode.h).
using trainscope::percentEncode;

}  // namespace trainscope::e2e
