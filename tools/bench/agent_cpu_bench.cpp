// agent_cpu_bench: how much CPU the real trainscope-agent uses under a realistic node load.
// Starts the agent process, a fake collector (acks batches, answers heartbeats) and N fake
// probe DEALER sockets that each send one StepReport (32 ops, 8 collectives) per period in
// Batch envelopes, as probes do; reads the agent's utime+stime from /proc/<pid>/stat and
// prints it as % of one core. Single-threaded apart from the collector thread.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
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
  int ranks = 64;                      // fake probes
  int stepsPerSec = 10;                // StepReports per rank per second
  int seconds = 20;                    // measured duration
  int warmupSeconds = 2;               // excluded from the measurement
  std::vector<std::string> agentArgs;  // extra flags for the agent
};

uint64_t cpuTicks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string f;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; fields >> f; ++i) {
    if (i == 14) utime = std::stoull(f);
    if (i == 15) {
      stime = std::stoull(f);
      break;
    }
  }
  return utime + stime;
}

using trainscope::bench::findAgent;

wire::Envelope stepReport(const std::string& job, uint32_t rank, int64_t step) {
  wire::Envelope env;
  auto* s = env.mutable_step();
  int64_t now = trainscope::wallNowNs();
  s->set_job(job);
  s->set_rank(rank);
  s->set_step(step);
  s->set_start_ns(now - 100'000'000);
  s->set_end_ns(now);
  s->set_duration_ns(100'000'000);
  s->set_compute_ns(70'000'000 + rank * 1000);
  s->set_comm_ns(25'000'000);
  s->set_exposed_comm_ns(8'000'000);
  s->set_data_ns(2'000'000);
  for (int i = 0; i < 32; ++i) {
    auto* op = s->add_ops();
    op->set_name("aten::op_" + std::to_string(i) + (i % 2 ? "_backward" : "_forward"));
    op->set_count(10 + static_cast<uint64_t>(i));
    op->set_total_ns(1'000'000 + i * 12'345);
    op->set_max_ns(200'000 + i * 1'000);
  }
  for (int i = 0; i < 8; ++i) {
    auto* c = s->add_collectives();
    c->set_op(i % 2 ? wire::ALL_GATHER : wire::ALL_REDUCE);
    c->set_group("dp:" + std::to_string(i % 4));
    c->set_bytes(1u << (20 + i % 4));
    c->set_count(4);
    c->set_total_ns(3'000'000 + i * 1000);
    c->set_max_ns(900'000);
    c->set_bandwidth_bps(1.2e10);
    c->set_first_arrival_ns(now - 50'000'000);
    c->set_last_completion_ns(now - 10'000'000);
  }
  s->set_records(400);
  return env;
}

// Owns `sock` (bound by main before the thread started) until stop.
void runCollector(zmq::socket_t& sock, std::atomic<bool>& stop, std::atomic<uint64_t>& items,
                  std::atomic<uint64_t>& batches) {
  while (!stop.load()) {
    zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) <= 0) continue;
    zmq::message_t rid, frame;
    if (!sock.recv(rid, zmq::recv_flags::dontwait) || !sock.recv(frame, zmq::recv_flags::dontwait))
      continue;
    auto env = wire::decode(frame.data(), frame.size());
    if (!env) continue;
    wire::Envelope reply;
    if (env->has_batch()) {
      items += static_cast<uint64_t>(env->batch().items_size());
      ++batches;
      reply.mutable_ack()->set_seq(env->batch().seq());
    } else if (env->has_heartbeat()) {
      auto* r = reply.mutable_heartbeat_reply();
      r->set_t1_ns(env->heartbeat().t1_ns());
      r->set_t2_ns(trainscope::wallNowNs());
      r->set_t3_ns(trainscope::wallNowNs());
    } else {
      continue;
    }
    std::string data = wire::encode(reply);
    sock.send(rid, zmq::send_flags::sndmore);
    sock.send(zmq::buffer(data), zmq::send_flags::none);
  }
}

int benchMain(int argc, char** argv) {
  BenchOptions opts;
  CLI::App app{
      "agent_cpu_bench: CPU use of trainscope-agent with N fake ranks sending step "
      "reports to it and a fake collector acking upstream."};
  app.add_option("--agent", opts.agentPath,
                 "path of trainscope-agent [default: next to this binary or ../../agent/]");
  app.add_option("--ranks", opts.ranks, "fake probes (ranks)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--steps-per-sec", opts.stepsPerSec, "step reports per rank per second")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--seconds", opts.seconds, "measured duration")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  app.add_option("--warmup-seconds", opts.warmupSeconds, "excluded start-up time")
      ->capture_default_str()
      ->check(CLI::Range(0, 600));
  app.add_option(
      "--agent-arg", opts.agentArgs,
      "extra flag passed to the agent, repeatable (e.g. --agent-arg=--probe-coalesce-ms=0)");
  CLI11_PARSE(app, argc, argv);

  std::string agentPath = findAgent(opts.agentPath);
  if (agentPath.empty() || !std::filesystem::exists(agentPath)) {
    std::fprintf(stderr, "agent_cpu_bench: trainscope-agent not found; pass --agent PATH\n");
    return 2;
  }
  char tmpl[] = "/tmp/ts-agent-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  std::string dir = tmpl;
  std::string sock = dir + "/agent.sock";

  zmq::context_t ctx(2);
  zmq::socket_t collectorSock(ctx, zmq::socket_type::router);
  collectorSock.set(zmq::sockopt::linger, 0);
  collectorSock.bind("tcp://127.0.0.1:*");
  std::string collectorEp = collectorSock.get(zmq::sockopt::last_endpoint);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> collectorItems{0}, collectorBatches{0};
  std::thread collector(runCollector, std::ref(collectorSock), std::ref(stop),
                        std::ref(collectorItems), std::ref(collectorBatches));

  pid_t pid = fork();
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDOUT_FILENO);
    std::vector<std::string> args{agentPath,       "--collector", collectorEp,    "--endpoint",
                                  "ipc://" + sock, "--spool-dir", dir + "/spool", "--node",
                                  "bench",         "--log-level", "warn"};
    args.insert(args.end(), opts.agentArgs.begin(), opts.agentArgs.end());
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(agentPath.c_str(), argv.data());
    std::perror("exec trainscope-agent");
    _exit(127);
  }
  for (int i = 0; i < 100 && !std::filesystem::exists(sock); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  struct Probe {
    zmq::socket_t sock;
    uint64_t seq = 0;
    int64_t step = 0;
    int64_t nextSendNs = 0;
    int64_t nextHelloNs = 0;
    uint64_t acked = 0;
  };
  std::vector<Probe> probes;
  probes.reserve(static_cast<size_t>(opts.ranks));
  const int64_t periodNs = 1'000'000'000 / opts.stepsPerSec;
  int64_t start = trainscope::monotonicNowNs();
  for (int r = 0; r < opts.ranks; ++r) {
    Probe p{zmq::socket_t(ctx, zmq::socket_type::dealer)};
    p.sock.set(zmq::sockopt::linger, 0);
    p.sock.connect("ipc://" + sock);
    p.nextSendNs = start + periodNs * r / opts.ranks;  // ranks spread over the period
    p.nextHelloNs = start;
    probes.push_back(std::move(p));
  }

  int64_t measureFrom = start + opts.warmupSeconds * 1'000'000'000LL;
  int64_t end = measureFrom + opts.seconds * 1'000'000'000LL;
  uint64_t ticksFrom = 0;
  bool measuring = false;
  uint64_t sent = 0;
  std::vector<zmq::pollitem_t> items(probes.size());
  while (true) {
    int64_t now = trainscope::monotonicNowNs();
    if (!measuring && now >= measureFrom) {
      ticksFrom = cpuTicks(pid);
      measuring = true;
    }
    if (now >= end) break;
    int64_t next = end;
    for (size_t r = 0; r < probes.size(); ++r) {
      Probe& p = probes[r];
      if (now >= p.nextHelloNs) {
        wire::Envelope hello;
        auto* info = hello.mutable_rank_hello()->mutable_rank();
        info->set_job("bench-job");
        info->set_rank(static_cast<uint32_t>(r));
        info->set_world_size(static_cast<uint32_t>(probes.size()));
        info->set_pid(static_cast<uint32_t>(getpid()));
        std::string data = wire::encode(hello);
        (void)p.sock.send(zmq::buffer(data), zmq::send_flags::dontwait);
        p.nextHelloNs += 2'000'000'000;
      }
      if (now >= p.nextSendNs) {
        wire::Envelope batch;
        batch.mutable_batch()->set_seq(++p.seq);
        *batch.mutable_batch()->add_items() =
            stepReport("bench-job", static_cast<uint32_t>(r), p.step++);
        std::string data = wire::encode(batch);
        if (p.sock.send(zmq::buffer(data), zmq::send_flags::dontwait)) ++sent;
        p.nextSendNs += periodNs;
      }
      next = std::min({next, p.nextSendNs, p.nextHelloNs});
      items[r] = zmq::pollitem_t{p.sock.handle(), 0, ZMQ_POLLIN, 0};
    }
    long waitMs =
        std::max<long>(0, static_cast<long>((next - trainscope::monotonicNowNs()) / 1'000'000));
    if (zmq::poll(items.data(), items.size(), std::chrono::milliseconds(waitMs)) > 0) {
      for (size_t r = 0; r < probes.size(); ++r) {
        if (!(items[r].revents & ZMQ_POLLIN)) continue;
        zmq::message_t m;
        while (probes[r].sock.recv(m, zmq::recv_flags::dontwait)) {
          auto env = wire::decode(m.data(), m.size());
          if (env && env->has_ack()) probes[r].acked = env->ack().seq();
        }
      }
    }
  }
  uint64_t ticksTo = cpuTicks(pid);
  double cpuSec =
      static_cast<double>(ticksTo - ticksFrom) / static_cast<double>(sysconf(_SC_CLK_TCK));
  double percent = 100.0 * cpuSec / opts.seconds;

  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  stop.store(true);
  collector.join();
  uint64_t acked = 0;
  for (const auto& p : probes) acked += p.acked;
  std::filesystem::remove_all(dir);

  std::printf(
      "agent_cpu_bench: %d ranks x %d steps/s for %d s (32 ops, 8 collectives per report)\n",
      opts.ranks, opts.stepsPerSec, opts.seconds);
  std::printf("  agent CPU: %.2f %% of one core (%.2f s CPU)\n", percent, cpuSec);
  std::printf("  probe batches sent %llu, acked by the agent %llu\n",
              static_cast<unsigned long long>(sent), static_cast<unsigned long long>(acked));
  std::printf("  collector received %llu items in %llu batches\n",
              static_cast<unsigned long long>(collectorItems.load()),
              static_cast<unsigned long long>(collectorBatches.load()));
  std::printf("  agent exit: %s %d\n", WIFEXITED(status) ? "code" : "signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return trainscope::guardedMain("agent_cpu_bench", [&] { return benchMain(argc, argv); });
}
