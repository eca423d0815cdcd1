// The collector's HTTP server (Boost.Beast): the JSON API under /api/v1/, /healthz, /metrics
// (Prometheus), the live WebSocket /api/v1/live and the dashboard's static files. It owns a
// small pool of I/O threads (HttpOptions::ioThreads); each connection runs on its own strand,
// so requests on different connections are handled side by side. start() and stop() are called
// from the thread that owns the collector. Handlers read the Store, which is safe from any
// thread; requests that change something (POST, ...) are handled one at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collector/http/metrics.h"
#include "collector/storage/store.h"
#include "common/status.h"

namespace trainscope::http {

class CaptureService;  // api.h
}  // namespace trainscope::http

namespace trainscope::ingest {
class ImportReceiver;  // collector/ingest/import_receiver.h
}  // namespace trainscope::ingest

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
  // Browsers may change things and open the live feed only from the collector's own origin
  // and these (scheme://host[:port], e.g. a dashboard served elsewhere); a request with any
  // other Origin gets 403 (origin.h). Clients that send no Origin (curl, scripts) pass.
  std::vector<std::string> allowedOrigins;
  // Host names such requests may be addressed to besides localhost and IP literals (a proxy's
  // or this machine's name), which defeats DNS rebinding. None given and listening on a
  // non-loopback address: any name.
  std::vector<std::string> allowedHosts;
  // Text in Prometheus exposition format appended to /metrics (the collector's ingest
  // counters, see metrics.h ingestMetricsText). Called on an I/O thread, possibly on several
  // at once (one per scrape in flight); must be quick and thread-safe.
  std::function<std::string()> extraMetrics;
  // How often the live feed (/api/v1/live) reads the store for changes while a client is
  // connected: shorter is fresher, longer costs fewer store queries.
  int liveIntervalMs = 500;
  // What /metrics covers (metrics.h): the steps of each job's histograms, how long an ended or
  // silent job or node stays, how many are shown at most. More costs each scrape more.
  MetricsLimits metrics;
  // A live client whose unsent updates exceed this many messages is disconnected (it
  // reconnects and gets a fresh snapshot): bounds memory per slow client.
  size_t liveMaxQueued = 64;
  // A live client that has not taken the next piece (64 KiB) of a message within this long
  // (the socket stays full) is disconnected and what it held is freed: bounds memory per client
  // that never reads. Longer tolerates slower links.
  int liveWriteTimeoutMs = 10000;
  // The capture stage behind POST /api/v1/jobs/{job}/captures and the capture file routes
  // (docs/CAPTURE.md); the collector wires it in. Null: that POST answers 503 "captures are off"
  // (stored captures are still listed).
  std::shared_ptr<CaptureService> captures;
  // Imports of existing traces (`trainscope import`: POST /api/v1/jobs/{job}/imports, PUT
  // .../imports/{id}/files/{name}, POST .../imports/{id}/commit); the collector wires its
  // receiver in. Null: those routes answer 503.
  std::shared_ptr<ingest::ImportReceiver> imports;
  // Threads that run request handlers. More lets a slow request (a large page) not hold up
  // the others (the dashboard's first load sends several at once); each costs a stack and, in
  // the store, contention on its read connection. At least 1.
  int ioThreads = 4;
};

class HttpServer {
 public:
  HttpServer(HttpOptions options, storage::Store& store);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts serving on ioThreads background threads. Fails with a message naming the
  // address when it cannot bind.
  Status start();
  // Stops accepting, closes connections (responses being written get up to 2 s to finish)
  // and joins the threads. Idempotent.
  void stop();
  // Whether stop() has begun (it may still be letting responses finish).
  bool stopping() const;
  // The bound port (useful with port 0).
  uint16_t port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainscope::http
