// trainscope-collector: parses flags into CollectorOptions and runs the collector.
#include <string>

#include <CLI/CLI.hpp>

#include "collector/collector.h"
#include "common/log.h"

int main(int argc, char** argv) {
  using trainscope::collector::CollectorOptions;
  CollectorOptions options;
  options.webRoot = trainscope::collector::defaultWebRoot();
  std::string logLevel = "info";

  CLI::App app{
      "trainscope-collector: receives telemetry from trainscope agents, stores it in "
      "SQLite and serves the HTTP API, dashboard and /metrics."};
  app.add_option("--data-dir", options.dataDir,
                 "directory for the database (DIR/trainscope.db); created if missing")
      ->capture_default_str();
  app.add_option("--ingest", options.ingest,
                 "ZeroMQ endpoint agents connect to, tcp://ADDR:PORT; port 0 or * picks a free "
                 "port (see --ready-file)")
      ->capture_default_str();
  app.add_option("--http", options.http,
                 "HTTP API/dashboard address, ADDR:PORT; port 0 picks a free port")
      ->capture_default_str();
  app.add_option("--retention-hours", options.retentionHours,
                 "delete steps and host samples received longer ago than this; 0 keeps all")
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
  CLI11_PARSE(app, argc, argv);

  using trainscope::LogLevel;
  trainscope::setLogLevel(logLevel == "debug"   ? LogLevel::kDebug
                          : logLevel == "warn"  ? LogLevel::kWarn
                          : logLevel == "error" ? LogLevel::kError
                                                : LogLevel::kInfo);
  auto status = trainscope::collector::run(options);
  if (!status) {
    trainscope::logError("collector", status.message());
    return 1;
  }
  return 0;
}
