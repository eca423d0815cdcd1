// Rendezvous hashing (agent/rendezvous.h): every agent picks the same collector for a job, a
// collector that goes away gives up only its own jobs, one that comes back or is added takes
// only jobs that then move to it, and the jobs spread over the collectors.
#include "agent/rendezvous.h"

#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

using trainscope::agent::rendezvousOwner;
using trainscope::agent::rendezvousWeight;

namespace {

std::vector<std::string> jobNames(int n) {
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out.push_back("job-" + std::to_string(i));
  return out;
}

const std::vector<std::string> kThree = {"tcp://c0:7601", "tcp://c1:7601", "tcp://c2:7601"};

}  // namespace

TEST_CASE("rendezvous: the same key and collectors always give the same owner") {
  for (const auto& job : jobNames(200)) {
    const size_t owner = rendezvousOwner(job, kThree);
    REQUIRE(owner < kThree.size());
    CHECK(rendezvousOwner(job, kThree) == owner);
    CHECK(rendezvousOwner(job, kThree, {true, true, true}) == owner);
    // The weight is a function of (key, collector) alone: the list's order does not matter.
    const std::vector<std::string> reversed(kThree.rbegin(), kThree.rend());
    CHECK(reversed[rendezvousOwner(job, reversed)] == kThree[owner]);
  }
  CHECK(rendezvousWeight("ab", "c") != rendezvousWeight("a", "bc"));
  CHECK(rendezvousOwner("job", kThree, {false, false, false}) == kThree.size());
  CHECK(rendezvousOwner("job", {}) == 0);
}

TEST_CASE("rendezvous: jobs spread over the collectors") {
  std::map<size_t, int> count;
  for (const auto& job : jobNames(3000)) ++count[rendezvousOwner(job, kThree)];
  REQUIRE(count.size() == 3);
  for (const auto& [owner, n] : count) {
    INFO("collector " << owner << " owns " << n << " of 3000");
    CHECK(n > 800);  // an even share is 1000
    CHECK(n < 1200);
  }
}

TEST_CASE("rendezvous: a collector going away moves only its jobs, and they come back to it") {
  const auto jobs = jobNames(3000);
  for (size_t gone = 0; gone < kThree.size(); ++gone) {
    std::vector<bool> up(kThree.size(), true);
    up[gone] = false;
    int moved = 0;
    std::map<size_t, int> movedTo;
    for (const auto& job : jobs) {
      const size_t before = rendezvousOwner(job, kThree);
      const size_t after = rendezvousOwner(job, kThree, up);
      REQUIRE(after != gone);
      if (before != gone) {
        CHECK(after == before);  // not its job: stays
      } else {
        ++moved;
        ++movedTo[after];
      }
      CHECK(rendezvousOwner(job, kThree) == before);  // all up again: back where it was
    }
    INFO("collector " << gone << " gone: " << moved << " jobs moved");
    CHECK(moved > 800);
    // Its jobs spread over the others, not all onto one.
    REQUIRE(movedTo.size() == 2);
    for (const auto& [to, n] : movedTo) CHECK(n > moved / 4);
  }
}

TEST_CASE("rendezvous: adding a collector moves jobs only onto it, about a fair share") {
  const auto jobs = jobNames(3000);
  std::vector<std::string> four = kThree;
  four.push_back("tcp://c3:7601");
  int moved = 0;
  for (const auto& job : jobs) {
    const size_t before = rendezvousOwner(job, kThree);
    const size_t after = rendezvousOwner(job, four);
    if (after != before) {
      CHECK(after == 3);
      ++moved;
    }
  }
  INFO(moved << " of 3000 jobs moved to the new collector");
  CHECK(moved > 600);  // a fair share is 750
  CHECK(moved < 900);
}
