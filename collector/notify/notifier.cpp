#include "collector/notify/notifier.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "common/log.h"
#include "common/prometheus_text.h"
#include "common/thread_annotations.h"

namespace trainscope::notify {
namespace {

constexpr const char* kComponent = "notify";
// Alerts per POST to Alertmanager: more are sent in the next request at once.
constexpr size_t kMaxAlertsPerPost = 500;
// Severities kept for open anomalies, so an anomaly's end is judged as its opening was;
// past this the oldest entries go (an open anomaly then reads as new at its next update).
constexpr size_t kMaxTrackedOpen = 100'000;

using SteadyClock = std::chrono::steady_clock;

enum class Outcome { kDelivered, kRetry, kRefused };

// 2xx delivered; 408, 429 and 5xx (the receiver is busy or broken now) worth a retry; any
// other status says the receiver will not take this request as it is.
Outcome outcomeOf(unsigned status) {
  if (status >= 200 && status < 300) return Outcome::kDelivered;
  if (status == 408 || status == 429 || status >= 500) return Outcome::kRetry;
  return Outcome::kRefused;
}

std::string alertmanagerTarget(std::string target) {
  static const std::string kPath = "/api/v2/alerts";
  if (const size_t q = target.find('?'); q != std::string::npos) target.resize(q);
  if (target.size() >= kPath.size() &&
      target.compare(target.size() - kPath.size(), kPath.size(), kPath) == 0) {
    return target;
  }
  while (!target.empty() && target.back() == '/') target.pop_back();
  return target + kPath;
}

}  // namespace

// One receiver and its sender thread. The thread takes what is due (nextLocked), posts it
// without the lock and reports the outcome (doneLocked); failures back off exponentially.
class Notifier::Receiver {
 public:
  Receiver(std::string sink, size_t index, HttpUrl url, HttpHeaders headers,
           const NotifyOptions& options)
      : url_(std::move(url)),
        headers_(std::move(headers)),
        options_(options),
        name_(sink + " " + std::to_string(index) + " (" + url_.origin() + ")") {
    stats_.sink = std::move(sink);
    stats_.index = index;
    stats_.origin = url_.origin();
  }
  virtual ~Receiver() = default;
  Receiver(const Receiver&) = delete;
  Receiver& operator=(const Receiver&) = delete;

  void start() {
    thread_ = std::thread([this] { run(); });
  }
  void stop() {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    cv_.notifyAll();
    poster_.cancel();
    if (thread_.joinable()) thread_.join();
    MutexLock lock(&mu_);
    if (size_t left = undeliveredLocked(); left > 0) {
      logWarn(kComponent,
              name() + ": stopping with " + std::to_string(left) + " undelivered item(s), lost");
    }
  }

  virtual void offer(const storage::AnomalyRow& row, Phase phase, Severity severity) = 0;

  ReceiverStats stats() const {
    MutexLock lock(&mu_);
    ReceiverStats s = stats_;
    s.queued = queuedLocked();
    return s;
  }

 protected:
  // "webhook 0 (http://HOST:PORT)", for the log.
  const std::string& name() const { return name_; }
  // The body to post now, or nothing (then the thread sleeps until *wake or an offer).
  virtual std::optional<std::string> nextLocked(SteadyClock::time_point now,
                                                SteadyClock::time_point* wake) REQUIRES(mu_) = 0;
  // What the last body's request came to; `sent` counts its items on delivery.
  virtual void doneLocked(Outcome outcome) REQUIRES(mu_) = 0;
  virtual size_t queuedLocked() const REQUIRES(mu_) = 0;
  // What was offered and never delivered (stop() logs it as lost).
  virtual size_t undeliveredLocked() const REQUIRES(mu_) { return queuedLocked(); }

  void wake() { cv_.notifyOne(); }

  const HttpUrl url_;
  const HttpHeaders headers_;
  const NotifyOptions& options_;
  const std::string name_;
  mutable Mutex mu_;
  ReceiverStats stats_ GUARDED_BY(mu_);
  RateLimitedLog dropLog_{std::chrono::seconds(10)};

 private:
  void run() {
    UniqueLock lock(&mu_);
    while (!stopping_) {
      const auto now = SteadyClock::now();
      if (now < retryAt_) {
        cv_.waitUntil(lock, retryAt_);
        continue;
      }
      SteadyClock::time_point wakeAt = now + std::chrono::hours(1);
      std::optional<std::string> body = nextLocked(now, &wakeAt);
      if (!body) {
        cv_.waitUntil(lock, wakeAt);
        continue;
      }
      lock.unlock();
      auto reply = poster_.post(url_, headers_, *body, options_.requestTimeout);
      lock.lock();
      if (stopping_) break;
      const Outcome outcome = reply ? outcomeOf(reply->status) : Outcome::kRetry;
      const std::string what = reply ? "HTTP " + std::to_string(reply->status) +
                                           (reply->body.empty() ? "" : ": " + reply->body)
                                     : reply.message();
      if (outcome == Outcome::kDelivered) {
        if (failStreak_ > 0) {
          logInfo(kComponent, name() + ": delivering again after " + std::to_string(failStreak_) +
                                  " failed request(s)");
        }
        failStreak_ = 0;
        backoff_ = {};
      } else {
        ++stats_.failures;
      }
      if (outcome == Outcome::kRetry) {
        backoff_ = backoff_.count() == 0 ? options_.retryInitial
                                         : std::min(backoff_ * 2, options_.retryMax);
        retryAt_ = SteadyClock::now() + backoff_;
        // The first failure of a streak, then every tenth: a receiver down for an hour at the
        // 60 s ceiling says so once or twice, not sixty times.
        if (failStreak_ % 10 == 0) {
          logWarn(kComponent, name() + ": request failed (" + what + "); retrying in " +
                                  std::to_string(backoff_.count()) + " ms, " +
                                  std::to_string(queuedLocked()) + " item(s) queued");
        }
        ++failStreak_;
      } else if (outcome == Outcome::kRefused) {
        logError(kComponent, name() + ": refused (" + what + "): dropped, not retried");
      }
      doneLocked(outcome);
    }
  }

  HttpPoster poster_;
  std::thread thread_;
  CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  SteadyClock::time_point retryAt_ GUARDED_BY(mu_){};
  std::chrono::milliseconds backoff_ GUARDED_BY(mu_){0};
  uint64_t failStreak_ GUARDED_BY(mu_) = 0;
};

namespace {

// Alertmanager: the alerts it is kept told of, each re-sent every alertmanagerResend while
// open (endsAt a few intervals ahead) and once more when it ends (endsAt its end).
class AlertmanagerReceiver final : public Notifier::Receiver {
 public:
  AlertmanagerReceiver(size_t index, HttpUrl url, const NotifyOptions& options, const Clock& clock)
      : Receiver("alertmanager", index, std::move(url), {}, options), clock_(clock) {}

  void offer(const storage::AnomalyRow& row, Phase phase, Severity severity) override {
    {
      MutexLock lock(&mu_);
      auto it = alerts_.find(row.id);
      if (it == alerts_.end()) {
        if (alerts_.size() >= options_.queueSize) {
          ++stats_.droppedQueueFull;
          dropLog_.log(LogLevel::kWarn, kComponent,
                       name() + ": " + std::to_string(alerts_.size()) +
                           " alerts held (the bound): not sending " + toString(phase) + " " +
                           row.id + " (" + std::to_string(stats_.droppedQueueFull) +
                           " dropped in all)");
          return;
        }
        it = alerts_.emplace(row.id, Alert{row, alertLabels(row, severity)}).first;
      }
      Alert& a = it->second;
      a.row = row;
      a.over = phase == Phase::kResolved || phase == Phase::kEnded;
      a.dirty = true;
      ++a.version;
    }
    wake();
  }

 private:
  struct Alert {
    storage::AnomalyRow row;
    std::map<std::string, std::string> labels;  // fixed at the first send (see alertLabels)
    bool over = false;                          // resolved or ended: sent once, then forgotten
    bool dirty = true;                          // due to be sent
    uint64_t version = 0;                       // offers so far; a send clears only its own
  };

  std::optional<std::string> nextLocked(SteadyClock::time_point now, SteadyClock::time_point* wake)
      REQUIRES(mu_) override {
    if (nextResend_ == SteadyClock::time_point{}) nextResend_ = now + options_.alertmanagerResend;
    if (now >= nextResend_) {
      for (auto& [id, a] : alerts_) a.dirty = true;
      nextResend_ = now + options_.alertmanagerResend;
    }
    *wake = nextResend_;
    const int64_t nowNs = clock_.nowNs();
    const int64_t ahead = std::chrono::nanoseconds(options_.alertmanagerResend).count() *
                          std::max(1, options_.endsAfterResends);
    nlohmann::json body = nlohmann::json::array();
    inFlight_.clear();
    for (const auto& [id, a] : alerts_) {
      if (!a.dirty) continue;
      const int64_t endsNs =
          a.over ? (a.row.resolvedNs > 0 ? std::min(a.row.resolvedNs, nowNs) : nowNs)
                 : nowNs + ahead;
      body.push_back(alertmanagerAlert(a.row, a.labels, options_.dashboardUrl, endsNs));
      inFlight_.emplace_back(id, a.version);
      if (inFlight_.size() >= kMaxAlertsPerPost) break;
    }
    if (inFlight_.empty()) return std::nullopt;
    return body.dump();
  }

  void doneLocked(Outcome outcome) REQUIRES(mu_) override {
    if (outcome == Outcome::kDelivered) stats_.sent += inFlight_.size();
    if (outcome == Outcome::kRefused) stats_.droppedRefused += inFlight_.size();
    if (outcome != Outcome::kRetry) {
      for (const auto& [id, version] : inFlight_) {
        auto it = alerts_.find(id);
        if (it == alerts_.end() || it->second.version != version) continue;  // newer news
        if (it->second.over) {
          alerts_.erase(it);
        } else {
          it->second.dirty = false;
        }
      }
    }
    inFlight_.clear();
  }

  size_t queuedLocked() const REQUIRES(mu_) override { return alerts_.size(); }
  size_t undeliveredLocked() const REQUIRES(mu_) override {
    return static_cast<size_t>(std::count_if(alerts_.begin(), alerts_.end(),
                                             [](const auto& a) { return a.second.dirty; }));
  }

  const Clock& clock_;
  std::map<std::string, Alert> alerts_ GUARDED_BY(mu_);
  std::vector<std::pair<std::string, uint64_t>> inFlight_ GUARDED_BY(mu_);
  SteadyClock::time_point nextResend_ GUARDED_BY(mu_){};
};

// A webhook: one POST per event (opened, resolved, ended; updates are left out: a message
// per refresh would be noise), in order, the oldest dropped when the queue is full.
class WebhookReceiver final : public Notifier::Receiver {
 public:
  WebhookReceiver(bool slack, size_t index, HttpUrl url, const NotifyOptions& options)
      : Receiver(slack ? "slack" : "webhook", index, std::move(url), options.webhookHeaders,
                 options),
        slack_(slack) {}

  void offer(const storage::AnomalyRow& row, Phase phase, Severity severity) override {
    if (phase == Phase::kUpdated) return;
    if (!options_.webhookKinds.empty() && options_.webhookKinds.count(row.kind) == 0) return;
    if (severity < options_.webhookMinSeverity) return;
    {
      MutexLock lock(&mu_);
      if (queue_.size() >= options_.queueSize) {
        // The oldest waiting event goes; the one being sent stays (its outcome is pending).
        auto victim = queue_.begin();
        if (victim != queue_.end() && victim->seq == inFlight_) ++victim;
        if (victim == queue_.end()) {
          dropLocked(phase, row.id);
          return;
        }
        dropLocked(victim->phase, victim->row.id);
        queue_.erase(victim);
      }
      queue_.push_back(Event{++lastSeq_, row, phase, severity});
    }
    wake();
  }

 private:
  // Rendered when sent, on the sender thread: offer() stays a copy under a lock.
  struct Event {
    uint64_t seq = 0;
    storage::AnomalyRow row;
    Phase phase = Phase::kOpened;
    Severity severity = Severity::kInfo;
  };

  void dropLocked(Phase phase, const std::string& id) REQUIRES(mu_) {
    ++stats_.droppedQueueFull;
    dropLog_.log(LogLevel::kWarn, kComponent,
                 name() + ": queue full (" + std::to_string(options_.queueSize) +
                     " events), dropped the event " + toString(phase) + " of " + id + " (" +
                     std::to_string(stats_.droppedQueueFull) + " dropped in all)");
  }

  std::optional<std::string> nextLocked(SteadyClock::time_point /*now*/,
                                        SteadyClock::time_point* /*wake*/) REQUIRES(mu_) override {
    if (queue_.empty()) return std::nullopt;
    const Event& e = queue_.front();
    inFlight_ = e.seq;
    return (slack_ ? slackJson(e.row, e.phase, e.severity, options_.dashboardUrl)
                   : webhookJson(e.row, e.phase, e.severity, options_.dashboardUrl))
        .dump();
  }

  void doneLocked(Outcome outcome) REQUIRES(mu_) override {
    if (outcome == Outcome::kDelivered) ++stats_.sent;
    if (outcome == Outcome::kRefused) ++stats_.droppedRefused;
    if (outcome != Outcome::kRetry && !queue_.empty() && queue_.front().seq == inFlight_) {
      queue_.pop_front();
    }
    inFlight_ = 0;
  }

  size_t queuedLocked() const REQUIRES(mu_) override { return queue_.size(); }

  const bool slack_;
  std::deque<Event> queue_ GUARDED_BY(mu_);
  uint64_t lastSeq_ GUARDED_BY(mu_) = 0;
  uint64_t inFlight_ GUARDED_BY(mu_) = 0;  // the seq being sent; 0 none
};

}  // namespace

Status checkNotifyOptions(const NotifyOptions& options) {
  auto check = [](const std::vector<std::string>& urls, const char* flag) -> Status {
    for (const auto& u : urls) {
      if (auto url = parseHttpUrl(u); !url)
        return Status::invalidArgument(std::string(flag) + ": " + url.message());
    }
    return Status::ok();
  };
  if (auto s = check(options.alertmanagers, "--alertmanager"); !s) return s;
  if (auto s = check(options.webhooks, "--webhook"); !s) return s;
  if (auto s = check(options.slackWebhooks, "--slack-webhook"); !s) return s;
  if (options.queueSize == 0) return Status::invalidArgument("--notify-queue: must be at least 1");
  if (options.alertmanagerResend.count() <= 0) {
    return Status::invalidArgument("--alertmanager-resend: must be positive");
  }
  if (options.retryInitial.count() <= 0 || options.retryMax < options.retryInitial) {
    return Status::invalidArgument("notify retry backoff: initial must be positive and <= max");
  }
  return Status::ok();
}

struct Notifier::Impl {
  NotifyOptions options;
  std::vector<std::unique_ptr<Receiver>> receivers;
  bool started = false;  // the thread that creates, starts and destroys the notifier only
  Mutex mu;
  // Open anomalies' severity as first judged, so the end goes where the opening went.
  std::map<std::string, Severity> open GUARDED_BY(mu);
};

Notifier::Notifier(NotifyOptions options, const Clock& clock) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  const NotifyOptions& o = impl_->options;
  for (size_t i = 0; i < o.alertmanagers.size(); ++i) {
    HttpUrl url = *parseHttpUrl(o.alertmanagers[i]);
    url.target = alertmanagerTarget(url.target);
    impl_->receivers.push_back(std::make_unique<AlertmanagerReceiver>(i, url, o, clock));
  }
  for (size_t i = 0; i < o.webhooks.size(); ++i) {
    impl_->receivers.push_back(
        std::make_unique<WebhookReceiver>(false, i, *parseHttpUrl(o.webhooks[i]), o));
  }
  for (size_t i = 0; i < o.slackWebhooks.size(); ++i) {
    impl_->receivers.push_back(
        std::make_unique<WebhookReceiver>(true, i, *parseHttpUrl(o.slackWebhooks[i]), o));
  }
}

Result<std::unique_ptr<Notifier>> Notifier::create(NotifyOptions options, const Clock& clock) {
  if (auto s = checkNotifyOptions(options); !s) return s;
  return std::unique_ptr<Notifier>(new Notifier(std::move(options), clock));
}

Result<std::unique_ptr<Notifier>> Notifier::start(NotifyOptions options, const Clock& clock) {
  auto n = create(std::move(options), clock);
  if (n) (*n)->start();
  return n;
}

void Notifier::start(const std::optional<std::string>& dashboardUrl) {
  if (impl_->started) return;
  impl_->started = true;
  // Before any sender thread exists: they read it, offer() does not.
  if (dashboardUrl) impl_->options.dashboardUrl = *dashboardUrl;
  for (auto& r : impl_->receivers) {
    r->start();
    const ReceiverStats s = r->stats();
    logInfo(kComponent, "sending anomalies to " + s.sink + " " + std::to_string(s.index) + " at " +
                            s.origin + "; dashboard links to " + impl_->options.dashboardUrl);
  }
}

Notifier::~Notifier() {
  for (auto& r : impl_->receivers) r->stop();
}

void Notifier::offer(const storage::AnomalyRow& row) {
  Phase phase = Phase::kUpdated;
  Severity severity = Severity::kInfo;
  {
    MutexLock lock(&impl_->mu);
    auto& open = impl_->open;
    auto it = open.find(row.id);
    if (row.state == storage::AnomalyState::kOpen) {
      if (it == open.end()) {
        if (open.size() >= kMaxTrackedOpen) open.erase(open.begin());
        it = open.emplace(row.id, severityOf(row, impl_->options.severity)).first;
        phase = Phase::kOpened;
      }
      severity = it->second;
    } else {
      phase = row.state == storage::AnomalyState::kResolved ? Phase::kResolved : Phase::kEnded;
      severity = it != open.end() ? it->second : severityOf(row, impl_->options.severity);
      if (it != open.end()) open.erase(it);
    }
  }
  for (auto& r : impl_->receivers) r->offer(row, phase, severity);
}

std::vector<ReceiverStats> Notifier::stats() const {
  std::vector<ReceiverStats> out;
  out.reserve(impl_->receivers.size());
  for (const auto& r : impl_->receivers) out.push_back(r->stats());
  return out;
}

std::string Notifier::metricsText() const {
  const auto all = stats();
  MetricsText m;
  auto labels = [](const ReceiverStats& s) -> MetricLabels {
    return {{"sink", s.sink}, {"index", std::to_string(s.index)}, {"receiver", s.origin}};
  };
  m.family("trainscope_notify_sent_total", "counter",
           "Anomaly events (webhooks) or alerts (Alertmanager, re-sends included) a receiver "
           "accepted with a 2xx status.");
  for (const auto& s : all) m.sample(labels(s), static_cast<double>(s.sent));
  m.family("trainscope_notify_failures_total", "counter",
           "Requests to a receiver that failed: no connection, no reply in time, or a non-2xx "
           "status. All but refusals are retried with exponential backoff.");
  for (const auto& s : all) m.sample(labels(s), static_cast<double>(s.failures));
  m.family("trainscope_notify_dropped_total", "counter",
           "Events or alerts given up: queue_full (the bounded queue overflowed while the "
           "receiver was slow or down) or refused (a 4xx other than 408 and 429).");
  for (const auto& s : all) {
    auto l = labels(s);
    l.emplace_back("reason", "queue_full");
    m.sample(l, static_cast<double>(s.droppedQueueFull));
    l.back().second = "refused";
    m.sample(l, static_cast<double>(s.droppedRefused));
  }
  m.family("trainscope_notify_queued", "gauge",
           "Webhook events waiting to be sent, or alerts an Alertmanager is kept told of (open "
           "ones and ends not yet delivered).");
  for (const auto& s : all) m.sample(labels(s), static_cast<double>(s.queued));
  return m.text();
}

}  // namespace trainscope::notify
