// What the notify stage sends for an anomaly: its severity, Alertmanager's alert (API v2
// labels and annotations) and the webhooks' bodies (generic JSON, Slack). Pure functions of a
// stored anomaly row and the time; any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "collector/storage/store.h"

namespace trainscope::notify {

// How urgent an anomaly is for whoever is paged. critical: the job stopped or lost hardware
// (hang, gpu_fault), or fixing the anomaly would save at least criticalGain of every step;
// warning: at least warningGain; info: the rest (spike, small regressions).
enum class Severity { kInfo, kWarning, kCritical };
const char* toString(Severity severity);
std::optional<Severity> parseSeverity(const std::string& text);

struct SeverityThresholds {
  double criticalGain = 0.20;  // share of step time; lower pages for smaller slowdowns
  double warningGain = 0.05;
};

// The anomaly's estimated gain in 0..1: evidence.estimated_gain, else magnitude - 1 (the
// measure the automatic captures rank anomalies by).
double estimatedGain(const storage::AnomalyRow& row);
Severity severityOf(const storage::AnomalyRow& row, const SeverityThresholds& thresholds);

// The phase of an anomaly a row reports.
enum class Phase { kOpened, kUpdated, kResolved, kEnded };
const char* toString(Phase phase);

// "TrainscopeStraggler" for "straggler", "TrainscopeStepShift" for "step_shift".
std::string alertName(const std::string& kind);

// Links into the dashboard served at `dashboardUrl` (the collector's external URL, no
// trailing slash): the anomaly's page, and a capture's page ("" without a capture).
std::string anomalyLink(const std::string& dashboardUrl, const storage::AnomalyRow& row);
std::string captureLink(const std::string& dashboardUrl, const storage::AnomalyRow& row);

// Alertmanager's identity of an alert: alertname, anomaly (the id), job, kind, severity,
// ranks ("0-3+6"), nodes ("a,b"), and stage, group, ep_index, cause where the anomaly has
// them. Computed once, when an anomaly is first sent, and kept: Alertmanager tells alerts
// apart by their labels, so a refresh whose gain moves it across a severity threshold must
// not become a second alert.
std::map<std::string, std::string> alertLabels(const storage::AnomalyRow& row, Severity severity);

// One element of Alertmanager's POST /api/v2/alerts body: `labels` as computed above,
// annotations (summary, description, estimated_gain, magnitude, dashboard, capture), startsAt
// the detection time, generatorURL the dashboard link, and endsAt `endsAtNs` (open: a few
// resend intervals ahead; resolved: when it resolved).
nlohmann::json alertmanagerAlert(const storage::AnomalyRow& row,
                                 const std::map<std::string, std::string>& labels,
                                 const std::string& dashboardUrl, int64_t endsAtNs);

// The generic webhook body: {"event", "severity", "anomaly": {...as the API serves it},
// "dashboard_url", "capture_url"}.
nlohmann::json webhookJson(const storage::AnomalyRow& row, Phase phase, Severity severity,
                           const std::string& dashboardUrl);
// A Slack incoming-webhook body: {"text": one mrkdwn line with a link to the dashboard}.
nlohmann::json slackJson(const storage::AnomalyRow& row, Phase phase, Severity severity,
                         const std::string& dashboardUrl);

// RFC 3339 UTC with milliseconds, as Alertmanager reads times: "2026-01-02T03:04:05.678Z".
std::string rfc3339(int64_t ns);

}  // namespace trainscope::notify
