#include "importer/import_job.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/delimited_message_util.h>
#include <nlohmann/json.hpp>

#include "common/checked.h"
#include "common/clock.h"
#include "common/median.h"
#include "importer/timeline_writer.h"
#include "schema/wire.h"

namespace trainscope::importer {
namespace {

namespace fs = std::filesystem;

// Unix time before this is a relative clock (traces that start at 0), not the wall clock.
constexpr int64_t kEpoch2001Ns = 978'307'200LL * 1'000'000'000;

std::string stemOf(const std::string& path) {
  std::string name = fs::path(path).filename().string();
  for (const char* ext : {".gz", ".json", ".trace", ".pt"}) {
    const std::string e = ext;
    if (name.size() > e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0) {
      name.resize(name.size() - e.size());
    }
  }
  return name;
}

// The job name when none is given: the capture files' own job, else the files' folder name (or
// the first file's name) after "import-".
std::string defaultJob(const std::vector<std::string>& files,
                       const std::vector<TraceFacts>& facts) {
  std::set<std::string> jobs;
  bool allCaptures = true;
  for (const auto& f : facts) {
    if (f.format != TraceFormat::kTrainscope || f.job.empty()) allCaptures = false;
    jobs.insert(f.job);
  }
  if (allCaptures && jobs.size() == 1) return *jobs.begin();
  std::set<std::string> dirs;
  for (const auto& f : files) {
    dirs.insert(fs::absolute(f).lexically_normal().parent_path().filename().string());
  }
  std::string base = dirs.size() == 1 && !dirs.begin()->empty() && files.size() > 1
                         ? *dirs.begin()
                         : stemOf(files.front());
  std::string out = "import-";
  for (char c : base) {
    out.push_back(
        std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ? c : '_');
  }
  if (out.size() > 128) out.resize(128);
  return out;
}

std::string formatShift(int64_t ns) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%+.3f ms", static_cast<double>(ns) / 1e6);
  return buf;
}

// Where pass 2 sends timeline events: the writer of the event's rank.
class WriterSink final : public TimelineSink {
 public:
  explicit WriterSink(std::map<uint32_t, std::unique_ptr<TimelineWriter>>* writers)
      : writers_(writers) {}
  bool write(uint32_t rank, std::string_view event, int64_t tNs) override {
    auto it = writers_->find(rank);
    return it != writers_->end() && it->second->write(event, tNs);
  }

 private:
  std::map<uint32_t, std::unique_ptr<TimelineWriter>>* writers_;
};

// Runs fn(i) for every i < n on up to `threads` threads (0: one per core). fn touches only what
// belongs to its index.
void forEachFile(size_t n, unsigned threads, const std::function<void(size_t)>& fn) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  const size_t workers = std::min<size_t>(threads, n);
  if (workers <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  pool.reserve(workers);
  for (size_t w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < n; i = next++) fn(i);
    });
  }
  for (auto& t : pool) t.join();
}

// What pass 2 made of one file: its ranks' folds and open timeline writers, and its step
// reports as length-delimited envelopes, ready to append to steps.pb.
struct FileFold {
  std::vector<RankFold> folds;
  std::map<uint32_t, std::unique_ptr<TimelineWriter>> writers;
  std::string reports;
  uint64_t reportCount = 0;
  std::string error;  // "" = folded
};

FileFold foldFile(const std::string& file, const TraceFacts& facts, const FoldOptions& fo,
                  const std::string& dir, const ImportOptions& options) {
  FileFold out;
  if (options.timeline) {
    for (const auto& r : facts.ranks) {
      auto w = std::make_unique<TimelineWriter>();
      const fs::path path = fs::path(dir) / rankFileName(r.rank);
      if (Status s = w->open(path.string(), r.rank, options.timelineMaxBytes); !s) {
        out.error = s.message();
        return out;
      }
      out.writers[r.rank] = std::move(w);
    }
  }
  WriterSink sink(&out.writers);
  google::protobuf::io::StringOutputStream buffer(&out.reports);
  auto folded =
      foldTrace([&] { return openFileSource(file); }, facts, fo,
                [&](wire::StepReport&& rep) {
                  wire::Envelope env;
                  env.set_schema_version(wire::kSchemaVersion);
                  *env.mutable_step() = std::move(rep);
                  ++out.reportCount;
                  if (!google::protobuf::util::SerializeDelimitedToZeroCopyStream(env, &buffer)) {
                    return Status::error(file + ": cannot encode a step report");
                  }
                  return Status::ok();
                },
                options.timeline ? &sink : nullptr);
  if (!folded) {
    out.error = file + ": " + folded.message();
    return out;
  }
  out.folds = std::move(*folded);
  return out;
}

// Removes what an import created when it fails.
class Cleanup {
 public:
  void add(const fs::path& p) { paths_.push_back(p); }
  void release() { paths_.clear(); }
  ~Cleanup() {
    std::error_code ec;
    for (const auto& p : paths_) fs::remove(p, ec);
  }

 private:
  std::vector<fs::path> paths_;
};

}  // namespace

std::string rankFileName(uint32_t rank) {
  return "rank-" + std::to_string(rank) + ".json.gz";
}

std::optional<uint32_t> rankFromFileName(const std::string& path) {
  std::string name = fs::path(path).filename().string();
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::optional<uint32_t> found;
  for (size_t at = name.find("rank"); at != std::string::npos; at = name.find("rank", at + 4)) {
    size_t i = at + 4;
    if (i < name.size() && (name[i] == '-' || name[i] == '_' || name[i] == '.')) ++i;
    size_t digits = 0;
    uint64_t n = 0;
    while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) && digits < 8) {
      n = n * 10 + static_cast<uint64_t>(name[i] - '0');
      ++i;
      ++digits;
    }
    if (digits > 0 && (i == name.size() || !std::isdigit(static_cast<unsigned char>(name[i])))) {
      found = static_cast<uint32_t>(n);
      break;
    }
  }
  return found;
}

Result<ImportResult> importTraces(const std::vector<std::string>& files, const std::string& dir,
                                  const ImportOptions& options) {
  using R = Result<ImportResult>;
  if (files.empty()) return R::error("no trace files given");
  ImportResult result;

  // Pass 1 over every file: nothing is written until all of them read well.
  // Files are independent: each is read on a thread of its own (up to options.threads).
  std::vector<TraceFacts> facts(files.size());
  std::vector<std::string> errors(files.size());
  ScanOptions so;
  so.stepEvent = options.stepEvent;
  forEachFile(files.size(), options.threads, [&](size_t i) {
    auto src = openFileSource(files[i]);
    if (!src) {
      errors[i] = src.message();
      return;
    }
    auto f = scanTrace(**src, so);
    if (!f) {
      errors[i] = files[i] + ": " + f.message();
      return;
    }
    facts[i] = std::move(*f);
  });
  // The first bad file in the order given, whatever thread finished first.
  for (const std::string& e : errors) {
    if (!e.empty()) return R::error(e);
  }

  // Ranks: from --ranks, else from inside the file, else its name, else (one file) 0.
  struct Owner {
    size_t file;
    size_t index;  // into facts[file].ranks
    std::string from;
  };
  std::map<uint32_t, Owner> owners;
  if (!options.ranks.empty() && options.ranks.size() != files.size()) {
    return R::error("--ranks names " + std::to_string(options.ranks.size()) + " ranks for " +
                    std::to_string(files.size()) + " files: give one rank per file, in order");
  }
  for (size_t i = 0; i < files.size(); ++i) {
    TraceFacts& f = facts[i];
    if (f.mergedCapture && !options.ranks.empty()) {
      return R::error(files[i] +
                      ": a merged capture holds several ranks (one per pid); --ranks cannot "
                      "name them");
    }
    if (f.mergedCapture) {
      for (size_t k = 0; k < f.ranks.size(); ++k) {
        const uint32_t r = f.ranks[k].rank;
        if (owners.count(r) > 0) {
          return R::error(files[i] + ": rank " + std::to_string(r) + " is also in " +
                          files[owners[r].file]);
        }
        owners[r] = {i, k, "pid"};
      }
      continue;
    }
    std::string from;
    std::optional<uint32_t> rank = f.rank;
    if (!options.ranks.empty()) {
      rank = options.ranks[i];
      from = "--ranks";
    } else if (rank) {
      from = f.format == TraceFormat::kTrainscope ? "trainscope header" : "distributedInfo";
    } else if ((rank = rankFromFileName(files[i]))) {
      from = "file name";
    } else if (files.size() == 1) {
      rank = 0;
      from = "only file";
    } else {
      return R::error(files[i] +
                      ": cannot tell its rank: no distributedInfo.rank in it and no 'rank<N>' in "
                      "its name (rename it, e.g. rank-3.json)");
    }
    if (owners.count(*rank) > 0) {
      return R::error(files[i] + ": rank " + std::to_string(*rank) + " (from its " + from +
                      ") is also the rank of " + files[owners[*rank].file]);
    }
    f.ranks[0].rank = *rank;
    owners[*rank] = {i, 0, from};
  }
  result.job = options.job.empty() ? defaultJob(files, facts) : options.job;
  result.worldSize = owners.rbegin()->first + 1;
  for (const auto& f : facts) {
    if (f.worldSize && *f.worldSize > result.worldSize) {
      result.traceWorldSize = std::max(result.traceWorldSize.value_or(0), *f.worldSize);
    }
  }

  // Clocks: a relative clock is moved to end at the newest file's modification time; then each
  // rank is shifted onto the lowest rank's clock by its steps' ends.
  std::map<uint32_t, int64_t> shift;
  int64_t earliest = INT64_MAX;
  int64_t latest = INT64_MIN;
  for (const auto& [rank, o] : owners) {
    const auto& steps = facts[o.file].ranks[o.index].steps;
    earliest = std::min(earliest, steps.front().beginNs);
    latest = std::max(latest, steps.back().endNs);
  }
  int64_t rebase = 0;
  if (earliest < kEpoch2001Ns) {
    int64_t newest = 0;
    for (const auto& path : files) {
      struct stat st {};
      if (stat(path.c_str(), &st) == 0) {
        newest = std::max<int64_t>(
            newest, static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec);
      }
    }
    if (newest == 0) newest = wallNowNs();
    const auto moved = checkedSub(newest, latest);
    if (!moved) {
      return R::error(files[owners.begin()->second.file] +
                      ": its clock cannot be placed (steps end at " + std::to_string(latest) +
                      " ns)");
    }
    rebase = *moved;
    result.notes.push_back(
        "the traces' clock is relative (it starts near 0, not at a Unix time): "
        "their steps are placed to end at the newest file's modification time");
  }
  const auto& refOwner = owners.begin()->second;
  std::map<int64_t, int64_t> refEnds;
  for (const auto& s : facts[refOwner.file].ranks[refOwner.index].steps) refEnds[s.step] = s.endNs;
  for (const auto& [rank, o] : owners) {
    int64_t align = 0;
    if (options.align && rank != owners.begin()->first) {
      std::vector<int64_t> diffs;
      for (const auto& s : facts[o.file].ranks[o.index].steps) {
        auto it = refEnds.find(s.step);
        if (it == refEnds.end()) continue;
        if (auto d = checkedSub(it->second, s.endNs)) diffs.push_back(*d);
      }
      if (diffs.empty()) {
        result.notes.push_back("rank " + std::to_string(rank) + " shares no step with rank " +
                               std::to_string(owners.begin()->first) + ": its clock is kept");
      } else {
        align = upperMedianInPlace(diffs);
      }
    }
    // Every step placed on the job's clock must be a time ingest takes (1970..2100): a trace
    // whose clock is neither a Unix time nor a relative one is named, not wrapped.
    const auto& steps = facts[o.file].ranks[o.index].steps;
    const auto total = checkedAdd(rebase, align);
    const auto first = total ? checkedAdd(steps.front().beginNs, *total) : std::nullopt;
    const auto last = total ? checkedAdd(steps.back().endNs, *total) : std::nullopt;
    if (!first || !last || *first < 1 || *last > wire::kMaxTimeNs) {
      return R::error(files[o.file] + ": rank " + std::to_string(rank) +
                      "'s steps cannot be placed on the job's clock between 1970 and 2100 "
                      "(their times are neither a Unix time nor a clock starting near 0)");
    }
    shift[rank] = *total;
  }

  // Pass 2: the bundle.
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return R::error("cannot create " + dir + ": " + ec.message());
  Cleanup cleanup;
  result.stepsFile = (fs::path(dir) / kStepsFileName).string();
  std::ofstream steps(result.stepsFile, std::ios::binary | std::ios::trunc);
  if (!steps) return R::error("cannot write " + result.stepsFile);
  cleanup.add(result.stepsFile);
  auto writeEnvelope = [&](wire::Envelope& env) -> Status {
    env.set_schema_version(wire::kSchemaVersion);
    if (!google::protobuf::util::SerializeDelimitedToOstream(env, &steps) || !steps) {
      return Status::error("cannot write " + result.stepsFile);
    }
    return Status::ok();
  };
  for (const auto& [rank, o] : owners) {
    const TraceFacts& f = facts[o.file];
    wire::Envelope env;
    auto* info = env.mutable_rank_hello()->mutable_rank();
    info->set_job(result.job);
    info->set_rank(rank);
    info->set_world_size(result.worldSize);
    info->set_host(f.host.empty() ? "unknown" : f.host);
    info->set_pid(f.pid);
    info->set_probe_version("import");
    info->set_node("import");
    env.mutable_rank_hello()->set_sent_ns(options.nowNs != 0 ? options.nowNs : wallNowNs());
    if (Status s = writeEnvelope(env); !s) return R::error(s.message());
  }

  FoldOptions fo;
  fo.job = result.job;
  fo.topOps = options.topOps;
  fo.shiftNs = shift;
  fo.maxUnits = options.maxUnits;
  std::map<uint32_t, RankFold> folds;
  std::map<uint32_t, std::pair<uint64_t, bool>> timelineStats;  // events, truncated
  std::map<uint32_t, uint64_t> timelineBytes;
  // Each file is folded on a thread of its own into its own timeline files and a buffer of its
  // step reports; the buffers go into steps.pb in the order of the files, as one thread would.
  std::vector<FileFold> fileFolds(files.size());
  if (options.timeline) {
    for (const auto& [rank, o] : owners) cleanup.add(fs::path(dir) / rankFileName(rank));
  }
  forEachFile(files.size(), options.threads,
              [&](size_t i) { fileFolds[i] = foldFile(files[i], facts[i], fo, dir, options); });
  for (size_t i = 0; i < files.size(); ++i) {
    if (!fileFolds[i].error.empty()) return R::error(fileFolds[i].error);
  }
  for (size_t i = 0; i < files.size(); ++i) {
    const TraceFacts& f = facts[i];
    FileFold& ff = fileFolds[i];
    steps.write(ff.reports.data(), static_cast<std::streamsize>(ff.reports.size()));
    if (!steps) return R::error("cannot write " + result.stepsFile);
    result.reports += ff.reportCount;
    for (const auto& rf : ff.folds) folds[rf.rank] = rf;
    for (auto& [rank, w] : ff.writers) {
      const RankFold& rf = folds[rank];
      nlohmann::json meta = {{"kind", "import"},
                             {"job", result.job},
                             {"rank", rank},
                             {"host", f.host},
                             {"source", files[i]},
                             {"format", formatName(f.format)},
                             {"first_step", rf.firstStep},
                             {"last_step", rf.lastStep},
                             {"shift_ns", shift[rank]},
                             {"truncated", w->truncated()}};
      timelineStats[rank] = {w->events(), w->truncated()};
      if (Status s = w->finish(meta); !s) return R::error(s.message());
      timelineBytes[rank] = fs::file_size(w->path(), ec);
    }
    result.events += f.events;
    result.inputBytes += f.inputBytes;
  }
  for (const auto& [rank, o] : owners) {
    wire::Envelope env;
    auto* bye = env.mutable_rank_goodbye();
    bye->set_job(result.job);
    bye->set_rank(rank);
    bye->set_last_step(folds[rank].lastStep);
    bye->set_sent_ns(options.nowNs != 0 ? options.nowNs : wallNowNs());
    if (Status s = writeEnvelope(env); !s) return R::error(s.message());
  }
  steps.close();
  if (!steps) return R::error("cannot write " + result.stepsFile);
  result.stepsBytes = fs::file_size(result.stepsFile, ec);

  for (const auto& [rank, o] : owners) {
    const TraceFacts& f = facts[o.file];
    ImportedRank r;
    r.rank = rank;
    r.file = files[o.file];
    r.format = formatName(f.format);
    r.rankFrom = o.from;
    r.host = f.host;
    r.stepRule = f.stepRule;
    r.comm = commSourceName(f.comm);
    r.device = f.device;
    r.fileEvents = f.events;
    r.fold = folds[rank];
    r.shiftNs = shift[rank];
    r.timelineEvents = timelineStats[rank].first;
    r.timelineTruncated = timelineStats[rank].second;
    r.timelineBytes = timelineBytes[rank];
    r.notes = f.notes;
    if (options.align && r.shiftNs - rebase != 0) {
      r.notes.push_back("clock shifted " + formatShift(r.shiftNs - rebase) + " onto rank " +
                        std::to_string(owners.begin()->first) + "'s by the step ends");
    }
    result.ranks.push_back(std::move(r));
  }
  cleanup.release();
  return result;
}

}  // namespace trainscope::importer
