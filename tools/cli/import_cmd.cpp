// `trainscope import FILE...`: existing traces (the PyTorch profiler's, trainscope captures,
// other Chrome traces) into the collector as a job. importer/ reads every file into a bundle
// (steps.pb and the ranks' timelines) before anything is sent, then the bundle is uploaded in
// chunks to the collector's import routes and committed in one go (collector/ingest/
// import_receiver.h), so a bad file or a failed upload stores nothing.
#include <stdlib.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "importer/import_job.h"
#include "tools/cli/cli.h"

namespace trainscope::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A commit stores every step and runs the detectors over them: it may take far longer than a
// query.
constexpr std::chrono::milliseconds kCommitTimeout{600'000};

struct ImportArgs {
  std::vector<std::string> files;
  importer::ImportOptions options;
  std::string out;  // keep the bundle here ("" = a temporary directory, removed after)
  bool dryRun = false;
  bool append = false;
  double timelineMb = 64;
};

std::string gbps(uint64_t bytes, int64_t ns) {
  if (ns <= 0 || bytes == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GB/s",
                static_cast<double>(bytes) / static_cast<double>(ns));
  return buf;
}

std::string share(int64_t part, int64_t whole) {
  if (whole <= 0) return "-";
  return formatPercent(100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

std::string stepsText(const importer::RankFold& f) {
  if (f.steps == 0) return "-";
  return std::to_string(f.firstStep) + "-" + std::to_string(f.lastStep) + " (" +
         std::to_string(f.steps) + ")";
}

json resultJson(const importer::ImportResult& r) {
  json ranks = json::array();
  for (const auto& k : r.ranks) {
    ranks.push_back({{"rank", k.rank},
                     {"file", k.file},
                     {"format", k.format},
                     {"rank_from", k.rankFrom},
                     {"host", k.host},
                     {"step_rule", k.stepRule},
                     {"collectives_from", k.comm},
                     {"device", k.device},
                     {"events", k.fileEvents},
                     {"steps", k.fold.steps},
                     {"first_step", k.fold.firstStep},
                     {"last_step", k.fold.lastStep},
                     {"records", k.fold.records},
                     {"outside_steps", k.fold.outside},
                     {"compute_ops", k.fold.kernels},
                     {"collectives", k.fold.collectives},
                     {"collective_bytes", k.fold.collectiveBytes},
                     {"collective_ns", k.fold.collectiveNs},
                     {"sized_collectives", k.fold.sizedCollectives},
                     {"duration_ns", k.fold.durationNs},
                     {"compute_ns", k.fold.computeNs},
                     {"comm_ns", k.fold.commNs},
                     {"exposed_comm_ns", k.fold.exposedNs},
                     {"data_ns", k.fold.dataNs},
                     {"shift_ns", k.shiftNs},
                     {"timeline_events", k.timelineEvents},
                     {"timeline_truncated", k.timelineTruncated},
                     {"timeline_bytes", k.timelineBytes},
                     {"notes", k.notes}});
  }
  return {{"job", r.job},
          {"world_size", r.worldSize},
          {"trace_world_size", r.traceWorldSize ? json(*r.traceWorldSize) : json(nullptr)},
          {"events", r.events},
          {"input_bytes", r.inputBytes},
          {"reports", r.reports},
          {"notes", r.notes},
          {"ranks", std::move(ranks)}};
}

void printSummary(Context& ctx, const importer::ImportResult& r, double seconds) {
  ctx.out << "job " << r.job << ": " << r.ranks.size() << (r.ranks.size() == 1 ? " rank" : " ranks")
          << ", world size " << r.worldSize;
  if (r.traceWorldSize) ctx.out << " (the traces say " << *r.traceWorldSize << ")";
  char eventRate[32];
  std::snprintf(eventRate, sizeof(eventRate), "%.2f M events/s",
                seconds > 0 ? static_cast<double>(r.events) / seconds / 1e6 : 0.0);
  const std::string rate = formatSeconds(seconds) + ", " + eventRate;
  ctx.out << "; " << r.reports << " step reports from " << r.events << " events ("
          << formatBytes(r.inputBytes) << " of JSON) in " << rate << "\n";
  Table t({{"rank"},
           {"file"},
           {"format"},
           {"steps"},
           {"events", true},
           {"ops", true},
           {"collectives", true},
           {"bytes", true},
           {"bandwidth", true},
           {"compute", true},
           {"exposed comm", true},
           {"data", true},
           {"shift", true}});
  for (const auto& k : r.ranks) {
    char shift[32];
    std::snprintf(shift, sizeof(shift), "%+.3f ms", static_cast<double>(k.shiftNs) / 1e6);
    t.addRow({std::to_string(k.rank), fs::path(k.file).filename().string(), k.format,
              stepsText(k.fold), std::to_string(k.fileEvents), std::to_string(k.fold.kernels),
              std::to_string(k.fold.collectives), formatBytes(k.fold.collectiveBytes),
              gbps(k.fold.collectiveBytes, k.fold.collectiveNs),
              share(k.fold.computeNs, k.fold.durationNs),
              share(k.fold.exposedNs, k.fold.durationNs), share(k.fold.dataNs, k.fold.durationNs),
              shift});
  }
  t.render(ctx.out);
  for (const auto& k : r.ranks) {
    ctx.out << "rank " << k.rank << ": steps from " << k.stepRule << ", compute from "
            << (k.device ? "device kernels" : "host operators") << ", collectives from " << k.comm;
    if (k.fold.collectives > k.fold.sizedCollectives) {
      ctx.out << " (" << (k.fold.collectives - k.fold.sizedCollectives) << " of unknown size)";
    }
    if (k.fold.outside > 0) ctx.out << "; " << k.fold.outside << " events outside every step";
    if (k.timelineTruncated) ctx.out << "; timeline cut at its size bound";
    ctx.out << "\n";
    for (const auto& n : k.notes) ctx.out << "  note: " << n << "\n";
  }
  for (const auto& n : r.notes) ctx.out << "note: " << n << "\n";
}

// One file of the bundle as the commit names it.
struct Uploaded {
  std::string name;
  uint64_t bytes = 0;
  uint32_t crc = 0;
};

// PUTs `path` as `name` in chunks of at most `chunk` bytes.
Result<Uploaded> uploadFile(Context& ctx, const std::string& base, const fs::path& path,
                            const std::string& name, uint64_t chunk, int* exitCode) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ctx.err << "trainscope: cannot read " << path.string() << "\n";
    *exitCode = kExitLocalError;
    return Status::error("cannot read");
  }
  Uploaded up;
  up.name = name;
  uLong crc = crc32(0L, Z_NULL, 0);
  std::string buf(chunk, '\0');
  do {
    in.read(buf.data(), static_cast<std::streamsize>(chunk));
    const auto n = static_cast<size_t>(in.gcount());
    if (n == 0 && up.bytes > 0) break;
    HttpRequest req;
    req.method = "PUT";
    req.target = base + "/files/" + percentEncode(name) + "?offset=" + std::to_string(up.bytes);
    req.body.assign(buf.data(), n);
    req.contentType = "application/octet-stream";
    auto reply =
        requestJson(ctx, std::move(req),
                    std::chrono::milliseconds(std::max(ctx.global.timeoutMs, 60'000)), exitCode);
    if (!reply) return reply.status();
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(n));
    up.bytes += n;
  } while (in);
  up.crc = static_cast<uint32_t>(crc);
  return up;
}

int upload(Context& ctx, const ImportArgs& args, const importer::ImportResult& r,
           const fs::path& dir, json* report) {
  int code = kExitOk;
  json begin = {{"reason", "import of " + std::to_string(args.files.size()) +
                               (args.files.size() == 1 ? " file" : " files") + " (" +
                               fs::path(args.files.front()).filename().string() +
                               (args.files.size() > 1 ? ", ..." : "") + ")"},
                {"append", args.append}};
  auto opened = postJson(ctx, jobPath(r.job, "imports"), begin.dump(), &code);
  if (!opened) return code;
  const std::string id = (*opened)["id"].get<std::string>();
  const uint64_t maxChunk = (*opened).value("max_chunk_bytes", uint64_t{1} << 20);
  // Room for the request line and headers within the server's body limit.
  const uint64_t chunk = maxChunk > (64u << 10) ? maxChunk - (16u << 10) : maxChunk / 2;
  const std::string base = "/api/v1/imports/" + percentEncode(id);
  auto abandon = [&] {
    HttpRequest del;
    del.method = "DELETE";
    del.target = base;
    int ignored = 0;
    std::ostringstream sink;
    Context quiet{ctx.global, sink, sink, ctx.nowNs};
    (void)requestJson(quiet, std::move(del), std::chrono::milliseconds(ctx.global.timeoutMs),
                      &ignored);
  };

  json files = json::array();
  std::vector<std::pair<std::string, const importer::ImportedRank*>> names = {
      {importer::kStepsFileName, nullptr}};
  for (const auto& k : r.ranks) {
    if (fs::exists(dir / importer::rankFileName(k.rank))) {
      names.push_back({importer::rankFileName(k.rank), &k});
    }
  }
  for (const auto& [name, rank] : names) {
    auto up = uploadFile(ctx, base, dir / name, name, chunk, &code);
    if (!up) {
      abandon();
      return code;
    }
    json f = {{"name", up->name}, {"bytes", up->bytes}, {"crc32", up->crc}};
    if (rank != nullptr) {
      f["first_step"] = rank->fold.firstStep;
      f["last_step"] = rank->fold.lastStep;
      f["truncated"] = rank->timelineTruncated;
      f["source"] = fs::path(rank->file).filename().string();
    }
    files.push_back(std::move(f));
  }
  HttpRequest commit;
  commit.method = "POST";
  commit.target = base + "/commit";
  commit.body = json{{"files", files}}.dump();
  auto done = requestJson(ctx, std::move(commit), kCommitTimeout, &code);
  if (!done) {
    abandon();  // usually gone already: a refused commit drops the session
    return code;
  }
  (*report)["stored"] = *done;
  if (!ctx.global.json) {
    ctx.out << "stored job " << r.job << " at " << ctx.global.server << ": "
            << (*done)["steps"].get<uint64_t>() << " step reports";
    if ((*done)["capture"].is_string()) {
      const std::string cap = (*done)["capture"].get<std::string>();
      ctx.out << "; timeline: capture " << cap << " (trainscope captures " << r.job
              << "; GET /api/v1/captures/" << cap << "/trace)";
    } else if (done->contains("capture_error")) {
      ctx.out << "; the timeline was not stored: " << (*done)["capture_error"].get<std::string>();
    }
    ctx.out << "\n";
  }
  return kExitOk;
}

int runImport(Context& ctx, const ImportArgs& args) {
  importer::ImportOptions options = args.options;
  options.timelineMaxBytes = static_cast<uint64_t>(args.timelineMb * 1024.0 * 1024.0);
  fs::path dir;
  bool temporary = false;
  if (!args.out.empty()) {
    dir = args.out;
  } else {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/trainscope-import-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      ctx.err << "trainscope: cannot create a temporary directory under "
              << fs::path(pattern).parent_path().string() << "\n";
      return kExitLocalError;
    }
    dir = pattern;
    temporary = true;
  }
  struct RemoveDir {
    fs::path dir;
    bool active;
    ~RemoveDir() {
      std::error_code ec;
      if (active) fs::remove_all(dir, ec);
    }
  } cleanup{dir, temporary};

  const auto t0 = std::chrono::steady_clock::now();
  auto result = importer::importTraces(args.files, dir.string(), options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!result) {
    ctx.err << "trainscope: import failed, nothing was sent: " << result.message() << "\n";
    return kExitLocalError;
  }
  json report = resultJson(*result);
  report["seconds"] = seconds;
  if (!ctx.global.json) printSummary(ctx, *result, seconds);
  int code = kExitOk;
  if (args.dryRun) {
    if (!ctx.global.json) {
      ctx.out << "dry run: nothing sent"
              << (temporary ? std::string() : "; the bundle is in " + dir.string()) << "\n";
    }
  } else {
    code = upload(ctx, args, *result, dir, &report);
  }
  if (ctx.global.json) ctx.out << report.dump(2) << "\n";
  return code;
}

}  // namespace

void addImportCommand(CLI::App& app, Action* action) {
  auto args = std::make_shared<ImportArgs>();
  auto* sub = app.add_subcommand(
      "import",
      "Import existing traces as a job: the PyTorch profiler's Chrome-trace JSON (one file per "
      "rank, gzip or not), trainscope capture files, or other Chrome traces whose steps are "
      "named events. Every file is read before anything is sent; the collector stores the "
      "steps (compute, communication, exposed communication, data wait, top operators, "
      "collectives with bandwidth), runs the detectors over them and keeps the ranks' timelines "
      "as a capture of kind import");
  sub->add_option("files", args->files, "Trace files (.json or .json.gz), one per rank")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--job", args->options.job,
                  "Job id to store them under (default: the capture files' job, else "
                  "import-<their folder or name>)");
  sub->add_option("--ranks", args->options.ranks,
                  "The rank of each file, in the order of the files, comma-separated (default: "
                  "the trace's distributedInfo.rank, else a rank<N> in the file name)")
      ->delimiter(',');
  sub->add_flag("--append", args->append,
                "Add to a job that exists already (else the import is refused)");
  sub->add_option("--step-event", args->options.stepEvent,
                  "Name of the events that are steps (default: ProfilerStep#N, trainscope step "
                  "events, else the events carrying a \"step\" argument once per step)");
  sub->add_flag("!--no-align", args->options.align,
                "Keep each file's clock (default: shift each rank so its step ends line up "
                "with the lowest rank's)");
  sub->add_flag("!--no-timeline", args->options.timeline, "Store the steps only, no timeline");
  sub->add_option("--timeline-max-mb", args->timelineMb,
                  "Bound per rank on the compressed timeline, in MiB; past it the timeline is "
                  "cut with a marker (the steps still cover the whole file)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1024.0));
  sub->add_option("--top-ops", args->options.topOps, "Operators kept per step report")
      ->capture_default_str()
      ->check(CLI::Range(uint32_t{1}, uint32_t{1000}));
  sub->add_option("--threads", args->options.threads,
                  "Files read at once, one thread each (0: one per core); each file being read "
                  "holds its step reports in memory")
      ->capture_default_str()
      ->check(CLI::Range(0u, 256u));
  sub->add_option("--out", args->out,
                  "Keep the converted bundle (steps.pb, rank-R.json.gz) in this directory");
  sub->add_flag("--dry-run", args->dryRun,
                "Read and convert the files and print what was found; send nothing");
  sub->callback(
      [action, args] { *action = [args](Context& ctx) { return runImport(ctx, *args); }; });
}

}  // namespace trainscope::cli
