#include "tools/cli/capture_cmd.h"

#include <cxxabi.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <thread>

#include "common/clock.h"
#include "common/str_cat.h"
#include "schema/capture_state.h"

namespace trainscope::cli {
namespace {

using nlohmann::json;

constexpr int64_t kNsPerSec = 1'000'000'000;
constexpr uint32_t kMaxRank = 1'000'000;
// A merged trace of many ranks is far larger than any JSON answer --timeout-ms is meant for.
constexpr std::chrono::milliseconds kDownloadTimeout{300'000};
// Innermost frames shown per thread, and compared between ranks.
constexpr size_t kFramesShown = 4;
constexpr size_t kFramesCompared = 3;

// j[key] for a const object without asserting on a missing key: null then.
const json& member(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

// A string field, or `fallback` when it is missing or not a string (never throws).
std::string textOr(const json& j, const char* key, const std::string& fallback) {
  const json& v = member(j, key);
  return v.is_string() ? v.get<std::string>() : fallback;
}

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string capturePath(const std::string& id, const char* what = "") {
  return "/api/v1/captures/" + percentEncode(id) + what;
}

std::vector<uint32_t> rankVector(const json& j) {
  std::vector<uint32_t> out;
  if (!j.is_array()) return out;
  for (const auto& r : j) {
    if (r.is_number_unsigned()) out.push_back(r.get<uint32_t>());
  }
  return out;
}

// The lines of progress go to stdout, or to stderr under --json (stdout then holds only JSON).
std::ostream& progress(Context& ctx) {
  return ctx.global.json ? ctx.err : ctx.out;
}

// "steps 12..14 (+2 before)", or "-" for a stack dump.
std::string stepsText(const json& c) {
  if (textOr(c, "kind", "") == "stacks") return "-";
  const int64_t s = fieldInt(c, "start_step", -1);
  const int64_t n = fieldInt(c, "steps", 0);
  if (s < 0 || n <= 0) return "-";
  std::string out = std::to_string(s) + ".." + std::to_string(s + n - 1);
  const int64_t k = fieldInt(c, "history", 0);
  if (k > 0) out += " (+" + std::to_string(k) + " before)";
  return out;
}

// A native frame's function demangled and without its parameter list: "ns::f", else the
// address and the module's file name.
std::string nativeFrameText(const json& f) {
  std::string fn = textOr(f, "function", "");
  if (fn.empty()) {
    std::string module = textOr(f, "module", "");
    const auto slash = module.rfind('/');
    if (slash != std::string::npos) module = module.substr(slash + 1);
    return textOr(f, "address", "?") + (module.empty() ? "" : " (" + module + ")");
  }
  if (fn.rfind("_Z", 0) == 0) {
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> d(
        abi::__cxa_demangle(fn.c_str(), nullptr, nullptr, &status), std::free);
    if (status == 0 && d) fn = d.get();
  }
  // "ns::(anonymous namespace)::f(long) const" -> "ns::f": the parameter list makes C++
  // frames several lines long and says little about where a thread is.
  const std::string kConst = " const";
  if (endsWith(fn, kConst)) fn.resize(fn.size() - kConst.size());
  if (!fn.empty() && fn.back() == ')') {
    int depth = 0;
    for (size_t i = fn.size(); i-- > 0;) {
      if (fn[i] == ')') ++depth;
      if (fn[i] == '(' && --depth == 0) {
        if (i > 0) fn.resize(i);
        break;
      }
    }
  }
  const std::string kAnon = "(anonymous namespace)::";
  for (size_t at = fn.find(kAnon); at != std::string::npos; at = fn.find(kAnon)) {
    fn.erase(at, kAnon.size());
  }
  return fn;
}

std::string pythonFrameText(const json& f) {
  std::string file = textOr(f, "file", "");
  const auto slash = file.rfind('/');
  if (slash != std::string::npos) file = file.substr(slash + 1);
  return textOr(f, "function", "?") + " (" + file + ":" + std::to_string(fieldInt(f, "line", 0)) +
         ")";
}

// A thread's innermost frames, Python first (what the user's code is doing), then native.
std::vector<std::string> topFrames(const json& thread, size_t count) {
  std::vector<std::string> out;
  auto py = thread.find("python");
  if (py != thread.end() && py->is_array()) {
    for (const auto& f : *py) {
      if (out.size() == count) return out;
      out.push_back(pythonFrameText(f));
    }
  }
  auto nat = thread.find("native");
  if (nat != thread.end() && nat->is_array()) {
    for (const auto& f : *nat) {
      if (out.size() == count) return out;
      out.push_back(nativeFrameText(f));
    }
  }
  return out;
}

// The rank's main thread: the one whose tid is the process id when the rank says its pid,
// else the first one listed.
const json* mainThread(const json& rank) {
  const json& threads = member(rank, "threads");
  if (!threads.is_array() || threads.empty()) return nullptr;
  int64_t pid = fieldInt(rank, "pid", -1);
  if (pid < 0) pid = fieldInt(member(rank, "trainscope"), "pid", -1);
  for (const auto& t : threads) {
    if (pid >= 0 && fieldInt(t, "tid", -2) == pid) return &t;
  }
  return &threads.front();
}

std::string joinFrames(const std::vector<std::string>& frames) {
  std::string out;
  for (const auto& f : frames) out += (out.empty() ? "" : " < ") + f;
  return out;
}

// Writes `data` to `path` whole; the message names the path.
Status writeFile(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return Status::error("--out '" + path + "': cannot open: " + std::strerror(errno));
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!f.flush()) return Status::error("--out '" + path + "': write failed");
  return Status::ok();
}

// Downloads the merged trace of capture `id` into `path` (gzip kept for *.gz, else plain
// JSON). Returns the bytes written, or nothing after printing why.
std::optional<size_t> downloadTrace(Context& ctx, const std::string& id, const std::string& path,
                                    int* exitCode) {
  auto reply = fetchRaw(ctx, capturePath(id, "/trace"), true, kDownloadTimeout, exitCode);
  if (!reply) return std::nullopt;
  const bool gz = reply->contentEncoding.find("gzip") != std::string::npos;
  const bool wantGz = endsWith(path, ".gz");
  std::string data = std::move(reply->body);
  if (gz != wantGz) {
    auto converted = gz ? gunzip(data) : gzipCompress(data);
    if (!converted) {
      ctx.err << "trainscope: merged trace of " << id << ": " << converted.message() << "\n";
      *exitCode = kExitLocalError;
      return std::nullopt;
    }
    data = std::move(*converted);
  }
  if (Status st = writeFile(path, data); !st) {
    ctx.err << "trainscope: " << st.message() << "\n";
    *exitCode = kExitLocalError;
    return std::nullopt;
  }
  return data.size();
}

// Polls the capture until it leaves `running`, printing a line for every rank whose state or
// detail changed. Returns the final capture JSON, or nothing (after printing why) on a poll
// failure or the timeout.
std::optional<json> follow(Context& ctx, const CaptureArgs& args, json capture, int* exitCode) {
  const std::string id = textOr(capture, "id", "");
  int64_t deadlineNs = 0;
  if (args.timeoutS > 0) {
    deadlineNs = wallNowNs() + static_cast<int64_t>(args.timeoutS * 1e9);
  } else {
    const int64_t collectorDeadline = fieldInt(capture, "deadline_ns", 0);
    deadlineNs =
        collectorDeadline > 0 ? collectorDeadline + 30 * kNsPerSec : wallNowNs() + 600 * kNsPerSec;
  }
  std::map<int64_t, std::string> seen;  // rank -> "state|detail|bytes" last printed
  for (;;) {
    for (const auto& rs : member(capture, "rank_status")) {
      const std::string key =
          fieldText(rs, "state") + "|" + fieldText(rs, "detail") + "|" + fieldText(rs, "bytes");
      auto& last = seen[fieldInt(rs, "rank", -1)];
      if (last != key) {
        progress(ctx) << "  " << rankStatusLine(rs) << "\n" << std::flush;
        last = key;
      }
    }
    if (wire::parseCaptureState(
            textOr(capture, "state", wire::toString(wire::CaptureState::kRunning))) !=
        wire::CaptureState::kRunning) {
      return capture;
    }
    if (wallNowNs() >= deadlineNs) {
      ctx.err << "trainscope: capture " << id << " still running after "
              << (args.timeoutS > 0 ? "--timeout " + formatSeconds(args.timeoutS)
                                    : std::string("its deadline"))
              << " (" << fieldText(capture, "summary") << "); it goes on in the collector: "
              << "trainscope captures " << args.job << "\n";
      *exitCode = kExitCaptureFailed;
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(args.pollMs));
    auto next = fetchJson(ctx, capturePath(id), exitCode);
    if (!next) return std::nullopt;
    capture = std::move(*next);
  }
}

int exitCodeOf(const json& capture) {
  const auto state = wire::parseCaptureState(textOr(capture, "state", ""));
  if (state == wire::CaptureState::kComplete) return kExitOk;
  if (state == wire::CaptureState::kPartial) return kExitPartial;
  return kExitCaptureFailed;
}

}  // namespace

Result<std::vector<uint32_t>> parseRankList(const std::string& text) {
  std::set<uint32_t> ranks;
  auto number = [](const std::string& s, uint32_t* out) {
    if (s.empty() || s.size() > 7 ||
        !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return false;
    }
    *out = static_cast<uint32_t>(std::stoul(s));
    return *out <= kMaxRank;
  };
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    const auto dash = item.find('-');
    uint32_t a = 0;
    uint32_t b = 0;
    bool ok = false;
    if (dash == std::string::npos) {
      ok = number(item, &a);
      b = a;
    } else {
      ok = number(item.substr(0, dash), &a) && number(item.substr(dash + 1), &b);
    }
    if (!ok) {
      return Result<std::vector<uint32_t>>::error(
          strCat("--ranks '", text, "': '", item,
                 "' is not a rank or a range A-B (expected e.g. 0,3,5-7)"));
    }
    if (b < a) {
      return Result<std::vector<uint32_t>>::error(
          strCat("--ranks '", text, "': range '", item, "' ends before it starts"));
    }
    for (uint32_t r = a; r <= b; ++r) ranks.insert(r);
    pos = comma + 1;
  }
  return std::vector<uint32_t>(ranks.begin(), ranks.end());
}

std::string formatRankList(const std::vector<uint32_t>& ranks) {
  if (ranks.empty()) return "-";
  std::string out;
  size_t i = 0;
  while (i < ranks.size()) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(ranks[i]);
    if (j > i) out += (j == i + 1 ? "," : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

json captureRequestBody(const CaptureArgs& args) {
  json body = json::object();
  body["kind"] = args.kind;
  if (args.ranks) body["ranks"] = *args.ranks;
  if (args.steps) body["steps"] = *args.steps;
  if (args.history) body["history"] = *args.history;
  if (args.startStep) body["start_step"] = *args.startStep;
  if (args.maxMb) body["max_bytes"] = static_cast<uint64_t>(*args.maxMb * 1024.0 * 1024.0);
  if (!args.reason.empty()) body["reason"] = args.reason;
  return body;
}

std::string rankStatusLine(const json& rs) {
  std::string line = "rank " + fieldText(rs, "rank");
  const std::string node = fieldText(rs, "node");
  if (node != "-" && !node.empty()) line += " (" + node + ")";
  const std::string state = fieldText(rs, "state");
  line += ": " + state;
  std::string detail = textOr(rs, "detail", "");
  const auto parsed = wire::parseRankState(state);
  if (parsed == wire::RankState::kDone ||
      (parsed == wire::RankState::kUploading && fieldInt(rs, "bytes", 0) > 0)) {
    std::string what = formatBytes(static_cast<uint64_t>(fieldInt(rs, "bytes", 0)));
    const int64_t first = fieldInt(rs, "first_step", -1);
    const int64_t last = fieldInt(rs, "last_step", -1);
    if (first >= 0 && last >= first) {
      what += ", steps " + std::to_string(first) + ".." + std::to_string(last);
    }
    if (member(rs, "truncated") == true) what += ", cut at the size bound";
    detail = detail.empty() ? what : what + "; " + detail;
  }
  if (!detail.empty()) line += ": " + detail;
  return line;
}

void renderStacks(const json& merged, std::ostream& out) {
  const json& ranks = member(merged, "ranks");
  if (!ranks.is_array() || ranks.empty()) {
    out << "no stacks: no rank sent its dump\n";
    return;
  }
  // The main threads' top frames, and how many ranks share each.
  std::vector<std::string> signature;
  std::map<std::string, size_t> votes;
  for (const auto& r : ranks) {
    const json* t = mainThread(r);
    signature.push_back(t ? joinFrames(topFrames(*t, kFramesCompared)) : "");
    ++votes[signature.back()];
  }
  std::string common;
  size_t best = 0;
  for (const auto& [sig, n] : votes) {
    if (n > best) {
      best = n;
      common = sig;
    }
  }
  // Marks are only meaningful against a majority of at least two ranks.
  const bool mark = best >= 2 && votes.size() > 1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const auto& r = ranks[i];
    const json& threads = member(r, "threads");
    out << "rank " << fieldText(r, "rank");
    if (r.contains("node")) out << " (" << fieldText(r, "node") << ")";
    out << ": " << (threads.is_array() ? threads.size() : 0) << " threads";
    if (mark && signature[i] != common) out << "   <== top frames differ from the other ranks";
    out << "\n";
    if (!threads.is_array()) continue;
    for (const auto& t : threads) {
      out << "  " << fieldText(t, "tid") << " " << textOr(t, "name", "?") << " ["
          << textOr(t, "state", "?") << "]  ";
      const auto frames = topFrames(t, kFramesShown);
      if (frames.empty()) {
        out << "(no frames" << (t.contains("error") ? ": " + fieldText(t, "error") : "") << ")";
      } else {
        out << joinFrames(frames);
      }
      out << "\n";
    }
  }
}

namespace {

// Feeds all of `data` to `zs` and calls `step` (inflate or deflate) until it stops returning
// Z_OK, collecting the output; returns zlib's last code (Z_STREAM_END when the stream ended).
template <typename Step>
int pumpZlib(z_stream& zs, const std::string& data, std::string* out, Step step) {
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  char buf[1 << 16];
  int rc = Z_OK;
  do {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = step();
    out->append(buf, sizeof buf - zs.avail_out);
  } while (rc == Z_OK);
  return rc;
}

}  // namespace

Result<std::string> gunzip(const std::string& data) {
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 32) != Z_OK) return Result<std::string>::error("inflateInit2 failed");
  std::string out;
  const int rc = pumpZlib(zs, data, &out, [&zs] { return inflate(&zs, Z_NO_FLUSH); });
  const std::string why = zs.msg ? zs.msg : "truncated";
  inflateEnd(&zs);
  if (rc != Z_STREAM_END) return Result<std::string>::error("not valid gzip: " + why);
  return out;
}

Result<std::string> gzipCompress(const std::string& data) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    return Result<std::string>::error("deflateInit2 failed");
  }
  std::string out;
  const int rc = pumpZlib(zs, data, &out, [&zs] { return deflate(&zs, Z_FINISH); });
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) return Result<std::string>::error("gzip compression failed");
  return out;
}

int runCapture(Context& ctx, const CaptureArgs& args) {
  int code = kExitOk;
  auto created =
      postJson(ctx, jobPath(args.job, "captures"), captureRequestBody(args).dump(), &code);
  if (!created) return code;
  json capture = std::move(*created);
  const std::string id = textOr(capture, "id", "");
  const bool stacks = args.kind == "stacks";
  const bool wait = args.wait || !args.out.empty();
  if (!wait) {
    if (ctx.global.json) {
      ctx.out << capture.dump(2) << "\n";
    } else {
      ctx.out << "capture " << id << " (" << textOr(capture, "kind", args.kind) << ") of job "
              << args.job << " started: ranks " << formatRankList(rankVector(capture["ranks"]))
              << (stacks ? "" : ", steps " + stepsText(capture)) << "\n"
              << "follow it with: trainscope captures " << args.job << "\n";
    }
    return kExitOk;
  }
  progress(ctx) << "capture " << id << " (" << textOr(capture, "kind", args.kind) << ") of job "
                << args.job << ": ranks " << formatRankList(rankVector(capture["ranks"]))
                << (stacks ? "" : ", steps " + stepsText(capture)) << "\n"
                << std::flush;
  auto done = follow(ctx, args, std::move(capture), &code);
  if (!done) return code;
  capture = std::move(*done);
  const int result = exitCodeOf(capture);
  progress(ctx) << "capture " << id << " " << textOr(capture, "state", "?") << ": "
                << fieldText(capture, "summary") << "\n"
                << std::flush;
  if (result == kExitCaptureFailed) {  // failed: there is no merged file
    if (ctx.global.json) ctx.out << capture.dump(2) << "\n";
    return result;
  }
  if (!args.out.empty()) {
    auto bytes = downloadTrace(ctx, id, args.out, &code);
    if (!bytes) return code;
    progress(ctx) << "wrote the merged " << (stacks ? "stacks" : "trace") << " to " << args.out
                  << " (" << formatBytes(*bytes) << ")\n";
  }
  if (stacks) {
    auto merged = fetchJson(ctx, capturePath(id, "/trace"), &code);
    if (!merged) return code;
    if (ctx.global.json) {
      ctx.out << merged->dump(2) << "\n";
    } else {
      renderStacks(*merged, ctx.out);
    }
  } else if (ctx.global.json) {
    ctx.out << capture.dump(2) << "\n";
  }
  return result;
}

int runCaptures(Context& ctx, const std::string& job) {
  int code = kExitOk;
  auto body = fetchForTable(ctx, jobPath(job, "captures"), &code);
  if (!body) return code;
  const json& list = (*body)["captures"];
  if (!list.is_array() || list.empty()) {
    ctx.out << "no captures for job '" << job << "'\n";
    return kExitOk;
  }
  Table t({{"ID"}, {"KIND"}, {"STATE"}, {"RANKS"}, {"STEPS"}, {"REASON"}, {"CREATED"}});
  for (const auto& c : list) {
    const int64_t createdNs = fieldInt(c, "created_ns", 0);
    t.addRow({fieldText(c, "id"), fieldText(c, "kind"), fieldText(c, "state"),
              formatRankList(rankVector(member(c, "ranks"))), stepsText(c), fieldText(c, "reason"),
              createdNs > 0 ? formatAge(ctx.nowNs - createdNs) : "-"});
  }
  t.render(ctx.out);
  return kExitOk;
}

// ---- registration ------------------------------------------------------------------------

namespace {

// The flags capture and stacks share; `ranksText` is parsed in the callback so a bad list is
// a usage error.
struct RawCapture {
  CaptureArgs args;
  std::string ranksText;
  uint32_t steps = 0;
  uint32_t history = 0;
  int64_t startStep = 0;
  double maxMb = 0;
};

void addWaitFlags(CLI::App* sub, RawCapture* raw) {
  sub->add_option("--ranks", raw->ranksText,
                  "Ranks to capture: a list with ranges such as 0,3,5-7 (default: all ranks of "
                  "the job)");
  sub->add_option("--reason", raw->args.reason,
                  "Why, stored with the capture (default: \"on request\")");
  sub->add_flag("--wait", raw->args.wait,
                "Follow the capture until it ends, printing each rank's progress; exit 0 "
                "complete, 3 partial, 5 failed or timed out");
  sub->add_option("--timeout", raw->args.timeoutS,
                  "With --wait: give up after this many seconds (default 0: the capture's own "
                  "deadline plus 30 s)")
      ->check(CLI::Range(0.0, 86400.0));
  sub->add_option("--out", raw->args.out,
                  "Write the merged file here when the capture ends (implies --wait): plain "
                  "JSON, or gzip when the name ends in .gz");
}

// Fills the parsed options into CaptureArgs; a bad --ranks list is thrown as a usage error.
CaptureArgs finish(const RawCapture& raw, const CLI::App* sub) {
  CaptureArgs args = raw.args;
  auto given = [sub](const char* flag) {  // stacks has no --steps etc.
    const CLI::Option* o = sub->get_option_no_throw(flag);
    return o != nullptr && o->count() > 0;
  };
  if (given("--ranks")) {
    auto ranks = parseRankList(raw.ranksText);
    if (!ranks) throw CLI::ValidationError(ranks.message());
    args.ranks = *ranks;
  }
  if (given("--steps")) args.steps = raw.steps;
  if (given("--history")) args.history = raw.history;
  if (given("--start-step")) args.startStep = raw.startStep;
  if (given("--max-mb")) args.maxMb = raw.maxMb;
  return args;
}

}  // namespace

void addCaptureCommand(CLI::App& app, Action* action) {
  auto raw = std::make_shared<RawCapture>();
  auto* sub = app.add_subcommand(
      "capture",
      "Ask the ranks of a job for a full trace of some steps (operators, ranges, collectives), "
      "including steps before the start from their flight recorders; the collector merges "
      "the ranks into one timeline (Chrome trace / Perfetto)");
  sub->add_option("job", raw->args.job, "Job id (as shown by `trainscope jobs`)")->required();
  addWaitFlags(sub, raw.get());
  sub->add_option("--steps", raw->steps,
                  "Steps recorded in full from the start step (default 5, at most 1000)")
      ->check(CLI::Range(uint32_t{1}, uint32_t{1000}));
  sub->add_option("--history", raw->history,
                  "Steps before the start step taken from the flight recorders (default 4)")
      ->check(CLI::Range(uint32_t{0}, uint32_t{1000}));
  sub->add_option("--start-step", raw->startStep,
                  "First recorded step; no selected rank may have reached it yet (default: "
                  "the job's latest stored step + max(2, the steps of 1 s))")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  sub->add_option("--max-mb", raw->maxMb,
                  "Bound per rank on the compressed file, in MiB; past it the trace is cut "
                  "with a marker (default 64)")
      ->check(CLI::Range(0.001, 1'048'576.0));
  sub->callback([action, raw, sub] {
    CaptureArgs args = finish(*raw, sub);
    *action = [args](Context& ctx) { return runCapture(ctx, args); };
  });
}

void addStacksCommand(CLI::App& app, Action* action) {
  auto raw = std::make_shared<RawCapture>();
  raw->args.kind = "stacks";
  auto* sub = app.add_subcommand(
      "stacks",
      "Dump every thread's stack (native and Python frames) of some ranks of a job, e.g. to "
      "see where a hung job waits; with --wait prints them rank by rank and marks the ranks "
      "whose main thread is somewhere else than the others'");
  sub->add_option("job", raw->args.job, "Job id (as shown by `trainscope jobs`)")->required();
  addWaitFlags(sub, raw.get());
  sub->callback([action, raw, sub] {
    CaptureArgs args = finish(*raw, sub);
    *action = [args](Context& ctx) { return runCapture(ctx, args); };
  });
}

void addCapturesCommand(CLI::App& app, Action* action) {
  auto job = std::make_shared<std::string>();
  auto* sub = app.add_subcommand("captures",
                                 "List a job's captures, newest first: id, kind, state, "
                                 "ranks, steps, reason and age");
  sub->add_option("job", *job, "Job id (as shown by `trainscope jobs`)")->required();
  sub->callback(
      [action, job] { *action = [job](Context& ctx) { return runCaptures(ctx, *job); }; });
}

}  // namespace trainscope::cli
