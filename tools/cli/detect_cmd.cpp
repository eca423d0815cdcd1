#include "tools/cli/detect_cmd.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <ostream>

namespace trainscope::cli {
namespace {

using nlohmann::json;

std::string num(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string value(double v) {
  return num("%.6g", v);
}

// One line saying how the series was judged, so a user can tell why a change was (not) found.
std::string judgedLine(const detect::Segmentation& seg) {
  std::string s = "model ";
  s += detect::segmentModelName(seg.model);
  s += ", penalty " + num("%.1f", seg.penalty) + " per change, noise sd " + value(seg.noiseSd) +
       ", lag-1 autocorrelation " + num("%.2f", seg.autocorr);
  s += seg.period > 0 ? ", season of " + std::to_string(seg.period) + " values removed"
                      : std::string(", no season");
  s += ", " + std::to_string(seg.outliers) + " outlier" + (seg.outliers == 1 ? "" : "s") +
       " replaced";
  return s;
}

}  // namespace

json segmentationJson(const detect::Segmentation& seg, size_t values) {
  json segments = json::array();
  for (const auto& s : seg.segments) {
    segments.push_back(json{{"start", s.start},
                            {"end", s.end},
                            {"values", s.end - s.start},
                            {"mean", s.mean},
                            {"sd", s.sd},
                            {"slope", s.slope}});
  }
  json points = json::array();
  for (const auto& p : seg.changePoints) {
    points.push_back(json{{"index", p.index},
                          {"before", p.before},
                          {"after", p.after},
                          {"jump", p.jump},
                          {"ratio", p.ratio()},
                          {"sd_before", p.sdBefore},
                          {"sd_after", p.sdAfter}});
  }
  return json{{"values", values},
              {"model", detect::segmentModelName(seg.model)},
              {"penalty", seg.penalty},
              {"noise_sd", seg.noiseSd},
              {"autocorrelation", seg.autocorr},
              {"period", seg.period},
              {"outliers", seg.outliers},
              {"segments", std::move(segments)},
              {"change_points", std::move(points)}};
}

int runDetect(Context& ctx, const DetectArgs& args) {
  std::ifstream file;
  std::istream* in = args.stdinStream != nullptr ? args.stdinStream : &std::cin;
  const std::string name = args.input == "-" ? "stdin" : args.input;
  if (args.input != "-") {
    file.open(args.input);
    if (!file) {
      ctx.err << "trainscope detect: --input: cannot open '" << args.input
              << "': " << std::strerror(errno) << "\n";
      return kExitApiError;
    }
    in = &file;
  }
  auto series = detect::parseSeries(*in);
  if (!series) {
    ctx.err << "trainscope detect: " << name << ": " << series.message() << "\n";
    return kExitApiError;
  }
  const detect::Segmentation seg = detect::segmentSeries(*series, args.options);
  if (ctx.global.json) {
    ctx.out << segmentationJson(seg, series->size()).dump(2) << "\n";
    return kExitOk;
  }
  if (seg.changePoints.empty()) {
    ctx.out << "no change points in " << series->size() << " values\n";
  } else {
    ctx.out << seg.changePoints.size() << " change point"
            << (seg.changePoints.size() == 1 ? "" : "s") << " in " << series->size() << " values\n";
    Table t({{"INDEX", true},
             {"BEFORE", true},
             {"AFTER", true},
             {"JUMP", true},
             {"RATIO", true},
             {"SD BEFORE", true},
             {"SD AFTER", true}});
    for (const auto& p : seg.changePoints) {
      t.addRow({std::to_string(p.index), value(p.before), value(p.after), num("%+.6g", p.jump),
                p.before != 0.0 ? num("%.3f", p.ratio()) : "-", value(p.sdBefore),
                value(p.sdAfter)});
    }
    t.render(ctx.out);
  }
  const bool lines = seg.model == detect::SegmentModel::kTrend;
  std::vector<Table::Column> cols{
      {"START", true}, {"END", true}, {"VALUES", true}, {"MEAN", true}, {"SD", true}};
  if (lines) cols.push_back({"SLOPE", true});
  Table segments(cols);
  for (const auto& s : seg.segments) {
    std::vector<std::string> row{std::to_string(s.start), std::to_string(s.end),
                                 std::to_string(s.end - s.start), value(s.mean), value(s.sd)};
    if (lines) row.push_back(value(s.slope));
    segments.addRow(std::move(row));
  }
  ctx.out << "\nsegments [START, END):\n";
  segments.render(ctx.out);
  ctx.out << "\n" << judgedLine(seg) << "\n";
  return kExitOk;
}

void addDetectCommand(CLI::App& app, Action* action) {
  auto args = std::make_shared<DetectArgs>();
  auto model = std::make_shared<std::string>("auto");
  auto* sub = app.add_subcommand(
      "detect",
      "Find change points in a series offline (no collector needed). Input: one value per "
      "line, or CSV whose last field is the value (e.g. step,value), with an optional header "
      "line, blank lines and #-comments. The series is split into segments by penalised "
      "likelihood (PELT, BIC penalty): level shifts, changes of spread and, with the automatic "
      "model, changes of trend; lone outliers, autocorrelated noise and a repeating season do "
      "not make change points. Prints each change point (INDEX = first value of the new "
      "segment, 0-based) with the means before and after, the jump and the spreads, then the "
      "segments; --json prints the same as JSON. Exit 1 on bad input, naming the line");
  sub->add_option("--input", args->input, "File of values; - reads standard input")->required();
  sub->add_option("--model", *model,
                  "What a segment is: mean = a level (only level shifts count; one noise "
                  "level for the whole series), meanvar = a level and a spread, trend = a "
                  "straight line and a spread, auto = meanvar or trend, whichever explains "
                  "the series better")
      ->check(CLI::IsMember({"auto", "mean", "meanvar", "trend"}))
      ->capture_default_str();
  auto* penalty = sub->add_option(
      "--penalty", args->options.penalty,
      "Penalty per change point (2 x log-likelihood units), replacing the default: "
      "(parameters per segment + 1) x ln(number of values), scaled up for autocorrelated "
      "noise. Higher finds fewer, larger changes");
  penalty->check(CLI::PositiveNumber);
  sub->add_option("--penalty-scale", args->options.penaltyScale,
                  "Multiplies the default penalty: 2 keeps only clearer changes, 0.5 finds "
                  "smaller ones")
      ->check(CLI::PositiveNumber)
      ->excludes(penalty)
      ->capture_default_str();
  sub->add_option("--min-segment", args->options.minSegment,
                  "Fewest values in a segment (shorter episodes count as outliers)")
      ->check(CLI::Validator(
          [](std::string& v) {
            if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos) {
              return '\'' + v + "' is not a whole number";
            }
            return std::strtoull(v.c_str(), nullptr, 10) >= 2 ? std::string()
                                                              : std::string("must be at least 2");
          },
          "INT>=2"))
      ->capture_default_str();
  sub->add_option("--outlier-sigmas", args->options.outlierSigmas,
                  "A value further than this many robust sds from the median of its 7 "
                  "neighbours is an outlier and replaced by that median; 0 keeps every value")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--max-autocorr", args->options.maxAutocorr,
                  "Cap of the noise's lag-1 autocorrelation the penalty adapts to; 0 treats "
                  "the values as independent")
      ->check(CLI::Range(0.0, 0.95))
      ->capture_default_str();
  sub->add_flag(
      "--no-seasonal", [args](int64_t) { args->options.seasonal = false; },
      "Do not look for and remove a repeating pattern (season) before segmenting");
  sub->callback([action, args, model] {
    args->options.model = *detect::parseSegmentModel(*model);  // checked by IsMember
    *action = [args](Context& ctx) { return runDetect(ctx, *args); };
  });
}

}  // namespace trainscope::cli
