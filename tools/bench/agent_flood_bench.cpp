// agent_flood_bench: the agent's memory under a local probe that floods it (issue 33 item 9).
// Starts trainscope-agent (no collector listening: everything stays in the spool), connects one
// DEALER to its probe endpoint and sends N batch frames of about 8 MB each (one step item that
// fills the frame, the largest a probe frame may be) as fast as ZeroMQ takes them, then samples
// the agent's VmRSS and VmHWM from /proc/<pid>/status every 20 ms and prints the peak, the RSS at
// the end and the agent's exit. Single-threaded; the frame is sent zero-copy, so the bench itself
// holds one copy of it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/guarded_main.h"
#include "schema/wire.h"
#include "tools/bench/agent_bench_common.h"

namespace wire = trainscope::wire;

namespace {

struct BenchOptions {
  std::string agentPath;               // empty: next to this binary or build/agent/
  int messages = 150;                  // frames sent
  size_t frameBytes = 8'000'000;       // size of each frame
  int seconds = 25;                    // sampling time after the first send
  std::vector<std::string> agentArgs;  // extra flags for the agent
};

// VmRSS and VmHWM of `pid` in KiB (0 when gone).
std::pair<uint64_t, uint64_t> memKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  uint64_t rss = 0, hwm = 0;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) rss = std::stoull(line.substr(6));
    if (line.rfind("VmHWM:", 0) == 0) hwm = std::stoull(line.substr(6));
  }
  return {rss, hwm};
}

using trainscope::bench::findAgent;

// A Batch frame of about `bytes` holding one step item whose op name fills it.
std::string floodFrame(size_t bytes) {
  wire::Envelope batch;
  batch.mutable_batch()->set_seq(1);
  auto* item = batch.mutable_batch()->add_items();
  item->set_schema_version(wire::kSchemaVersion);
  auto* s = item->mutable_step();
  s->set_job("flood");
  s->set_rank(0);
  s->set_step(1);
  s->add_ops()->set_name(std::string(bytes > 64 ? bytes - 64 : 0, 'x'));
  return wire::encode(batch);
}

double mib(uint64_t kib) {
  return static_cast<double>(kib) / 1024.0;
}

int benchMain(int argc, char** argv) {
  BenchOptions opts;
  CLI::App app{
      "agent_flood_bench: peak RSS of trainscope-agent while one local probe floods it with "
      "large batch frames."};
  app.add_option("--agent", opts.agentPath,
                 "path of trainscope-agent [default: next to this binary or ../../agent/]");
  app.add_option("--messages", opts.messages, "frames sent")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--frame-bytes", opts.frameBytes, "bytes per frame")
      ->capture_default_str()
      ->check(CLI::Range(size_t{64}, size_t{64} << 20));
  app.add_option("--seconds", opts.seconds, "sampling time from the first send")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  app.add_option("--agent-arg", opts.agentArgs, "extra flag passed to the agent, repeatable");
  CLI11_PARSE(app, argc, argv);

  std::string agentPath = findAgent(opts.agentPath);
  if (agentPath.empty() || !std::filesystem::exists(agentPath)) {
    std::fprintf(stderr, "agent_flood_bench: trainscope-agent not found; pass --agent PATH\n");
    return 2;
  }
  char tmpl[] = "/tmp/ts-agent-flood-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string dir = tmpl;
  const std::string sock = dir + "/agent.sock";

  pid_t pid = fork();
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDOUT_FILENO);
    // Port 9 (discard): nothing acks, so every record stays in the spool, bounded below so
    // the flood costs 256 MiB of disk at most.
    std::vector<std::string> args{agentPath,
                                  "--collector",
                                  "tcp://127.0.0.1:9",
                                  "--endpoint",
                                  "ipc://" + sock,
                                  "--spool-dir",
                                  dir + "/spool",
                                  "--spool-max-bytes",
                                  std::to_string(256u << 20),
                                  "--node",
                                  "flood",
                                  "--log-level",
                                  "warn"};
    args.insert(args.end(), opts.agentArgs.begin(), opts.agentArgs.end());
    std::vector<char*> argv2;
    argv2.reserve(args.size() + 1);
    for (auto& a : args) argv2.push_back(a.data());
    argv2.push_back(nullptr);
    execv(agentPath.c_str(), argv2.data());
    std::perror("exec trainscope-agent");
    _exit(127);
  }
  for (int i = 0; i < 200 && !std::filesystem::exists(sock); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const auto [startRss, startHwm] = memKiB(pid);

  static std::string frame;  // outlives every zero-copy message
  frame = floodFrame(opts.frameBytes);
  zmq::context_t ctx(1);
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::sndhwm, opts.messages + 10);
  dealer.connect("ipc://" + sock);

  uint64_t peakRss = 0;
  auto sample = [&] {
    auto [rss, hwm] = memKiB(pid);
    peakRss = std::max(peakRss, rss);
    (void)hwm;
  };
  const int64_t start = trainscope::monotonicNowNs();
  const int64_t end = start + opts.seconds * 1'000'000'000LL;
  int sent = 0;
  uint64_t acks = 0;
  while (trainscope::monotonicNowNs() < end) {
    while (sent < opts.messages) {
      zmq::message_t m(frame.data(), frame.size(), nullptr, nullptr);  // no copy, no free
      if (!dealer.send(m, zmq::send_flags::dontwait)) break;
      ++sent;
    }
    zmq::message_t reply;
    while (dealer.recv(reply, zmq::recv_flags::dontwait)) {
      auto env = wire::decode(reply.data(), reply.size());
      if (env && env->has_ack()) ++acks;
    }
    sample();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto [endRss, hwm] = memKiB(pid);
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);

  std::printf("agent_flood_bench: %d frames of %zu bytes from one probe, sampled for %d s\n",
              opts.messages, frame.size(), opts.seconds);
  std::printf("  frames queued to the agent %d, acks received %llu\n", sent,
              static_cast<unsigned long long>(acks));
  std::printf("  agent RSS: at start %.1f MiB, peak sampled %.1f MiB, at the end %.1f MiB\n",
              mib(startRss), mib(peakRss), mib(endRss));
  std::printf("  agent VmHWM (peak RSS of its life): %.1f MiB (%.1f MiB before the flood)\n",
              mib(hwm), mib(startHwm));
  std::printf("  agent exit: %s %d\n", WIFEXITED(status) ? "code" : "signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return trainscope::guardedMain("agent_flood_bench", [&] { return benchMain(argc, argv); });
}
