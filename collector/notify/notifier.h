// The notify stage: sends each anomaly's opening, updates and end to Alertmanager (API v2,
// re-sent while open) and to webhooks (generic JSON or Slack), so findings reach whoever is
// on call. offer() is the detect runner's onStored hook (called under its lock, on ingest's
// writer thread or the collector's main thread): it only files the row into each receiver's
// bounded queue. Every receiver has its own sender thread, so a receiver that is down,
// refuses or never answers fills its own queue and nothing else; ingest and detection never
// wait for it. offer(), stats() and metricsText() are safe from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "collector/notify/http_post.h"
#include "collector/notify/payload.h"
#include "collector/storage/store.h"
#include "common/clock.h"
#include "common/status.h"

namespace trainscope::notify {

struct NotifyOptions {
  // Alertmanager base URLs (http://HOST:PORT, or the full .../api/v2/alerts): every one gets
  // every alert, as Prometheus sends to each Alertmanager of a cluster.
  std::vector<std::string> alertmanagers;
  // Webhooks: generic JSON (webhookJson) and Slack's incoming-webhook text (slackJson).
  std::vector<std::string> webhooks;
  std::vector<std::string> slackWebhooks;
  // Headers sent to every webhook ("Authorization: Bearer ..."), e.g. a shared secret.
  HttpHeaders webhookHeaders;
  // Webhooks hear only of these kinds (empty: all) at or above this severity; Alertmanager
  // hears of every anomaly (its routes filter by the labels).
  std::set<std::string> webhookKinds;
  Severity webhookMinSeverity = Severity::kInfo;
  SeverityThresholds severity{};
  // Where people reach the dashboard (no trailing slash): the links in alerts and messages.
  std::string dashboardUrl = "http://127.0.0.1:7600";
  // Open alerts are re-sent this often; each says it ends endsAfterResends intervals later, so
  // Alertmanager keeps it through that many lost re-sends (a collector that died resolves
  // there by itself after as long). Shorter ends a dead collector's alerts sooner, costs more
  // requests.
  std::chrono::milliseconds alertmanagerResend{60'000};
  int endsAfterResends = 4;
  // Per receiver: webhook events waiting (the oldest goes when full), or alerts Alertmanager
  // is kept told of (a new one is refused when full). More rides out a longer outage.
  size_t queueSize = 1000;
  // A failed request is retried after retryInitial, doubling up to retryMax, for as long as
  // the queue holds it; a 4xx other than 408 and 429 is a refusal and is not retried.
  std::chrono::milliseconds retryInitial{1'000};
  std::chrono::milliseconds retryMax{60'000};
  std::chrono::milliseconds requestTimeout{10'000};
};

// Checks every URL and header, naming the flag at fault (--alertmanager, --webhook, ...).
Status checkNotifyOptions(const NotifyOptions& options);

struct ReceiverStats {
  std::string sink;               // "alertmanager", "webhook" or "slack"
  size_t index = 0;               // its place among the flags of its sink
  std::string origin;             // http://HOST:PORT (the path is left out: it may hold a secret)
  uint64_t sent = 0;              // webhook events, or alerts (re-sends included), answered 2xx
  uint64_t failures = 0;          // requests that failed (transport, timeout, non-2xx)
  uint64_t droppedQueueFull = 0;  // lost to the queue bound
  uint64_t droppedRefused = 0;    // answered with a 4xx other than 408/429: not retried
  uint64_t queued = 0;            // waiting events, or alerts held (open or not yet resolved there)
};

class Notifier {
 public:
  // A notifier whose receivers queue what is offered but send nothing before start().
  // `clock` (wall time, the collector clock) must outlive it. Fails as checkNotifyOptions.
  static Result<std::unique_ptr<Notifier>> create(NotifyOptions options, const Clock& clock);
  // create() and start() in one.
  static Result<std::unique_ptr<Notifier>> start(NotifyOptions options, const Clock& clock);
  // Starts a sender thread per receiver; `dashboardUrl` (when given) replaces the options'
  // (the collector knows its HTTP port only once bound). Once, from the creating thread.
  void start(const std::optional<std::string>& dashboardUrl = std::nullopt);
  // Stops the threads, ending a request in flight; what is still queued is logged and lost.
  ~Notifier();
  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;

  // A stored anomaly row (opened, refreshed, resolved or ended). Never blocks on a receiver.
  void offer(const storage::AnomalyRow& row);

  std::vector<ReceiverStats> stats() const;
  // trainscope_notify_* in Prometheus exposition format (for /metrics).
  std::string metricsText() const;

  class Receiver;

 private:
  Notifier(NotifyOptions options, const Clock& clock);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainscope::notify
