#include "collector/notify/payload.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "collector/detect/events.h"
#include "collector/http/api.h"
#include "common/percent_encode.h"
#include "common/str_cat.h"

namespace trainscope::notify {
namespace {

// The anomaly's labels that tell where in the job it is, copied onto the alert when present.
constexpr const char* kPlaceLabels[] = {"stage", "group", "ep_index", "cause"};

std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", share * 100.0);
  return buf;
}

std::string ratio(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", std::isfinite(r) ? r : 0.0);
  return buf;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out.append(out.empty() ? "" : ",").append(s);
  return out;
}

}  // namespace

const char* toString(Severity severity) {
  switch (severity) {
    case Severity::kInfo:
      return "info";
    case Severity::kWarning:
      return "warning";
    case Severity::kCritical:
      return "critical";
  }
  return "info";
}

std::optional<Severity> parseSeverity(const std::string& text) {
  for (Severity s : {Severity::kInfo, Severity::kWarning, Severity::kCritical}) {
    if (text == toString(s)) return s;
  }
  return std::nullopt;
}

const char* toString(Phase phase) {
  switch (phase) {
    case Phase::kOpened:
      return "opened";
    case Phase::kUpdated:
      return "updated";
    case Phase::kResolved:
      return "resolved";
    case Phase::kEnded:
      return "ended";
  }
  return "updated";
}

double estimatedGain(const storage::AnomalyRow& row) {
  auto it = row.evidence.find("estimated_gain");
  double gain = it != row.evidence.end() ? it->second : row.magnitude - 1.0;
  if (!std::isfinite(gain)) gain = 0;
  return std::clamp(gain, 0.0, 1.0);
}

Severity severityOf(const storage::AnomalyRow& row, const SeverityThresholds& thresholds) {
  if (row.kind == "hang" || row.kind == "gpu_fault") return Severity::kCritical;
  const double gain = estimatedGain(row);
  if (gain >= thresholds.criticalGain) return Severity::kCritical;
  if (gain >= thresholds.warningGain) return Severity::kWarning;
  return Severity::kInfo;
}

std::string alertName(const std::string& kind) {
  std::string out = "Trainscope";
  bool upper = true;
  for (char c : kind) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out.push_back(upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c);
    upper = false;
  }
  return out;
}

std::string anomalyLink(const std::string& dashboardUrl, const storage::AnomalyRow& row) {
  return dashboardUrl + "/#/jobs/" + percentEncode(row.job) + "/anomalies/" + percentEncode(row.id);
}

std::string captureLink(const std::string& dashboardUrl, const storage::AnomalyRow& row) {
  if (!row.captureId) return "";
  return dashboardUrl + "/#/jobs/" + percentEncode(row.job) + "/captures/" +
         percentEncode(*row.captureId);
}

std::map<std::string, std::string> alertLabels(const storage::AnomalyRow& row, Severity severity) {
  std::map<std::string, std::string> labels = {
      {"alertname", alertName(row.kind)}, {"anomaly", row.id}, {"job", row.job}, {"kind", row.kind},
      {"severity", toString(severity)},
  };
  if (!row.ranks.empty()) labels["ranks"] = detect::rankSubject(row.ranks);
  if (!row.nodes.empty()) labels["nodes"] = joined(row.nodes);
  for (const char* key : kPlaceLabels) {
    auto it = row.labels.find(key);
    if (it != row.labels.end() && !it->second.empty()) labels[key] = it->second;
  }
  return labels;
}

std::string rfc3339(int64_t ns) {
  const int64_t secs = ns >= 0 ? ns / 1'000'000'000 : (ns - 999'999'999) / 1'000'000'000;
  const int64_t ms = (ns - secs * 1'000'000'000) / 1'000'000;
  const auto t = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

nlohmann::json alertmanagerAlert(const storage::AnomalyRow& row,
                                 const std::map<std::string, std::string>& labels,
                                 const std::string& dashboardUrl, int64_t endsAtNs) {
  const std::string link = anomalyLink(dashboardUrl, row);
  const double gain = estimatedGain(row);
  nlohmann::json annotations = {
      {"summary", row.summary},
      {"description", row.summary + " (estimated gain " + percent(gain) + " of step time, " +
                          ratio(row.magnitude) + " slower; detected at step " +
                          std::to_string(row.detectedStep) + ")"},
      {"estimated_gain", percent(gain)},
      {"magnitude", ratio(row.magnitude)},
      {"dashboard", link},
  };
  if (row.captureId) annotations["capture"] = captureLink(dashboardUrl, row);
  return {
      {"labels", labels},
      {"annotations", std::move(annotations)},
      {"startsAt", rfc3339(row.detectedNs)},
      {"endsAt", rfc3339(endsAtNs)},
      {"generatorURL", link},
  };
}

nlohmann::json webhookJson(const storage::AnomalyRow& row, Phase phase, Severity severity,
                           const std::string& dashboardUrl) {
  nlohmann::json body = {
      {"event", toString(phase)},
      {"severity", toString(severity)},
      {"estimated_gain", estimatedGain(row)},
      {"anomaly", http::anomalyJson(row)},
      {"dashboard_url", anomalyLink(dashboardUrl, row)},
  };
  body["capture_url"] = row.captureId ? nlohmann::json(captureLink(dashboardUrl, row)) : nullptr;
  return body;
}

nlohmann::json slackJson(const storage::AnomalyRow& row, Phase phase, Severity severity,
                         const std::string& dashboardUrl) {
  // Slack's mrkdwn: <URL|text> links; &, < and > escaped in the text around them.
  auto escape = [](const std::string& s) {
    std::string out;
    for (char c : s) {
      if (c == '&')
        out += "&amp;";
      else if (c == '<')
        out += "&lt;";
      else if (c == '>')
        out += "&gt;";
      else
        out.push_back(c);
    }
    return out;
  };
  const bool over = phase == Phase::kResolved || phase == Phase::kEnded;
  std::string text = over ? ":white_check_mark: *" + std::string(toString(phase)) + "*"
                          : std::string(severity == Severity::kCritical  ? ":rotating_light:"
                                        : severity == Severity::kWarning ? ":warning:"
                                                                         : ":information_source:") +
                                " *" + toString(severity) + "*";
  // strCat, not operator+ on temporaries: GCC 12 at -O3 warns (-Wrestrict) on those here.
  text += strCat(" ", escape(row.kind), " in job `", escape(row.job), "`: ", escape(row.summary));
  if (!over) text += strCat(" (estimated gain ", percent(estimatedGain(row)), ")");
  text += strCat(" <", anomalyLink(dashboardUrl, row), "|dashboard>");
  if (row.captureId) text += strCat(" <", captureLink(dashboardUrl, row), "|capture>");
  return {{"text", text}};
}

}  // namespace trainscope::notify
