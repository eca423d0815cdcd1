// trainscope-collector: parses flags into CollectorOptions and runs the collector.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "collector/capture/request.h"
#include "collector/collector.h"
#include "collector/detect/anomaly.h"
#include "collector/http/api.h"
#include "collector/http/origin.h"
#include "collector/http/token.h"
#include "common/config_file.h"
#include "common/guarded_main.h"
#include "common/log.h"
#include "schema/wire.h"

namespace {

// A CLI11 check that a flag's value is an http:// URL the notifier can send to.
CLI::Validator httpUrlCheck() {
  return CLI::Validator(
      [](std::string& url) {
        auto parsed = trainscope::notify::parseHttpUrl(url);
        return parsed ? std::string() : parsed.message();
      },
      "URL");
}

// --webhook-header-file: one "Name: value" a line; blank lines and lines starting with # are
// skipped. Errors name the file and line, never the value (a secret).
trainscope::Status readHeaderFile(const std::string& path, trainscope::notify::HttpHeaders* out) {
  std::ifstream in(path);
  if (!in) return trainscope::Status::error("--webhook-header-file: cannot read " + path);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    auto header = trainscope::notify::parseHeader(line);
    if (!header) {
      return trainscope::Status::error("--webhook-header-file: " + path + " line " +
                                       std::to_string(n) + ": " + header.message());
    }
    out->push_back(std::move(*header));
  }
  return trainscope::Status::ok();
}

int collectorMain(int argc, char** argv) {
  using trainscope::collector::CollectorOptions;
  CollectorOptions options;
  options.webRoot = trainscope::collector::defaultWebRoot();
  std::string logLevel = "info";

  CLI::App app{
      "trainscope-collector: receives telemetry from trainscope agents, stores it in "
      "SQLite or ClickHouse and serves the HTTP API, dashboard and /metrics."};
  app.add_option("--data-dir", options.dataDir,
                 "directory for the database (DIR/trainscope.db); created if missing")
      ->capture_default_str();
  app.add_option("--store", options.store,
                 "storage engine: sqlite (default; DATA-DIR/trainscope.db) or "
                 "clickhouse://HOST:PORT/DB (a ClickHouse server's HTTP port and database, "
                 "created with its tables when missing; retention drops whole partitions of "
                 "receive time), or clickhouse://HOST:PORT,HOST:PORT/DB?cluster=NAME (every "
                 "shard's server of a cluster in the servers' remote_servers: sharded tables "
                 "and Distributed tables over them). Several collectors may share one")
      ->capture_default_str();
  app.add_option("--name", options.name,
                 "this collector's name among several sharing a ClickHouse store (the API names "
                 "each job's collector; detection runs on it only); unique among them "
                 "[default: HOSTNAME:INGEST-PORT]");
  app.add_option("--ingest", options.ingest,
                 "ZeroMQ endpoint agents connect to, tcp://ADDR:PORT; port 0 or * picks a free "
                 "port (see --ready-file)")
      ->capture_default_str();
  app.add_option("--http", options.http,
                 "HTTP API/dashboard address, ADDR:PORT; port 0 picks a free port")
      ->capture_default_str();
  app.add_option("--commit-gap-ms", options.commitGapMs,
                 "shortest time between two writes of ingested telemetry to the store (acks "
                 "and detection wait up to this long); -1 takes the engine's: 0 for SQLite, "
                 "1000 for ClickHouse, whose every insert makes a part it merges later")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{-1}, int64_t{60000}));
  app.add_option("--http-threads", options.httpThreads,
                 "threads answering HTTP requests; more lets slow downloads run beside the "
                 "dashboard's requests")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--metrics-age-out", options.metricsAgeOutS,
                 "seconds: /metrics leaves out jobs and nodes not heard from for this long "
                 "(ended or crashed jobs); the API keeps them")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{365} * 24 * 3600));
  app.add_option("--metrics-max-jobs", options.metricsMaxJobs,
                 "/metrics shows at most this many jobs (the most recently heard from) and "
                 "counts the rest in trainscope_metrics_omitted; each costs two queries a scrape")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1000000}));
  app.add_option("--retention-hours", options.retentionHours,
                 "delete steps and host samples received longer ago than this, and the files "
                 "of captures begun longer ago; 0 keeps all")
      ->capture_default_str();
  app.add_option("--web-root", options.webRoot,
                 "directory of dashboard files to serve; default: the source tree's web/ if "
                 "found, else none")
      ->capture_default_str();
  app.add_option("--log-level", logLevel, "debug, info, warn or error")
      ->capture_default_str()
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}));
  app.add_option("--ready-file", options.readyFile,
                 "once bound, write {\"ingest\", \"http\", \"pid\"} JSON here (atomically); "
                 "default: none");
  app.add_flag("--sync-full", options.synchronousFull,
               "SQLite synchronous=FULL: survives power loss, slower ingest (default: NORMAL, "
               "survives process crashes)");
  std::string tokenFile;
  auto* tokenOpt = app.add_option(
      "--http-token", options.httpToken,
      "require 'Authorization: Bearer TOKEN' on every request that changes something; "
      "default: none (prefer --http-token-file: a flag shows in ps)");
  app.add_option("--http-token-file", tokenFile,
                 "read the bearer token from this file (first line, trimmed)")
      ->excludes(tokenOpt);
  app.add_option("--curve-keys", options.curveKeysDir,
                 "encrypt and authenticate agents with CurveZMQ: DIR/server.key is this "
                 "collector's key pair (mode 0600), DIR/agents/<node>.pub the agents allowed in, "
                 "each only as <node> (make them with `trainscope keygen`); unknown or plain-text "
                 "agents are refused and counted. Default: none (plain text, any agent)");
  app.add_option("--http-allow-origin", options.httpAllowOrigins,
                 "a browser origin (scheme://host[:port]) besides the collector's own that may "
                 "start captures and open the live feed, e.g. a dashboard served elsewhere; "
                 "repeatable. Other origins get 403")
      ->check(CLI::Validator(
          [](std::string& origin) {
            auto parsed = trainscope::http::parseOrigin(origin);
            return parsed ? std::string() : parsed.message();
          },
          "ORIGIN"));
  app.add_option("--http-allowed-host", options.httpAllowedHosts,
                 "a host name (no port) besides localhost and IP literals under which a "
                 "browser may change something or open the live feed (a proxy's or this "
                 "machine's name; stops DNS rebinding); repeatable. Default: any name when "
                 "--http is not loopback");
  bool noDetect = false;
  app.add_flag("--no-detect", noDetect,
               "do not run the regression detectors (no anomalies are stored)");
  auto& det = options.detectOptions;
  int warmupSteps = det.stepShift.warmupSteps;
  app.add_option("--detect-warmup-steps", warmupSteps,
                 "steps at the start of a job (or of a rank's series) the detectors that learn "
                 "a baseline from the job's own history ignore (compile, cache warm-up): more = "
                 "fewer false alarms, later first alarm; the straggler check compares a rank "
                 "with its peers and needs none")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  int64_t hangFloorMs = det.hang.floorNs / 1'000'000;
  app.add_option("--hang-floor-ms", hangFloorMs,
                 "a rank silent for less than this is never a hang (besides 10 typical steps "
                 "and 1.5x the longest step): lower reports hangs sooner, risks false ones")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{86'400'000}));
  app.add_option("--detect-grace-steps", det.assembly.graceSteps,
                 "a step is judged once every rank reported it or this many steps later: more "
                 "waits longer for late ranks, detects later")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000));
  app.add_option("--detect-confirm-steps", det.fold.confirmSteps,
                 "every anomaly but a hang is held this many judged steps (and "
                 "--detect-confirm-ms) and dropped if its detector resolves it meanwhile: a "
                 "burst on a shared host is over sooner; lower detects sooner, raises more false "
                 "alarms on real jobs")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000));
  app.add_option("--detect-confirm-ms", det.fold.confirmMs,
                 "the least time an anomaly is held before it is raised (see "
                 "--detect-confirm-steps)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{3'600'000}));
  app.add_option("--detect-min-gain", det.fold.minGain,
                 "an anomaly whose estimated gain (the share of the step its fix would save) is "
                 "below this is not raised; hangs always are")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--detect-op-max-cpu-wait", det.opRegression.maxCpuWaitShare,
                 "a rank's operators are not judged in a step whose training thread waited for a "
                 "CPU longer than this share of it (an oversubscribed host); 1 judges them always")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--auto-capture-interval", options.autoCaptureIntervalS,
                 "seconds: the window of the automatic-capture budget; 0 turns automatic "
                 "captures off")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{365} * 24 * 3600));
  app.add_option("--auto-capture-budget", options.autoCaptureBudget,
                 "automatic trace captures per job per interval (and as many stack dumps for "
                 "hangs), each for the most important open anomaly (estimated gain x "
                 "confidence); after one, another only for an anomaly twice as important; 0 "
                 "turns automatic captures off")
      ->capture_default_str()
      ->check(CLI::Range(0u, 1000u));
  app.add_option("--auto-capture-min-gain", options.autoCaptureMinGain,
                 "anomalies whose estimated gain (fraction of step time a fix would save) is "
                 "below this take no automatic capture; hangs always do")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--auto-capture-wait-ms", options.autoCaptureWaitMs,
                 "an open anomaly waits this long before it may take an automatic capture (a "
                 "false alarm resolves, a more important anomaly shows up)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{600'000}));
  app.add_option("--auto-capture-max-history", options.autoCaptureMaxHistory,
                 "most steps before the start an automatic trace capture asks for, so it reaches "
                 "the anomaly's onset (the probe's flight recorder holds 256 by default)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1000u));
  app.add_option("--job-end-idle", options.jobEndIdleS,
                 "seconds: a job none of whose ranks was heard from for this long is over and "
                 "its open anomalies end (as when every rank said goodbye); 0: only goodbyes")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{365} * 24 * 3600));
  app.add_option("--capture-dir", options.captureDir,
                 "directory for capture files (ID/rank-R.json.gz, ID/trace.json.gz); default: "
                 "DATA-DIR/captures");
  app.add_option("--capture-max-bytes", options.captureMaxBytes,
                 "per-rank bound on a capture's compressed trace when the request names none "
                 "(max_bytes)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, trainscope::capture::kMaxMaxBytes));
  app.add_option("--import-max-bytes", options.importMaxBytes,
                 "largest steps file one `trainscope import` may upload; the commit holds about "
                 "3x this in memory")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1} << 20, uint64_t{1} << 36));
  app.add_option("--import-max-open", options.importMaxOpen,
                 "imports open (uploading) at once; more are refused with 503 until one commits, "
                 "is aborted or expires")
      ->capture_default_str()
      ->check(CLI::Range(uint32_t{1}, uint32_t{1024}));
  app.add_option("--import-max-open-bytes", options.importMaxOpenBytes,
                 "bytes the open imports may stage on disk together; a chunk past it is refused "
                 "with 413 (the import may resume later); every chunk also leaves 1 GiB of the "
                 "disk free")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1} << 20, uint64_t{1} << 50));
  app.add_option("--captures-max-bytes", options.capturesMaxBytes,
                 "disk that finished captures and imported timelines may hold together; past "
                 "it the oldest lose their files, checked with retention (0: no bound; files "
                 "older than --retention-hours go too)")
      ->capture_default_str();
  auto& notify = options.notify;
  app.add_option("--alertmanager", notify.alertmanagers,
                 "send each anomaly to this Alertmanager (http://HOST:PORT; API v2, POST "
                 "/api/v2/alerts) when it opens, updates and ends, re-sent while open (see "
                 "--alertmanager-resend); repeatable: every one gets every alert. Plain http only")
      ->check(httpUrlCheck());
  int64_t resendS = notify.alertmanagerResend.count() / 1000;
  app.add_option("--alertmanager-resend", resendS,
                 "seconds between re-sends of open alerts; each says it ends 4 re-sends later, "
                 "so Alertmanager keeps it through 3 lost ones and resolves the alerts of a "
                 "collector that died after 4")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{3600}));
  app.add_option("--webhook", notify.webhooks,
                 "POST each anomaly's opening and end as JSON ({\"event\", \"severity\", "
                 "\"anomaly\", \"dashboard_url\", ...}; docs/OPERATIONS.md) to this http:// URL; "
                 "repeatable")
      ->check(httpUrlCheck());
  app.add_option("--slack-webhook", notify.slackWebhooks,
                 "as --webhook, in the form of a Slack incoming webhook ({\"text\": ...}, "
                 "mrkdwn with a dashboard link); http:// only (a proxy for Slack's https); "
                 "repeatable")
      ->check(httpUrlCheck());
  std::vector<std::string> webhookHeaders;
  app.add_option("--webhook-header", webhookHeaders,
                 "'Name: value' sent with every webhook request, e.g. a shared secret; "
                 "repeatable (prefer --webhook-header-file: a flag shows in ps)")
      ->check(CLI::Validator(
          [](std::string& text) {
            auto parsed = trainscope::notify::parseHeader(text);
            return parsed ? std::string() : parsed.message();
          },
          "HEADER"));
  std::string webhookHeaderFile;
  app.add_option("--webhook-header-file", webhookHeaderFile,
                 "read webhook headers from this file, one 'Name: value' a line (# comments)");
  std::vector<std::string> webhookKinds;
  app.add_option("--webhook-kinds", webhookKinds,
                 "webhooks hear only of these anomaly kinds (comma-separated: straggler, "
                 "step_shift, hang, ...); default: every kind")
      ->delimiter(',')
      ->check(CLI::Validator(
          [](std::string& kind) {
            trainscope::detect::AnomalyKind k{};
            return trainscope::detect::parseAnomalyKind(kind, &k)
                       ? std::string()
                       : "unknown anomaly kind '" + kind + "'";
          },
          "KIND"));
  std::string minSeverity = "info";
  app.add_option("--webhook-min-severity", minSeverity,
                 "webhooks hear only of anomalies of this severity or above (info, warning, "
                 "critical; see --notify-critical-gain)")
      ->capture_default_str()
      ->check(CLI::IsMember({"info", "warning", "critical"}));
  app.add_option("--notify-critical-gain", notify.severity.criticalGain,
                 "an anomaly whose estimated gain (share of step time its fix would save) is at "
                 "least this is critical; hangs and GPU faults always are")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--notify-warning-gain", notify.severity.warningGain,
                 "an anomaly whose estimated gain is at least this (and below the critical one) "
                 "is a warning, below it info")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--notify-queue", notify.queueSize,
                 "per receiver: webhook events waiting while it is slow or down (the oldest "
                 "is dropped and counted when full), or alerts an Alertmanager is kept told of "
                 "(a new one is dropped and counted when full)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1000000}));
  app.add_option("--external-url", options.externalUrl,
                 "the URL people reach this collector's dashboard under, for the links in alerts "
                 "and webhook messages [default: http://HOST:PORT of --http; this machine's name "
                 "when it listens on every address]")
      ->check(CLI::Validator(
          [](std::string& url) {
            return url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0
                       ? std::string()
                       : "expected http://... or https://..., got '" + url + "'";
          },
          "URL"));
  bool listRoutes = false;
  app.add_flag("--list-routes", listRoutes,
               "print the HTTP routes this collector serves (a Markdown table: method, path and "
               "query parameters, what it serves) and exit");
  if (int rc = trainscope::parseWithConfigFile(app, argc, argv, std::cout, std::cerr); rc >= 0) {
    return rc;
  }
  if (listRoutes) {
    std::cout << trainscope::http::routeListing();
    return 0;
  }
  if (!tokenFile.empty()) {
    auto token = trainscope::http::readTokenFile(tokenFile, "--http-token-file");
    if (!token) {
      std::fprintf(stderr, "trainscope-collector: %s\n", token.message().c_str());
      return 1;
    }
    options.httpToken = *token;
  }
  for (const auto& h : webhookHeaders)
    notify.webhookHeaders.push_back(*trainscope::notify::parseHeader(h));
  if (!webhookHeaderFile.empty()) {
    if (auto s = readHeaderFile(webhookHeaderFile, &notify.webhookHeaders); !s) {
      std::fprintf(stderr, "trainscope-collector: %s\n", s.message().c_str());
      return 1;
    }
  }
  notify.webhookKinds.insert(webhookKinds.begin(), webhookKinds.end());
  notify.webhookMinSeverity = *trainscope::notify::parseSeverity(minSeverity);
  notify.alertmanagerResend = std::chrono::seconds(resendS);
  if (notify.severity.warningGain > notify.severity.criticalGain) {
    std::fprintf(stderr,
                 "trainscope-collector: --notify-warning-gain %g is above --notify-critical-gain "
                 "%g\n",
                 notify.severity.warningGain, notify.severity.criticalGain);
    return 1;
  }
  options.detect = !noDetect;
  det.stepShift.warmupSteps = warmupSteps;
  det.slowComm.persistence.warmupSamples = warmupSteps;
  det.slowComm.linkPersistence.warmupSamples = warmupSteps;
  det.opRegression.persistence.warmupSamples = warmupSteps;
  det.hang.warmupSteps = warmupSteps;
  det.hang.floorNs = hangFloorMs * 1'000'000;

  using trainscope::LogLevel;
  trainscope::setLogLevel(logLevel == "debug"   ? LogLevel::kDebug
                          : logLevel == "warn"  ? LogLevel::kWarn
                          : logLevel == "error" ? LogLevel::kError
                                                : LogLevel::kInfo);
  // A flood of malformed frames must not become a flood of protobuf's own log lines.
  trainscope::wire::routeProtobufLogs();
  auto status = trainscope::collector::run(options);
  if (!status) {
    trainscope::logError("collector", status.message());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return trainscope::guardedMain("trainscope-collector", [&] { return collectorMain(argc, argv); });
}
