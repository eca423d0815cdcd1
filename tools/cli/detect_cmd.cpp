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
       " left out";
  return s;
}

}  // namespace

json segmentationJson(const detect::Segmentation& seg, size_t values,
                      const std::vector<int64_t>* steps) {
  json segments = json::array();
  for (const auto& s : seg.segments) {
    json one{{"start", s.start}, {"end", s.end}, {"values", s.end - s.start},
             {"mean", s.mean},   {"sd", s.sd},   {"slope", s.slope}};
    if (steps != nullptr && s.end > s.start) {
      one["first_step"] = (*steps)[s.start];
      one["last_step"] = (*steps)[s.end - 1];
    }
    segments.push_back(std::move(one));
  }
  json points = json::array();
  for (const auto& p : seg.changePoints) {
    json one{{"index", p.index},     {"before", p.before}, {"after", p.after},
             {"jump", p.jump},       {"ratio", p.ratio()}, {"sd_before", p.sdBefore},
             {"sd_after", p.sdAfter}};
    if (steps != nullptr) one["step"] = (*steps)[p.index];
    points.push_back(std::move(one));
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

namespace {

// Segments `series` and prints the result; `steps` (one per value) for a job's series,
// `title` a line saying what the series is ("" prints none).
int printSegmentation(Context& ctx, const DetectorFlags& flags, const std::vector<double>& series,
                      const std::vector<int64_t>* steps, const std::string& title) {
  const detect::Segmentation seg = detect::segmentSeries(series, detectorOptions(flags));
  if (ctx.global.json) {
    ctx.out << segmentationJson(seg, series.size(), steps).dump(2) << "\n";
    return kExitOk;
  }
  if (!title.empty()) ctx.out << title << "\n";
  if (seg.changePoints.empty()) {
    ctx.out << "no change points in " << series.size() << " values\n";
  } else {
    ctx.out << seg.changePoints.size() << " change point"
            << (seg.changePoints.size() == 1 ? "" : "s") << " in " << series.size() << " values\n";
    std::vector<Table::Column> cols{{"INDEX", true}};
    if (steps != nullptr) cols.push_back({"STEP", true});
    for (const char* c : {"BEFORE", "AFTER", "JUMP", "RATIO", "SD BEFORE", "SD AFTER"}) {
      cols.push_back({c, true});
    }
    Table t(cols);
    for (const auto& p : seg.changePoints) {
      std::vector<std::string> row{std::to_string(p.index)};
      if (steps != nullptr) row.push_back(std::to_string((*steps)[p.index]));
      for (std::string cell : {value(p.before), value(p.after), num("%+.6g", p.jump),
                               p.before != 0.0 ? num("%.3f", p.ratio()) : std::string("-"),
                               value(p.sdBefore), value(p.sdAfter)}) {
        row.push_back(std::move(cell));
      }
      t.addRow(std::move(row));
    }
    t.render(ctx.out);
  }
  const bool lines = seg.model == detect::SegmentModel::kTrend;
  std::vector<Table::Column> cols{{"START", true}, {"END", true}};
  if (steps != nullptr) cols.insert(cols.end(), {{"FIRST STEP", true}, {"LAST STEP", true}});
  for (const char* c : {"VALUES", "MEAN", "SD"}) cols.push_back({c, true});
  if (lines) cols.push_back({"SLOPE", true});
  Table segments(cols);
  for (const auto& s : seg.segments) {
    std::vector<std::string> row{std::to_string(s.start), std::to_string(s.end)};
    if (steps != nullptr) {
      row.push_back(std::to_string((*steps)[s.start]));
      row.push_back(std::to_string((*steps)[s.end - 1]));
    }
    row.insert(row.end(), {std::to_string(s.end - s.start), value(s.mean), value(s.sd)});
    if (lines) row.push_back(value(s.slope));
    segments.addRow(std::move(row));
  }
  ctx.out << "\nsegments [START, END):\n";
  segments.render(ctx.out);
  ctx.out << "\n" << judgedLine(seg) << "\n";
  return kExitOk;
}

}  // namespace

std::optional<JobSeries> fetchJobSeries(Context& ctx, const DetectArgs& args, int* exitCode) {
  // One rank: its rows of /steps; the job: /summary's median over ranks, which a straggler
  // barely moves, so the series shows job-wide changes. Both come in step order, so each page
  // starts after the last step of the one before.
  const char* what = args.rank ? "steps" : "summary";
  const char* field = args.rank ? "duration_ns" : "median_ns";
  JobSeries out;
  std::optional<int64_t> from = args.from;
  for (;;) {
    std::vector<std::pair<std::string, std::string>> q;
    if (args.rank) q.emplace_back("rank", std::to_string(*args.rank));
    if (from) q.emplace_back("from", std::to_string(*from));
    if (args.to) q.emplace_back("to", std::to_string(*args.to));
    auto body = fetchJson(ctx, withQuery(jobPath(args.job, what), q), exitCode);
    if (!body) return std::nullopt;
    const auto rows = body->find("steps");
    if (rows == body->end() || !rows->is_array()) {
      ctx.err << "trainscope detect: the collector's " << what << " answer has no steps list\n";
      *exitCode = kExitApiError;
      return std::nullopt;
    }
    for (const auto& row : *rows) {
      const int64_t step = fieldInt(row, "step", -1);
      auto v = row.find(field);
      if (step < 0 || v == row.end() || !v->is_number()) continue;   // nothing to judge
      if (!out.steps.empty() && step <= out.steps.back()) continue;  // a page's overlap
      out.steps.push_back(step);
      out.valuesMs.push_back(v->get<double>() / 1e6);
    }
    if (!body->value("truncated", false) || rows->empty() || out.steps.empty()) break;
    from = out.steps.back() + 1;
  }
  *exitCode = kExitOk;
  return out;
}

int runDetect(Context& ctx, const DetectArgs& args) {
  if (!args.job.empty()) {
    int code = kExitOk;
    auto job = fetchJobSeries(ctx, args, &code);
    if (!job) return code;
    const std::string what = args.rank ? "rank " + std::to_string(*args.rank) + "'s step times"
                                       : std::string("median step time over ranks");
    if (job->valuesMs.empty()) {
      ctx.err << "trainscope detect: job '" << args.job << "' has no " << what
              << " stored in the steps asked for\n";
      return kExitLocalError;
    }
    return printSegmentation(ctx, args.flags, job->valuesMs, &job->steps,
                             "job " + args.job + ", " + what + " (ms), steps " +
                                 std::to_string(job->steps.front()) + "-" +
                                 std::to_string(job->steps.back()));
  }
  std::ifstream file;
  std::istream* in = args.stdinStream != nullptr ? args.stdinStream : &std::cin;
  const std::string name = args.input == "-" ? "stdin" : args.input;
  if (args.input != "-") {
    file.open(args.input);
    if (!file) {
      ctx.err << "trainscope detect: --input: cannot open '" << args.input
              << "': " << std::strerror(errno) << "\n";
      return kExitLocalError;
    }
    in = &file;
  }
  auto series = detect::parseSeries(*in);
  if (!series) {
    ctx.err << "trainscope detect: " << name << ": " << series.message() << "\n";
    return kExitLocalError;
  }
  return printSegmentation(ctx, args.flags, *series, nullptr, "");
}

void addDetectorFlags(CLI::App& app, DetectorFlags* flags) {
  app.add_option("--model", flags->model,
                 "What a segment is: mean = a level (only level shifts count; one noise level "
                 "for the whole series), meanvar = a level and a spread, trend = a straight "
                 "line and a spread, auto = meanvar or trend, whichever explains the series "
                 "better")
      ->check(CLI::IsMember({"auto", "mean", "meanvar", "trend"}))
      ->capture_default_str();
  auto* penalty = app.add_option(
      "--penalty", flags->options.penalty,
      "Penalty per change point (2 x log-likelihood units), replacing the default: "
      "(parameters per segment + 1) x ln(number of values), scaled up for autocorrelated "
      "noise. Higher finds fewer, larger changes");
  penalty->check(CLI::PositiveNumber);
  app.add_option("--penalty-scale", flags->options.penaltyScale,
                 "Multiplies the default penalty: 2 keeps only clearer changes, 0.5 finds "
                 "smaller ones")
      ->check(CLI::PositiveNumber)
      ->excludes(penalty)
      ->capture_default_str();
  app.add_option("--min-segment", flags->options.minSegment,
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
  app.add_option("--outlier-sigmas", flags->options.outlierSigmas,
                 "A value further than this many robust sds from the median of its 7 "
                 "neighbours is an outlier and left out of the fits; 0 keeps every value")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-autocorr", flags->options.maxAutocorr,
                 "Cap of the noise's lag-1 autocorrelation the penalty adapts to; 0 treats "
                 "the values as independent")
      ->check(CLI::Range(0.0, 0.95))
      ->capture_default_str();
  app.add_flag(
      "--no-seasonal", [flags](int64_t) { flags->options.seasonal = false; },
      "Do not look for and remove a repeating pattern (season) before segmenting");
}

detect::OfflineOptions detectorOptions(const DetectorFlags& flags) {
  detect::OfflineOptions o = flags.options;
  auto model = detect::parseSegmentModel(flags.model);
  if (model) o.model = *model;  // the flag is checked against the names when parsed
  return o;
}

void addDetectCommand(CLI::App& app, Action* action) {
  struct Raw {
    uint32_t rank = 0;
    int64_t from = 0;
    int64_t to = 0;
  };
  auto args = std::make_shared<DetectArgs>();
  auto raw = std::make_shared<Raw>();
  auto* sub = app.add_subcommand(
      "detect",
      "Find change points in a series offline: a file (--input; no collector needed) or a job "
      "stored by the collector (--job: the median step time over ranks of each step, or one "
      "rank's with --rank, in ms). File input: one value per line, or CSV whose last field is "
      "the value (e.g. step,value), with an optional header line, blank lines and #-comments. "
      "The series is split into segments by penalised likelihood (PELT, BIC penalty): level "
      "shifts, changes of spread and, with the automatic model, changes of trend; lone "
      "outliers, autocorrelated noise and a repeating season do not make change points. Prints "
      "each change point (INDEX = first value of the new segment, 0-based; STEP for a job) "
      "with the means before and after, the jump and the spreads, then the segments; --json "
      "prints the same as JSON. Exit 6 on bad input (a file that cannot be read, a line that is "
      "not a number: the message names it), 1 on a collector error, 4 when the collector "
      "cannot be reached");
  auto* input = sub->add_option("--input", args->input, "File of values; - reads standard input");
  auto* job = sub->add_option("--job", args->job,
                              "A job stored by the collector (id as `trainscope jobs` shows "
                              "it): judge its step times, fetched from --server");
  input->excludes(job);
  auto* rank = sub->add_option("--rank", raw->rank,
                               "With --job: this global rank's step times (default: the median "
                               "over the job's ranks of each step)")
                   ->needs(job);
  auto* from =
      sub->add_option("--from", raw->from, "With --job: first step, inclusive (default: the first)")
          ->needs(job);
  auto* to =
      sub->add_option("--to", raw->to, "With --job: last step, inclusive (default: the last)")
          ->needs(job);
  addDetectorFlags(*sub, &args->flags);
  sub->callback([action, args, raw, input, job, rank, from, to] {
    if (input->count() == 0 && job->count() == 0) {
      throw CLI::RequiredError("detect: one of --input FILE or --job JOB");
    }
    if (rank->count() > 0) args->rank = raw->rank;
    if (from->count() > 0) args->from = raw->from;
    if (to->count() > 0) args->to = raw->to;
    if (args->from && args->to && *args->from > *args->to) {
      throw CLI::ValidationError("--from", "must not be greater than --to");
    }
    *action = [args](Context& ctx) { return runDetect(ctx, *args); };
  });
}

}  // namespace trainscope::cli
