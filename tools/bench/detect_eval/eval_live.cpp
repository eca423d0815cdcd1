#include "tools/bench/detect_eval/eval_live.h"

#include <algorithm>
#include <cmath>
#include <exception>

namespace trainscope::bench {

namespace {

// An anomaly as GET /api/v1/jobs/{job}/anomalies serves it.
Result<detect::Anomaly> anomalyOf(const nlohmann::json& j) {
  detect::Anomaly a;
  const std::string kind = j.at("kind").get<std::string>();
  if (!detect::parseAnomalyKind(kind, &a.kind)) {
    return Status::error("unknown anomaly kind '" + kind + "'");
  }
  a.id = j.value("id", "");
  a.job = j.value("job", "");
  a.ranks = j.at("ranks").get<std::vector<uint32_t>>();
  a.onsetStep = j.at("onset_step").get<int64_t>();
  a.detectedStep = j.at("detected_step").get<int64_t>();
  a.detectedNs = j.at("detected_ns").get<int64_t>();
  a.summary = j.value("summary", "");
  if (j.contains("evidence") && j["evidence"].is_object()) {
    for (const auto& [k, v] : j["evidence"].items()) {
      if (v.is_number()) a.evidence[k] = v.get<double>();
    }
  }
  if (j.contains("labels") && j["labels"].is_object()) {
    for (const auto& [k, v] : j["labels"].items()) {
      if (v.is_string()) a.labels[k] = v.get<std::string>();
    }
  }
  return a;
}

}  // namespace

Result<std::vector<ScenarioResult>> liveResults(const nlohmann::json& run) {
  std::vector<ScenarioResult> out;
  if (!run.is_object() || !run.contains("scenarios") || !run["scenarios"].is_array()) {
    return Status::error("no 'scenarios' array");
  }
  for (const auto& s : run["scenarios"]) {
    const std::string name = s.value("name", "?");
    try {
      ScenarioResult r;
      r.scenario.name = name;
      r.scenario.group = s.at("group").get<std::string>();
      r.scenario.faultLabel = s.at("label").get<std::string>();
      r.scenario.magnitude = s.at("magnitude").get<double>();
      r.scenario.sim.ranks = s.at("ranks").get<uint32_t>();
      r.scenario.sim.steps = s.at("steps").get<int64_t>();
      r.scenario.sim.noise = s.at("noise").get<double>();
      r.stepNs = s.at("step_ms").get<double>() * 1e6;
      r.stepsJudged = r.scenario.sim.steps;
      // --parallel jobs are scored in groups of their own, as in-process.
      if (const std::string layout = s.value("parallel", ""); !layout.empty()) {
        auto parsed = sim::parseParallel(layout);
        if (!parsed) return parsed.status();
        r.scenario.sim.parallel = *parsed;
        r.scenario.sim.edgeLoad = s.value("edge_load", 0.0);
      }
      for (const auto& t : s.at("truth")) {
        TruthFault f;
        f.kind = t.at("kind").get<std::string>();
        if (f.kind == "spike") continue;  // checkpoints: healthy
        f.ranks = t.at("ranks").get<std::vector<uint32_t>>();
        f.fromStep = t.at("from_step").get<int64_t>();
        f.factor = t.value("factor", 1.0);
        f.op = t.value("op", "");
        f.startNs = t.value("start_ns", int64_t{0});
        if (t.contains("gain") && t["gain"].is_number()) f.gain = t["gain"].get<double>();
        r.truth.push_back(std::move(f));
      }
      for (const auto& j : s.at("anomalies")) {
        auto a = anomalyOf(j);
        if (!a) return Status::error("job '" + name + "': " + a.message());
        r.detections.push_back(std::move(*a));
      }
      std::stable_sort(r.detections.begin(), r.detections.end(),
                       [](const detect::Anomaly& x, const detect::Anomaly& y) {
                         return x.detectedNs < y.detectedNs;
                       });
      out.push_back(std::move(r));
    } catch (const std::exception& e) {
      return Status::error("job '" + name + "': " + e.what());
    }
  }
  return out;
}

}  // namespace trainscope::bench
