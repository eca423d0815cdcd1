// The collector's HTTP server (Boost.Beast): the JSON API under /api/v1/, /healthz, /metrics
// (Prometheus), the live WebSocket /api/v1/live and the dashboard's static files. It owns its
// I/O thread; start() and stop() are called from the thread that owns the collector. Handlers
// read the Store, which is safe from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "collector/storage/store.h"
#include "common/status.h"

namespace trainscope::http {

struct HttpOptions {
  std::string address = "127.0.0.1";  // bind address; only loopback unless told otherwise
  uint16_t port = 7600;               // 0 picks a free port (see HttpServer::port())
  std::string webRoot;                // directory of the dashboard's static files; "" serves none
  size_t maxStepRows = 100000;        // upper bound a client may ask for with limit=
  size_t maxBodyBytes = 1 << 20;      // larger request bodies get 413; bounds memory per client
  int readTimeoutMs = 30000;          // a request (or an idle keep-alive) slower than this is
                                      // closed; shorter frees slots sooner, longer suits slow links
  // Requests that change something (any method but GET/HEAD/OPTIONS) need
  // "Authorization: Bearer <authToken>", else 401. "" leaves them open (loopback use only).
  std::string authToken;
  // Text in Prometheus exposition format appended to /metrics (the collector's ingest
  // counters, see metrics.h ingestMetricsText). Called on the I/O thread; must be quick.
  std::function<std::string()> extraMetrics;
  // How often the live feed (/api/v1/live) reads the store for changes while a client is
  // connected: shorter is fresher, longer costs fewer store queries.
  int liveIntervalMs = 500;
  // Step rows /metrics reads per job: the latest this many steps of every rank (the step-time
  // histogram's window). More smooths the histogram; fewer keeps a scrape cheap.
  int64_t metricsWindowSteps = 20;
  // A live client whose unsent updates exceed this many messages is disconnected (it
  // reconnects and gets a fresh snapshot): bounds memory per slow client.
  size_t liveMaxQueued = 64;
};

class HttpServer {
 public:
  HttpServer(HttpOptions options, storage::Store& store);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts serving on a background thread. Fails with a message naming the
  // address when it cannot bind.
  Status start();
  // Stops accepting, closes connections and joins the thread. Idempotent.
  void stop();
  // The bound port (useful with port 0).
  uint16_t port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainscope::http
