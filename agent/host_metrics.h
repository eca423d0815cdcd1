// HostSampler: reads host and per-rank process metrics from a proc filesystem rooted at a
// given path (a fixture tree in tests) and turns two successive readings into rates.
// Not thread-safe: one owner (the agent's event loop) calls sample().
//
// Sources: <root>/stat (CPU % of all cores over the interval, cpu count), <root>/meminfo
// (MemTotal, MemAvailable), <root>/loadavg (load1), <root>/net/dev (every interface, `lo`
// included, cumulative bytes and rates), <root>/<pid>/stat (utime+stime as % of one core,
// rss pages * page size). The first sample has zero rates. A file that is missing or
// unreadable leaves its fields zero and is logged once.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "schema/trainscope.pb.h"

namespace trainscope::agent {

// A registered rank whose process the sampler should watch.
struct WatchedProc {
  std::string job;
  uint32_t rank = 0;
  uint32_t pid = 0;
};

class HostSampler {
 public:
  // clockTicks and pageSize default to this machine's sysconf values; tests pass their own.
  explicit HostSampler(std::string procRoot, long clockTicks = 0, long pageSize = 0);

  // One sample at wall time `wallNs` (stamped into the message) and monotonic time `monoNs`
  // (used for rates). A process that was readable before and is gone now is reported once
  // with alive=false and then no more; one never readable is left out (it may live in
  // another pid namespace).
  wire::HostSample sample(const std::string& node, const std::vector<WatchedProc>& procs,
                          int64_t wallNs, int64_t monoNs);

 private:
  struct CpuTimes {
    uint64_t total = 0;
    uint64_t idle = 0;
  };
  struct NetTimes {
    uint64_t rx = 0;
    uint64_t tx = 0;
  };
  struct ProcPrev {
    uint64_t ticks = 0;  // utime + stime
    int64_t monoNs = 0;
    bool gone = false;  // reported alive=false already
  };

  bool readFile(const std::string& rel, std::string* out);

  std::string root_;
  long clockTicks_;
  long pageSize_;
  bool havePrev_ = false;
  int64_t prevMonoNs_ = 0;
  CpuTimes prevCpu_;
  std::map<std::string, NetTimes> prevNet_;
  std::map<uint32_t, ProcPrev> prevProc_;
};

}  // namespace trainscope::agent
