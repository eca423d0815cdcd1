// The probe's side of the probe -> agent hop (schema/PROTOCOL.md): one DEALER socket per
// probe instance, batches with sequence numbers, a bounded backlog of unacknowledged batches,
// resends, hellos and acks. Used only by the probe runtime thread (ZeroMQ sockets are not
// thread-safe); the counters may be read from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/probe/peer_check.h"
#include "common/status.h"
#include "schema/trainscope.pb.h"

namespace trainscope::probe {

struct TransportOptions {
  std::string endpoint;                       // agent ROUTER endpoint
  uint32_t backlogReports = 4096;             // reports kept unacked; more rides out longer
                                              // agent outages at ~1.7 KiB per report
  int64_t batchIntervalNs = 10'000'000;       // longest a queued item waits for its batch;
                                              // shorter means more, smaller frames
  uint32_t batchMaxItems = 256;               // items per batch; bounds the frame size
  int64_t resendAfterNs = 1'000'000'000;      // unacked batch resend delay (PROTOCOL.md)
  int64_t helloIntervalNs = 2'000'000'000;    // RankHello period (PROTOCOL.md)
  int64_t connectedWindowNs = 3'000'000'000;  // "connected" = an ack within this window
  // Step reports of fast steps share a message: while the rank's next step is due before the
  // oldest queued report has waited batchLatencyNs, the reports wait for it, so a message
  // carries up to batchSteps of them (at 10 steps/s and 200 ms, two or three). Reports of
  // slower steps leave after batchIntervalNs, as other items do. Each message wakes the agent
  // and is acked, so fewer cost it less CPU; the bound is what the collector's view (stored
  // latest step, detection) may lag by. 0 sends every report after batchIntervalNs.
  int64_t batchLatencyNs = 200'000'000;
  uint32_t batchSteps = 16;
};

class Transport {
 public:
  Transport(void* zmqContext, TransportOptions options, wire::RankInfo info);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Creates and connects the socket; the connection itself completes in the background. On
  // an ipc:// endpoint the connection completes only to a listener of our own user or root
  // (peer_check.h): nothing is sent to any other.
  Status open();

  // `nowNs` is monotonic time, as service() takes it.
  void addReport(wire::StepReport report, int64_t nowNs);
  // The rank's last message: no hello follows it (a hello after the goodbye would register the
  // ended rank at the agent again, whose process watch would then report it gone).
  void addGoodbye(int64_t lastStep, int64_t nowWallNs);
  // A command's status (captures): rides in the same acked, resent batches as the reports.
  void addStatus(wire::CommandStatus status);
  // The rank's declared process groups as of `declaredNs` (wall clock). They ride in the
  // hellos until the agent acknowledged one that carried this set; a new set sends a hello at
  // the next service (or as soon as the hello in flight is acknowledged).
  void setGroups(std::vector<wire::ProcessGroup> groups, int64_t declaredNs);
  // True once a hello with the current group set was acknowledged (tests).
  bool groupsDelivered() const { return groupsDeclaredNs_ == 0 || groupsAcked_; }
  // Receives acks/commands, cuts batches, sends and resends. `nowNs` is monotonic time;
  // `cutNow` sends whatever is queued without waiting for the batch interval.
  void service(int64_t nowNs, bool cutNow);

  // Nothing queued and nothing waiting for an ack.
  bool idle() const { return queued_.empty() && backlog_.empty(); }
  bool connected(int64_t nowNs) const {
    const int64_t last = lastAckNs_.load(std::memory_order_relaxed);
    return last != 0 && nowNs - last < options_.connectedWindowNs;
  }

  // Called for each Command envelope from the agent (the capture seam). Unset: logged once
  // and ignored.
  std::function<void(const wire::Command&)> onCommand;
  // Fills the rank's progress into each RankHello when it is queued (the runtime's
  // ProgressTracker). Unset: hellos carry no progress, as from older probes.
  std::function<void(wire::RankProgress*)> progress;

  std::atomic<uint64_t> reportsSent{0};  // reports whose batch went out the first time
  std::atomic<uint64_t> reportsAcked{0};
  std::atomic<uint64_t> backlogReports{0};  // reports queued or unacked now
  std::atomic<uint64_t> backlogDropped{0};
  std::atomic<uint64_t> batchesSent{0};  // including resends
  std::atomic<uint64_t> lastAckedSeq{0};

 private:
  struct Pending {
    uint64_t seq;
    std::string frame;
    uint32_t reports;
    bool hello;
    int64_t lastSentNs = 0;  // 0: never sent
    int64_t groupsNs = 0;    // groups_declared_ns of the group set its hello carried; 0: none
  };

  void receive(int64_t nowNs);
  void queueHello(int64_t nowNs);
  bool batchDue(int64_t nowNs) const;
  void cutBatch();
  void sendDue(int64_t nowNs);
  void enforceBound();

  void* ctx_;
  std::shared_ptr<PeerCheck> peerCheck_;  // ipc endpoints: answers this context's ZAP requests
  void* socket_ = nullptr;
  TransportOptions options_;
  wire::RankInfo info_;
  std::vector<wire::Envelope> queued_;  // items not yet in a batch
  uint32_t queuedReports_ = 0;
  int64_t firstReportNs_ = 0;    // monotonic: when the oldest queued report was queued
  int64_t firstOtherNs_ = 0;     // monotonic: when the oldest queued other item was; 0: none
  int64_t lastEndNs_ = 0;        // end_ns of the latest report (the probe's wall clock)
  int64_t stepGapNs_ = 0;        // the latest two reports' ends apart: the step period; 0: unknown
  std::deque<Pending> backlog_;  // batches waiting for an ack, oldest first
  uint64_t nextSeq_ = 1;
  bool linkUp_ = false;
  bool helloOutstanding_ = false;
  bool helloWanted_ = false;    // queue a hello as soon as the outstanding one is acked
  bool goodbyeQueued_ = false;  // no more hellos
  int64_t lastHelloNs_ = 0;
  std::vector<wire::ProcessGroup> groups_;  // the rank's declared groups
  int64_t groupsDeclaredNs_ = 0;            // 0: none declared
  bool groupsAcked_ = false;                // a hello carrying groups_ was acknowledged
  std::atomic<int64_t> lastAckNs_{0};
};

}  // namespace trainscope::probe
