#include "collector/ingest/import_receiver.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <system_error>
#include <utility>
#include <vector>

#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/util/delimited_message_util.h>

#include "common/json_limits.h"
#include "common/log.h"
#include "common/timed_id.h"
#include "schema/capture_state.h"
#include "schema/wire.h"

namespace trainscope::ingest {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kComponent = "import";
constexpr const char* kStepsFile = "steps.pb";
constexpr const char* kPart = ".part";

ImportReply fail(StatusCode code, std::string message) {
  ImportReply r;
  r.status = Status::error(code, std::move(message));
  return r;
}

ImportReply ok(json body) {
  ImportReply r;
  r.body = std::move(body);
  return r;
}

ImportReply created(json body) {
  ImportReply r = ok(std::move(body));
  r.created = true;
  return r;
}

bool safeId(const std::string& id) {
  return id.size() > 4 && id.size() <= 64 && id.compare(0, 4, "imp-") == 0 &&
         std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
         });
}

// The rank of "rank-<R>.json.gz"; -1 for any other name.
int64_t rankOfFile(const std::string& name) {
  const std::string prefix = "rank-";
  const std::string suffix = ".json.gz";
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return -1;
  }
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 7 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return -1;
  }
  return std::stoll(digits);
}

// zlib crc32 of a file, read in pieces.
Result<uint32_t> fileCrc(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Result<uint32_t>::error("cannot read " + path.string());
  std::vector<char> buf(1 << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = in.gcount();
    if (n > 0) crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(n));
  }
  if (in.bad()) return Result<uint32_t>::error("cannot read " + path.string());
  return static_cast<uint32_t>(crc);
}

bool startsWithGzipMagic(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char magic[2] = {0, 0};
  in.read(reinterpret_cast<char*>(magic), 2);
  return in.gcount() == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

std::string itemWhere(size_t index) {
  return "steps.pb item #" + std::to_string(index);
}

}  // namespace

ImportReceiver::ImportReceiver(ImportReceiverOptions options, storage::Store& store,
                               const Clock& clock)
    : options_(std::move(options)), store_(store), clock_(clock) {}

std::string ImportReceiver::directory(const std::string& id) const {
  return (fs::path(options_.dir) / id).string();
}

void ImportReceiver::recover() {
  std::error_code ec;
  if (!fs::is_directory(options_.dir, ec)) return;
  for (const auto& entry : fs::directory_iterator(options_.dir, ec)) {
    const std::string id = entry.path().filename().string();
    if (!safeId(id) || !entry.is_directory(ec)) continue;
    // A committed import is a capture; a directory without one is an upload cut short.
    auto row = store_.capture(id);
    if (row && !row->has_value()) {
      fs::remove_all(entry.path(), ec);
      logInfo(kComponent, "removed import " + id + ", left unfinished by a previous run");
    }
  }
}

void ImportReceiver::eraseLocked(const std::string& id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  stagedBytes_ -= it->second.bytes;
  sessions_.erase(it);
}

void ImportReceiver::dropLocked(const std::string& id) {
  std::error_code ec;
  fs::remove_all(directory(id), ec);
  eraseLocked(id);
}

std::optional<ImportReply> ImportReceiver::roomFor(uint64_t bytes) const {
  if (stagedBytes_ + bytes > options_.maxOpenBytes) {
    return fail(StatusCode::kTooLarge,
                "open imports hold " + std::to_string(stagedBytes_) + " bytes and may hold " +
                    std::to_string(options_.maxOpenBytes) +
                    " together (--import-max-open-bytes): retry when one has committed");
  }
  std::error_code ec;
  const auto space = fs::space(options_.dir, ec);
  if (!ec && space.available < bytes + options_.minFreeBytes) {
    return fail(StatusCode::kTooLarge, "the disk of " + options_.dir + " has " +
                                           std::to_string(space.available) +
                                           " bytes free, and imports leave at least " +
                                           std::to_string(options_.minFreeBytes) + " free");
  }
  return std::nullopt;
}

void ImportReceiver::expireLocked(int64_t nowNs) {
  std::vector<std::string> old;
  for (const auto& [id, s] : sessions_) {
    if (nowNs - s.touchedNs > options_.idleTimeoutNs) old.push_back(id);
  }
  for (const auto& id : old) {
    logWarn(kComponent,
            "import " + id + " of job " + sessions_[id].job + " was idle too long and is dropped");
    dropLocked(id);
    ++stats_.aborted;
  }
}

ImportReply ImportReceiver::begin(const std::string& job, std::string_view body) {
  if (job.empty() || job.size() > options_.limits.maxJobBytes) {
    return fail(StatusCode::kInvalidArgument,
                "job: must be 1.." + std::to_string(options_.limits.maxJobBytes) + " bytes");
  }
  json req = body.empty() ? json::object() : parseJsonBounded(body, kMaxRequestJsonDepth);
  if (req.is_discarded() || !req.is_object())
    return fail(StatusCode::kInvalidArgument, "the body must be a JSON object");
  Session s;
  s.job = job;
  for (const auto& [key, value] : req.items()) {
    if (key == "reason") {
      if (!value.is_string()) return fail(StatusCode::kInvalidArgument, "reason: must be a string");
      s.reason = value.get<std::string>();
    } else if (key == "append") {
      if (!value.is_boolean())
        return fail(StatusCode::kInvalidArgument, "append: must be true or false");
      s.append = value.get<bool>();
    } else {
      return fail(StatusCode::kInvalidArgument,
                  "unknown field '" + shortForMessage(key) + "' (known: reason, append)");
    }
  }
  if (!s.append) {
    auto exists = store_.jobExists(job);
    if (!exists) return fail(StatusCode::kError, exists.message());
    if (*exists) {
      return fail(StatusCode::kConflict,
                  "job '" + job +
                      "' exists already: import under another name (--job), or add to it "
                      "(--append)");
    }
  }
  const int64_t now = clock_.nowNs();
  MutexLock lock(&mu_);
  expireLocked(now);
  if (sessions_.size() >= options_.maxOpen) {
    return fail(StatusCode::kUnavailable,
                std::to_string(sessions_.size()) +
                    " imports are open, the most this collector "
                    "takes at once (--import-max-open): retry when one has committed or expired");
  }
  s.id = timedId("imp", now);
  s.touchedNs = now;
  std::error_code ec;
  fs::create_directories(directory(s.id), ec);
  if (ec) return fail(StatusCode::kError, "cannot create " + directory(s.id) + ": " + ec.message());
  ++stats_.begun;
  const std::string id = s.id;
  sessions_.emplace(id, std::move(s));
  return created(json{{"id", id}, {"job", job}});
}

ImportReply ImportReceiver::put(const std::string& id, const std::string& name, uint64_t offset,
                                std::string_view data) {
  const int64_t rank = rankOfFile(name);
  if (name != kStepsFile && rank < 0) {
    return fail(StatusCode::kInvalidArgument,
                "file name '" + name + "': must be steps.pb or rank-<R>.json.gz");
  }
  const uint64_t limit = name == kStepsFile ? options_.maxStepsBytes : options_.maxTimelineBytes;
  MutexLock lock(&mu_);
  expireLocked(clock_.nowNs());
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return fail(StatusCode::kNotFound, "no import session '" + id + "'");
  Session& s = it->second;
  if (rank >= 0 && s.files.count(name) == 0 && s.files.size() > options_.maxRanks) {
    return fail(StatusCode::kTooLarge,
                "an import holds at most " + std::to_string(options_.maxRanks) + " ranks");
  }
  FileState& f = s.files[name];
  if (offset != f.bytes) {
    ImportReply r = fail(StatusCode::kConflict, name + " has " + std::to_string(f.bytes) +
                                                    " bytes; a chunk at " + std::to_string(offset) +
                                                    " does not follow");
    r.body = json{{"name", name}, {"bytes", f.bytes}};
    return r;
  }
  if (f.bytes + data.size() > limit) {
    dropLocked(id);
    ++stats_.aborted;
    return fail(StatusCode::kTooLarge, name + " is larger than the collector takes (" +
                                           std::to_string(limit) +
                                           " bytes): the import is dropped");
  }
  if (auto refused = roomFor(data.size())) return *refused;
  const fs::path part = fs::path(directory(id)) / (name + kPart);
  {
    std::ofstream out(part, std::ios::binary | (offset == 0 ? std::ios::trunc : std::ios::app));
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    out.flush();
    if (!out) return fail(StatusCode::kError, "cannot write " + part.string());
  }
  f.bytes += data.size();
  s.bytes += data.size();
  stagedBytes_ += data.size();
  stats_.bytes += data.size();
  s.touchedNs = clock_.nowNs();
  return ok(json{{"name", name}, {"bytes", f.bytes}});
}

ImportReply ImportReceiver::abort(const std::string& id) {
  MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return fail(StatusCode::kNotFound, "no import session '" + id + "'");
  dropLocked(id);
  ++stats_.aborted;
  return ok(json{{"id", id}});
}

ImportStats ImportReceiver::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

ImportReply ImportReceiver::commit(const std::string& id, std::string_view body) {
  MutexLock lock(&mu_);
  expireLocked(clock_.nowNs());
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return fail(StatusCode::kNotFound, "no import session '" + id + "'");
  ImportReply r = commitLocked(it->second, body);
  if (!r.status) {
    ++stats_.failed;
    logWarn(kComponent, "import " + id + " refused: " + r.status.message());
    dropLocked(id);
  }
  return r;
}

// Runs with mu_ held throughout: commits are rare, and no upload may change a file under it.
ImportReply ImportReceiver::commitLocked(Session& s, std::string_view body) {
  const fs::path dir = directory(s.id);
  json req = parseJsonBounded(body, kMaxRequestJsonDepth);
  if (req.is_discarded() || !req.is_object() || !req.contains("files") ||
      !req["files"].is_array()) {
    return fail(StatusCode::kInvalidArgument,
                "the body must be a JSON object with a \"files\" list");
  }

  // The declared files must be exactly the uploaded ones, whole.
  struct RankFile {
    uint32_t rank = 0;
    uint64_t bytes = 0;
    int64_t firstStep = -1;
    int64_t lastStep = -1;
    bool truncated = false;
    std::string source;
  };
  std::vector<RankFile> rankFiles;
  std::set<std::string> declared;
  for (const auto& f : req["files"]) {
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("bytes") ||
        !f["bytes"].is_number_unsigned() || !f.contains("crc32") ||
        !f["crc32"].is_number_unsigned()) {
      return fail(StatusCode::kInvalidArgument,
                  "files: each needs \"name\" (text), \"bytes\" and \"crc32\" (numbers)");
    }
    const std::string name = f["name"].get<std::string>();
    auto st = s.files.find(name);
    if (st == s.files.end())
      return fail(StatusCode::kInvalidArgument,
                  "files: " + shortForMessage(name) + " was never uploaded");
    if (!declared.insert(name).second)
      return fail(StatusCode::kInvalidArgument, "files: " + name + " is named twice");
    const uint64_t bytes = f["bytes"].get<uint64_t>();
    if (st->second.bytes != bytes) {
      return fail(StatusCode::kInvalidArgument, name + ": " + std::to_string(st->second.bytes) +
                                                    " bytes arrived, the client sent " +
                                                    std::to_string(bytes));
    }
    auto crc = fileCrc(dir / (name + kPart));
    if (!crc) return fail(StatusCode::kError, crc.message());
    if (*crc != f["crc32"].get<uint64_t>()) {
      return fail(StatusCode::kInvalidArgument,
                  name + ": its crc32 does not match what the client sent (corrupted)");
    }
    const int64_t rank = rankOfFile(name);
    if (rank >= 0) {
      if (!startsWithGzipMagic(dir / (name + kPart)))
        return fail(StatusCode::kInvalidArgument, name + ": not gzip data");
      RankFile rf;
      rf.rank = static_cast<uint32_t>(rank);
      rf.bytes = bytes;
      auto num = [&](const char* key, int64_t fallback) {
        return f.contains(key) && f[key].is_number_integer() ? f[key].get<int64_t>() : fallback;
      };
      rf.firstStep = num("first_step", -1);
      rf.lastStep = num("last_step", -1);
      rf.truncated =
          f.contains("truncated") && f["truncated"].is_boolean() && f["truncated"].get<bool>();
      rf.source = f.contains("source") && f["source"].is_string() ? f["source"].get<std::string>()
                                                                  : std::string();
      rankFiles.push_back(std::move(rf));
    }
  }
  for (const auto& [name, st] : s.files) {
    if (declared.count(name) == 0)
      return fail(StatusCode::kInvalidArgument, "files: " + name + " was uploaded, not named");
  }
  if (declared.count(kStepsFile) == 0)
    return fail(StatusCode::kInvalidArgument, "files: steps.pb is missing");

  // Every item, checked before anything is stored.
  storage::WriteBatch batch;
  {
    const fs::path steps = dir / (std::string(kStepsFile) + kPart);
    const int fd = ::open(steps.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail(StatusCode::kError, "cannot read " + steps.string());
    google::protobuf::io::FileInputStream in(fd);
    in.SetCloseOnDelete(true);
    for (size_t index = 0;; ++index) {
      wire::Envelope env;
      bool clean = false;
      if (!google::protobuf::util::ParseDelimitedFromZeroCopyStream(&env, &in, &clean)) {
        if (clean) break;
        return fail(StatusCode::kInvalidArgument,
                    itemWhere(index) + ": not a length-prefixed Envelope (or cut short)");
      }
      if (env.schema_version() != wire::kSchemaVersion) {
        return fail(StatusCode::kInvalidArgument,
                    itemWhere(index) + ": schema version " + std::to_string(env.schema_version()) +
                        ", this collector speaks " + std::to_string(wire::kSchemaVersion));
      }
      if (env.has_rank_hello()) {
        batch.ranks.push_back(env.rank_hello().rank());
      } else if (env.has_step()) {
        batch.steps.push_back(std::move(*env.mutable_step()));
      } else if (env.has_rank_goodbye()) {
        batch.goodbyes.push_back(env.rank_goodbye());
      } else {
        return fail(
            StatusCode::kInvalidArgument,
            itemWhere(index) + ": only rank_hello, step and rank_goodbye items can be imported");
      }
    }
  }
  if (batch.ranks.empty())
    return fail(StatusCode::kInvalidArgument, "steps.pb names no rank (no rank_hello)");
  std::set<uint32_t> ranks;
  const uint32_t worldSize = batch.ranks.front().world_size();
  for (auto& info : batch.ranks) {
    if (auto rej = validateRankInfo(info, options_.limits)) {
      return fail(StatusCode::kInvalidArgument, "rank_hello: " + rej->detail);
    }
    if (info.job() != s.job) {
      return fail(StatusCode::kInvalidArgument, "rank_hello of rank " +
                                                    std::to_string(info.rank()) + " is for job '" +
                                                    info.job() + "', not '" + s.job + "'");
    }
    if (info.world_size() != worldSize) {
      return fail(StatusCode::kInvalidArgument, "rank_hello items disagree on world_size (" +
                                                    std::to_string(worldSize) + " and " +
                                                    std::to_string(info.world_size()) + ")");
    }
    info.set_node("import");  // imported ranks run on no agent's node
    ranks.insert(info.rank());
  }
  for (const auto& step : batch.steps) {
    if (auto rej = validateStep(step, worldSize, options_.limits)) {
      return fail(StatusCode::kInvalidArgument, "step: " + rej->detail);
    }
    if (step.job() != s.job || ranks.count(step.rank()) == 0) {
      return fail(StatusCode::kInvalidArgument, "step " + std::to_string(step.step()) +
                                                    " of rank " + std::to_string(step.rank()) +
                                                    " is not for a rank of this import's job");
    }
  }
  for (const auto& bye : batch.goodbyes) {
    if (auto rej = validateGoodbye(bye, worldSize, options_.limits)) {
      return fail(StatusCode::kInvalidArgument, "rank_goodbye: " + rej->detail);
    }
    if (bye.job() != s.job || ranks.count(bye.rank()) == 0) {
      return fail(StatusCode::kInvalidArgument, "rank_goodbye of rank " +
                                                    std::to_string(bye.rank()) +
                                                    " is not for a rank of this import's job");
    }
  }
  for (const auto& rf : rankFiles) {
    if (ranks.count(rf.rank) == 0) {
      return fail(
          StatusCode::kInvalidArgument,
          "rank-" + std::to_string(rf.rank) + ".json.gz is for a rank steps.pb does not name");
    }
  }
  if (!rankFiles.empty() && !options_.onTimeline) {
    return fail(StatusCode::kUnavailable,
                "this collector takes no timelines (captures are off): import with "
                "--no-timeline");
  }
  if (!s.append) {
    auto exists = store_.jobExists(s.job);
    if (!exists) return fail(StatusCode::kError, exists.message());
    if (*exists)
      return fail(StatusCode::kConflict,
                  "job '" + s.job + "' was created while this import uploaded");
  }
  // Steps in the order a live job's arrive (step, then rank): the detectors assemble steps.
  std::stable_sort(batch.steps.begin(), batch.steps.end(),
                   [](const wire::StepReport& a, const wire::StepReport& b) {
                     return a.step() != b.step() ? a.step() < b.step() : a.rank() < b.rank();
                   });

  // Store: the rank files take their final names first, so a failed transaction can still
  // remove them and leave nothing.
  std::error_code ec;
  for (const auto& rf : rankFiles) {
    const std::string name = "rank-" + std::to_string(rf.rank) + ".json.gz";
    fs::rename(dir / (name + kPart), dir / name, ec);
    if (ec) return fail(StatusCode::kError, "cannot store " + name + ": " + ec.message());
  }
  const int64_t now = clock_.nowNs();
  batch.receivedNs = now;
  if (Status st = store_.write(batch); !st)
    return fail(StatusCode::kError, "storing the import: " + st.message());
  fs::remove(dir / (std::string(kStepsFile) + kPart), ec);
  if (options_.onCommitted) options_.onCommitted(batch);

  json out = {{"job", s.job},
              {"ranks", ranks},
              {"steps", batch.steps.size()},
              {"world_size", worldSize},
              {"capture", nullptr}};
  if (!rankFiles.empty()) {
    storage::CaptureRow row;
    row.id = s.id;
    row.job = s.job;
    row.kind = "import";
    row.state = wire::CaptureState::kRunning;
    row.reason = s.reason.empty() ? "import" : s.reason;
    row.createdNs = now;
    row.updatedNs = now;
    row.deadlineNs = now + 3'600'000'000'000;  // merged at the capture stage's next tick
    int64_t first = INT64_MAX;
    int64_t last = INT64_MIN;
    for (const auto& rf : rankFiles) {
      row.ranks.push_back(rf.rank);
      storage::CaptureRankRow rr;
      rr.rank = rf.rank;
      rr.node = "import";
      rr.state = wire::RankState::kDone;
      rr.detail = rf.source;
      rr.bytes = rf.bytes;
      rr.truncated = rf.truncated;
      rr.firstStep = rf.firstStep;
      rr.lastStep = rf.lastStep;
      rr.updatedNs = now;
      row.rankStatus.push_back(std::move(rr));
      row.maxBytes = std::max(row.maxBytes, rf.bytes);
      if (rf.firstStep >= 0) first = std::min(first, rf.firstStep);
      last = std::max(last, rf.lastStep);
    }
    std::sort(row.ranks.begin(), row.ranks.end());
    std::sort(row.rankStatus.begin(), row.rankStatus.end(),
              [](const auto& a, const auto& b) { return a.rank < b.rank; });
    if (first != INT64_MAX && last >= first) {
      row.startStep = first;
      row.steps = static_cast<uint32_t>(std::min<int64_t>(last - first + 1, UINT32_MAX));
    }
    auto stored = options_.onTimeline(row);
    if (stored) {
      out["capture"] = stored->id;
    } else {
      // The steps are stored; only the timeline is missing. Say so rather than fail.
      out["capture_error"] = stored.message();
      logError(kComponent, "import " + s.id + ": steps stored, timeline not: " + stored.message());
    }
  }
  ++stats_.committed;
  stats_.steps += batch.steps.size();
  logInfo(kComponent, "import " + s.id + " stored job " + s.job + ": " +
                          std::to_string(ranks.size()) + " ranks, " +
                          std::to_string(batch.steps.size()) + " step reports");
  const std::string id = s.id;
  const bool keepDir = !rankFiles.empty() && !out["capture"].is_null();
  if (keepDir) {
    eraseLocked(id);
  } else {
    dropLocked(id);
  }
  return created(out);
}

}  // namespace trainscope::ingest
