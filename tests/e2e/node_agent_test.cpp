// One agent per node serves every user's jobs (issue 34 item 5): a root agent on its default
// endpoint (/run/trainscope/agent.sock, as docs/OPERATIONS.md's cluster install runs it) and an
// unchanged training script run by a non-root user (uid 65534) under `trainscope run` with no
// --agent: the rank's default endpoint must find the node agent and its steps must reach the
// collector. And when the agent's socket directory is closed to that user (mode 0700, as older
// agents made it), the rank says "permission denied" once, not "no agent", and trains as
// before. The test takes a private /run (a mount namespace with a tmpfs there), so it neither
// needs nor disturbs an agent of this machine. Exits 77 when not root, when mount namespaces
// are not allowed, or without /usr/bin/python3 torch.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/e2e/harness.h"

using namespace trainscope::e2e;

namespace {

constexpr const char* kNodeEndpoint = "ipc:///run/trainscope/agent.sock";
constexpr const char* kSetpriv = "/usr/bin/setpriv";

[[noreturn]] void skip(const std::string& why) {
  std::fprintf(stderr, "e2e: skipped: %s\n", why.c_str());
  std::exit(77);
}

// This process (and the daemons and ranks it starts) gets a /run of its own.
void privateRun() {
  if (::unshare(CLONE_NEWNS) != 0)
    skip("no mount namespace (unshare: " + std::string(std::strerror(errno)) + ")");
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      ::mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0) {
    skip("cannot mount a private /run: " + std::string(std::strerror(errno)));
  }
}

unsigned modeOf(const std::string& path) {
  struct stat sb {};
  if (::lstat(path.c_str(), &sb) != 0) return 0;
  return sb.st_mode & 07777;
}

size_t countOf(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// One rank (world size 1) of ddp_train_plain.py as uid 65534 under `trainscope run --job JOB`,
// with no --agent and no TRAINSCOPE_AGENT: the default endpoint decides.
std::unique_ptr<Process> startRankAsNobody(const TempDir& dir, const std::string& tag,
                                           const std::string& job) {
  const char* src = std::getenv("TRAINSCOPE_SOURCE_ROOT");
  REQUIRE(src != nullptr);
  std::vector<std::string> argv{kSetpriv,
                                "--reuid=65534",
                                "--regid=65534",
                                "--clear-groups",
                                "--",
                                binaryFromEnv("TRAINSCOPE_CLI_BIN"),
                                "run",
                                "--job",
                                job,
                                "--"};
  const auto python = pythonCommand();
  argv.insert(argv.end(), python.begin(), python.end());
  argv.insert(argv.end(), {std::string(src) + "/tests/e2e/ddp_train_plain.py", "--steps", "12",
                           "--width", "256"});
  std::vector<std::string> env{"RANK=0",
                               "LOCAL_RANK=0",
                               "WORLD_SIZE=1",
                               "MASTER_ADDR=127.0.0.1",
                               "MASTER_PORT=" + std::to_string(freePort()),
                               "PYTHONPATH=",
                               "OMP_NUM_THREADS=1",
                               "HOME=/tmp",
                               "XDG_RUNTIME_DIR=",
                               "TRAINSCOPE_AGENT="};
  return std::make_unique<Process>(tag, argv, dir / (tag + ".log"), env);
}

}  // namespace

TEST_CASE(
    "e2e: a root agent on the default endpoint serves a non-root user's job under trainscope "
    "run; a rank denied the socket says permission denied") {
  if (::geteuid() != 0) skip("not root: cannot run an agent as root and a rank as another user");
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    skip("/usr/bin/python3 cannot import torch");
  }
  if (::access(kSetpriv, X_OK) != 0) skip("no /usr/bin/setpriv (util-linux)");
  privateRun();
  TempDir dir;
  CollectorSpec cs;
  cs.dataDir = dir / "data";
  cs.ingestPort = freePort();
  cs.httpPort = freePort();
  auto collector = startCollector(dir, cs);
  // The endpoint named is root's default, so the agent treats its directory as the node's.
  const AgentSpec as{"node0", kNodeEndpoint, dir / "spool", cs.ingest()};
  const mode_t oldMask = ::umask(022);  // a root shell's; the systemd unit's is 0000
  {
    auto agent = startAgent(dir, as, "agent");
    CHECK(modeOf("/run/trainscope") == 0755);  // others enter, only root creates
    CHECK(modeOf("/run/trainscope/agent.sock") == 0666);

    const std::string job = "e2e-node-agent";
    auto rank = startRankAsNobody(dir, "served", job);
    const auto rc = rank->wait(180s);
    const std::string log = rank->log();
    INFO("rank log:\n" << log << "\nagent log:\n" << agent->logTail());
    REQUIRE(rc.has_value());
    CHECK(*rc == 0);
    CHECK(countOf(log, "rank 0: done") == 1);
    CHECK(countOf(log, "no agent") == 0);
    CHECK(countOf(log, "permission denied") == 0);
    CHECK(waitFor([&] { return jobStepRows(cs.httpPort, job) >= 12; }, 30s, 100ms));
    CHECK(jobStepRows(cs.httpPort, job) == 12);
  }
  {
    // A directory closed to other users, as agents before this one made it.
    auto agent = startAgent(dir, as, "agent-closed");
    REQUIRE(::chmod("/run/trainscope", 0700) == 0);
    const std::string job = "e2e-node-agent-denied";
    auto rank = startRankAsNobody(dir, "denied", job);
    const auto rc = rank->wait(180s);
    const std::string log = rank->log();
    INFO("rank log:\n" << log);
    REQUIRE(rc.has_value());
    CHECK(*rc == 0);
    CHECK(countOf(log, "rank 0: done") == 1);
    CHECK(countOf(log, "trainscope: permission denied: uid 65534 may not connect to the agent at " +
                           std::string(kNodeEndpoint)) == 1);
    CHECK(countOf(log, "no agent") == 0);
    CHECK(jobStepRows(cs.httpPort, job) <= 0);
  }
  ::umask(oldMask);
}
