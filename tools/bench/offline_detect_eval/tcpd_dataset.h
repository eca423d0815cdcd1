// Reads the Turing Change Point Dataset (TCPD, github.com/alan-turing-institute/TCPD) from a
// local checkout, for evaluating the offline detector on real series with human annotations.
// Only univariate series are read (as in the benchmark's univariate table). Any thread.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "tools/bench/offline_detect_eval/cpd_score.h"

namespace trainscope::bench {

struct AnnotatedSeries {
  std::string name;
  std::vector<double> values;            // missing values carry the previous one forward
  std::vector<ChangePoints> annotators;  // one set per annotator
};

// `root` holds annotations.json and datasets/NAME/NAME.json. Datasets that need a download
// (their JSON is absent) and multivariate ones are skipped and named in *skipped.
Result<std::vector<AnnotatedSeries>> loadTcpd(const std::string& root,
                                              std::vector<std::string>* skipped);

}  // namespace trainscope::bench
