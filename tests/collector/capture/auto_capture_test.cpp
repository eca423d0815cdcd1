// The automatic-capture policy (collector/capture/auto_capture.h): an open anomaly waits its
// decision window and is dropped if it resolves meanwhile; of the candidates, the most
// important (estimated gain x confidence) takes the capture, not the first; an anomaly of tiny
// estimated effect takes none; within the interval the budget holds and only a clearly more
// important anomaly takes another; hangs have their own budget; refreshes and resolutions of
// a decided anomaly change nothing.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "collector/capture/auto_capture.h"

using trainscope::capture::anomalyScore;
using trainscope::capture::AutoCaptureOptions;
using trainscope::capture::AutoCapturePolicy;
namespace storage = trainscope::storage;

namespace {

constexpr int64_t kSec = 1'000'000'000;

storage::AnomalyRow anomaly(const std::string& id, double gain, double confidence = 1.0,
                            const std::string& kind = "straggler") {
  storage::AnomalyRow a;
  a.id = id;
  a.job = "j";
  a.kind = kind;
  a.confidence = confidence;
  a.evidence["estimated_gain"] = gain;
  return a;
}

std::vector<std::string> ids(const std::vector<storage::AnomalyRow>& rows) {
  std::vector<std::string> out;
  out.reserve(rows.size());
  for (const auto& r : rows) out.push_back(r.id);
  return out;
}

}  // namespace

TEST_CASE("auto capture: the most important candidate after the window takes it, not the first") {
  AutoCapturePolicy p(AutoCaptureOptions{});
  p.offer(anomaly("false-alarm", 0.05), 0);
  p.offer(anomaly("real-fault", 0.30), kSec / 2);
  CHECK(p.due(kSec / 2).empty());  // the window of neither passed
  // The first one's window passed, the second's not yet: nothing is due but the first.
  auto due = p.due(kSec);
  REQUIRE(ids(due) == std::vector<std::string>{"false-alarm"});
  // Had the caller not started it (say, a capture still ran on its ranks), the next call
  // weighs both: the real fault first.
  due = p.due(2 * kSec);
  REQUIRE(ids(due) == std::vector<std::string>{"real-fault"});
  p.started(due.front(), 2 * kSec);
  // The false alarm is not clearly more important than the captured fault: dropped.
  CHECK(p.due(3 * kSec).empty());
  CHECK(p.skips().notBetter == 1);
  CHECK(p.candidates() == 0);
}

TEST_CASE("auto capture: an anomaly that resolves within its window takes none") {
  AutoCapturePolicy p(AutoCaptureOptions{});
  auto a = anomaly("blip", 0.2);
  p.offer(a, 0);
  a.state = storage::AnomalyState::kResolved;
  p.offer(a, kSec / 2);
  CHECK(p.due(2 * kSec).empty());
  CHECK(p.skips().resolved == 1);
  auto b = anomaly("job-ended", 0.2);
  p.offer(b, 0);
  b.state = storage::AnomalyState::kEnded;
  p.offer(b, kSec / 2);
  CHECK(p.due(2 * kSec).empty());
  CHECK(p.skips().resolved == 2);
}

TEST_CASE("auto capture: an anomaly of tiny estimated effect takes none, a hang always may") {
  AutoCapturePolicy p(AutoCaptureOptions{});
  // A faster job (its step_shift's gain clamps to 0) and a 1.15x operator adding 0.05 % of a
  // step: neither is worth a trace.
  auto faster = anomaly("faster", 0.0, 1.0, "step_shift");
  faster.magnitude = 0.8;
  p.offer(faster, 0);
  p.offer(anomaly("tiny-op", 0.0005, 1.0, "op_regression"), 0);
  CHECK(p.due(2 * kSec).empty());
  CHECK(p.skips().smallGain == 2);
  auto hang = anomaly("hang", 1.0, 1.0, "hang");
  p.offer(hang, 0);
  CHECK(ids(p.due(2 * kSec)) == std::vector<std::string>{"hang"});
  // Without estimated_gain the slowdown ratio stands in for it.
  storage::AnomalyRow old;
  old.id = "no-gain";
  old.job = "j";
  old.kind = "straggler";
  old.magnitude = 1.4;
  old.confidence = 1.0;
  CHECK(anomalyScore(old) == Approx(0.4));
}

TEST_CASE("auto capture: the budget per interval holds; a clearly better anomaly takes one") {
  AutoCaptureOptions o;
  o.budget = 2;
  o.intervalNs = 100 * kSec;
  AutoCapturePolicy p(o);
  auto first = anomaly("a", 0.10);
  p.offer(first, 0);
  auto due = p.due(kSec);
  REQUIRE(ids(due) == std::vector<std::string>{"a"});
  p.started(due.front(), kSec);
  // 1.5x as important: not clearly better.
  p.offer(anomaly("b", 0.15), 2 * kSec);
  CHECK(p.due(4 * kSec).empty());
  CHECK(p.skips().notBetter == 1);
  // 3x as important: a second capture within the interval.
  p.offer(anomaly("c", 0.30), 5 * kSec);
  due = p.due(7 * kSec);
  REQUIRE(ids(due) == std::vector<std::string>{"c"});
  p.started(due.front(), 7 * kSec);
  // The budget of 2 is spent, however important the next one is.
  p.offer(anomaly("d", 0.99), 8 * kSec);
  CHECK(p.due(10 * kSec).empty());
  CHECK(p.skips().budget == 1);
  // Stack dumps for hangs count on their own.
  p.offer(anomaly("h", 1.0, 1.0, "hang"), 8 * kSec);
  CHECK(ids(p.due(10 * kSec)) == std::vector<std::string>{"h"});
  // Once the interval after the first capture passed, one slot is free again: any anomaly
  // above the floor takes it only if it beats the capture still inside the window (c).
  p.offer(anomaly("e", 0.10), 102 * kSec);
  CHECK(p.due(104 * kSec).empty());
  CHECK(p.skips().notBetter == 2);
  p.offer(anomaly("f", 0.10), 110 * kSec);
  CHECK(ids(p.due(112 * kSec)) == std::vector<std::string>{"f"});  // both spent ones expired
}

TEST_CASE("auto capture: a decided anomaly's refreshes make it no candidate again") {
  AutoCapturePolicy p(AutoCaptureOptions{});
  auto a = anomaly("a", 0.2);
  p.offer(a, 0);
  auto due = p.due(kSec);
  REQUIRE(due.size() == 1);
  p.started(due.front(), kSec);
  // A refresh carries no capture id (the store keeps the one set): still no second capture,
  // even after the interval.
  a.evidence["estimated_gain"] = 0.9;
  p.offer(a, 700 * kSec);
  CHECK(p.due(702 * kSec).empty());
  CHECK(p.candidates() == 0);
  // Passed over for its small effect: a refresh with a larger one does not reopen it either.
  auto small = anomaly("small", 0.001);
  p.offer(small, 800 * kSec);
  CHECK(p.due(802 * kSec).empty());
  small.evidence["estimated_gain"] = 0.5;
  p.offer(small, 803 * kSec);
  CHECK(p.candidates() == 0);
}

TEST_CASE("auto capture: off when the interval is 0") {
  AutoCaptureOptions o;
  o.intervalNs = 0;
  AutoCapturePolicy p(o);
  p.offer(anomaly("a", 0.5), 0);
  CHECK(p.candidates() == 0);
  CHECK(p.due(10 * kSec).empty());
}
