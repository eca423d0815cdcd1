// offline_detect_eval: scores `trainscope detect`'s offline change-point detector against two
// baselines -- "no change points" and plain binary segmentation (TCPDBench's default_binseg) --
// with the change-point benchmark's F1 (margin 5, the series start counted as a change in
// truth and prediction), on seeded synthetic series of many shapes, and optionally on a local
// checkout of the Turing Change Point Dataset. Prints one row per shape and the overall mean.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "collector/detect/offline.h"
#include "common/guarded_main.h"
#include "tools/bench/offline_detect_eval/binseg_baseline.h"
#include "tools/bench/offline_detect_eval/cpd_score.h"
#include "tools/bench/offline_detect_eval/synth_series.h"
#include "tools/bench/offline_detect_eval/tcpd_dataset.h"
#include "tools/cli/detect_cmd.h"

namespace ts = trainscope;
namespace bench = trainscope::bench;
namespace detect = trainscope::detect;

namespace {

struct EvalOptions {
  uint64_t seed = 1;           // the synthetic series' seed: same seed, same series
  size_t perShape = 40;        // series per shape; more = tighter means, longer run
  std::string only;            // "" = every shape; else the one shape named
  std::string tcpd;            // a TCPD checkout to score as well ("" = synthetic only)
  bool verbose = false;        // one line per series: truth and each method's changes
  std::string cli;             // a trainscope binary: score what `detect --json` prints instead
  std::string model = "auto";  // --model, forwarded with --cli
  detect::OfflineOptions detector;  // from the detector's flags (tools/cli/detect_cmd.h)
};

// What the CLI answered against what the library found in-process, with --cli.
struct CliCheck {
  size_t runs = 0;
  size_t identical = 0;
  size_t failed = 0;
};
CliCheck gCliCheck;

// Runs `<cli> detect --input FILE --json` with the evaluation's detector flags on `values`
// (written with every digit) and returns the change points it printed; empty with *ok = false
// when it failed.
bench::ChangePoints detectViaCli(const EvalOptions& o, const std::vector<double>& values,
                                 bool* ok) {
  *ok = false;
  char path[] = "/tmp/offline_detect_eval.XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) return {};
  std::FILE* f = ::fdopen(fd, "w");
  std::fprintf(f, "step,value\n");
  for (size_t i = 0; i < values.size(); ++i) std::fprintf(f, "%zu,%.17g\n", i, values[i]);
  std::fclose(f);
  char flags[256];
  std::snprintf(flags, sizeof(flags),
                " --model %s --%s %.17g --min-segment %zu --outlier-sigmas %.17g "
                "--max-autocorr %.17g%s",
                o.model.c_str(), o.detector.penalty > 0.0 ? "penalty" : "penalty-scale",
                o.detector.penalty > 0.0 ? o.detector.penalty : o.detector.penaltyScale,
                o.detector.minSegment, o.detector.outlierSigmas, o.detector.maxAutocorr,
                o.detector.seasonal ? "" : " --no-seasonal");
  const std::string cmd =
      "'" + o.cli + "' detect --json --input " + std::string(path) + flags + " 2>/dev/null";
  std::string out;
  if (std::FILE* pipe = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, got);
    const int status = ::pclose(pipe);
    *ok = status == 0;
  }
  std::remove(path);
  const nlohmann::json j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  bench::ChangePoints found;
  if (!*ok || j.is_discarded() || !j.contains("change_points")) {
    *ok = false;
    return found;
  }
  for (const auto& cp : j["change_points"]) found.push_back(cp["index"].get<size_t>());
  return found;
}

// F1 sums of the three methods over a group of series.
struct Tally {
  size_t series = 0;
  size_t minLen = 0, maxLen = 0;
  double zero = 0.0, binseg = 0.0, offline = 0.0;
  double offlineP = 0.0, offlineR = 0.0;
  double offlineSeconds = 0.0;

  void add(size_t n, double z, double b, const bench::F1Score& o, double seconds) {
    minLen = series == 0 ? n : std::min(minLen, n);
    maxLen = std::max(maxLen, n);
    ++series;
    zero += z;
    binseg += b;
    offline += o.f1;
    offlineP += o.precision;
    offlineR += o.recall;
    offlineSeconds += seconds;
  }
  void add(const Tally& t) {
    minLen = series == 0 ? t.minLen : std::min(minLen, t.minLen);
    maxLen = std::max(maxLen, t.maxLen);
    series += t.series;
    zero += t.zero;
    binseg += t.binseg;
    offline += t.offline;
    offlineP += t.offlineP;
    offlineR += t.offlineR;
    offlineSeconds += t.offlineSeconds;
  }
};

std::string joined(const std::vector<size_t>& v) {
  std::string s;
  for (size_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s.empty() ? "-" : s;
}

// Runs the three methods on one series and adds their F1 to `tally`.
void score(const std::string& label, const std::vector<double>& values,
           const std::vector<bench::ChangePoints>& truth, const EvalOptions& o, Tally* tally) {
  const auto start = std::chrono::steady_clock::now();
  const detect::Segmentation seg = detect::segmentSeries(values, o.detector);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  bench::ChangePoints found;
  for (const auto& cp : seg.changePoints) found.push_back(cp.index);
  if (!o.cli.empty()) {
    // The real process decides the score; the in-process answer only checks it.
    bool ok = false;
    bench::ChangePoints viaCli = detectViaCli(o, values, &ok);
    ++gCliCheck.runs;
    if (!ok) ++gCliCheck.failed;
    if (ok && viaCli == found) ++gCliCheck.identical;
    found = std::move(viaCli);
  }
  const bench::ChangePoints binseg = bench::binsegMeanChanges(values);
  const double zeroF1 = bench::f1Score(truth, {}).f1;
  const double binsegF1 = bench::f1Score(truth, binseg).f1;
  const bench::F1Score offline = bench::f1Score(truth, found);
  tally->add(values.size(), zeroF1, binsegF1, offline, seconds);
  if (o.verbose) {
    std::printf(
        "  %-22s n=%-6zu truth=%s\n      binseg %.2f %s\n      offline %.2f %s (%s, "
        "pen %.1f, phi %.2f, period %zu, outliers %zu)\n",
        label.c_str(), values.size(), joined(truth[0]).c_str(), binsegF1, joined(binseg).c_str(),
        offline.f1, joined(found).c_str(), detect::segmentModelName(seg.model), seg.penalty,
        seg.autocorr, seg.period, seg.outliers);
  }
}

void printHeader(const char* first) {
  std::printf("%-16s %6s %13s %7s %7s %8s %11s %9s\n", first, "series", "values", "zero", "binseg",
              "offline", "offline P/R", "ms/series");
}

void printRow(const std::string& name, const Tally& t) {
  const double k = t.series > 0 ? static_cast<double>(t.series) : 1.0;
  const std::string range = std::to_string(t.minLen) + "-" + std::to_string(t.maxLen);
  std::printf("%-16s %6zu %13s %7.3f %7.3f %8.3f %5.2f/%4.2f %9.2f\n", name.c_str(), t.series,
              range.c_str(), t.zero / k, t.binseg / k, t.offline / k, t.offlineP / k,
              t.offlineR / k, 1000.0 * t.offlineSeconds / k);
}

void printCliCheck(const EvalOptions& o) {
  if (o.cli.empty()) return;
  std::printf(
      "offline column from `%s detect --json` (the real process): %zu runs, %zu failed, "
      "%zu with the same change points as in-process\n",
      o.cli.c_str(), gCliCheck.runs, gCliCheck.failed, gCliCheck.identical);
  gCliCheck = {};
}

int runSynthetic(const EvalOptions& o) {
  std::printf(
      "synthetic series: seed %llu, %zu per shape; F1 (margin 5) of: no change points, "
      "binary segmentation (mean, MBIC, Q=5), trainscope detect defaults\n\n",
      static_cast<unsigned long long>(o.seed), o.perShape);
  printHeader("shape");
  Tally overall;
  bool any = false;
  for (const auto& shape : bench::shapes()) {
    if (!o.only.empty() && o.only != shape.name) continue;
    any = true;
    Tally t;
    for (size_t i = 0; i < o.perShape; ++i) {
      const auto s = bench::makeSeries(shape.name, o.seed, i);
      score(std::string(shape.name) + " #" + std::to_string(i), s.values, {s.changes}, o, &t);
    }
    printRow(shape.name, t);
    overall.add(t);
  }
  if (!any) {
    std::fprintf(stderr, "offline_detect_eval: --only: unknown shape '%s'\n", o.only.c_str());
    return 2;
  }
  printRow("overall", overall);
  printCliCheck(o);
  std::printf("\nshapes:\n");
  for (const auto& shape : bench::shapes())
    std::printf("  %-15s %s\n", shape.name, shape.description);
  return 0;
}

int runTcpd(const EvalOptions& o) {
  std::vector<std::string> skipped;
  auto data = bench::loadTcpd(o.tcpd, &skipped);
  if (!data) {
    std::fprintf(stderr, "offline_detect_eval: --tcpd: %s\n", data.message().c_str());
    return 2;
  }
  std::printf("\nTCPD (%s): %zu univariate series; F1 (margin 5) over each series' annotators\n\n",
              o.tcpd.c_str(), data->size());
  printHeader("dataset");
  Tally overall;
  for (const auto& s : *data) {
    Tally t;
    score(s.name, s.values, s.annotators, o, &t);
    printRow(s.name, t);
    overall.add(t);
  }
  printRow("overall", overall);
  printCliCheck(o);
  for (const auto& name : skipped) std::printf("skipped: %s\n", name.c_str());
  return 0;
}

int benchMain(int argc, char** argv) {
  EvalOptions o;
  CLI::App app{
      "Scores the offline change-point detector (trainscope detect) against 'no change "
      "points' and binary segmentation with the change-point benchmark's F1 (margin 5) "
      "on seeded synthetic series, and on a TCPD checkout with --tcpd."};
  app.add_option("--seed", o.seed, "Seed of the synthetic series")->capture_default_str();
  app.add_option("--per-shape", o.perShape, "Series per shape")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{100000}));
  app.add_option("--only", o.only, "Only this shape (names are listed after the table)");
  app.add_option("--tcpd", o.tcpd,
                 "Also score a local checkout of github.com/alan-turing-institute/TCPD "
                 "(annotations.json and datasets/NAME/NAME.json)");
  bool tcpdOnly = false;
  app.add_flag("--tcpd-only", tcpdOnly, "Skip the synthetic series (with --tcpd)");
  app.add_flag("-v,--verbose", o.verbose, "One line per series: truth and what each method found");
  app.add_option("--cli", o.cli,
                 "A trainscope binary: run `detect --json` on each series (written to a temp "
                 "file) and score its answers, checking them against the in-process ones");
  ts::cli::DetectorFlags flags;
  ts::cli::addDetectorFlags(app, &flags);
  CLI11_PARSE(app, argc, argv);
  o.model = flags.model;
  o.detector = ts::cli::detectorOptions(flags);
  if (tcpdOnly && o.tcpd.empty()) {
    std::fprintf(stderr, "offline_detect_eval: --tcpd-only needs --tcpd DIR\n");
    return 2;
  }
  if (!tcpdOnly) {
    if (int rc = runSynthetic(o); rc != 0) return rc;
  }
  if (!o.tcpd.empty()) return runTcpd(o);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return trainscope::guardedMain("offline_detect_eval", [&] { return benchMain(argc, argv); });
}
