// The collector's ingest stage: a ZeroMQ ROUTER socket that agents stream to (schema/PROTOCOL.md).
// It validates every frame and item, answers heartbeats at once, commits telemetry to the Store
// in batched transactions on a writer thread, and acks each Batch only after its commit.
// start(), stop() and endpoint() belong to the thread that owns the server; stats(),
// sendCommand() and connectedNodes() may be called from any thread.
//
// World sizes: a job's world size is the first one claimed (its first accepted RankHello, or
// the store's at start); a hello claiming another is refused as "world_size_conflict", so a
// late or foreign hello cannot turn the job's real ranks into "invalid_rank". A job that
// really changes size (an elastic restart) needs a new job id.
//
// Ranks and nodes (with CURVE, where a sender's node is its key's): a rank lives on the node
// whose hello for it was accepted first (after a restart: the node the store holds). Its step
// reports, hellos, goodbye, CommandStatus and FileChunk items are accepted only from that
// node; the rest, and items of a rank no hello has bound yet, are refused as "node_mismatch".
// A rank moves to another node's hello only once its node's goodbye for it was accepted or no
// agent of its node is connected. Without CURVE a sender names its own node, so nothing is
// bound.
//
// Rejects and acks: a batch is acked once its accepted items are committed, rejects included,
// and each batch with rejects gets an ErrorReply naming the first reason and the count. That
// is safe because no reject depends on what may still arrive: the world size is fixed by the
// first claim, and every agent spools a rank's hello before its reports (and ingest handles a
// batch's hellos before its reports), so a genuine rank's reports never precede its binding.
// Sending a refused item again would be refused again.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collector/ingest/job_limiter.h"
#include "collector/ingest/validate.h"
#include "collector/storage/store.h"
#include "common/curve_keys.h"
#include "common/status.h"
#include "schema/wire.h"

namespace trainscope::ingest {

// A rank's progress from its RankHello, for the hang detector (schema RankProgress).
struct RankProgressUpdate {
  std::string job;
  uint32_t rank = 0;
  std::string node;             // the agent's node name
  wire::RankProgress progress;  // times on the node's clock
  int64_t sentNs = 0;           // the hello's sent_ns (node clock); 0 when the probe left it out
  int64_t clockOffsetNs = 0;    // collector clock - node clock, from the node's latest
                                // heartbeat; 0 before its first
  int64_t receivedNs = 0;       // collector clock when its batch arrived
};

struct IngestOptions {
  // Where agents connect. "tcp://127.0.0.1:0" or "tcp://127.0.0.1:*" picks a free port
  // (see endpoint()).
  std::string endpoint = "tcp://127.0.0.1:7601";
  // Longest items gather while the writer is busy before they are queued as one commit (an
  // idle writer takes them at once): lower acks sooner, higher makes fewer, larger
  // transactions.
  std::chrono::milliseconds commitInterval{20};
  // Commit earlier once this many items wait: larger means fewer transactions but a longer
  // writer stall per commit and more memory held.
  size_t commitItems = 4096;
  // Shortest time from one commit handed to the writer to the next, unless commitItems wait:
  // for a store that pays per write (ClickHouse makes a part of every insert and merges them
  // in the background; dozens a second outrun the merges and fill the disk). 0: an idle
  // writer takes what is there at once. Acks and detection wait up to this long.
  std::chrono::milliseconds minCommitGap{0};
  // Commits handed to the writer but not yet done before ingest stops reading the socket:
  // bounds memory when the disk is slow (agents then hold the data in their spools).
  size_t maxQueuedCommits = 3;
  // ZMQ_MAXMSGSIZE: libzmq drops the connection of a peer that sends a bigger message, so an
  // oversized frame never reaches memory. A little above wire::kMaxFrameBytes so frames just
  // over the wire limit still get a counted "oversized" ErrorReply.
  int64_t maxMessageBytes = static_cast<int64_t>(wire::kMaxFrameBytes) + (64 << 10);
  ValidationLimits limits;  // item field checks
  NewJobLimits newJobs;     // jobs one sender may start: a burst, then a rate
  // A connection silent this long is forgotten (its node's command route with it), whether or
  // not libzmq's close of it was seen: a message read after its close, or a close lost from the
  // monitor, would otherwise keep it, and its node listed as connected, for ever. An agent
  // heartbeats every second by default; one that speaks again is known again at once.
  std::chrono::milliseconds peerIdleTimeout{std::chrono::minutes(2)};
  // A job no item named for this long leaves ingest's memory (its world size and, with CURVE,
  // its ranks' nodes); both are read again from the store when it speaks again, so memory
  // follows the jobs running, not every job ever seen. Shorter holds less, reads more.
  std::chrono::milliseconds jobIdleTimeout{std::chrono::minutes(10)};
  // Called on the writer thread after each successful commit (detectors hook in here). Must be
  // quick: the acks of that commit wait for it. It may take what it keeps out of the batch (the
  // detectors move the step reports): after it returns the batch is only freed.
  std::function<void(storage::WriteBatch&)> onCommitted;
  // Receives CommandStatus and FileChunk items (for the capture stage) on the socket thread,
  // with the sending agent's node name. Unset: such items are counted as "unsupported_item".
  // Their batch is acked after the next commit whether or not the hook kept them durably.
  std::function<void(const std::string& node, const wire::Envelope& item)> onCommandItem;
  // Receives the progress of every valid RankHello that carries one (the hang detector's
  // input; hellos come every 2 s per rank) on the socket thread. Must be quick: queue it.
  // Invalid progress is counted ("invalid_progress") and dropped; the registration is kept.
  // Unset: progress is dropped.
  std::function<void(const RankProgressUpdate&)> onRankProgress;
  // CurveZMQ (common/curve_keys.h). Set: every agent must complete a CURVE handshake with one
  // of curve->agents' keys (a plain-text peer or an unknown key is refused and counted as
  // "handshake_failed" or "unknown_key", and nothing of it is read), traffic is encrypted,
  // and a key may speak only for its own node: a hello, heartbeat, RankHello or HostSample
  // naming another node, or any item about a rank of another node (see "Ranks and nodes"
  // above), is refused ("node_mismatch"), so no key can receive another node's commands or act
  // for its ranks. Unset: plain text from any peer, as before.
  std::optional<CurveServerKeys> curve;
};

// Counters since start. A snapshot; safe to take from any thread.
struct IngestStats {
  uint64_t frames = 0;       // messages received on the socket
  uint64_t batches = 0;      // Batch envelopes accepted (before commit)
  uint64_t itemsStored = 0;  // items committed: step reports, ranks, goodbyes, host samples
  uint64_t stepsStored = 0;  // step reports committed (duplicates included; see StoreStats)
  uint64_t heartbeats = 0;   // heartbeats answered
  uint64_t hellos = 0;       // agent hellos received
  uint64_t acksSent = 0;
  uint64_t commits = 0;         // successful storage transactions
  uint64_t commitFailures = 0;  // failed transactions (their batches are not acked)
  uint64_t disconnects = 0;     // peer connections closed (incl. ones libzmq drops for size)
  uint64_t peers = 0;           // connections open that have sent a message
  uint64_t jobsHeld = 0;        // jobs in ingest's memory (named within jobIdleTimeout)
  int64_t lastCommitNs = 0;     // duration of the last Store::write
  std::map<std::string, uint64_t> rejects;  // by reason: oversized, malformed, version, ...
};

class IngestServer {
 public:
  IngestServer(IngestOptions options, storage::Store& store);
  ~IngestServer();  // stops
  IngestServer(const IngestServer&) = delete;
  IngestServer& operator=(const IngestServer&) = delete;

  // Binds the socket and starts the socket and writer threads. Fails with a message naming
  // the endpoint when it cannot bind.
  Status start();
  // Stops reading, commits what is pending, sends its acks, closes. Idempotent.
  void stop();
  // Whether stop() has begun (any thread may ask).
  bool stopping() const;
  // The bound endpoint, with the actual port ("tcp://127.0.0.1:41234"). Valid after start().
  std::string endpoint() const;
  IngestStats stats() const;

  // Queues `command` for the agent of `node` and wakes the socket thread, which sends it as a
  // Command envelope to that agent's connection. Any thread. Fails, naming the node, when no
  // agent of that name is connected (or the server is not running).
  Status sendCommand(const std::string& node, const wire::Command& command);
  // Nodes whose agent is connected now (it said hello or sent a heartbeat on a connection that
  // is still open), sorted. Any thread.
  std::vector<std::string> connectedNodes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainscope::ingest
