// The one Prometheus exposition writer (common/prometheus_text.h): HELP and label escaping,
// value formatting, families with their samples, histograms.
#include "common/prometheus_text.h"

#include <catch2/catch.hpp>
#include <limits>

using trainscope::escapeHelpText;
using trainscope::escapeLabelValue;
using trainscope::formatMetricValue;
using trainscope::MetricsText;

TEST_CASE("prometheus text: HELP escapes backslash and newline, labels also quotes",
          "[common][prometheus]") {
  CHECK(escapeHelpText("a\\b\nc\"d") == "a\\\\b\\nc\"d");
  CHECK(escapeLabelValue("a\\b\nc\"d") == "a\\\\b\\nc\\\"d");
  MetricsText m;
  m.family("x_total", "counter", "two\nlines \\ here");
  m.sample({{"job", "j\"1\n"}}, 3);
  CHECK(m.text() ==
        "# HELP x_total two\\nlines \\\\ here\n# TYPE x_total counter\nx_total{job=\"j\\\"1\\n\"} "
        "3\n");
}

TEST_CASE("prometheus text: values, single samples, histograms", "[common][prometheus]") {
  CHECK(formatMetricValue(1234) == "1234");
  CHECK(formatMetricValue(0.25) == "0.25");
  CHECK(formatMetricValue(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(formatMetricValue(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(formatMetricValue(std::numeric_limits<double>::quiet_NaN()) == "NaN");
  MetricsText m;
  m.single("up", "gauge", "Is it up.", 1);
  m.family("t_seconds", "histogram", "Times.");
  m.histogram({{"r", "0"}}, {0.1, 1}, {0.0625, 0.5, 2});
  m.raw("# end");
  CHECK(m.text() ==
        "# HELP up Is it up.\n# TYPE up gauge\nup 1\n"
        "# HELP t_seconds Times.\n# TYPE t_seconds histogram\n"
        "t_seconds_bucket{r=\"0\",le=\"0.1\"} 1\nt_seconds_bucket{r=\"0\",le=\"1\"} 2\n"
        "t_seconds_bucket{r=\"0\",le=\"+Inf\"} 3\nt_seconds_sum{r=\"0\"} 2.5625\n"
        "t_seconds_count{r=\"0\"} 3\n# end\n");
}
