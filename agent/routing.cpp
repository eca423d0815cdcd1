#include "agent/routing.h"

#include <algorithm>
#include <limits>

#include "agent/internal.h"
#include "agent/rendezvous.h"
#include "common/log.h"

namespace trainscope::agent {
using namespace internal;  // NOLINT(google-build-using-namespace): the agent's own constants

namespace {

// Keys whose owner is remembered: more jobs than one agent sees at once.
constexpr size_t kMaxCachedOwners = 4096;

// Whether a spooled record is a HostSample envelope. Those are the agent's own (takeSample),
// encoded by wire::encode in field order: schema_version (field 1, a varint), then the body,
// whose tag for HostSample is field 13, length-delimited (0x6a).
bool isHostSample(std::string_view record) {
  size_t i = 0;
  if (i < record.size() && static_cast<uint8_t>(record[i]) == 0x08) {
    ++i;
    while (i < record.size() && (static_cast<uint8_t>(record[i]) & 0x80) != 0) ++i;
    ++i;
  }
  return i < record.size() && static_cast<uint8_t>(record[i]) == 0x6a;
}

}  // namespace

Routing::Routing(zmq::context_t& ctx, const AgentOptions& opts, SpoolWriter& spool)
    : opts_(opts), spool_(spool), up_(opts.collectors.size(), true) {
  for (size_t i = 0; i < opts.collectors.size(); ++i) {
    auto link = std::make_unique<Upstream>(ctx, opts, spool, opts.collectors[i]);
    link->onCommand = [this](const wire::Command& cmd) {
      if (onCommand) onCommand(cmd);
    };
    link->rankCount = [this] { return rankCount ? rankCount() : 0; };
    link->onAcked = [this] { ackSpool(); };
    if (opts.collectors.size() > 1) {
      link->owns = [this, i](std::string_view record) { return owns(i, record); };
    }
    links_.push_back(std::move(link));
  }
}

Status Routing::connect(int64_t now) {
  for (auto& link : links_) {
    if (Status st = link->connect(now); !st) return st;
  }
  return Status::ok();
}

void Routing::addPollItems(std::vector<zmq_pollitem_t>& items) {
  for (auto& link : links_) {
    items.push_back({link->handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({link->monitorHandle(), 0, ZMQ_POLLIN, 0});
  }
}

void Routing::handlePolled(const zmq_pollitem_t* items, int64_t now) {
  for (size_t i = 0; i < links_.size(); ++i) {
    if (items[2 * i].revents & ZMQ_POLLIN) links_[i]->drain(now);
    if (items[2 * i + 1].revents & ZMQ_POLLIN) links_[i]->drainMonitor(now);
  }
}

void Routing::tick(int64_t now) {
  for (auto& link : links_) link->tick(now);
  if (links_.size() < 2) return;  // one collector: nowhere else to go, so nothing to decide
  const int64_t bound = static_cast<int64_t>(opts_.collectorTimeoutMs) * kMs;
  std::vector<bool> up(links_.size());
  for (size_t i = 0; i < links_.size(); ++i) up[i] = links_[i]->heardWithin(now, bound);
  if (up == up_) return;
  std::string change;
  for (size_t i = 0; i < links_.size(); ++i) {
    if (up[i] == up_[i]) continue;
    if (!change.empty()) change += ", ";
    change += links_[i]->endpoint() + (up[i] ? " is back" : " is gone");
  }
  up_ = std::move(up);
  owners_.clear();
  ++reroutes_;
  const auto live = std::count(up_.begin(), up_.end(), true);
  logWarn(kLog, "collectors changed (" + change + "): " + std::to_string(live) + " of " +
                    std::to_string(links_.size()) + " up; jobs move by the hashing" +
                    (live == 0 ? "; spooling until one is back" : ""));
  for (auto& link : links_) link->rerouted("collectors changed");
  ackSpool();
}

void Routing::pump(int64_t now) {
  for (auto& link : links_) link->pump(now);
}

int64_t Routing::nextDeadline(int64_t now) const {
  int64_t d = std::numeric_limits<int64_t>::max();
  for (const auto& link : links_) d = std::min(d, link->nextDeadline(now));
  if (links_.size() > 1) d = std::min(d, now + 100 * kMs);  // liveness is checked by tick()
  return d;
}

void Routing::noteAppended(int64_t now) {
  for (auto& link : links_) link->noteAppended(now);
}

void Routing::fill(AgentStats& s) const {
  for (size_t i = 0; i < links_.size(); ++i) links_[i]->fill(s, up_[i]);
  s.reroutes = reroutes_;
}

size_t Routing::ownerOf(std::string_view key) {
  auto it = owners_.find(std::string(key));
  if (it != owners_.end()) return it->second;
  const size_t owner = rendezvousOwner(key, opts_.collectors, up_);
  if (owners_.size() >= kMaxCachedOwners) owners_.clear();  // a cache: recomputing is cheap
  owners_.emplace(std::string(key), owner);
  return owner;
}

bool Routing::owns(size_t link, std::string_view record) {
  // Every collector gets the node's host samples: they are the clock a job's silence is
  // measured on, and they say when a rank's process exited, which each job's collector needs.
  if (isHostSample(record)) return up_[link];
  std::string_view key;
  // An item without a key (none today) goes with the empty key, to one collector.
  if (!wire::itemRouteKey(record, &key)) key = {};
  return ownerOf(key) == link;
}

void Routing::ackSpool() {
  uint64_t upTo = std::numeric_limits<uint64_t>::max();
  for (size_t i = 0; i < links_.size(); ++i) {
    if (up_[i]) upTo = std::min(upTo, links_[i]->acked());
  }
  if (upTo != std::numeric_limits<uint64_t>::max()) spool_.spool().ack(upTo);
}

}  // namespace trainscope::agent
