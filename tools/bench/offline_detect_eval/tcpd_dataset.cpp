#include "tools/bench/offline_detect_eval/tcpd_dataset.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace trainscope::bench {

namespace {

Result<nlohmann::json> readJson(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return Result<nlohmann::json>::error("cannot open " + path.string());
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Result<nlohmann::json>::error(path.string() + ": not JSON");
  return j;
}

}  // namespace

Result<std::vector<AnnotatedSeries>> loadTcpd(const std::string& root,
                                              std::vector<std::string>* skipped) {
  namespace fs = std::filesystem;
  auto annotations = readJson(fs::path(root) / "annotations.json");
  if (!annotations) return annotations.status();
  if (!annotations->is_object()) {
    return Result<std::vector<AnnotatedSeries>>::error("annotations.json: not an object");
  }
  std::vector<AnnotatedSeries> out;
  for (const auto& [name, byAnnotator] : annotations->items()) {
    const fs::path file = fs::path(root) / "datasets" / name / (name + ".json");
    if (!fs::exists(file)) {
      skipped->push_back(name + " (not in the checkout: needs its download script)");
      continue;
    }
    auto data = readJson(file);
    if (!data) return data.status();
    const auto& series = (*data)["series"];
    if (!series.is_array() || series.empty()) {
      return Result<std::vector<AnnotatedSeries>>::error(file.string() + ": no series");
    }
    if (series.size() > 1) {
      skipped->push_back(name + " (multivariate)");
      continue;
    }
    AnnotatedSeries s;
    s.name = name;
    double last = 0.0;
    bool seen = false;
    size_t leadingMissing = 0;
    for (const auto& v : series[0]["raw"]) {
      if (v.is_number()) {
        last = v.get<double>();
        if (!seen) s.values.insert(s.values.begin(), leadingMissing, last);
        seen = true;
        s.values.push_back(last);
      } else if (seen) {
        s.values.push_back(last);
      } else {
        ++leadingMissing;
      }
    }
    for (const auto& [annotator, points] : byAnnotator.items()) {
      ChangePoints cps;
      for (const auto& p : points) cps.push_back(p.get<size_t>());
      s.annotators.push_back(std::move(cps));
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace trainscope::bench
