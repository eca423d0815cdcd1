// Whole-system robustness of ingest: malformed frames sent straight to the collector's
// ingest port are rejected and counted, and the collector keeps storing valid data.
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include <catch2/catch.hpp>
#include <zmq.hpp>

#include "schema/trainscope.pb.h"
#include "schema/wire.h"
#include "tests/e2e/harness.h"

using namespace trainscope;
using namespace trainscope::e2e;

namespace {

// Runs a small simulated job through `agentEndpoint` and waits for all its rows.
void runSmallJob(const TempDir& dir, uint16_t http, const std::string& agentEndpoint,
                 const std::string& job) {
  auto sim = startSim(dir,
                      {"--agent", agentEndpoint, "--job", job, "--ranks", "4", "--steps", "25",
                       "--fast", "--quiet"},
                      "simtrain-" + job);
  const auto rc = sim->wait(60s);
  INFO("simtrain log:\n" << sim->logTail());
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
  CHECK(waitFor([&] { return jobStepRows(http, job) == 100; }, 20s, 100ms));
}

std::string validBatchFrame() {
  wire::Envelope env;
  auto* batch = env.mutable_batch();
  batch->set_seq(1);
  auto* item = batch->add_items();
  auto* step = item->mutable_step();
  step->set_job("e2e-bad-frames-never-stored");
  step->set_rank(0);
  step->set_step(1);
  step->set_start_ns(1);
  step->set_end_ns(2);
  step->set_duration_ns(1);
  return wire::encode(env);
}

}  // namespace

TEST_CASE("e2e: bad frames to the ingest port are rejected and counted") {
  TempDir dir;
  auto [cs, as, collector, agent] = startOneNode(dir);

  runSmallJob(dir, cs.httpPort, as.endpoint, "e2e-before-bad");

  zmq::context_t ctx;
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::sndtimeo, 2000);
  dealer.connect(cs.ingest());

  std::mt19937 rng(42);
  std::string random(512, '\0');
  for (auto& c : random) c = static_cast<char>(rng());
  const std::string valid = validBatchFrame();
  const std::string truncated = valid.substr(0, valid.size() / 2);
  wire::Envelope future;
  future.mutable_ack()->set_seq(1);
  future.set_schema_version(wire::kSchemaVersion + 41);  // not through encode(): keeps it
  const std::string wrongVersion = future.SerializeAsString();
  wire::Envelope bodiless;
  bodiless.set_schema_version(wire::kSchemaVersion);
  const std::string empty = bodiless.SerializeAsString();
  const std::string oversized(wire::kMaxFrameBytes + 1024, 'x');

  const std::string* frames[] = {&random, &truncated, &wrongVersion, &empty, &oversized};
  for (int i = 0; i < 3; ++i) {
    for (const std::string* f : frames) {
      REQUIRE(dealer.send(zmq::buffer(*f), zmq::send_flags::none));
    }
  }
  // Several frames glued into one message (multipart) are not one envelope either.
  dealer.send(zmq::buffer(valid), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(valid), zmq::send_flags::none);

  // The collector may answer with ErrorReply; read what comes, it must decode.
  int replies = 0;
  std::string reasons;
  zmq::pollitem_t items[] = {{dealer.handle(), 0, ZMQ_POLLIN, 0}};
  while (zmq::poll(items, 1, std::chrono::milliseconds(1500)) > 0) {
    zmq::message_t m;
    if (!dealer.recv(m, zmq::recv_flags::dontwait)) break;
    auto env = wire::decode(m.data(), m.size());
    if (env && env->has_error()) {
      ++replies;
      reasons += env->error().reason() + " ";
    }
  }
  INFO("error replies: " << replies << " (" << reasons << ")");
  // Every bad frame is answered: the ROUTER knows the sender of each.
  CHECK(replies >= 15);

  // Still serving, earlier rows intact, a later valid run stored.
  REQUIRE(collector->running());
  CHECK(httpGet(cs.httpPort, "/healthz").status == 200);
  CHECK(jobStepRows(cs.httpPort, "e2e-before-bad") == 100);
  runSmallJob(dir, cs.httpPort, as.endpoint, "e2e-after-bad");
  CHECK(jobStepRows(cs.httpPort, "e2e-before-bad") == 100);
  CHECK(jobStepRows(cs.httpPort, "e2e-bad-frames-never-stored") <= 0);

  // Counted by reason: every bad kind is named in the ErrorReplies and counted in /metrics
  // (sent 3 times each; the oversized frame may also be counted as it is cut off).
  INFO("error reply reasons: " << reasons);
  for (const char* reason : {"malformed", "version", "oversized", "empty"}) {
    CHECK(reasons.find(reason) != std::string::npos);
  }
  auto metrics = httpGet(cs.httpPort, "/metrics");
  REQUIRE(metrics.status == 200);
  std::istringstream lines(metrics.body);
  std::string line;
  std::map<std::string, double> counted;
  while (std::getline(lines, line)) {
    if (line.rfind("trainscope_ingest_rejected_frames_total{", 0) != 0) continue;
    for (const char* reason : {"malformed", "version", "oversized", "empty"}) {
      if (line.find(std::string("reason=\"") + reason + "\"") != std::string::npos) {
        counted[reason] += std::stod(line.substr(line.find_last_of(' ') + 1));
      }
    }
  }
  INFO("/metrics:\n" << metrics.body.substr(0, 6000));
  for (const char* reason : {"malformed", "version", "oversized", "empty"}) {
    INFO("reason " << reason);
    CHECK(counted[reason] >= 3);
  }
}
