// The trainscope collector daemon: opens storage, binds ingest and the HTTP server, runs the
// detectors and captures, applies retention hourly and stops cleanly on SIGINT/SIGTERM. run()
// is called once, from main.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collector/capture/manager.h"
#include "collector/detect/options.h"
#include "collector/http/api.h"
#include "collector/notify/notifier.h"
#include "common/status.h"

namespace trainscope::collector {

struct CollectorOptions {
  // Where the database lives (DIR/trainscope.db); created if missing. Put it on a local disk:
  // ingest speed is bounded by its write bandwidth. Captures are kept here whatever the store.
  std::string dataDir = "./trainscope-data";
  // The storage engine: "" or "sqlite" is SQLite in dataDir (one machine, nothing to run
  // beside the collector); "clickhouse://HOST:PORT/DB" is a ClickHouse server's database over
  // its HTTP interface (tables created when missing), for more data than one disk holds or
  // several collectors sharing one database.
  std::string store;
  // Where agents connect (ZeroMQ). Port 0 or * picks a free port; the ready file says which.
  std::string ingest = "tcp://127.0.0.1:7601";
  // This collector's name among several sharing one ClickHouse store: the API's jobs name the
  // collector that stores each job's data now, and each collector runs detection only for its
  // own. Unique among them. "": HOST:PORT (the hostname and --ingest's port).
  std::string name;
  // HTTP API, dashboard and /metrics, as ADDR:PORT. Loopback by default: the API has no auth.
  std::string http = "127.0.0.1:7600";
  // Steps and host samples older than this (by receive time) are deleted: shorter keeps the
  // disk small, longer keeps more history. 0 keeps everything.
  double retentionHours = 168;
  // How often retention runs: more often deletes in smaller bites.
  std::chrono::seconds retentionInterval{3600};
  // Dashboard files; "" serves none (see defaultWebRoot()).
  std::string webRoot;
  // Once ingest and HTTP are bound, {"ingest", "http", "pid"} is written here atomically; "" =
  // none. Lets a supervisor or a test learn the ports picked for port 0.
  std::string readyFile;
  // SQLite synchronous=FULL survives power loss at some ingest speed; NORMAL (default)
  // survives process crashes.
  bool synchronousFull = false;
  // Shortest time between two writes of ingested telemetry to the store, in ms, and the rows
  // that end the wait sooner (ingest::IngestOptions::minCommitGap): -1 takes the engine's
  // own: SQLite 0 (every commit at once) and 4,096 rows; ClickHouse 1,000 ms and 32,768 rows,
  // as each insert makes a part that the server merges later. Longer makes fewer, larger
  // writes; acks to the agents and detection wait up to that long.
  int64_t commitGapMs = -1;
  // Bearer token required on every HTTP request that changes something (starting a capture);
  // "" leaves them open, which is only safe while the API listens on loopback.
  std::string httpToken;
  // Browser origins besides the collector's own that may start captures and open the live
  // feed (a dashboard served elsewhere), and host names besides localhost and IP literals the
  // HTTP API may be addressed under (a proxy's): see http/origin.h. Empty = same-origin only.
  std::vector<std::string> httpAllowOrigins;
  std::vector<std::string> httpAllowedHosts;
  // /metrics leaves out jobs and nodes not heard from for this many seconds (ended or crashed
  // jobs, departed agents), and shows at most metricsMaxJobs jobs (the most recent): a scrape
  // of a collector that had seen 20,000 jobs took 12-18 s and 163 MB before.
  int64_t metricsAgeOutS = 3600;
  size_t metricsMaxJobs = 500;
  // Threads answering HTTP requests: more lets slow requests (a big trace download) run beside
  // the dashboard's; each costs a thread and a stack.
  int httpThreads = 4;
  // Run the regression detectors on committed step reports and store their anomalies. Off
  // saves the detectors' CPU and memory on the ingest writer thread.
  bool detect = true;
  // Detector thresholds and windows (collector/detect/options.h); flags set a few of them.
  detect::DetectOptions detectOptions{};
  // Automatic captures (docs/CAPTURE.md, collector/capture/auto_capture.h): at most
  // autoCaptureBudget trace captures (and as many stack dumps) per job per
  // autoCaptureIntervalS seconds, each for the most important open anomaly after it waited
  // autoCaptureWaitMs; an anomaly whose estimated gain is below autoCaptureMinGain takes none,
  // and after a capture in the interval only one at least twice as important takes another.
  // Interval or budget 0 turns them off. More captures more anomalies and costs the job more
  // tracing overhead and disk.
  int64_t autoCaptureIntervalS = 600;
  uint32_t autoCaptureBudget = 3;
  double autoCaptureMinGain = 0.02;
  int64_t autoCaptureWaitMs = 1000;
  // Most steps of history an automatic trace capture asks for, so it reaches the anomaly's
  // onset (the probe's flight recorder holds 256 by default); the capture says when the onset
  // was out of reach.
  uint32_t autoCaptureMaxHistory = 256;
  // A job none of whose ranks was heard from (steps or hellos) for this many seconds is over:
  // its open anomalies end (state "ended"), as they do when every rank said goodbye. 0: only
  // goodbyes end a job. Shorter ends a silent job's anomalies sooner.
  int64_t jobEndIdleS = 600;
  // Where capture files go (DIR/<id>/rank-<R>.json.gz, trace.json.gz); "" = DATA-DIR/captures.
  std::string captureDir;
  // A capture request's per-rank bound on the compressed trace when it names none: larger keeps
  // longer traces, costs disk and upload time.
  uint64_t captureMaxBytes = 64ull << 20;
  // CurveZMQ between agents and ingest: DIR/server.key (this collector's key pair, mode 0600)
  // and DIR/agents/<node>.pub (the agents allowed in, each only as <node>); see
  // common/curve_keys.h and `trainscope keygen`. "" = plain text from any agent.
  std::string curveKeysDir;
  // Largest steps file one `trainscope import` may upload (its step reports, ~2-8 KiB each):
  // the commit holds it in memory (about 3x) while it checks and stores it in one transaction.
  uint64_t importMaxBytes = 256ull << 20;
  // Imports open at once, and the bytes they stage on disk together (ImportReceiverOptions):
  // uploads beyond are refused, saying which bound, instead of filling the disk.
  uint32_t importMaxOpen = 8;
  // Disk that finished captures and committed imports may hold together: past it the oldest
  // lose their files (their rows stay and say so). 0: no bound. Files older than
  // retentionHours go too.
  uint64_t capturesMaxBytes = 32ull << 30;
  uint64_t importMaxOpenBytes = 8ull << 30;
  // Where anomalies are sent (Alertmanager, webhooks; collector/notify/notifier.h): none by
  // default. Its dashboardUrl is replaced by externalUrl, or else by http://HOST:PORT of the
  // bound HTTP address (this machine's name when it listens on every address).
  notify::NotifyOptions notify{};
  // The URL people reach this collector's dashboard under (behind a proxy, another name), for
  // the links in alerts and webhook messages; "" derives it from --http.
  std::string externalUrl;
};

// The HTTP API's view of the capture stage: http::CaptureService over `manager`, which must
// outlive it. Safe from any thread.
std::shared_ptr<http::CaptureService> captureService(capture::CaptureManager& manager);

// The dashboard's files: the source tree's web/ for a binary run from the build tree, else the
// installed copy (DATADIR/trainscope/web under the prefix found from the executable's path, then
// under the configured prefix), else the source tree's when it exists, else "".
std::string defaultWebRoot();

// Runs until SIGINT or SIGTERM, then commits and acks what ingest holds and returns. Fails
// with a message naming the option at fault when something cannot start.
Status run(const CollectorOptions& options);

}  // namespace trainscope::collector
