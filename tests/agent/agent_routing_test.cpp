// An agent with two collectors (fake ones, tests/agent/relay_fakes.h): each job's steps go to
// the collector rendezvous hashing picks; when one collector goes away without acking, its
// jobs, including what it had not acked, go to the other; when it comes back its jobs return.
#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <zmq.hpp>

#include "agent/agent.h"
#include "agent/rendezvous.h"
#include "schema/wire.h"
#include "tests/agent/relay_fakes.h"
#include "tests/common/support.h"

namespace wire = trainscope::wire;
using namespace trainscope::agent::testing;  // NOLINT(google-build-using-namespace): the fakes
using trainscope::agent::AgentOptions;
using trainscope::agent::rendezvousOwner;

namespace {

using JobStep = std::pair<std::string, int64_t>;

const std::vector<std::string> kJobs = {"job-a", "job-b", "job-c", "job-d",
                                        "job-e", "job-f", "job-g", "job-h"};

// Pumps both collectors in turns (each answers its heartbeats) until `done` holds.
bool pumpBoth(FakeCollector& a, FakeCollector& b, const std::function<bool()>& done,
              int timeoutMs = 15000) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    a.pumpUntil([] { return false; }, 20);
    b.pumpUntil([] { return false; }, 20);
  }
  return true;
}

// Steps [from, to) of every job, one batch, rank = the job's index.
void sendSteps(FakeProbe& probe, uint64_t seq, int64_t from, int64_t to) {
  std::vector<wire::Envelope> items;
  for (int64_t s = from; s < to; ++s) {
    for (size_t j = 0; j < kJobs.size(); ++j) {
      items.push_back(stepItem(s, kJobs[j], static_cast<uint32_t>(j)));
    }
  }
  probe.sendItems(seq, items);
  REQUIRE(probe.awaitAck() == seq);
}

std::set<JobStep> received(const FakeCollector& c) {
  return {c.jobSteps.begin(), c.jobSteps.end()};
}

bool hasAll(const FakeCollector& c, const std::vector<std::string>& jobs, int64_t from,
            int64_t to) {
  const auto got = received(c);
  for (const auto& job : jobs) {
    for (int64_t s = from; s < to; ++s) {
      if (got.count({job, s}) == 0) return false;
    }
  }
  return true;
}

std::set<std::string> jobsIn(const FakeCollector& c, int64_t from, int64_t to) {
  std::set<std::string> out;
  for (const auto& [job, step] : c.jobSteps) {
    if (step >= from && step < to) out.insert(job);
  }
  return out;
}

}  // namespace

TEST_CASE(
    "agent with two collectors: jobs by rendezvous hashing, failover replays, ownership returns") {
  TempDir tmp;
  zmq::context_t ctx;
  const std::string epA = freeTcpEndpoint(ctx);
  const std::string epB = freeTcpEndpoint(ctx);
  AgentOptions opts = testOptions(tmp, epA);
  opts.collectors = {epA, epB};
  opts.collectorTimeoutMs = 600;

  std::vector<std::string> jobsOfA, jobsOfB;
  for (const auto& job : kJobs) {
    (rendezvousOwner(job, opts.collectors) == 0 ? jobsOfA : jobsOfB).push_back(job);
  }
  INFO("A owns " << jobsOfA.size() << " jobs, B " << jobsOfB.size());
  // The job names are fixed: the hashing gives each collector some of them.
  REQUIRE(!jobsOfA.empty());
  REQUIRE(!jobsOfB.empty());

  AgentRunner agent(opts);
  FakeProbe probe(ctx, opts.endpoint);
  probe.hello();
  FakeCollector b(ctx, epB);
  std::set<JobStep> seenByA;
  {
    // A takes its jobs' steps but never acks them: a crash before its commits.
    FakeCollector a(ctx, epA, /*ack=*/false);
    sendSteps(probe, 1, 0, 10);
    REQUIRE(pumpBoth(a, b, [&] { return hasAll(a, jobsOfA, 0, 10) && hasAll(b, jobsOfB, 0, 10); }));
    // Each collector got only its own jobs.
    CHECK(jobsIn(a, 0, 10) == std::set<std::string>(jobsOfA.begin(), jobsOfA.end()));
    CHECK(jobsIn(b, 0, 10) == std::set<std::string>(jobsOfB.begin(), jobsOfB.end()));
    CHECK(agent.stats().reroutes == 0);
    // What A holds unacked keeps the spool from being trimmed past it.
    CHECK(agent.stats().spoolPending > 0);
    seenByA = received(a);
  }  // A is gone: no acks, no heartbeat replies

  sendSteps(probe, 2, 10, 20);
  // After --collector-timeout-ms A's jobs move to B: what A never acked (0..9), and the new
  // steps; then the spool is empty.
  REQUIRE(b.pumpUntil([&] { return hasAll(b, kJobs, 0, 20) && agent.stats().spoolPending == 0; },
                      15000));
  CHECK(agent.stats().reroutes == 1);
  const auto stats = agent.stats();
  REQUIRE(stats.collectors.size() == 2);
  CHECK_FALSE(stats.collectors[0].up);
  CHECK(stats.collectors[1].up);

  // A comes back (acking now): its jobs return to it, B keeps only its own.
  FakeCollector a2(ctx, epA);
  REQUIRE(pumpBoth(a2, b, [&] { return agent.stats().reroutes == 2; }));
  sendSteps(probe, 3, 20, 30);
  REQUIRE(pumpBoth(a2, b, [&] {
    return hasAll(a2, jobsOfA, 20, 30) && hasAll(b, jobsOfB, 20, 30) &&
           agent.stats().spoolPending == 0;
  }));
  CHECK(jobsIn(a2, 20, 30) == std::set<std::string>(jobsOfA.begin(), jobsOfA.end()));
  CHECK(jobsIn(b, 20, 30) == std::set<std::string>(jobsOfB.begin(), jobsOfB.end()));
  CHECK(agent.stats().collectors[0].up);
}

TEST_CASE("agent with two collectors: a collector that never answers gets no job for long") {
  TempDir tmp;
  zmq::context_t ctx;
  const std::string epA = freeTcpEndpoint(ctx);  // nothing listens here
  const std::string epB = freeTcpEndpoint(ctx);
  AgentOptions opts = testOptions(tmp, epA);
  opts.collectors = {epA, epB};
  opts.collectorTimeoutMs = 400;
  AgentRunner agent(opts);
  FakeProbe probe(ctx, opts.endpoint);
  probe.hello();
  FakeCollector b(ctx, epB);
  sendSteps(probe, 1, 0, 5);
  // A counts as up for the first --collector-timeout-ms; then everything goes to B.
  REQUIRE(b.pumpUntil([&] { return hasAll(b, kJobs, 0, 5) && agent.stats().spoolPending == 0; },
                      15000));
  CHECK(agent.stats().reroutes == 1);
}
