// The bound on the jobs one sender may start (job_limiter.h), applied to the items that name a
// job. Socket thread.
#include <string>

#include "collector/ingest/ingest_impl.h"
#include "common/clock.h"

namespace trainscope::ingest {

std::optional<Rejection> IngestServer::Impl::newJobRefused(const Peer& peer,
                                                           const wire::Envelope& item) {
  switch (item.body_case()) {
    case wire::Envelope::kStep:
      return newJobRefused(peer, item.step().job());
    case wire::Envelope::kRankHello:
      return newJobRefused(peer, item.rank_hello().rank().job());
    case wire::Envelope::kRankGoodbye:
      return newJobRefused(peer, item.rank_goodbye().job());
    default:
      return std::nullopt;
  }
}

std::optional<Rejection> IngestServer::Impl::newJobRefused(const Peer& peer,
                                                           const std::string& job) {
  if (job.empty()) return std::nullopt;  // validation names that
  // The sender by what it cannot choose freely: its key's node with CURVE, else its address
  // (a routing id or node name is the peer's own to pick, a fresh bucket per reconnect).
  const std::string& sender = !peer.keyNode.empty()   ? peer.keyNode
                              : !peer.address.empty() ? peer.address
                                                      : peer.id;
  if (newJobs.admit(sender, job, monotonicNowNs())) return std::nullopt;
  return Rejection{"too_many_new_jobs",
                   "sender " + describe(peer) + " started more than " +
                       std::to_string(static_cast<int>(options.newJobs.burst)) +
                       " jobs, then more than " + std::to_string(options.newJobs.perSecond) +
                       " a second (job " + job + ")"};
}

}  // namespace trainscope::ingest
