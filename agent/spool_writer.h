// SpoolWriter: how the agent's parts add items to the spool. It appends, logs a refusal (rate
// limited), and tells the upstream part (through onAppended) that records wait to be sent.
// Owned by the agent's loop thread, which is the only thread that calls it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "agent/spool.h"
#include "common/log.h"
#include "common/status.h"
#include "schema/capture_state.h"

namespace trainscope::agent {

class SpoolWriter {
 public:
  explicit SpoolWriter(Spool& spool) : spool_(spool) {}

  // Appends serialized item envelopes with one write; false (logged) when the spool refused
  // them, so nothing of them is stored.
  bool append(const std::vector<std::string>& records, int64_t nowMono);
  // One record, with the spool's eviction choice (capture-file chunks must not evict); the
  // refusal is returned, not logged.
  Status appendOne(const std::string& record, Spool::Evict evict, int64_t nowMono);
  // A CommandStatus from the agent itself: a command it could not deliver, a file it could
  // not ship (docs/CAPTURE.md).
  void commandStatus(const std::string& commandId, const std::string& job, uint32_t rank,
                     wire::RankState state, const std::string& detail);
  // Logs a spool problem, at most one line per 5 s.
  void logProblem(LogLevel level, const std::string& message);

  Spool& spool() { return spool_; }
  const Spool& spool() const { return spool_; }

  // Called after every successful append with its monotonic time (the upstream part's
  // batch linger starts there).
  std::function<void(int64_t nowMono)> onAppended;

 private:
  Spool& spool_;
  RateLimitedLog log_{std::chrono::seconds(5)};
};

}  // namespace trainscope::agent
