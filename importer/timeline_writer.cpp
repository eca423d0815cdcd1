#include "importer/timeline_writer.h"

#include <charconv>

namespace trainscope::importer {
namespace {

// Room kept for the marker and the closing trailer, so a cut file still fits its bound.
constexpr uint64_t kReserveBytes = 4096;
// Flushing this often keeps the compressed size known closely enough for the bound.
constexpr uint64_t kFlushEvery = 1u << 20;

std::string boundText(uint64_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

}  // namespace

void appendMicros(std::string& out, int64_t ns) {
  if (ns < 0) {
    out.push_back('-');
    ns = -ns;
  }
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof(buf), ns / 1000);
  out.append(buf, res.ptr);
  const int64_t frac = ns % 1000;
  out.push_back('.');
  out.push_back(static_cast<char>('0' + frac / 100));
  out.push_back(static_cast<char>('0' + (frac / 10) % 10));
  out.push_back(static_cast<char>('0' + frac % 10));
}

Status TimelineWriter::open(const std::string& path, uint32_t rank, uint64_t maxBytes) {
  rank_ = rank;
  maxBytes_ = maxBytes;
  if (Status s = out_.open(path); !s) return s;
  return out_.write("{\"traceEvents\": [\n");
}

bool TimelineWriter::write(std::string_view event, int64_t tNs) {
  if (truncated_ || !error_.empty()) return false;
  if (maxBytes_ > 0) {
    const uint64_t pending =
        probe::GzipWriter::worstCaseBytes(out_.unflushedBytes() + event.size());
    if (out_.compressedBytes() + pending + kReserveBytes > maxBytes_) {
      truncated_ = true;
      std::string marker = events_ > 0 ? ",\n" : "";
      marker += "{\"name\": \"trainscope: timeline cut at the " + boundText(maxBytes_) +
                " bound (step rows cover the whole file)\", \"ph\": \"i\", \"s\": \"g\", \"ts\": ";
      appendMicros(marker, tNs);
      marker += ", \"pid\": " + std::to_string(rank_) + "}";
      if (Status s = out_.write(marker); !s) error_ = s.message();
      return false;
    }
  }
  Status s = events_ > 0 ? out_.write(",\n") : Status::ok();
  if (s) s = out_.write(event);
  if (s && out_.unflushedBytes() >= kFlushEvery) s = out_.flush();
  if (!s) {
    error_ = s.message();
    return false;
  }
  ++events_;
  return true;
}

Status TimelineWriter::finish(const nlohmann::json& meta) {
  if (!error_.empty()) return Status::error(error_);
  std::string tail = "\n], \"trainscope\": ";
  tail += meta.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  tail += "}\n";
  if (Status s = out_.write(tail); !s) return s;
  return out_.finish();
}

void TimelineWriter::abandon() {
  out_.abandon();
}

}  // namespace trainscope::importer
