#include "agent/spool_writer.h"

#include "agent/internal.h"
#include "common/clock.h"
#include "schema/capture_state.h"
#include "schema/wire.h"

namespace trainscope::agent {

bool SpoolWriter::append(const std::vector<std::string>& records, int64_t nowMono) {
  if (records.empty()) return true;
  Status st = spool_.append(records);
  if (!st) {
    logProblem(LogLevel::kError,
               "cannot spool " + std::to_string(records.size()) + " items: " + st.message());
    return false;
  }
  if (onAppended) onAppended(nowMono);
  return true;
}

Status SpoolWriter::appendOne(const std::string& record, Spool::Evict evict, int64_t nowMono) {
  Status st = spool_.append(record, evict);
  if (st && onAppended) onAppended(nowMono);
  return st;
}

void SpoolWriter::commandStatus(const std::string& commandId, const std::string& job, uint32_t rank,
                                wire::RankState state, const std::string& detail) {
  wire::Envelope env;
  auto* cs = env.mutable_command_status();
  cs->set_command_id(commandId);
  cs->set_job(job);
  cs->set_rank(rank);
  wire::setCommandState(cs, state);
  cs->set_detail(detail);
  append({wire::encode(env)}, monotonicNowNs());
}

void SpoolWriter::logProblem(LogLevel level, const std::string& message) {
  log_.log(level, internal::kLog, message);
}

}  // namespace trainscope::agent
