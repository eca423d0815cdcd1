// One rank's timeline file of an import, in the per-rank capture format of docs/CAPTURE.md
// ({"traceEvents": [...], "trainscope": {...}}, gzip), so the collector's capture merge turns
// the ranks' files into one timeline. The file is kept under a size bound: past it the rest of
// the events are left out and a marker event says where the cut was. One owner thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "agent/probe/gzip_writer.h"
#include "common/status.h"

namespace trainscope::importer {

// Nanoseconds as the fractional microseconds of Chrome traces ("1700000000123456.789").
void appendMicros(std::string& out, int64_t ns);

class TimelineWriter {
 public:
  // Creates `path`. `maxBytes` bounds the compressed file (0: no bound).
  Status open(const std::string& path, uint32_t rank, uint64_t maxBytes);
  // Appends one event (a JSON object). False once the bound was reached: this event and every
  // later one are left out, and a marker at `tNs` records the cut.
  bool write(std::string_view event, int64_t tNs);
  // Writes {"trainscope": meta} after the events and closes the file.
  Status finish(const nlohmann::json& meta);
  // Closes and removes an unfinished file.
  void abandon();

  bool truncated() const { return truncated_; }
  uint64_t events() const { return events_; }
  const std::string& path() const { return out_.path(); }
  // The first write error, if any (later writes are then ignored).
  const std::string& error() const { return error_; }

 private:
  probe::GzipWriter out_;
  uint32_t rank_ = 0;
  uint64_t maxBytes_ = 0;
  uint64_t events_ = 0;
  bool truncated_ = false;
  std::string error_;
};

}  // namespace trainscope::importer
