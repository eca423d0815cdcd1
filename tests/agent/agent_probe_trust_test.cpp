// What a local process gets from the agent's probe endpoint (issue 33 item 11): a (job, rank)
// belongs to the uid that registered it first, so another user's probe can neither take it over
// (and receive its commands) nor end it; the same user may register it again from a new
// process, as a restarted rank does. And an ipc --endpoint's socket file takes --endpoint-mode
// (0666 by default), so the root agent of docs/OPERATIONS.md serving other users' probes works
// as written.
// The other-user cases fork a child that drops to uid 65534 before any thread exists; they
// need root and are skipped (WARN) otherwise.
#include "agent/agent.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <zmq.hpp>

#include "schema/wire.h"
#include "tests/agent/relay_fakes.h"
#include "tests/common/support.h"

namespace wire = trainscope::wire;
using namespace trainscope::agent::testing;  // NOLINT(google-build-using-namespace): the fakes
using trainscope::agent::AgentOptions;

namespace {

constexpr uint32_t kNobody = 65534;

unsigned modeOf(const std::string& path) {
  struct stat sb {};
  REQUIRE(::lstat(path.c_str(), &sb) == 0);
  return sb.st_mode & 07777;
}

wire::Envelope helloOf(const std::string& job, uint32_t rank, uint32_t pid) {
  wire::Envelope e;
  auto* r = e.mutable_rank_hello()->mutable_rank();
  r->set_job(job);
  r->set_rank(rank);
  r->set_world_size(8);
  r->set_pid(pid);
  return e;
}

// What the agent answered one message: "error:<reason>", "ack:<seq>" or "none" (nothing
// within the wait; a plain hello or goodbye is not answered when taken).
std::string answer(zmq::socket_t& sock, int waitMs) {
  zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, std::chrono::milliseconds(waitMs)) <= 0) return "none";
  zmq::message_t m;
  if (!sock.recv(m, zmq::recv_flags::dontwait)) return "none";
  auto env = wire::decode(m.data(), m.size());
  if (!env) return "undecodable";
  if (env->has_error()) return "error:" + env->error().reason();
  if (env->has_ack()) return "ack:" + std::to_string(env->ack().seq());
  return "other";
}

// A probe in a child process of another uid, forked before the test starts any thread. It
// waits for the endpoint on its pipe, then sends what run() names and reports each answer.
class OtherUserProbe {
 public:
  OtherUserProbe() {
    int toChild[2], fromChild[2];
    REQUIRE(::pipe(toChild) == 0);
    REQUIRE(::pipe(fromChild) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(toChild[1]);
      ::close(fromChild[0]);
      child(toChild[0], fromChild[1]);  // never returns
    }
    ::close(toChild[0]);
    ::close(fromChild[1]);
    to_ = toChild[1];
    from_ = fromChild[0];
  }
  ~OtherUserProbe() {
    if (to_ >= 0) ::close(to_);
    if (from_ >= 0) ::close(from_);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  // Connects to `endpoint` and sends a hello, then a goodbye, for (jobA, 3); the answers to
  // each, one per line.
  std::string run(const std::string& endpoint) {
    const std::string line = endpoint + "\n";
    REQUIRE(::write(to_, line.data(), line.size()) == static_cast<ssize_t>(line.size()));
    ::close(to_);
    to_ = -1;
    std::string out;
    char buf[256];
    ssize_t n;
    while ((n = ::read(from_, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }

 private:
  [[noreturn]] static void child(int in, int out) {
    std::string endpoint;
    char c;
    while (::read(in, &c, 1) == 1 && c != '\n') endpoint.push_back(c);
    if (endpoint.empty()) ::_exit(0);  // the test ended before run(): nothing to do
    std::string report;
    if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) {
      report = "setuid failed\n";
    } else {
      zmq::context_t ctx;
      zmq::socket_t sock(ctx, zmq::socket_type::dealer);
      sock.set(zmq::sockopt::linger, 0);
      sock.connect(endpoint);
      wire::Envelope hello = helloOf("jobA", 3, static_cast<uint32_t>(::getpid()));
      std::string data = wire::encode(hello);
      sock.send(zmq::buffer(data), zmq::send_flags::none);
      report += answer(sock, 2000) + "\n";
      wire::Envelope bye;
      bye.mutable_rank_goodbye()->set_job("jobA");
      bye.mutable_rank_goodbye()->set_rank(3);
      data = wire::encode(bye);
      sock.send(zmq::buffer(data), zmq::send_flags::none);
      report += answer(sock, 2000) + "\n";
    }
    (void)!::write(out, report.data(), report.size());
    ::_exit(0);
  }

  pid_t pid_ = -1;
  int to_ = -1;
  int from_ = -1;
};

// Sends a capture command for jobA rank 3 from the collector; whether `probe` receives it.
bool commandReaches(FakeCollector& collector, FakeProbe& probe, const std::string& id) {
  wire::Envelope cmd;
  cmd.mutable_command()->set_id(id);
  cmd.mutable_command()->set_job("jobA");
  cmd.mutable_command()->add_ranks(3);
  auto* cap = cmd.mutable_command()->mutable_capture();
  cap->set_capture_id(id);
  cap->set_start_step(20);
  cap->set_steps(3);
  collector.sendToAgent(cmd);
  wire::Envelope got;
  while (probe.recv(&got, 3000)) {
    if (got.has_command() && got.command().id() == id) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("another user's probe cannot take over or end a registered rank; the same user can",
          "[root]") {
  trainscope::tests::requireRoot("cannot run a probe as another user");
  OtherUserProbe other;  // forked first, while this process has one thread
  TempDir tmp;
  REQUIRE(::chmod(tmp.path().c_str(), 0755) == 0);  // the other user reaches the socket
  zmq::context_t ctx;
  std::string collectorEp = freeTcpEndpoint(ctx);
  AgentOptions opts = testOptions(tmp, collectorEp);
  FakeCollector collector(ctx, collectorEp);
  AgentRunner agent(opts);
  // Open to everyone whatever --endpoint-mode does, so this case checks only the ranks.
  REQUIRE(::chmod(tmp.sub("agent.sock").c_str(), 0666) == 0);
  FakeProbe probe(ctx, opts.endpoint);
  probe.hello();  // rank 3 of jobA, as root
  REQUIRE(waitFor([&] { return agent.stats().ranks == 1; }));
  REQUIRE(collector.pumpUntil([&] { return collector.heartbeats > 0; }));

  const std::string answers = other.run(opts.endpoint);
  INFO("the other user's probe got: " << answers);
  CHECK(answers == "error:rank_claimed\nerror:rank_claimed\n");
  CHECK(waitFor([&] { return agent.stats().rejects["rank_claimed"] == 2; }));
  CHECK(agent.stats().ranks == 1);
  // The rank's commands still go to the probe that registered it.
  CHECK(commandReaches(collector, probe, "cap-1"));

  // A new process of the same user (a restarted rank) registers the rank again and gets its
  // commands from then on.
  FakeProbe restarted(ctx, opts.endpoint);
  restarted.send(helloOf("jobA", 3, static_cast<uint32_t>(::getpid()) + 1));
  (void)collector.pumpUntil([] { return false; }, 300);  // heartbeats go on while it lands
  CHECK(agent.stats().ranks == 1);
  CHECK(commandReaches(collector, restarted, "cap-2"));
  CHECK(agent.stats().rejects["rank_claimed"] == 2);
}

TEST_CASE("an ipc --endpoint's socket file takes --endpoint-mode, 0666 by default") {
  const mode_t old = ::umask(022);  // what a root agent started by hand or by systemd has
  TempDir tmp;
  zmq::context_t ctx;
  std::string collectorEp = freeTcpEndpoint(ctx);
  AgentOptions opts = testOptions(tmp, collectorEp);
  SECTION("by default anyone who can enter the directory may connect") {
    AgentRunner agent(opts);
    CHECK(modeOf(tmp.sub("agent.sock")) == 0666);
  }
  SECTION("0660 narrows it to the socket's group") {
    opts.endpointMode = 0660;
    AgentRunner agent(opts);
    CHECK(modeOf(tmp.sub("agent.sock")) == 0660);
  }
  ::umask(old);
}

TEST_CASE("a root agent's --endpoint in a directory others can enter serves their probes",
          "[root]") {
  trainscope::tests::requireRoot("cannot run a probe as another user");
  OtherUserProbe other;  // forked first, while this process has one thread
  const mode_t old = ::umask(022);
  TempDir tmp;
  REQUIRE(::chmod(tmp.path().c_str(), 0755) == 0);
  zmq::context_t ctx;
  std::string collectorEp = freeTcpEndpoint(ctx);
  AgentOptions opts = testOptions(tmp, collectorEp);
  AgentRunner agent(opts);
  // Its hello is taken (not answered) and its goodbye too: that user owns no rank here yet.
  // Without write permission on the socket its connect fails and the agent hears nothing.
  const std::string answers = other.run(opts.endpoint);
  INFO("the other user's probe got: " << answers);
  CHECK(answers == "none\nnone\n");
  CHECK(waitFor([&] { return agent.stats().probeFrames == 2; }, 3000));
  ::umask(old);
}

TEST_CASE("--endpoint-group with mode 0660 lets that group's users connect", "[root]") {
  trainscope::tests::requireRoot(
      "cannot give a socket another group or run a probe as another user");
  OtherUserProbe other;  // forked first, while this process has one thread; its gid is 65534
  const mode_t old = ::umask(022);
  TempDir tmp;
  REQUIRE(::chmod(tmp.path().c_str(), 0755) == 0);
  zmq::context_t ctx;
  std::string collectorEp = freeTcpEndpoint(ctx);
  AgentOptions opts = testOptions(tmp, collectorEp);
  opts.endpointMode = 0660;
  opts.endpointGroup = std::to_string(kNobody);
  AgentRunner agent(opts);
  struct stat sb {};
  REQUIRE(::lstat(tmp.sub("agent.sock").c_str(), &sb) == 0);
  CHECK(sb.st_gid == kNobody);
  CHECK((sb.st_mode & 07777) == 0660);
  const std::string answers = other.run(opts.endpoint);
  INFO("the group member's probe got: " << answers);
  CHECK(answers == "none\nnone\n");
  CHECK(waitFor([&] { return agent.stats().probeFrames == 2; }, 3000));
  ::umask(old);
}

TEST_CASE("--endpoint-group names a group of this node") {
  CHECK(trainscope::agent::groupId("0").isOk());
  CHECK(*trainscope::agent::groupId("0") == 0);
  CHECK(trainscope::agent::groupId("root").isOk());
  auto bad = trainscope::agent::groupId("no-such-group-here");
  CHECK_FALSE(bad.isOk());
  CHECK_THAT(bad.message(),
             Catch::Contains("--endpoint-group") && Catch::Contains("no-such-group-here"));
}
