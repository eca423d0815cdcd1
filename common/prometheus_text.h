// Prometheus text exposition (format 0.0.4): one writer for every /metrics part (the HTTP
// server's store and request metrics, ingest, the detectors, captures), so names, HELP and
// label values are escaped the same way everywhere. Pure; one writer per render, any thread.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trainscope {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// Escapes a label value: backslash, double quote and newline (the format's three escapes).
std::string escapeLabelValue(std::string_view value);
// Escapes HELP text (and comment lines): backslash and newline only.
std::string escapeHelpText(std::string_view text);
// A sample value: shortest round-trip decimal, NaN, +Inf, -Inf.
std::string formatMetricValue(double value);

// Builds the exposition text one metric family at a time, so each family's HELP, TYPE and
// samples stay together (the format requires it). Not thread-safe; one per render.
class MetricsText {
 public:
  // Starts a family; `type` is "counter", "gauge" or "histogram". A family with no samples
  // is still announced (HELP/TYPE only), which the format allows.
  void family(const std::string& name, const std::string& type, const std::string& help);
  // One sample of the current family; `suffix` is "" or "_bucket"/"_sum"/"_count".
  void sample(const MetricLabels& labels, double value, std::string_view suffix = "");
  // A family with one unlabelled sample: the common case of a counter or gauge.
  void single(const std::string& name, const std::string& type, const std::string& help,
              double value);
  // A whole histogram sample set: cumulative buckets at `bounds` (ascending) plus +Inf,
  // _sum and _count, for the observed `values`.
  void histogram(const MetricLabels& labels, const std::vector<double>& bounds,
                 const std::vector<double>& values);
  // Appends text that is already in exposition format (ends with a newline if non-empty).
  void raw(const std::string& text);
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::string name_;
};

}  // namespace trainscope
