// Ingest bounds the jobs one sender may start (collector/ingest/job_limiter.h): a flood of new
// job names from one sender is refused past the burst and counted as too_many_new_jobs, while
// a job already running goes on being stored.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/collector/ingest/ingest_fixture.h"

using namespace trainscope;
using namespace trainscope::ingest::testing;

TEST_CASE("ingest: a sender making jobs by the thousand is refused past its burst, counted") {
  Fixture f;
  Client c(f.ctx, f.server->endpoint());
  c.send(batchFrame(1, {report("legit", 0, 0)}));
  REQUIRE(c.recvKind(wire::Envelope::kAck));

  Client flood(f.ctx, f.server->endpoint());
  std::vector<wire::StepReport> steps;
  steps.reserve(1000);
  for (int i = 0; i < 1000; ++i) steps.push_back(report("flood-" + std::to_string(i), 0, 0));
  flood.send(batchFrame(1, steps));
  auto err = flood.recvKind(wire::Envelope::kError);
  REQUIRE(err);
  CHECK(err->error().reason() == "too_many_new_jobs");
  REQUIRE(flood.recvKind(wire::Envelope::kAck));
  // The default burst is 200 new jobs, one of them spent on "legit" (both clients are one
  // sender, 127.0.0.1); the rate adds a fraction of one while the batch is read.
  const uint64_t refused = f.rejects("too_many_new_jobs");
  CHECK(refused >= 790);
  CHECK(refused <= 801);

  // The running job is no new job: still stored.
  c.send(batchFrame(2, {report("legit", 0, 1)}));
  REQUIRE(c.recvKind(wire::Envelope::kAck));
  CHECK(f.rows("legit") == 2);
  auto jobs = f.store->jobs();
  REQUIRE(jobs);
  CHECK(jobs->size() == 1 + (1000 - refused));
}
