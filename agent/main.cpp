// trainscope-agent: parses flags into AgentOptions and runs the agent until SIGINT/SIGTERM.
#include <cstdlib>
#include <iostream>
#include <map>

#include <CLI/CLI.hpp>

#include "agent/agent.h"
#include "agent/options.h"
#include "common/config_file.h"
#include "common/guarded_main.h"

namespace {

int agentMain(int argc, char** argv) {
  using trainscope::LogLevel;
  trainscope::agent::AgentOptions opts;
  CLI::App app{
      "trainscope-agent: the per-node daemon. Receives probe telemetry on a local "
      "endpoint, spools it on disk, samples host metrics from /proc and streams "
      "everything to the collector."};
  app.add_option("--collector", opts.collectors,
                 "collector ingest endpoint, tcp://HOST:PORT or ipc://PATH. Several (repeat "
                 "the flag or separate them with commas): each job's data goes to the one its "
                 "name hashes to among those up (rendezvous hashing), and a collector's jobs move "
                 "to the others while it is gone; list the same endpoints on every agent and let "
                 "the collectors share one ClickHouse store (docs/OPERATIONS.md: several "
                 "collectors)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--collector-timeout-ms", opts.collectorTimeoutMs,
                 "with several --collector: one not heard from (acks, heartbeat replies) for "
                 "this long is taken as gone and its jobs move to the others")
      ->capture_default_str();
  app.add_option("--endpoint", opts.endpoint,
                 "where probes connect: ipc://PATH (or tcp://HOST:PORT); a stale socket file "
                 "is removed, a live agent there makes this one refuse to start. The default "
                 "is /run/trainscope/agent.sock for root (the node agent: its directory is made "
                 "mode 0755, so every user's probes reach it, and every probe connects there "
                 "without TRAINSCOPE_AGENT when it exists), $XDG_RUNTIME_DIR/trainscope/agent.sock "
                 "for others, else /tmp/trainscope-<uid>/agent.sock (those directories are made "
                 "mode 0700); a directory another user owns is refused")
      ->capture_default_str();
  std::string endpointMode = "0666";
  app.add_option("--endpoint-mode", endpointMode,
                 "octal mode of an ipc:// --endpoint's socket file; probes need write permission "
                 "to connect, so the default leaves the directory's permissions to decide who "
                 "may (0660: the socket's group only, see --endpoint-group)")
      ->capture_default_str();
  app.add_option("--endpoint-group", opts.endpointGroup,
                 "group (name or number) given to an ipc:// --endpoint's socket file; with "
                 "--endpoint-mode 0660 only its members (and root) may connect [default: the "
                 "agent's own group]");
  app.add_option("--node", opts.node, "this node's name [default: the hostname]");
  app.add_option("--spool-dir", opts.spoolDir,
                 "on-disk spool directory [default: /var/tmp/trainscope/spool-<node>]");
  app.add_option("--spool-max-bytes", opts.spoolMaxBytes,
                 "disk bound of the spool; past it the oldest segment is dropped and counted "
                 "[default: 1073741824 (1 GiB)]");
  app.add_option("--spool-segment-bytes", opts.spoolSegmentBytes,
                 "size of one spool segment file [default: 4194304 (4 MiB)]");
  app.add_option("--sample-interval-ms", opts.sampleIntervalMs, "host metric sampling period")
      ->capture_default_str();
  app.add_option("--heartbeat-interval-ms", opts.heartbeatIntervalMs,
                 "heartbeat (clock offset) period")
      ->capture_default_str();
  app.add_option("--hello-interval-ms", opts.helloIntervalMs, "AgentHello period")
      ->capture_default_str();
  app.add_option("--batch-linger-ms", opts.batchLingerMs,
                 "how long spooled items may wait to fill an upstream batch")
      ->capture_default_str();
  app.add_option("--probe-coalesce-ms", opts.probeCoalesceMs,
                 "least time between two reads of the probe socket; longer costs less CPU with "
                 "many ranks and delays acks")
      ->capture_default_str();
  app.add_option("--window", opts.windowBatches,
                 "upstream batches in flight before waiting for an ack")
      ->capture_default_str();
  app.add_option("--resend-timeout-ms", opts.resendTimeoutMs,
                 "resend from the oldest unacked batch after this long without an ack")
      ->capture_default_str();
  app.add_option("--rank-expiry-ms", opts.rankExpiryMs,
                 "forget a rank that sent no RankHello for this long")
      ->capture_default_str();
  app.add_option("--sync-interval-ms", opts.syncIntervalMs,
                 "how often the spool is fsynced and its acked position saved")
      ->capture_default_str();
  app.add_option("--capture-dir", opts.captureDir,
                 "probes' capture directory: only regular files under it, with one link and "
                 "owned by the uid of the probe that names them, are shipped to the collector "
                 "and deleted; anything else is refused "
                 "[default: $TRAINSCOPE_CAPTURE_DIR, else /tmp/trainscope-captures]");
  app.add_option("--max-file-bytes", opts.maxFileBytes,
                 "largest capture file shipped; a larger one is refused [default: 1073741824 "
                 "(1 GiB)]");
  app.add_option("--spool-file-bytes", opts.spoolFileBytes,
                 "spool bytes capture-file chunks may hold unacked; they never evict anything, "
                 "an upload waits for the collector instead [default: a quarter of "
                 "--spool-max-bytes; at most half]");
  app.add_option("--collector-key", opts.collectorKeyFile,
                 "CurveZMQ: the collector's public key file (server.pub of its --curve-keys); "
                 "with --agent-key, traffic to the collector is encrypted and this agent "
                 "authenticated [default: none, plain text]");
  app.add_option("--agent-key", opts.agentKeyFile,
                 "CurveZMQ: this agent's key file (NODE.key from `trainscope keygen --name "
                 "NODE`, mode 0600); the collector must list NODE.pub in its agents/");
  app.add_option("--proc-root", opts.procRoot, "root of the proc filesystem (tests use a fixture)")
      ->capture_default_str();
  std::string level = "info";
  app.add_option("--log-level", level, "lowest level logged: debug, info, warn or error")
      ->capture_default_str()
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}));
  if (int rc = trainscope::parseWithConfigFile(app, argc, argv, std::cout, std::cerr); rc >= 0) {
    return rc;
  }
  static const std::map<std::string, LogLevel> kLevels{{"debug", LogLevel::kDebug},
                                                       {"info", LogLevel::kInfo},
                                                       {"warn", LogLevel::kWarn},
                                                       {"error", LogLevel::kError}};
  opts.logLevel = kLevels.at(level);
  {
    char* end = nullptr;
    const unsigned long mode = std::strtoul(endpointMode.c_str(), &end, 8);
    if (endpointMode.empty() || *end != '\0' || endpointMode.size() > 4 || mode > 0777) {
      std::cerr << "trainscope-agent: --endpoint-mode: '" << endpointMode
                << "' is not an octal mode within 0..0777 (e.g. 0660)\n";
      return 2;
    }
    opts.endpointMode = static_cast<uint32_t>(mode);
  }

  trainscope::Status st = trainscope::agent::finalizeOptions(opts);
  if (!st) {
    std::cerr << "trainscope-agent: " << st.message() << "\n";
    return 2;
  }
  return trainscope::agent::run(opts);
}

}  // namespace

int main(int argc, char** argv) {
  return trainscope::guardedMain("trainscope-agent", [&] { return agentMain(argc, argv); });
}
