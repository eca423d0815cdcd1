#include "tools/cli/cli.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <ostream>
#include <sstream>

#include "common/clock.h"
#include "tools/cli/keygen_cmd.h"

namespace trainscope::cli {
namespace {

using nlohmann::json;

constexpr int64_t kNsPerSec = 1'000'000'000;

std::string printf1(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

uint64_t u64(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<uint64_t>() : 0;
}

double f64(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::string ageSince(const Context& ctx, int64_t thenNs) {
  if (thenNs <= 0) return "never";
  return formatAge(ctx.nowNs - thenNs);
}

std::string stepText(int64_t step) {
  return step < 0 ? "-" : std::to_string(step);
}

void printJson(Context& ctx, const json& j) {
  ctx.out << j.dump(2) << "\n";
}

// Edits that turn `a` into `b`: insertions, deletions, substitutions and swaps of neighbours
// (optimal string alignment), so "jbos" is one edit from "jobs".
size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// The subcommand of `app` nearest to `word` when it is near enough to be a slip of the
// keyboard (one edit for words of up to four letters, two for longer ones); "" otherwise.
// Ties go to the subcommand registered first.
std::string closestSubcommand(CLI::App& app, const std::string& word) {
  const size_t allowed = word.size() <= 4 ? 1 : 2;
  std::string best;
  size_t bestDistance = allowed + 1;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    const size_t d = editDistance(word, sub->get_name());
    if (d < bestDistance) {
      best = sub->get_name();
      bestDistance = d;
    }
  }
  return best;
}

// A parse that failed with no subcommand chosen and a word CLI11 did not take: that word was
// meant as the subcommand. Returns it ("" when the failure is another one).
std::string unknownSubcommand(const CLI::App& app) {
  if (!app.get_subcommands().empty()) return "";
  for (const std::string& word : app.remaining()) {
    if (!word.empty() && word[0] != '-') return word;
  }
  return "";
}

}  // namespace

std::string withQuery(std::string path, const std::vector<std::pair<std::string, std::string>>& q) {
  char sep = '?';
  for (const auto& [k, v] : q) {
    path += sep + k + "=" + percentEncode(v);
    sep = '&';
  }
  return path;
}

std::string fieldText(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "-";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_boolean()) return it->get<bool>() ? "yes" : "no";
  return it->dump();
}

int64_t fieldInt(const json& j, const char* key, int64_t fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<int64_t>() : fallback;
}

std::string jobPath(const std::string& job, const char* what) {
  return "/api/v1/jobs/" + percentEncode(job) + "/" + what;
}

// ---- HTTP client -------------------------------------------------------------------------

std::optional<json> fetchForTable(Context& ctx, const std::string& target, int* exitCode) {
  auto body = fetchJson(ctx, target, exitCode);
  if (!body) return std::nullopt;
  if (ctx.global.json) {
    printJson(ctx, *body);
    *exitCode = kExitOk;
    return std::nullopt;
  }
  return std::move(*body);
}

// ---- formatting --------------------------------------------------------------------------

std::string formatDurationMs(int64_t ns) {
  return printf1("%.2f ms", static_cast<double>(ns) / 1e6);
}

std::string formatSeconds(double seconds) {
  const bool wholeSeconds = std::fabs(seconds) >= 0.9995;  // would print as "1000 ms"
  const double v = wholeSeconds ? seconds : seconds * 1e3;
  const double size = std::fabs(v);
  // Three significant figures at most, trailing zeros dropped: "20", "1.5", "12.3", "250".
  std::string text = printf1(size >= 99.95 ? "%.0f" : size >= 9.995 ? "%.1f" : "%.2f", v);
  if (text.find('.') != std::string::npos) {
    while (text.back() == '0') text.pop_back();
    if (text.back() == '.') text.pop_back();
  }
  if (text == "-0") text = "0";
  return text + (wholeSeconds ? " s" : " ms");
}

std::string formatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes) / 1024.0;
  size_t unit = 0;
  while (v >= 1024.0 && unit + 1 < std::size(kUnits)) {
    v /= 1024.0;
    ++unit;
  }
  return printf1("%.1f ", v) + kUnits[unit];
}

std::string formatAge(int64_t ageNs) {
  if (ageNs < kNsPerSec) return "just now";  // also a peer clock slightly ahead of ours
  int64_t s = ageNs / kNsPerSec;
  if (s < 60) return std::to_string(s) + "s ago";
  if (s < 3600) return std::to_string(s / 60) + "m ago";
  if (s < 86400) return std::to_string(s / 3600) + "h ago";
  return std::to_string(s / 86400) + "d ago";
}

std::string formatPercent(double percent) {
  return printf1("%.1f%%", percent);
}

void Table::addRow(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

void Table::render(std::ostream& out) const {
  std::vector<size_t> width(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    width[c] = columns_[c].title.size();
    for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](auto cellOf) {
    std::string text;
    for (size_t c = 0; c < columns_.size(); ++c) {
      const std::string& cell = cellOf(c);
      std::string pad(width[c] - cell.size(), ' ');
      bool last = c + 1 == columns_.size();
      if (columns_[c].alignRight) {
        text += pad + cell;
      } else {
        text += cell;
        if (!last) text += pad;
      }
      if (!last) text += "  ";
    }
    out << text << "\n";
  };
  line([&](size_t c) -> const std::string& { return columns_[c].title; });
  for (const auto& row : rows_) line([&](size_t c) -> const std::string& { return row[c]; });
}

// ---- subcommands -------------------------------------------------------------------------

int runJobs(Context& ctx) {
  int code = kExitOk;
  auto body = fetchForTable(ctx, "/api/v1/jobs", &code);
  if (!body) return code;
  const json& jobs = (*body)["jobs"];
  if (jobs.empty()) {
    ctx.out << "no jobs yet\n";
    return kExitOk;
  }
  Table t({{"JOB"},
           {"STATE"},
           {"RANKS", true},
           {"ENDED", true},
           {"LATEST STEP", true},
           {"STEP ROWS", true},
           {"FIRST SEEN"},
           {"LAST SEEN"}});
  for (const auto& j : jobs) {
    t.addRow({fieldText(j, "job"), fieldText(j, "state"),
              std::to_string(u64(j, "ranks_seen")) + "/" + std::to_string(u64(j, "world_size")),
              fieldText(j, "ranks_ended"), stepText(fieldInt(j, "latest_step", -1)),
              fieldText(j, "step_rows"), ageSince(ctx, fieldInt(j, "first_seen_ns")),
              ageSince(ctx, fieldInt(j, "last_seen_ns"))});
  }
  t.render(ctx.out);
  return kExitOk;
}

int runRanks(Context& ctx, const std::string& job) {
  int code = kExitOk;
  auto body = fetchForTable(ctx, jobPath(job, "ranks"), &code);
  if (!body) return code;
  const json& ranks = (*body)["ranks"];
  if (ranks.empty()) {
    ctx.out << "job '" << job << "' has no registered ranks\n";
    return kExitOk;
  }
  Table t({{"RANK", true},
           {"LOCAL", true},
           {"HOST"},
           {"NODE"},
           {"PID", true},
           {"LATEST STEP", true},
           {"STATUS"},
           {"LAST SEEN"},
           {"PROBE"}});
  for (const auto& r : ranks) {
    // The collector's state: running, silent (nothing from the rank for the window after which
    // a job is stale) or ended.
    std::string status = fieldText(r, "state");
    if (r.value("ended", false))
      status = "ended at step " + stepText(fieldInt(r, "ended_step", -1));
    t.addRow({fieldText(r, "rank"), fieldText(r, "local_rank"), fieldText(r, "host"),
              fieldText(r, "node"), fieldText(r, "pid"), stepText(fieldInt(r, "latest_step", -1)),
              status, ageSince(ctx, fieldInt(r, "last_seen_ns")), fieldText(r, "probe_version")});
  }
  t.render(ctx.out);
  return kExitOk;
}

namespace {

// Operators and collectives steps --detail shows per step (--json has all of them).
constexpr size_t kDetailTop = 5;

// The entries of `list` (objects with "total_ns"), the longest first, at most kDetailTop.
std::vector<const json*> longest(const json& list) {
  std::vector<const json*> out;
  if (!list.is_array()) return out;
  for (const auto& e : list) out.push_back(&e);
  std::stable_sort(out.begin(), out.end(), [](const json* a, const json* b) {
    return fieldInt(*a, "total_ns") > fieldInt(*b, "total_ns");
  });
  if (out.size() > kDetailTop) out.resize(kDetailTop);
  return out;
}

// A title line for a step's top list: "operators (all 3, longest first):" or
// "operators (5 longest of 12):".
std::string topTitle(const char* what, size_t shown, size_t all) {
  if (shown == all) return std::string(what) + " (longest first):";
  return std::string(what) + " (" + std::to_string(shown) + " longest of " + std::to_string(all) +
         "):";
}

// Renders `t` with every line indented by `indent` spaces.
void renderIndented(std::ostream& out, const Table& t, size_t indent) {
  std::ostringstream text;
  t.render(text);
  std::istringstream lines(text.str());
  for (std::string line; std::getline(lines, line);) {
    out << std::string(indent, ' ') << line << "\n";
  }
}

// One step report with its detail (the API's steps?detail=1 row): where the step's time went,
// the parallel figures the step has, and its longest operators and collectives.
void printStepDetail(std::ostream& out, const json& s) {
  out << "step " << fieldText(s, "step") << ", rank " << fieldText(s, "rank") << ": "
      << formatDurationMs(fieldInt(s, "duration_ns")) << "\n";
  out << "  compute " << formatDurationMs(fieldInt(s, "compute_ns")) << ", communication "
      << formatDurationMs(fieldInt(s, "comm_ns")) << " ("
      << formatDurationMs(fieldInt(s, "exposed_comm_ns")) << " exposed), data wait "
      << formatDurationMs(fieldInt(s, "data_ns")) << "; " << fieldText(s, "records") << " records, "
      << fieldText(s, "dropped") << " dropped\n";
  // The ratios are null where they have no meaning for the step (no p2p, no collectives,
  // FLOPs not stated): those are left out, not shown as 0.
  std::vector<std::string> figures;
  auto ratio = [&](const char* key, const std::string& label) {
    auto it = s.find(key);
    if (it != s.end() && it->is_number()) {
      figures.push_back(label + " " + formatPercent(100.0 * it->get<double>()));
    }
  };
  if (s.contains("bubble_ratio") && s["bubble_ratio"].is_number()) {
    figures.push_back("pipeline bubble " + formatDurationMs(fieldInt(s, "bubble_ns")) + " (" +
                      formatPercent(100.0 * s["bubble_ratio"].get<double>()) + ")");
  }
  ratio("comm_overlap_ratio", "communication overlapped");
  ratio("mfu", "MFU");
  ratio("hfu", "HFU");
  ratio("all_to_all_share", "all-to-all share");
  if (fieldInt(s, "cpu_wait_ns") > 0) {
    figures.push_back("waited for a CPU " + formatDurationMs(fieldInt(s, "cpu_wait_ns")));
  }
  for (size_t i = 0; i < figures.size(); ++i) {
    out << (i == 0 ? "  " : ", ") << figures[i] << (i + 1 == figures.size() ? "\n" : "");
  }
  const auto opsIt = s.find("ops");
  const auto ops = opsIt == s.end() ? std::vector<const json*>() : longest(*opsIt);
  if (ops.empty()) {
    out << "  operators: none recorded\n";
  } else {
    out << "  " << topTitle("operators", ops.size(), opsIt->size()) << "\n";
    Table t({{"NAME"}, {"COUNT", true}, {"TOTAL", true}, {"MAX", true}});
    for (const json* op : ops) {
      t.addRow({fieldText(*op, "name"), fieldText(*op, "count"),
                formatDurationMs(fieldInt(*op, "total_ns")),
                formatDurationMs(fieldInt(*op, "max_ns"))});
    }
    renderIndented(out, t, 4);
  }
  const auto collIt = s.find("collectives");
  const auto colls = collIt == s.end() ? std::vector<const json*>() : longest(*collIt);
  if (colls.empty()) {
    out << "  collectives: none recorded\n";
  } else {
    out << "  " << topTitle("collectives", colls.size(), collIt->size()) << "\n";
    Table t({{"OP"},
             {"GROUP"},
             {"COUNT", true},
             {"SIZE", true},
             {"TOTAL", true},
             {"MAX", true},
             {"BANDWIDTH", true}});
    for (const json* c : colls) {
      t.addRow(
          {fieldText(*c, "op"), fieldText(*c, "group"), fieldText(*c, "count"),
           formatBytes(u64(*c, "bytes")), formatDurationMs(fieldInt(*c, "total_ns")),
           formatDurationMs(fieldInt(*c, "max_ns")),
           formatBytes(static_cast<uint64_t>(std::max(0.0, f64(*c, "bandwidth_bps")))) + "/s"});
    }
    renderIndented(out, t, 4);
  }
}

}  // namespace

int runSteps(Context& ctx, const StepsArgs& args) {
  std::vector<std::pair<std::string, std::string>> q;
  if (args.rank) q.emplace_back("rank", std::to_string(*args.rank));
  if (args.from) q.emplace_back("from", std::to_string(*args.from));
  if (args.to) q.emplace_back("to", std::to_string(*args.to));
  if (args.limit) q.emplace_back("limit", std::to_string(*args.limit));
  if (args.detail) q.emplace_back("detail", "1");
  int code = kExitOk;
  auto body = fetchForTable(ctx, withQuery(jobPath(args.job, "steps"), q), &code);
  if (!body) return code;
  const json& steps = (*body)["steps"];
  if (steps.empty()) {
    ctx.out << "no steps match\n";
    return kExitOk;
  }
  if (args.detail) {
    bool first = true;
    for (const auto& step : steps) {
      if (!first) ctx.out << "\n";
      first = false;
      printStepDetail(ctx.out, step);
    }
    if (body->value("truncated", false)) {
      ctx.out << "\n(showing the first " << steps.size()
              << " rows; more exist: raise --limit or narrow --from/--to/--rank)\n";
    }
    return kExitOk;
  }
  Table t({{"STEP", true},
           {"RANK", true},
           {"DURATION", true},
           {"COMPUTE", true},
           {"COMM", true},
           {"EXPOSED COMM", true},
           {"DATA", true},
           {"RECORDS", true},
           {"DROPPED", true}});
  for (const auto& s : steps) {
    t.addRow(
        {fieldText(s, "step"), fieldText(s, "rank"), formatDurationMs(fieldInt(s, "duration_ns")),
         formatDurationMs(fieldInt(s, "compute_ns")), formatDurationMs(fieldInt(s, "comm_ns")),
         formatDurationMs(fieldInt(s, "exposed_comm_ns")), formatDurationMs(fieldInt(s, "data_ns")),
         fieldText(s, "records"), fieldText(s, "dropped")});
  }
  t.render(ctx.out);
  if (body->value("truncated", false)) {
    ctx.out << "(showing the first " << steps.size()
            << " rows; more exist: raise --limit or narrow --from/--to/--rank)\n";
  }
  return kExitOk;
}

int runSummary(Context& ctx, const SummaryArgs& args) {
  std::vector<std::pair<std::string, std::string>> q;
  if (args.from) q.emplace_back("from", std::to_string(*args.from));
  if (args.to) q.emplace_back("to", std::to_string(*args.to));
  if (args.limit) q.emplace_back("limit", std::to_string(*args.limit));
  int code = kExitOk;
  auto body = fetchForTable(ctx, withQuery(jobPath(args.job, "summary"), q), &code);
  if (!body) return code;
  const json& steps = (*body)["steps"];
  if (steps.empty()) {
    ctx.out << "no steps match\n";
    return kExitOk;
  }
  Table t({{"STEP", true},
           {"RANKS", true},
           {"MIN", true},
           {"MEDIAN", true},
           {"MAX", true},
           {"MAX/MEDIAN", true},
           {"SLOWEST RANK", true}});
  for (const auto& s : steps) {
    int64_t median = fieldInt(s, "median_ns");
    int64_t max = fieldInt(s, "max_ns");
    std::string spread =
        median > 0 ? printf1("%.2fx", static_cast<double>(max) / static_cast<double>(median)) : "-";
    t.addRow({fieldText(s, "step"), fieldText(s, "ranks"), formatDurationMs(fieldInt(s, "min_ns")),
              formatDurationMs(median), formatDurationMs(max), spread,
              fieldText(s, "slowest_rank")});
  }
  t.render(ctx.out);
  if (body->value("truncated", false)) {
    ctx.out << "(showing the first " << steps.size()
            << " steps; more exist: raise --limit or narrow --from/--to)\n";
  }
  return kExitOk;
}

int runNodes(Context& ctx) {
  int code = kExitOk;
  auto body = fetchForTable(ctx, "/api/v1/nodes", &code);
  if (!body) return code;
  const json& nodes = (*body)["nodes"];
  if (nodes.empty()) {
    ctx.out << "no agents have connected yet\n";
    return kExitOk;
  }
  Table t({{"NODE"},
           {"HOST"},
           {"RANKS", true},
           {"CPU", true},
           {"MEMORY USED", true},
           {"LOAD", true},
           {"RTT", true},
           {"CLOCK OFFSET", true},
           {"SPOOL", true},
           {"LAST SEEN"},
           {"AGENT"}});
  for (const auto& n : nodes) {
    std::string cpu = "-";
    std::string mem = "-";
    std::string load = "-";
    auto h = n.find("latest_host");
    if (h != n.end() && h->is_object()) {
      cpu = formatPercent(f64(*h, "cpu_percent"));
      uint64_t total = u64(*h, "mem_total_bytes");
      uint64_t avail = std::min(total, u64(*h, "mem_available_bytes"));
      mem = formatBytes(total - avail) + " / " + formatBytes(total);
      load = printf1("%.2f", f64(*h, "load1"));
    }
    std::string spool = formatBytes(u64(n, "spool_bytes"));
    if (u64(n, "spool_dropped") > 0) spool += " (" + fieldText(n, "spool_dropped") + " dropped)";
    double ageS = f64(n, "last_seen_age_s");
    t.addRow(
        {fieldText(n, "node"), fieldText(n, "host"), fieldText(n, "ranks"), cpu, mem, load,
         formatDurationMs(fieldInt(n, "rtt_ns")), formatDurationMs(fieldInt(n, "clock_offset_ns")),
         spool,
         fieldInt(n, "last_seen_ns") > 0 ? formatAge(static_cast<int64_t>(ageS * 1e9)) : "never",
         fieldText(n, "agent_version")});
  }
  t.render(ctx.out);
  return kExitOk;
}

// ---- registration ------------------------------------------------------------------------

std::string listText(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array() || it->empty()) return "-";
  std::string out;
  for (const auto& v : *it) {
    if (!out.empty()) out += ",";
    out += v.is_string() ? v.get<std::string>() : v.dump();
  }
  return out;
}

int runAnomalies(Context& ctx, const std::string& job) {
  int code = kExitOk;
  auto body = fetchForTable(ctx, jobPath(job, "anomalies"), &code);
  if (!body) return code;
  const json& list = (*body)["anomalies"];
  if (!list.is_array() || list.empty()) {
    ctx.out << "no anomalies for job '" << job << "'\n";
    return kExitOk;
  }
  Table t({{"ID"},
           {"KIND"},
           {"RANKS"},
           {"NODES"},
           {"ONSET", true},
           {"DETECTED", true},
           {"MAGNITUDE", true},
           {"STATE"},
           {"SUMMARY"}});
  for (const auto& a : list) {
    std::string state = fieldText(a, "state");
    if (state == "resolved") state += " at " + stepText(fieldInt(a, "resolved_step", -1));
    if (state == "ended") state += " with its job at " + stepText(fieldInt(a, "ended_step", -1));
    t.addRow({fieldText(a, "id"), fieldText(a, "kind"), listText(a, "ranks"), listText(a, "nodes"),
              stepText(fieldInt(a, "onset_step", -1)), stepText(fieldInt(a, "detected_step", -1)),
              printf1("%.2fx", f64(a, "magnitude")), state, fieldText(a, "summary")});
  }
  t.render(ctx.out);
  return kExitOk;
}

void addAnomaliesCommand(CLI::App& app, Action* action) {
  auto job = std::make_shared<std::string>();
  auto* sub = app.add_subcommand("anomalies",
                                 "List a job's detected regressions (anomalies): kind, ranks, "
                                 "nodes, onset and detection step, magnitude, state");
  sub->add_option("job", *job, "Job id (as shown by `trainscope jobs`)")->required();
  sub->callback(
      [action, job] { *action = [job](Context& ctx) { return runAnomalies(ctx, *job); }; });
}

void addJobsCommand(CLI::App& app, Action* action) {
  auto* sub = app.add_subcommand("jobs",
                                 "List the training jobs the collector has seen, with "
                                 "their state (running, stale: silent for 30 s, ended)");
  sub->callback([action] { *action = [](Context& ctx) { return runJobs(ctx); }; });
}

void addRanksCommand(CLI::App& app, Action* action) {
  auto job = std::make_shared<std::string>();
  auto* sub = app.add_subcommand("ranks",
                                 "List the ranks of a job: host, node, pid, latest step "
                                 "and state (running; silent: nothing from the rank for 30 "
                                 "s; ended at step N)");
  sub->add_option("job", *job, "Job id (as shown by `trainscope jobs`)")->required();
  sub->callback([action, job] { *action = [job](Context& ctx) { return runRanks(ctx, *job); }; });
}

void addStepsCommand(CLI::App& app, Action* action) {
  struct Raw {
    std::string job;
    uint32_t rank = 0;
    int64_t from = 0;
    int64_t to = 0;
    uint32_t limit = 0;
    bool detail = false;
  };
  auto raw = std::make_shared<Raw>();
  auto* sub = app.add_subcommand("steps",
                                 "Per-rank step times of a job: duration and where it "
                                 "went (compute, communication, exposed communication, "
                                 "data loading), ordered by step then rank");
  sub->add_option("job", raw->job, "Job id")->required();
  auto* rank = sub->add_option("--rank", raw->rank, "Only this global rank (default: all ranks)")
                   ->check(CLI::Range(uint32_t{0}, std::numeric_limits<uint32_t>::max()));
  auto* from = sub->add_option("--from", raw->from, "First step, inclusive (default: the first)");
  auto* to = sub->add_option("--to", raw->to, "Last step, inclusive (default: the last)");
  auto* limit =
      sub->add_option("--limit", raw->limit, "Rows at most (default 1000; the collector caps it)")
          ->check(CLI::Range(uint32_t{1}, std::numeric_limits<uint32_t>::max()));
  sub->add_flag("--detail", raw->detail,
                "Each step of each rank on its own: where its time went, its pipeline bubble, "
                "communication overlap and MFU where the job has them, and its 5 longest "
                "operators and collectives (--json: all of them, with p2p per peer)");
  sub->callback([action, raw, rank, from, to, limit] {
    StepsArgs args;
    args.job = raw->job;
    if (rank->count() > 0) args.rank = raw->rank;
    if (from->count() > 0) args.from = raw->from;
    if (to->count() > 0) args.to = raw->to;
    if (limit->count() > 0) args.limit = raw->limit;
    args.detail = raw->detail;
    *action = [args](Context& ctx) { return runSteps(ctx, args); };
  });
}

void addSummaryCommand(CLI::App& app, Action* action) {
  struct Raw {
    std::string job;
    int64_t from = 0;
    int64_t to = 0;
    uint32_t limit = 0;
  };
  auto raw = std::make_shared<Raw>();
  auto* sub = app.add_subcommand("summary",
                                 "Per-step spread across ranks: min, median and max "
                                 "step time and the slowest rank");
  sub->add_option("job", raw->job, "Job id")->required();
  auto* from = sub->add_option("--from", raw->from, "First step, inclusive (default: the first)");
  auto* to = sub->add_option("--to", raw->to, "Last step, inclusive (default: the last)");
  auto* limit =
      sub->add_option("--limit", raw->limit, "Steps at most (default 1000; the collector caps it)")
          ->check(CLI::Range(uint32_t{1}, std::numeric_limits<uint32_t>::max()));
  sub->callback([action, raw, from, to, limit] {
    SummaryArgs args;
    args.job = raw->job;
    if (from->count() > 0) args.from = raw->from;
    if (to->count() > 0) args.to = raw->to;
    if (limit->count() > 0) args.limit = raw->limit;
    *action = [args](Context& ctx) { return runSummary(ctx, args); };
  });
}

void addNodesCommand(CLI::App& app, Action* action) {
  auto* sub = app.add_subcommand("nodes",
                                 "List the nodes (agents): host load, memory, clock "
                                 "offset to the collector, spool and last contact");
  sub->callback([action] { *action = [](Context& ctx) { return runNodes(ctx); }; });
}

int runCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "trainscope: query a trainscope collector (jobs, ranks, step times, nodes, anomalies),\n"
      "request captures (capture, captures, stacks), find change points in a series offline\n"
      "(detect), import profiler traces as a job (import), run a training command with zero-code\n"
      "monitoring (run) and write CurveZMQ keys for agents and the collector (keygen).\n"
      "Exit codes: 0 ok; 1 the collector answered with an error; 2 bad flags or arguments;\n"
      "3 a capture finished partial (some ranks failed); 4 the collector could not be reached;\n"
      "5 a capture failed or outlived --timeout; 6 an input that cannot be read or used, or an\n"
      "output that cannot be written. `run` exits with its command's status.",
      "trainscope"};
  GlobalOptions global;
  app.add_option("--server", global.server,
                 "Collector base URL, http://HOST:PORT; the environment variable "
                 "TRAINSCOPE_SERVER is used when the flag is absent")
      ->envname("TRAINSCOPE_SERVER")
      ->capture_default_str();
  app.add_flag("--json", global.json, "Print the API's JSON (pretty) instead of a table");
  app.add_option("--timeout-ms", global.timeoutMs,
                 "Give up on the collector after this long (connect + request)")
      ->check(CLI::Range(1, 600000))
      ->capture_default_str();
  app.add_option("--token", global.token,
                 "Bearer token for a collector started with --http-token (needed to request "
                 "captures there); the environment variable TRAINSCOPE_TOKEN is used when the "
                 "flag is absent (default: none)")
      ->envname("TRAINSCOPE_TOKEN");
  app.require_subcommand(1);
  app.fallthrough();  // global flags may also follow the subcommand

  Action action;
  addJobsCommand(app, &action);
  addRanksCommand(app, &action);
  addStepsCommand(app, &action);
  addSummaryCommand(app, &action);
  addNodesCommand(app, &action);
  addAnomaliesCommand(app, &action);
  addDetectCommand(app, &action);
  addCaptureCommand(app, &action);
  addCapturesCommand(app, &action);
  addStacksCommand(app, &action);
  addKeygenCommand(app, &action);
  addImportCommand(app, &action);
  // `trainscope run [OPTIONS] -- COMMAND...`: the command's words never reach CLI11.
  std::vector<std::string> head = args;
  std::optional<std::vector<std::string>> afterDashes;
  const auto dashes = std::find(args.begin(), args.end(), "--");
  if (dashes != args.end() && std::find(args.begin(), dashes, "run") != dashes) {
    head.assign(args.begin(), dashes);
    afterDashes.emplace(dashes + 1, args.end());
  }
  addRunCommand(app, &action, afterDashes);

  std::vector<std::string> reversed(head.rbegin(), head.rend());  // CLI11 parses from the back
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    if (const std::string word = unknownSubcommand(app); !word.empty() && e.get_exit_code() != 0) {
      // CLI11 would say "A subcommand is required", which hides the typo.
      const std::string near = closestSubcommand(app, word);
      err << "trainscope: unknown command '" << word << "'; "
          << (near.empty() ? "`trainscope --help` lists the commands"
                           : "did you mean '" + near + "'?")
          << "\n";
      return kExitUsage;
    }
    const int rc = app.exit(e, out, err);  // prints --help, or the message naming the flag
    return rc == 0 ? kExitOk : kExitUsage;
  }
  if (!action) return kExitOk;
  Context ctx{global, out, err, wallNowNs()};
  return action(ctx);
}

}  // namespace trainscope::cli
