#include "agent/host_metrics.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include <unistd.h>

#include "common/log.h"

namespace trainscope::agent {
namespace {

constexpr std::string_view kLog = "host";

// Splits on whitespace.
std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  std::string f;
  while (in >> f) out.push_back(f);
  return out;
}

uint64_t toU64(const std::string& s) {
  return std::strtoull(s.c_str(), nullptr, 10);
}

}  // namespace

HostSampler::HostSampler(std::string procRoot, long clockTicks, long pageSize)
    : root_(std::move(procRoot)),
      clockTicks_(clockTicks > 0 ? clockTicks : sysconf(_SC_CLK_TCK)),
      pageSize_(pageSize > 0 ? pageSize : sysconf(_SC_PAGESIZE)) {
  if (clockTicks_ <= 0) clockTicks_ = 100;
  if (pageSize_ <= 0) pageSize_ = 4096;
}

bool HostSampler::readFile(const std::string& rel, std::string* out) {
  std::ifstream in(root_ + "/" + rel);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

wire::HostSample HostSampler::sample(const std::string& node, const std::vector<WatchedProc>& procs,
                                     int64_t wallNs, int64_t monoNs) {
  wire::HostSample s;
  s.set_node(node);
  s.set_time_ns(wallNs);
  double dtSec = havePrev_ && monoNs > prevMonoNs_ ? (monoNs - prevMonoNs_) / 1e9 : 0.0;
  std::string text;

  // /proc/stat: "cpu  user nice system idle iowait irq softirq steal guest guest_nice"
  if (readFile("stat", &text)) {
    std::istringstream in(text);
    std::string line;
    uint32_t cpus = 0;
    CpuTimes now;
    bool found = false;
    while (std::getline(in, line)) {
      if (line.rfind("cpu", 0) != 0) continue;
      if (line.size() > 3 && line[3] != ' ') {
        ++cpus;
        continue;
      }
      auto f = fields(line);
      // guest and guest_nice are already inside user and nice; leave them out of the total.
      for (size_t i = 1; i < f.size() && i <= 8; ++i) now.total += toU64(f[i]);
      if (f.size() > 4) now.idle += toU64(f[4]);
      if (f.size() > 5) now.idle += toU64(f[5]);
      found = true;
    }
    s.set_cpu_count(cpus);
    if (found) {
      if (havePrev_ && now.total > prevCpu_.total && now.idle >= prevCpu_.idle) {
        uint64_t dTotal = now.total - prevCpu_.total;
        uint64_t dIdle = now.idle - prevCpu_.idle;
        double busy = dIdle >= dTotal ? 0.0 : static_cast<double>(dTotal - dIdle);
        s.set_cpu_percent(100.0 * busy / static_cast<double>(dTotal));
      }
      prevCpu_ = now;
    }
  } else {
    logOnce(LogLevel::kWarn, kLog, "stat", "cannot read " + root_ + "/stat; CPU % left at 0");
  }

  if (readFile("meminfo", &text)) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      auto f = fields(line);
      if (f.size() < 2) continue;
      uint64_t mult = f.size() > 2 && f[2] == "kB" ? 1024 : 1;
      if (f[0] == "MemTotal:") s.set_mem_total_bytes(toU64(f[1]) * mult);
      if (f[0] == "MemAvailable:") s.set_mem_available_bytes(toU64(f[1]) * mult);
    }
  } else {
    logOnce(LogLevel::kWarn, kLog, "meminfo", "cannot read " + root_ + "/meminfo");
  }

  if (readFile("loadavg", &text)) {
    s.set_load1(std::strtod(text.c_str(), nullptr));
  } else {
    logOnce(LogLevel::kWarn, kLog, "loadavg", "cannot read " + root_ + "/loadavg");
  }

  // /proc/net/dev: two header lines, then "iface: rx_bytes rx_packets ... (8 rx) tx_bytes ...".
  if (readFile("net/dev", &text)) {
    std::istringstream in(text);
    std::string line;
    std::map<std::string, NetTimes> now;
    while (std::getline(in, line)) {
      auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      auto nameFields = fields(line.substr(0, colon));
      if (nameFields.size() != 1) continue;
      auto f = fields(line.substr(colon + 1));
      if (f.size() < 9) continue;
      const std::string& iface = nameFields[0];
      NetTimes cur{toU64(f[0]), toU64(f[8])};
      auto* ns = s.add_net();
      ns->set_iface(iface);
      ns->set_rx_bytes(cur.rx);
      ns->set_tx_bytes(cur.tx);
      auto it = prevNet_.find(iface);
      if (dtSec > 0 && it != prevNet_.end()) {
        // A counter that went backwards (interface reset) gives no rate this time.
        if (cur.rx >= it->second.rx) ns->set_rx_bps((cur.rx - it->second.rx) / dtSec);
        if (cur.tx >= it->second.tx) ns->set_tx_bps((cur.tx - it->second.tx) / dtSec);
      }
      now[iface] = cur;
    }
    prevNet_ = std::move(now);
  } else {
    logOnce(LogLevel::kWarn, kLog, "netdev", "cannot read " + root_ + "/net/dev");
  }

  std::set<uint32_t> watched;
  for (const auto& p : procs) {
    watched.insert(p.pid);
    auto prev = prevProc_.find(p.pid);
    if (!readFile(std::to_string(p.pid) + "/stat", &text)) {
      if (prev != prevProc_.end() && !prev->second.gone) {
        auto* ps = s.add_procs();
        ps->set_job(p.job);
        ps->set_rank(p.rank);
        ps->set_pid(p.pid);
        ps->set_alive(false);
        prev->second.gone = true;
      } else if (prev == prevProc_.end()) {
        logOnce(LogLevel::kInfo, kLog, "pid" + std::to_string(p.pid),
                "process " + std::to_string(p.pid) + " of rank " + std::to_string(p.rank) +
                    " is not visible under " + root_ +
                    " (another pid namespace?); not sampling it");
      }
      continue;
    }
    // The command name sits in parentheses and may hold spaces; fields count from after it.
    auto close = text.rfind(')');
    if (close == std::string::npos) continue;
    auto f = fields(text.substr(close + 1));
    // f[0] is field 3 (state): utime is field 14, stime 15, rss 24.
    if (f.size() < 22) continue;
    uint64_t ticks = toU64(f[11]) + toU64(f[12]);
    uint64_t rssPages = toU64(f[21]);
    auto* ps = s.add_procs();
    ps->set_job(p.job);
    ps->set_rank(p.rank);
    ps->set_pid(p.pid);
    ps->set_alive(true);
    ps->set_rss_bytes(rssPages * static_cast<uint64_t>(pageSize_));
    if (prev != prevProc_.end() && !prev->second.gone && monoNs > prev->second.monoNs &&
        ticks >= prev->second.ticks) {
      double cpuSec = static_cast<double>(ticks - prev->second.ticks) / clockTicks_;
      ps->set_cpu_percent(100.0 * cpuSec / ((monoNs - prev->second.monoNs) / 1e9));
    }
    prevProc_[p.pid] = ProcPrev{ticks, monoNs, false};
  }
  // Forget processes no longer registered, so a reused pid starts fresh.
  for (auto it = prevProc_.begin(); it != prevProc_.end();) {
    it = watched.count(it->first) ? std::next(it) : prevProc_.erase(it);
  }

  havePrev_ = true;
  prevMonoNs_ = monoNs;
  return s;
}

}  // namespace trainscope::agent
