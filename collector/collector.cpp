#include "collector/collector.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <system_error>

#include <nlohmann/json.hpp>

#include "collector/capture/request.h"
#include "collector/http/metrics.h"
#include "collector/http/server.h"
#include "collector/ingest/import_receiver.h"
#include "collector/ingest/ingest.h"
#include "collector/pipeline.h"
#include "collector/storage/store.h"
#include "common/clock.h"
#include "common/curve_keys.h"
#include "common/install_layout.h"
#include "common/log.h"
#include "common/process_memory.h"

#ifndef TRAINSCOPE_WEB_DIR
#define TRAINSCOPE_WEB_DIR ""
#endif

namespace trainscope::collector {
namespace {

constexpr const char* kComponent = "collector";

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

Result<HostPort> parseHostPort(const std::string& text, const std::string& flag) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    return Result<HostPort>::error(flag + ": expected ADDR:PORT, got '" + text + "'");
  }
  HostPort out;
  out.host = text.substr(0, colon);
  const std::string portText = text.substr(colon + 1);
  if (portText.find_first_not_of("0123456789") != std::string::npos || portText.size() > 5) {
    return Result<HostPort>::error(flag + ": port '" + portText + "' is not a number");
  }
  const long port = std::stol(portText);
  if (port > 65535) {
    return Result<HostPort>::error(flag + ": port " + portText + " is out of range 0-65535");
  }
  out.port = static_cast<uint16_t>(port);
  return out;
}

Status writeReadyFile(const std::string& path, const std::string& ingest, const std::string& http) {
  nlohmann::json doc = {{"ingest", ingest}, {"http", http}, {"pid", static_cast<int>(getpid())}};
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return Status::error("--ready-file: cannot write " + tmp);
    out << doc.dump() << "\n";
    out.flush();
    if (!out) return Status::error("--ready-file: cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::error("--ready-file: cannot rename to " + path + ": " + ec.message());
  return Status::ok();
}

bool sqliteStore(const CollectorOptions& options) {
  return options.store.empty() || options.store == "sqlite";
}

// What the log calls the store: the SQLite file or the ClickHouse URL.
std::string storeName(const CollectorOptions& options) {
  return sqliteStore(options) ? (std::filesystem::path(options.dataDir) / "trainscope.db").string()
                              : options.store;
}

// --name, or HOST:PORT from the hostname and --ingest's port (HOST:PID for a port picked at
// start, which differs from run to run).
std::string collectorName(const CollectorOptions& options) {
  if (!options.name.empty()) return options.name;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "collector");
  std::string port = options.ingest.substr(options.ingest.rfind(':') + 1);
  if (port.empty() || port == "0" || port == "*" || options.ingest.rfind("tcp://", 0) != 0) {
    port = std::to_string(getpid());
  }
  return std::string(host) + ':' + port;
}

// The engine --store names, opened (SQLite in --data-dir by default); `name` is this
// collector's in a store several share.
Result<std::unique_ptr<storage::Store>> openStore(const CollectorOptions& options,
                                                  const std::string& name) {
  const int64_t retentionNs = static_cast<int64_t>(options.retentionHours * 3600.0 * 1e9);
  if (sqliteStore(options)) {
    storage::SqliteOptions so;
    so.path = storeName(options);
    so.retentionNs = retentionNs;
    so.synchronousFull = options.synchronousFull;
    auto store = storage::openSqliteStore(so);
    if (!store) return Status::error(store.code(), "--data-dir: " + store.message());
    return store;
  }
  if (storage::isClickHouseUrl(options.store)) {
    storage::ClickHouseOptions co;
    co.url = options.store;
    co.collector = name;
    co.retentionNs = retentionNs;
    auto store = storage::openClickHouseStore(co);
    if (!store) return Status::error(store.code(), "--store: " + store.message());
    return store;
  }
  return Status::invalidArgument("--store: '" + options.store +
                                 "' is neither sqlite nor clickhouse://HOST:PORT/DB");
}

void retention(storage::Store& store) {
  const int64_t t0 = monotonicNowNs();
  auto deleted = store.applyRetention(wallNowNs());
  if (!deleted) {
    logError(kComponent, "retention failed: " + deleted.message());
  } else if (*deleted > 0) {
    logInfo(kComponent, "retention deleted " + std::to_string(*deleted) + " rows in " +
                            std::to_string((monotonicNowNs() - t0) / 1'000'000) + " ms");
  }
}

// The capture stage's share of retention: files of old captures, and of the oldest past
// --captures-max-bytes.
void pruneCaptureFiles(capture::CaptureManager& captures, int64_t nowNs) {
  auto removed = captures.pruneStoredFiles(nowNs);
  if (!removed) logError(kComponent, "capture file retention failed: " + removed.message());
}

// --external-url, else http://HOST:PORT of the bound HTTP address (this machine's name when it
// listens on every address: a link to 0.0.0.0 reaches nobody).
std::string dashboardUrl(const CollectorOptions& options, const HostPort& http, uint16_t port) {
  std::string url = options.externalUrl;
  if (url.empty()) {
    std::string host = http.host;
    if (host == "0.0.0.0" || host == "::" || host == "[::]" || host.empty()) {
      char name[256] = {};
      host = gethostname(name, sizeof name - 1) == 0 && name[0] != '\0' ? name : "localhost";
    }
    const bool v6 = host.find(':') != std::string::npos && host.front() != '[';
    url = "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
  }
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

class ManagerService final : public http::CaptureService {
 public:
  explicit ManagerService(capture::CaptureManager& manager) : manager_(manager) {}

  Result<storage::CaptureRow> start(const std::string& job, std::string_view body) override {
    auto request = capture::parseCaptureRequest(body);
    if (!request) return Status::invalidArgument(request.message());
    return manager_.start(job, *request);
  }

  Result<std::unique_ptr<ByteSource>> file(const std::string& id, const std::string& name,
                                           bool gzip) const override {
    return manager_.openFile(id, name, gzip);
  }

 private:
  capture::CaptureManager& manager_;
};

}  // namespace

std::shared_ptr<http::CaptureService> captureService(capture::CaptureManager& manager) {
  return std::make_shared<ManagerService>(manager);
}

std::string defaultWebRoot() {
  std::error_code ec;
  auto isDir = [&](const std::string& d) {
    return !d.empty() && std::filesystem::is_directory(d, ec);
  };
  std::string source = TRAINSCOPE_WEB_DIR;
  const std::string exeDir = executableDir();
  // A build-tree binary (the collector, a test) serves the source tree's pages as edited.
  if (isInside(exeDir, TRAINSCOPE_BUILD_ROOT) && isDir(source)) return source;
  for (const std::string& dir :
       installedCandidates(exeDir, TRAINSCOPE_INSTALL_BINDIR, TRAINSCOPE_INSTALL_PREFIX,
                           TRAINSCOPE_INSTALL_WEBDIR)) {
    if (isDir(dir)) return dir;
  }
  return isDir(source) ? source : "";
}

Status run(const CollectorOptions& options) {
  if (!(options.retentionHours >= 0) || !std::isfinite(options.retentionHours)) {
    return Status::error("--retention-hours: must be >= 0 (0 keeps everything)");
  }
  auto httpAddr = parseHostPort(options.http, "--http");
  if (!httpAddr) return httpAddr.status();
  if (options.ingest.rfind("tcp://", 0) != 0 && options.ingest.rfind("ipc://", 0) != 0) {
    return Status::error("--ingest: expected tcp://ADDR:PORT (or ipc://PATH), got '" +
                         options.ingest + "'");
  }
  // Keys are checked before anything is opened: a bad key file changes nothing on disk.
  std::optional<CurveServerKeys> curve;
  if (!options.curveKeysDir.empty()) {
    auto keys = readCurveServerKeys(options.curveKeysDir);
    if (!keys) return Status::error("--curve-keys: " + keys.message());
    logInfo(kComponent, "CURVE on: " + std::to_string(keys->agents.size()) +
                            " agent keys allowed from " + options.curveKeysDir + "/agents");
    curve = std::move(*keys);
  } else {
    logWarn(kComponent, "ingest on " + options.ingest +
                            " is UNAUTHENTICATED and unencrypted: anyone who reaches it can pose "
                            "as an agent, send data and receive that node's commands. Use "
                            "--curve-keys DIR (see `trainscope keygen --help`) on any network "
                            "others can reach");
  }
  std::error_code ec;
  std::filesystem::create_directories(options.dataDir, ec);
  if (ec || !std::filesystem::is_directory(options.dataDir)) {
    return Status::error("--data-dir: cannot create " + options.dataDir +
                         (ec ? ": " + ec.message() : std::string()));
  }
  if (!options.webRoot.empty() && !std::filesystem::is_directory(options.webRoot, ec)) {
    return Status::error("--web-root: " + options.webRoot + " is not a directory");
  }

  // Signals are taken synchronously by this thread only: block them before any other thread
  // starts, so the threads started below inherit the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const std::string name = collectorName(options);
  auto store = openStore(options, name);
  if (!store) return store.status();
  retention(**store);

  SystemClock clock;
  // Captures send commands through ingest, which is built after them: the sink reads this
  // pointer, set once ingest exists (before it starts, so before any capture can begin).
  std::atomic<ingest::IngestServer*> ingestPtr{nullptr};
  capture::CaptureManagerOptions co;
  co.dir = options.captureDir.empty()
               ? (std::filesystem::path(options.dataDir) / "captures").string()
               : options.captureDir;
  co.defaultMaxBytes = options.captureMaxBytes;
  co.autoCapture.intervalNs = options.autoCaptureIntervalS * 1'000'000'000;
  co.autoCapture.budget = options.autoCaptureBudget;
  co.autoCapture.minGain = options.autoCaptureMinGain;
  co.autoCapture.decisionNs = options.autoCaptureWaitMs * 1'000'000;
  co.autoMaxHistory = options.autoCaptureMaxHistory;
  co.describe = http::captureJson;
  co.filesRetentionNs = static_cast<int64_t>(options.retentionHours * 3600.0 * 1e9);
  co.maxStoredBytes = options.capturesMaxBytes;
  std::filesystem::create_directories(co.dir, ec);
  if (ec || !std::filesystem::is_directory(co.dir)) {
    return Status::error("--capture-dir: cannot create " + co.dir +
                         (ec ? ": " + ec.message() : std::string()));
  }
  capture::CaptureManager captures(co, **store, clock,
                                   [&ingestPtr](const std::string& node, const wire::Command& cmd) {
                                     auto* server = ingestPtr.load();
                                     if (server == nullptr)
                                       return Status::error("ingest is not running");
                                     return server->sendCommand(node, cmd);
                                   });
  captures.recover();
  pruneCaptureFiles(captures, clock.nowNs());

  // Anomalies to Alertmanager and webhooks: offered from the pipeline's onStored, sent from the
  // notifier's own threads once the HTTP address (for its links) is known.
  std::unique_ptr<notify::Notifier> notifier;
  const notify::NotifyOptions& no = options.notify;
  if (!(no.alertmanagers.empty() && no.webhooks.empty() && no.slackWebhooks.empty())) {
    if (options.detect) {
      auto made = notify::Notifier::create(no, clock);
      if (!made) return made.status();
      notifier = std::move(*made);
    } else {
      logWarn(kComponent, "--no-detect: no anomalies, so --alertmanager and the webhooks get none");
    }
  }

  std::unique_ptr<DetectPipeline> pipeline;
  ingest::IngestOptions io;
  io.endpoint = options.ingest;
  // Few, large inserts for ClickHouse (a part each); SQLite commits at once.
  const bool clickhouse = storage::isClickHouseUrl(options.store);
  io.minCommitGap = std::chrono::milliseconds(options.commitGapMs >= 0 ? options.commitGapMs
                                                                       : (clickhouse ? 1000 : 0));
  if (clickhouse) io.commitItems = 32768;
  io.curve = std::move(curve);
  io.onCommandItem = [&captures](const std::string& node, const wire::Envelope& item) {
    captures.onCommandItem(node, item);
  };
  if (options.detect) {
    PipelineOptions po;
    po.detect = options.detectOptions;
    const bool autoCaptures = options.autoCaptureIntervalS > 0 && options.autoCaptureBudget > 0;
    if (autoCaptures) {
      po.pickCaptures = [&captures](int64_t nowNs) { return captures.pickAutoCaptures(nowNs); };
    }
    if (autoCaptures || notifier != nullptr) {
      po.onStored = [&captures, autoCaptures, n = notifier.get()](const storage::AnomalyRow& row) {
        if (autoCaptures) captures.offerAnomaly(row);
        if (n != nullptr) n->offer(row);
      };
    }
    po.jobEndIdleNs = options.jobEndIdleS * 1'000'000'000;
    pipeline = std::make_unique<DetectPipeline>(po, **store, clock);
  }
  // The detectors take the step reports (captures read only goodbyes and host samples).
  io.onCommitted = [p = pipeline.get(), &captures](storage::WriteBatch& batch) {
    if (p != nullptr) p->takeCommitted(batch);
    captures.onCommitted(batch);
  };
  // Imported traces take the same path after their commit as the socket's batches.
  ingest::ImportReceiverOptions ro;
  ro.dir = co.dir;
  ro.maxStepsBytes = options.importMaxBytes;
  ro.maxOpen = options.importMaxOpen;
  ro.maxOpenBytes = options.importMaxOpenBytes;
  ro.onCommitted = [p = pipeline.get(), &captures](const storage::WriteBatch& batch) {
    if (p != nullptr) p->onCommitted(batch);
    captures.onCommitted(batch);
  };
  ro.onTimeline = [&captures](const storage::CaptureRow& row) { return captures.adoptImport(row); };
  auto imports = std::make_shared<ingest::ImportReceiver>(ro, **store, clock);
  imports->recover();
  if (pipeline != nullptr) {
    // Hellos' progress names the stuck rank of a hang (socket thread; the pipeline queues it).
    io.onRankProgress = [p = pipeline.get()](const ingest::RankProgressUpdate& u) {
      p->onRankProgress(u);
    };
  }
  ingest::IngestServer ingestServer(io, **store);
  ingestPtr = &ingestServer;
  if (auto s = ingestServer.start(); !s) return Status::error("--ingest: " + s.message());

  http::HttpOptions ho;
  ho.address = httpAddr->host;
  ho.port = httpAddr->port;
  ho.webRoot = options.webRoot;
  ho.authToken = options.httpToken;
  ho.allowedOrigins = options.httpAllowOrigins;
  ho.allowedHosts = options.httpAllowedHosts;
  ho.ioThreads = options.httpThreads;
  ho.metrics.ageOutNs = options.metricsAgeOutS * 1'000'000'000;
  ho.metrics.maxJobs = options.metricsMaxJobs;
  ho.captures = captureService(captures);
  ho.imports = imports;
  ho.extraMetrics = [&ingestServer, p = pipeline.get(), &captures, n = notifier.get()] {
    std::string text = http::ingestMetricsText(ingestServer.stats());
    if (p != nullptr) text += detectMetricsText(p->stats(), p->detectStats());
    text += capture::captureMetricsText(captures.stats());
    if (n != nullptr) text += n->metricsText();
    text += processMemoryMetricsText(readProcessMemory());
    return text;
  };
  http::HttpServer httpServer(ho, **store);
  if (auto s = httpServer.start(); !s) {
    ingestServer.stop();
    return Status::error("--http: " + s.message());
  }
  const std::string httpBound = httpAddr->host + ":" + std::to_string(httpServer.port());
  if (notifier) notifier->start(dashboardUrl(options, *httpAddr, httpServer.port()));
  logInfo(kComponent, "collector ready: ingest " + ingestServer.endpoint() + ", http " + httpBound +
                          ", database " + storeName(options) + ", name " + name + ", web root " +
                          (options.webRoot.empty() ? std::string("(none)") : options.webRoot) +
                          ", pid " + std::to_string(getpid()));
  if (!options.readyFile.empty()) {
    if (auto s = writeReadyFile(options.readyFile, ingestServer.endpoint(), httpBound); !s) {
      httpServer.stop();
      ingestServer.stop();
      return s;
    }
  }

  int64_t nextRetention =
      monotonicNowNs() + std::chrono::nanoseconds(options.retentionInterval).count();
  // Hang detection needs time to pass without reports: the detectors are ticked about once a
  // second from this thread (the pipeline serializes it with the writer thread's calls).
  constexpr int64_t kTickIntervalNs = 1'000'000'000;
  int64_t nextTick = monotonicNowNs() + kTickIntervalNs;
  // With a store several collectors may share, jobs whose data another collector stores now are
  // dropped from this one's detection this often (DetectPipeline::releaseJobsOwnedElsewhere):
  // well within the hang detector's 10 s floor, so a job that moved away is not called hung.
  constexpr int64_t kReleaseIntervalNs = 2'000'000'000;
  int64_t nextRelease = monotonicNowNs() + kReleaseIntervalNs;
  // Memory malloc keeps after ingest's, the detectors' and HTTP's threads freed it goes back to
  // the kernel this often, so the resident set follows the heap in use, not its high water.
  constexpr int64_t kTrimIntervalNs = 60'000'000'000;
  int64_t nextTrim = monotonicNowNs() + kTrimIntervalNs;
  for (;;) {
    timespec wait{0, 250'000'000};
    int sig = sigtimedwait(&signals, nullptr, &wait);
    if (sig == SIGINT || sig == SIGTERM) {
      logInfo(kComponent,
              std::string("received ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") + ", stopping");
      break;
    }
    if (monotonicNowNs() >= nextTick) {
      if (pipeline) pipeline->tick();
      nextTick = monotonicNowNs() + kTickIntervalNs;
    }
    if (pipeline && !sqliteStore(options) && monotonicNowNs() >= nextRelease) {
      if (size_t n = pipeline->releaseJobsOwnedElsewhere(name); n > 0) {
        logInfo(kComponent, std::to_string(n) +
                                " job(s) now stored by another collector: detection for them "
                                "stopped here");
      }
      nextRelease = monotonicNowNs() + kReleaseIntervalNs;
    }
    if (monotonicNowNs() >= nextTrim) {
      releaseFreeHeap();
      nextTrim = monotonicNowNs() + kTrimIntervalNs;
    }
    // Capture deadlines and merges; a merge runs here, never on ingest's threads.
    captures.tick(clock.nowNs());
    if (monotonicNowNs() >= nextRetention) {
      retention(**store);
      pruneCaptureFiles(captures, clock.nowNs());
      nextRetention =
          monotonicNowNs() + std::chrono::nanoseconds(options.retentionInterval).count();
    }
  }
  httpServer.stop();
  // Commits what ingest holds and sends its acks before the socket closes.
  ingestServer.stop();
  ingestPtr = nullptr;
  auto is = ingestServer.stats();
  auto ss = (*store)->stats();
  logInfo(kComponent, "stopped: " + std::to_string(is.itemsStored) + " items stored, " +
                          std::to_string(is.acksSent) + " acks sent this run; database holds " +
                          std::to_string(ss.stepRows) + " step rows");
  if (pipeline) {
    auto ps = pipeline->stats();
    auto ds = pipeline->detectStats();
    logInfo(kComponent, "detectors: " + std::to_string(ps.reportsFed) + " reports fed, " +
                            std::to_string(ps.rejected) + " refused, " + std::to_string(ds.late) +
                            " late, " + std::to_string(ds.droppedSteps) + " steps dropped, " +
                            std::to_string(ps.anomaliesOpened) + " anomalies opened, " +
                            std::to_string(ps.anomaliesResolved) + " resolved");
  }
  return Status::ok();
}

}  // namespace trainscope::collector
