// The default probe endpoint (issue 13 item 6): agents and probes derive the same path, never
// a shared name in /tmp, and the agent makes its directory private or refuses one another user
// owns (it may have been made to receive the probes' telemetry). One node agent serves every
// user (issue 34 item 5): a probe takes root's socket when it is there, and that directory is
// 0755 (every user enters, only root creates in it).
#include <filesystem>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "agent/options.h"
#include "agent/private_dir.h"
#include "common/agent_endpoint.h"
#include "tests/common/support.h"

using trainscope::agentSocketDirFor;
using trainscope::probeEndpointFor;
using trainscope::agent::ensureNodeSocketDir;
using trainscope::agent::ensurePrivateDir;
using trainscope::tests::TempDir;

namespace {

unsigned modeOf(const std::string& path) {
  struct stat sb {};
  REQUIRE(::lstat(path.c_str(), &sb) == 0);
  return sb.st_mode & 07777;
}

}  // namespace

TEST_CASE("the default endpoint: /run/trainscope for root, the runtime dir for others") {
  CHECK(agentSocketDirFor(0, "/run/user/0", true) == "/run/trainscope");
  CHECK(agentSocketDirFor(0, nullptr, false) == "/tmp/trainscope-0");
  CHECK(agentSocketDirFor(1000, "/run/user/1000", true) == "/run/user/1000/trainscope");
  CHECK(agentSocketDirFor(1000, nullptr, true) == "/tmp/trainscope-1000");
  CHECK(agentSocketDirFor(1000, "", true) == "/tmp/trainscope-1000");
  CHECK(agentSocketDirFor(1000, "relative/dir", true) == "/tmp/trainscope-1000");
  // What the agent binds by default is what the probes connect to by default.
  CHECK(trainscope::agent::AgentOptions().endpoint == trainscope::defaultAgentEndpoint());
  CHECK(trainscope::defaultAgentEndpoint() ==
        "ipc://" + trainscope::defaultAgentSocketDir() + "/agent.sock");
}

TEST_CASE("a probe's default: the node agent's socket when it is there, else its user's own") {
  const std::string node = "ipc:///run/trainscope/agent.sock";
  CHECK(probeEndpointFor(1000, "/run/user/1000", true, true) == node);
  CHECK(probeEndpointFor(1000, nullptr, true, true) == node);
  CHECK(probeEndpointFor(0, nullptr, true, true) == node);
  CHECK(probeEndpointFor(1000, "/run/user/1000", true, false) ==
        "ipc:///run/user/1000/trainscope/agent.sock");
  CHECK(probeEndpointFor(1000, nullptr, true, false) == "ipc:///tmp/trainscope-1000/agent.sock");
  CHECK(probeEndpointFor(0, nullptr, true, false) == node);  // root's own is the node's
  CHECK(probeEndpointFor(1000, nullptr, false, true) == "ipc:///tmp/trainscope-1000/agent.sock");
}

TEST_CASE("the node agent's socket directory: every user enters it, only its owner writes") {
  const mode_t old = ::umask(077);  // the mode is set, not left to the umask
  TempDir tmp;
  SECTION("created with mode 0755") {
    const std::string dir = tmp.sub("new");
    REQUIRE(ensureNodeSocketDir(dir, "--endpoint").isOk());
    CHECK(modeOf(dir) == 0755);
  }
  SECTION("one an older agent made private is opened to 0755") {
    const std::string dir = tmp.sub("private");
    std::filesystem::create_directories(dir);
    REQUIRE(::chmod(dir.c_str(), 0700) == 0);
    REQUIRE(ensureNodeSocketDir(dir, "--endpoint").isOk());
    CHECK(modeOf(dir) == 0755);
  }
  SECTION("one open to others' writes is closed to them") {
    const std::string dir = tmp.sub("open");
    std::filesystem::create_directories(dir);
    REQUIRE(::chmod(dir.c_str(), 0777) == 0);
    REQUIRE(ensureNodeSocketDir(dir, "--endpoint").isOk());
    CHECK(modeOf(dir) == 0755);
  }
  SECTION("a link in its place and a directory of another user are refused") {
    std::filesystem::create_directories(tmp.sub("real"));
    std::filesystem::create_directory_symlink(tmp.sub("real"), tmp.sub("link"));
    CHECK_FALSE(ensureNodeSocketDir(tmp.sub("link"), "--endpoint").isOk());
    if (::geteuid() == 0) {
      const std::string dir = tmp.sub("theirs");
      std::filesystem::create_directories(dir);
      REQUIRE(::chown(dir.c_str(), 65534, 65534) == 0);
      auto st = ensureNodeSocketDir(dir, "--endpoint");
      CHECK_FALSE(st.isOk());
      CHECK_THAT(st.message(), Catch::Contains("belongs to uid 65534"));
    }
  }
  ::umask(old);
}

TEST_CASE("the agent makes the endpoint directory private, or refuses one it does not own") {
  TempDir tmp;
  SECTION("created with mode 0700") {
    const std::string dir = tmp.sub("new");
    REQUIRE(ensurePrivateDir(dir, "--endpoint").isOk());
    CHECK(modeOf(dir) == 0700);
  }
  SECTION("an existing directory of ours open to others is tightened") {
    const std::string dir = tmp.sub("open");
    std::filesystem::create_directories(dir);
    REQUIRE(::chmod(dir.c_str(), 0777) == 0);
    REQUIRE(ensurePrivateDir(dir, "--endpoint").isOk());
    CHECK(modeOf(dir) == 0700);
  }
  SECTION("a link in its place is refused") {
    std::filesystem::create_directories(tmp.sub("real"));
    const std::string dir = tmp.sub("link");
    std::filesystem::create_directory_symlink(tmp.sub("real"), dir);
    auto st = ensurePrivateDir(dir, "--endpoint");
    CHECK_FALSE(st.isOk());
    CHECK_THAT(st.message(), Catch::Contains("--endpoint") && Catch::Contains("not a directory"));
  }
  SECTION("a missing parent is named") {
    auto st = ensurePrivateDir(tmp.sub("no/such/parent"), "--endpoint");
    CHECK_FALSE(st.isOk());
    CHECK_THAT(st.message(), Catch::Contains("cannot create"));
  }
}

TEST_CASE("the agent refuses an endpoint directory of another user", "[root]") {
  trainscope::tests::requireRoot("cannot make a directory of another user");
  TempDir tmp;
  const std::string dir = tmp.sub("theirs");
  std::filesystem::create_directories(dir);
  REQUIRE(::chown(dir.c_str(), 65534, 65534) == 0);
  REQUIRE(::chmod(dir.c_str(), 0700) == 0);
  auto st = ensurePrivateDir(dir, "--endpoint");
  CHECK_FALSE(st.isOk());
  CHECK_THAT(st.message(), Catch::Contains("belongs to uid 65534"));
}
