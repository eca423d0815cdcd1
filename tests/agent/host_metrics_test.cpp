#include "agent/host_metrics.h"

#include <filesystem>
#include <string>

#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/common/support.h"

using trainscope::agent::HostSampler;
using trainscope::agent::WatchedProc;
using trainscope::tests::TempDir;

namespace {

const char* kNetHeader =
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs "
    "drop fifo colls carrier compressed\n";

std::string netLine(const std::string& iface, uint64_t rx, uint64_t tx) {
  return "  " + iface + ": " + std::to_string(rx) + " 10 0 0 0 0 0 0 " + std::to_string(tx) +
         " 20 0 0 0 0 0 0\n";
}

// /proc/<pid>/stat with a command name holding spaces and parentheses.
std::string pidStat(uint32_t pid, uint64_t utime, uint64_t stime, uint64_t rssPages) {
  std::string s = std::to_string(pid) + " (python3 (rank 0)) S 1 1 1 0 -1 4194560 100 0 0 0 ";
  s += std::to_string(utime) + " " + std::to_string(stime) + " 0 0 20 0 8 0 12345 1000000 ";
  s += std::to_string(rssPages) + " 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0\n";
  return s;
}

void writeHost(const TempDir& t, uint64_t user, uint64_t system, uint64_t idle, uint64_t iowait,
               uint64_t ethRx, uint64_t ethTx) {
  t.write("proc/stat", "cpu  " + std::to_string(user) + " 0 " + std::to_string(system) + " " +
                           std::to_string(idle) + " " + std::to_string(iowait) +
                           " 0 0 0 0 0\n"
                           "cpu0 1 0 1 1 0 0 0 0 0 0\ncpu1 1 0 1 1 0 0 0 0 0 0\n"
                           "cpu2 1 0 1 1 0 0 0 0 0 0\ncpu3 1 0 1 1 0 0 0 0 0 0\n"
                           "intr 12345\nctxt 999\nbtime 1700000000\n");
  t.write("proc/meminfo",
          "MemTotal:       16384000 kB\nMemFree:         1000000 kB\n"
          "MemAvailable:    8192000 kB\nBuffers:          10000 kB\n");
  t.write("proc/loadavg", "1.50 0.75 0.25 2/300 4242\n");
  t.write("proc/net/dev",
          std::string(kNetHeader) + netLine("lo", 500, 500) + netLine("eth0", ethRx, ethTx));
}

}  // namespace

TEST_CASE(
    "host metrics come from the proc tree the sampler is given, with rates over two samples") {
  TempDir t;
  const int64_t sec = 1'000'000'000;
  writeHost(t, 1000, 500, 8000, 500, 1'000'000, 2'000'000);
  t.write("proc/4242/stat", pidStat(4242, 300, 100, 2560));
  HostSampler sampler(t.sub("proc"), /*clockTicks=*/100, /*pageSize=*/4096);
  std::vector<WatchedProc> procs{{"jobA", 3, 4242}};

  auto first = sampler.sample("node-1", procs, 42, 10 * sec);
  CHECK(first.node() == "node-1");
  CHECK(first.time_ns() == 42);
  CHECK(first.cpu_count() == 4);
  CHECK(first.cpu_percent() == 0.0);  // no interval yet
  CHECK(first.mem_total_bytes() == 16384000ull * 1024);
  CHECK(first.mem_available_bytes() == 8192000ull * 1024);
  CHECK(first.load1() == Approx(1.5));
  REQUIRE(first.net_size() == 2);
  CHECK(first.net(1).iface() == "eth0");
  CHECK(first.net(1).rx_bytes() == 1'000'000);
  CHECK(first.net(1).tx_bytes() == 2'000'000);
  CHECK(first.net(1).rx_bps() == 0.0);
  REQUIRE(first.procs_size() == 1);
  CHECK(first.procs(0).alive());
  CHECK(first.procs(0).rss_bytes() == 2560ull * 4096);
  CHECK(first.procs(0).cpu_percent() == 0.0);

  // Two seconds later: 400 busy and 600 idle jiffies (40 %); eth0 moved 2 MB in and 1 MB
  // out; the rank used 150 ticks of CPU = 1.5 s over 2 s = 75 % of one core.
  writeHost(t, 1300, 600, 8500, 600, 3'000'000, 3'000'000);
  t.write("proc/4242/stat", pidStat(4242, 400, 150, 3000));
  auto second = sampler.sample("node-1", procs, 43, 12 * sec);
  CHECK(second.cpu_percent() == Approx(40.0));
  REQUIRE(second.net_size() == 2);
  CHECK(second.net(0).iface() == "lo");
  CHECK(second.net(0).rx_bps() == 0.0);
  CHECK(second.net(1).rx_bps() == Approx(1'000'000.0));
  CHECK(second.net(1).tx_bps() == Approx(500'000.0));
  REQUIRE(second.procs_size() == 1);
  CHECK(second.procs(0).job() == "jobA");
  CHECK(second.procs(0).rank() == 3);
  CHECK(second.procs(0).pid() == 4242);
  CHECK(second.procs(0).cpu_percent() == Approx(75.0));
  CHECK(second.procs(0).rss_bytes() == 3000ull * 4096);

  // The process exits: reported dead once, then left out.
  std::filesystem::remove_all(t.sub("proc/4242"));
  auto third = sampler.sample("node-1", procs, 44, 13 * sec);
  REQUIRE(third.procs_size() == 1);
  CHECK_FALSE(third.procs(0).alive());
  CHECK(third.procs(0).rank() == 3);
  auto fourth = sampler.sample("node-1", procs, 45, 14 * sec);
  CHECK(fourth.procs_size() == 0);
}

TEST_CASE("host metrics leave out a process never visible and survive missing files") {
  TempDir t;
  t.write("proc/stat", "cpu  1 0 1 1 0 0 0 0 0 0\ncpu0 1 0 1 1 0 0 0 0 0 0\n");
  HostSampler sampler(t.sub("proc"), 100, 4096);
  auto s = sampler.sample("n", {{"job", 0, 999999}}, 1, 1);
  CHECK(s.procs_size() == 0);
  CHECK(s.cpu_count() == 1);
  CHECK(s.mem_total_bytes() == 0);
  CHECK(s.net_size() == 0);
}

TEST_CASE("host metrics give no rate when a counter goes backwards") {
  TempDir t;
  const int64_t sec = 1'000'000'000;
  writeHost(t, 100, 100, 100, 0, 5'000'000, 5'000'000);
  HostSampler sampler(t.sub("proc"), 100, 4096);
  (void)sampler.sample("n", {}, 1, sec);
  writeHost(t, 200, 100, 200, 0, 1'000, 6'000'000);  // eth0 rx reset
  auto s = sampler.sample("n", {}, 2, 2 * sec);
  REQUIRE(s.net_size() == 2);
  CHECK(s.net(1).rx_bps() == 0.0);
  CHECK(s.net(1).tx_bps() == Approx(1'000'000.0));
  CHECK(s.cpu_percent() == Approx(50.0));
}

TEST_CASE("host metrics read this machine's real /proc") {
  HostSampler sampler("/proc");
  auto s = sampler.sample("self", {{"job", 0, static_cast<uint32_t>(::getpid())}}, 1, 1);
  CHECK(s.cpu_count() >= 1);
  CHECK(s.mem_total_bytes() > 0);
  REQUIRE(s.procs_size() == 1);
  CHECK(s.procs(0).alive());
  CHECK(s.procs(0).rss_bytes() > 0);
}
