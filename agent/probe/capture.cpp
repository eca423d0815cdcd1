#include "agent/probe/capture.h"

#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <utility>

#include <nlohmann/json.hpp>

#include "agent/probe/intern.h"
#include "agent/probe/trainscope_probe.h"
#include "schema/capture_state.h"
#include "schema/wire.h"

namespace trainscope::probe {
namespace {

void appendInt(std::string& out, int64_t v) {
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, res.ptr);
}

void appendUint(std::string& out, uint64_t v) {
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, res.ptr);
}

// Nanoseconds as fractional microseconds, exactly ("1700000000123456.789"): a double would
// lose the nanoseconds of a 2020s epoch time.
void appendMicros(std::string& out, int64_t ns) {
  if (ns < 0) {
    out.push_back('-');
    ns = -ns;
  }
  appendInt(out, ns / 1000);
  const int64_t frac = ns % 1000;
  out.push_back('.');
  out.push_back(static_cast<char>('0' + frac / 100));
  out.push_back(static_cast<char>('0' + (frac / 10) % 10));
  out.push_back(static_cast<char>('0' + frac % 10));
}

std::string jsonString(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

const char* rangeKindName(uint8_t kind) {
  switch (kind) {
    case TS_RANGE_COMPUTE:
      return "compute";
    case TS_RANGE_DATA:
      return "data";
    case TS_RANGE_COMM:
      return "comm";
    default:
      return "other";
  }
}

}  // namespace

bool safeCaptureId(const std::string& s) {
  if (s.empty() || s.size() > 128 || s == "." || s == "..") return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

std::string formatBound(uint64_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1u << 10) && bytes % (1u << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " bytes";
}

CaptureRecorder::CaptureRecorder(CaptureIdentity identity, CaptureOptions options)
    : identity_(std::move(identity)), options_(std::move(options)) {}

wire::CommandStatus CaptureRecorder::status(const std::string& id, wire::RankState state,
                                            std::string detail) const {
  wire::CommandStatus st;
  st.set_command_id(id);
  st.set_job(identity_.job);
  st.set_rank(identity_.rank);
  wire::setCommandState(&st, state);
  st.set_detail(std::move(detail));
  return st;
}

wire::CommandStatus CaptureRecorder::fail(std::string detail) {
  file_.abandon();
  active_ = false;
  return status(commandId_, wire::RankState::kFailed, std::move(detail));
}

const std::string& CaptureRecorder::jsonName(uint32_t id) {
  auto it = names_.find(id);
  if (it == names_.end()) it = names_.emplace(id, jsonString(nameString(id))).first;
  return it->second;
}

std::pair<int64_t, int64_t> CaptureRecorder::historyRange(const wire::CaptureCommand& c) {
  if (c.start_step() < 0 || c.start_step() > INT64_MAX / 2) return {1, 0};  // empty
  // The whole window: a command that arrives late (the agent or this probe was busy) finds
  // the steps it missed in the flight recorder. Only folded steps are held, so the range
  // ends at the last folded step in effect.
  return {c.start_step() - static_cast<int64_t>(c.history()),
          c.start_step() + static_cast<int64_t>(c.steps()) - 1};
}

std::vector<wire::CommandStatus> CaptureRecorder::start(const wire::Command& cmd,
                                                        int64_t lastFinalStep,
                                                        const FlightRecorder& flight) {
  const auto [from, to] = historyRange(cmd.capture());
  const std::vector<HeldStep> held = flight.stepsIn(from, to);
  bool started = false;
  std::vector<wire::CommandStatus> out;
  out.push_back(begin(cmd, lastFinalStep, held.empty() ? -1 : held.front().step, &started));
  if (started) {
    if (auto st = writeHistory(held)) out.push_back(std::move(*st));
  }
  return out;
}

wire::CommandStatus CaptureRecorder::begin(const wire::Command& cmd, int64_t lastFinalStep,
                                           int64_t firstHeldStep, bool* started) {
  *started = false;
  const wire::CaptureCommand& c = cmd.capture();
  const std::string id = cmd.id().empty() ? c.capture_id() : cmd.id();
  if (active_) {
    if (id == commandId_) {
      return status(id, wire::RankState::kRecording, "already recording this capture");
    }
    return status(id, wire::RankState::kFailed,
                  "a capture is already running on rank " + std::to_string(identity_.rank) + ": " +
                      commandId_);
  }
  if (!safeCaptureId(c.capture_id())) {
    return status(id, wire::RankState::kFailed,
                  "capture_id '" + c.capture_id() + "' " + kBadCaptureId);
  }
  if (c.steps() == 0 || c.steps() > options_.maxSteps) {
    return status(id, wire::RankState::kFailed,
                  "steps must be between 1 and " + std::to_string(options_.maxSteps) + ", not " +
                      std::to_string(c.steps()));
  }
  if (c.history() > options_.maxHistory) {
    return status(id, wire::RankState::kFailed,
                  "history must be at most " + std::to_string(options_.maxHistory) + ", not " +
                      std::to_string(c.history()));
  }
  // A start step already passed is served from the flight recorder while it still holds it
  // (the held steps are contiguous up to the last folded one).
  const bool passed = c.start_step() <= lastFinalStep;
  if (passed && (firstHeldStep < 0 || firstHeldStep > c.start_step())) {
    return status(
        id, wire::RankState::kFailed,
        "start step " + std::to_string(c.start_step()) + " already passed: rank " +
            std::to_string(identity_.rank) + " is at step " + std::to_string(lastFinalStep) +
            (firstHeldStep < 0
                 ? std::string(" and its flight recorder holds no step")
                 : " and its flight recorder holds steps from " + std::to_string(firstHeldStep)));
  }
  if (c.start_step() > INT64_MAX / 2) {
    return status(id, wire::RankState::kFailed,
                  "start_step " + std::to_string(c.start_step()) + " is too big");
  }

  commandId_ = id;
  captureId_ = c.capture_id();
  start_ = c.start_step();
  steps_ = c.steps();
  history_ = c.history();
  maxBytes_ = c.max_bytes() != 0 ? c.max_bytes() : options_.defaultMaxBytes;
  truncated_ = false;
  anyEvent_ = false;
  error_.clear();
  firstStep_ = -1;
  lastStep_ = -1;
  lastSeen_ = lastFinalStep;
  // The tail (marker, metadata object, gzip trailer) must fit whatever happens.
  const uint64_t tail = 640 + captureId_.size() + identity_.job.size() + identity_.host.size();
  reserve_ = GzipWriter::worstCaseBytes(tail) + 64;
  // The bound check counts unflushed input as incompressible, so a small bound needs more
  // frequent flushes to be filled at all.
  flushEvery_ =
      std::clamp<uint64_t>(maxBytes_ / 16, 512, std::max<uint64_t>(512, options_.flushEveryBytes));

  const std::string dir = options_.dir + "/" + captureId_;
  const std::string path = dir + "/rank-" + std::to_string(identity_.rank) + ".json.gz";
  if (Status s = makeDirectories(dir); !s) return status(id, wire::RankState::kFailed, s.message());
  if (Status s = file_.open(path, options_.zlibLevel); !s) {
    return status(id, wire::RankState::kFailed, s.message());
  }
  active_ = true;
  if (Status s = file_.write("{\"traceEvents\": [\n"); !s) return fail(s.message());
  *started = true;

  const int64_t from = start_ - static_cast<int64_t>(history_);
  const int64_t historyFrom =
      firstHeldStep >= from ? firstHeldStep : std::max(from, lastFinalStep + 1);
  std::string detail = "steps " + std::to_string(start_) + ".." +
                       std::to_string(start_ + steps_ - 1) + ", history from " +
                       std::to_string(historyFrom);
  if (passed) {
    detail += "; steps to " + std::to_string(std::min(lastFinalStep, start_ + steps_ - 1)) +
              " from the flight recorder (the command came at step " +
              std::to_string(lastFinalStep) + ")";
  }
  return status(id, wire::RankState::kRecording, std::move(detail));
}

std::optional<wire::CommandStatus> CaptureRecorder::writeHistory(
    const std::vector<HeldStep>& held) {
  if (!active_) return std::nullopt;
  const int64_t from = start_ - static_cast<int64_t>(history_);
  const int64_t last = start_ + static_cast<int64_t>(steps_) - 1;
  for (const HeldStep& h : held) {
    // Steps folded after the command come through offer(), not from here.
    if (h.step > lastSeen_) break;
    if (h.step < from || h.step > last) continue;
    if (!writeStep(h.step, h.startNs, h.endNs, h.records)) break;
  }
  if (!error_.empty()) return fail(error_);
  // Truncated, or every step of the window was already held (a command that came late).
  if (truncated_ || lastSeen_ >= last) return finishFile("");
  return std::nullopt;
}

std::optional<wire::CommandStatus> CaptureRecorder::cutShort(std::string detail) {
  if (!active_) return std::nullopt;
  truncated_ = true;
  return finishFile(std::move(detail));
}

bool CaptureRecorder::writeEvent(const std::string& event, int64_t tNs) {
  if (truncated_ || !error_.empty()) return false;
  const uint64_t pending = GzipWriter::worstCaseBytes(file_.unflushedBytes() + event.size() + 2);
  if (file_.compressedBytes() + pending + reserve_ > maxBytes_) {
    truncated_ = true;
    std::string marker = anyEvent_ ? ",\n" : "";
    marker += "{\"name\": \"trainscope: trace cut at the " + formatBound(maxBytes_) +
              " bound\", \"ph\": \"i\", \"s\": \"g\", \"ts\": ";
    appendMicros(marker, tNs);
    marker += ", \"pid\": ";
    appendUint(marker, identity_.rank);
    marker += "}";
    anyEvent_ = true;
    if (Status s = file_.write(marker); !s) error_ = s.message();
    return false;
  }
  if (anyEvent_) {
    if (Status s = file_.write(",\n"); !s) {
      error_ = s.message();
      return false;
    }
  }
  anyEvent_ = true;
  if (Status s = file_.write(event); !s) {
    error_ = s.message();
    return false;
  }
  if (file_.unflushedBytes() >= flushEvery_) {
    if (Status s = file_.flush(); !s) {
      error_ = s.message();
      return false;
    }
  }
  return true;
}

bool CaptureRecorder::writeStep(int64_t step, int64_t startNs, int64_t endNs,
                                const std::vector<Record>& records) {
  auto noteStep = [&] {
    if (firstStep_ < 0 || step < firstStep_) firstStep_ = step;
    lastStep_ = std::max(lastStep_, step);
  };
  lastSeen_ = std::max(lastSeen_, step);
  const std::string pid = std::to_string(identity_.rank);
  if (endNs > startNs && startNs > 0) {
    buf_.clear();
    buf_ += "{\"name\": \"ProfilerStep#";
    appendInt(buf_, step);
    buf_ += "\", \"ph\": \"X\", \"cat\": \"step\", \"ts\": ";
    appendMicros(buf_, startNs);
    buf_ += ", \"dur\": ";
    appendMicros(buf_, endNs - startNs);
    buf_ += ", \"pid\": " + pid + ", \"tid\": 0, \"args\": {\"step\": ";
    appendInt(buf_, step);
    buf_ += "}}";
    if (!writeEvent(buf_, startNs)) return false;
    noteStep();
  }
  for (const Record& r : records) {
    if (r.step != step) continue;  // unattributed records belong to no step
    const char* cat = nullptr;
    switch (r.type) {
      case RecordType::kOp:
        cat = "op";
        break;
      case RecordType::kRange:
        cat = "range";
        break;
      case RecordType::kCollective:
        cat = "collective";
        break;
      case RecordType::kP2p:
        cat = "p2p";
        break;
      default:
        continue;
    }
    buf_.clear();
    buf_ += "{\"name\": ";
    const char* opName = nullptr;
    if (r.type == RecordType::kCollective || r.type == RecordType::kP2p) {
      opName = wire::collectiveOpName(static_cast<wire::CollectiveOp>(r.kind));
      buf_ += '"';
      buf_ += opName;
      buf_ += '"';
    } else {
      buf_ += jsonName(r.name);
    }
    buf_ += ", \"ph\": \"X\", \"cat\": \"";
    buf_ += cat;
    buf_ += "\", \"ts\": ";
    appendMicros(buf_, r.t0);
    buf_ += ", \"dur\": ";
    appendMicros(buf_, std::max<int64_t>(0, r.t1 - r.t0));
    buf_ += ", \"pid\": " + pid + ", \"tid\": ";
    appendUint(buf_, r.ring);
    buf_ += ", \"args\": {\"step\": ";
    appendInt(buf_, step);
    if (r.type == RecordType::kRange) {
      buf_ += ", \"kind\": \"";
      buf_ += rangeKindName(r.kind);
      buf_ += '"';
    } else if (r.type == RecordType::kCollective || r.type == RecordType::kP2p) {
      if (r.type == RecordType::kP2p) {
        buf_ += ", \"peer\": ";
        appendUint(buf_, r.name);
      }
      buf_ += ", \"bytes\": ";
      appendUint(buf_, r.bytes);
      buf_ += ", \"op\": \"";
      buf_ += opName;
      buf_ += "\", \"group\": ";
      buf_ += jsonName(r.group);
    }
    buf_ += "}}";
    if (!writeEvent(buf_, r.t0)) return false;
    noteStep();
  }
  return true;
}

std::optional<wire::CommandStatus> CaptureRecorder::offer(int64_t step, int64_t startNs,
                                                          int64_t endNs,
                                                          const std::vector<Record>& records) {
  if (!active_ || step <= lastSeen_) return std::nullopt;
  const int64_t last = start_ + static_cast<int64_t>(steps_) - 1;
  if (step > last) return finishFile("");  // numbering jumped past the capture
  lastSeen_ = step;
  if (step >= start_ - static_cast<int64_t>(history_)) {
    writeStep(step, startNs, endNs, records);
    if (!error_.empty()) return fail(error_);
    if (truncated_) return finishFile("");
  }
  if (step >= last) return finishFile("");
  return std::nullopt;
}

std::optional<wire::CommandStatus> CaptureRecorder::close(int64_t lastStep) {
  if (!active_) return std::nullopt;
  return finishFile("rank ended at step " + std::to_string(lastStep));
}

wire::CommandStatus CaptureRecorder::finishFile(std::string detail) {
  std::string tail = "\n], \"trainscope\": ";
  nlohmann::json meta = {
      {"kind", "trace"},          {"capture_id", captureId_}, {"job", identity_.job},
      {"rank", identity_.rank},   {"host", identity_.host},   {"pid", identity_.pid},
      {"start_step", start_},     {"steps", steps_},          {"history", history_},
      {"first_step", firstStep_}, {"last_step", lastStep_},   {"truncated", truncated_},
      {"detail", detail},
  };
  tail += meta.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  tail += "}\n";
  if (!error_.empty()) return fail(error_);
  if (Status s = file_.write(tail); !s) return fail(s.message());
  const std::string path = file_.path();
  if (Status s = file_.finish(); !s) return fail(s.message());
  active_ = false;
  struct stat st {};
  const uint64_t size = stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  wire::CommandStatus out = status(commandId_, wire::RankState::kUploading, std::move(detail));
  out.set_file_path(path);
  out.set_file_bytes(size);
  out.set_truncated(truncated_);
  out.set_first_step(firstStep_);
  out.set_last_step(lastStep_);
  return out;
}

}  // namespace trainscope::probe
