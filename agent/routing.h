// Routing: the agent's links to its collectors (one Upstream each) and which records go where.
// With one --collector this is that link and nothing else: every record goes to it, exactly as
// an agent with one collector always worked. With several, each spooled record goes to the
// collector its job (wire::itemRouteKey) hashes to by rendezvous hashing (agent/rendezvous.h)
// over the collectors that are up, so one collector gets all of a job's data from every agent
// and runs its detection; the node's host samples go to every collector up. A collector is up while
// it was heard from (a handshake, an ack, a heartbeat reply) within --collector-timeout-ms; at the
// start every collector counts as up for that long. When the set changes, every link starts again
// from the spool's oldest unacked record with the new choice (Upstream::rerouted): what a collector
// that went away had not acked goes to the new owner, and a job whose collector came back returns
// to it. Collectors may get a record twice around a change; storage keys make that harmless. The
// spool is acked up to the lowest acked position of the links that are up, so no record leaves the
// spool before its owner has it. Owned by the agent's loop thread, like the Upstreams it holds.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>

#include "agent/agent.h"
#include "agent/options.h"
#include "agent/spool_writer.h"
#include "agent/upstream.h"
#include "common/status.h"
#include "schema/wire.h"

namespace trainscope::agent {

class Routing {
 public:
  Routing(zmq::context_t& ctx, const AgentOptions& opts, SpoolWriter& spool);
  Routing(const Routing&) = delete;
  Routing& operator=(const Routing&) = delete;

  // Connects every link (the connections complete in the background).
  Status connect(int64_t nowMono);
  // Two poll items per link (its socket, its monitor), appended to `items`.
  void addPollItems(std::vector<zmq_pollitem_t>& items);
  // Handles what the poll found on the items addPollItems added, starting at `items`.
  void handlePolled(const zmq_pollitem_t* items, int64_t nowMono);
  // Timers of every link, then whether the set of collectors up changed.
  void tick(int64_t nowMono);
  void pump(int64_t nowMono);
  int64_t nextDeadline(int64_t nowMono) const;
  void noteAppended(int64_t nowMono);
  void fill(AgentStats& s) const;

  // The index in opts.collectors of the collector that gets records of `key` now (tests, logs).
  size_t ownerOf(std::string_view key);

  // Called for each Command envelope from any collector.
  std::function<void(const wire::Command&)> onCommand;
  // The number of ranks registered now, for heartbeats.
  std::function<uint32_t()> rankCount;

 private:
  bool owns(size_t link, std::string_view record);
  void ackSpool();

  const AgentOptions& opts_;
  SpoolWriter& spool_;
  std::vector<std::unique_ptr<Upstream>> links_;  // in opts.collectors order
  std::vector<bool> up_;                          // per link: in the hashing now
  // key -> owning link under up_, cleared when up_ changes (jobs and nodes are few).
  std::unordered_map<std::string, size_t> owners_;
  uint64_t reroutes_ = 0;
};

}  // namespace trainscope::agent
