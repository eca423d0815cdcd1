#include "common/prometheus_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace trainscope {

namespace {

// Backslash and newline always; double quotes inside label values only.
std::string escape(std::string_view text, bool quotes) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quotes) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string escapeLabelValue(std::string_view value) {
  return escape(value, true);
}

std::string escapeHelpText(std::string_view text) {
  return escape(text, false);
}

std::string formatMetricValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  if (ec != std::errc()) return "NaN";
  return std::string(buf, end);
}

void MetricsText::family(const std::string& name, const std::string& type,
                         const std::string& help) {
  name_ = name;
  text_ += "# HELP " + name + " " + escapeHelpText(help) + "\n";
  text_ += "# TYPE " + name + " " + type + "\n";
}

void MetricsText::sample(const MetricLabels& labels, double value, std::string_view suffix) {
  text_ += name_;
  text_ += suffix;
  if (!labels.empty()) {
    text_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) text_ += ',';
      text_ += labels[i].first + "=\"" + escapeLabelValue(labels[i].second) + "\"";
    }
    text_ += '}';
  }
  text_ += ' ';
  text_ += formatMetricValue(value);
  text_ += '\n';
}

void MetricsText::single(const std::string& name, const std::string& type, const std::string& help,
                         double value) {
  family(name, type, help);
  sample({}, value);
}

void MetricsText::histogram(const MetricLabels& labels, const std::vector<double>& bounds,
                            const std::vector<double>& values) {
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  double sum = 0;
  for (double v : sorted) sum += v;
  MetricLabels withLe = labels;
  withLe.emplace_back("le", "");
  for (double bound : bounds) {
    // Cumulative: observations <= bound.
    auto n = std::upper_bound(sorted.begin(), sorted.end(), bound) - sorted.begin();
    withLe.back().second = formatMetricValue(bound);
    sample(withLe, static_cast<double>(n), "_bucket");
  }
  withLe.back().second = "+Inf";
  sample(withLe, static_cast<double>(sorted.size()), "_bucket");
  sample(labels, sum, "_sum");
  sample(labels, static_cast<double>(sorted.size()), "_count");
}

void MetricsText::raw(const std::string& text) {
  text_ += text;
  if (!text.empty() && text.back() != '\n') text_ += '\n';
}

}  // namespace trainscope
