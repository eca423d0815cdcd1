// Uploads: the capture files the agent ships (docs/CAPTURE.md step 4). A probe's "uploading"
// status names a file; once the status is spooled, the file is read a few MiB per loop turn
// into FileChunk items in the spool (so they survive agent and collector restarts like any
// item) and deleted. A journal entry per upload under <spool>/uploads lets a restarted agent
// ship a file it had not finished.
// Any local process can send a status, so a file is shipped (and deleted) only when the
// descriptor opened with O_NOFOLLOW|O_NONBLOCK is a regular file with one link, owned by the
// uid of the process that named it, under the capture directory, and within maxFileBytes.
// Files and telemetry have separate budgets in the spool: chunks are appended only with
// Spool::Evict::kNever and only while the chunks not yet acked stay within spoolFileBytes;
// otherwise the upload waits for the collector's acks (and fails after 5 minutes), so a file
// can never push out telemetry already acked to the probes.
// Owned by the agent's loop thread; nothing in it is touched from another thread.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "agent/agent.h"
#include "agent/options.h"
#include "agent/spool_writer.h"
#include "schema/wire.h"

namespace trainscope::agent {

class Uploads {
 public:
  // `spoolDir` holds the journal (<spoolDir>/uploads).
  Uploads(const AgentOptions& opts, SpoolWriter& spool, std::string spoolDir);
  ~Uploads();  // closes open files; the journal resumes them in the next agent
  Uploads(const Uploads&) = delete;
  Uploads& operator=(const Uploads&) = delete;

  // Queues the files a previous agent had not finished (from the journal).
  void resume();
  // Queues the file of a spooled "uploading" status sent by a process of `uid` (kUnknownUid:
  // not known), or answers it "failed" when the file may not or cannot be shipped.
  void queue(const wire::CommandStatus& status, uint32_t uid) { queue(status, uid, false); }
  // Spools the next chunks (a few MiB per call).
  void pump(int64_t nowMono);
  // When pump() has work again: now while files wait, else far away.
  int64_t nextDeadline(int64_t nowMono) const;
  // Copies this part's counters into `s`.
  void fill(AgentStats& s) const;

 private:
  struct Upload {
    wire::CommandStatus status;  // the probe's "uploading" status: command, job, rank, file
    uint32_t uid = 0;            // the uid of the probe that sent it
    std::string resolved;        // real path of the opened file, under the capture dir
    int fd = -1;
    uint64_t size = 0;    // at open; the file is complete when the probe reports it
    uint64_t offset = 0;  // next byte to ship
    std::string journal;  // <spool>/uploads/<name>: resumes the upload after a restart
  };

  void queue(const wire::CommandStatus& status, uint32_t uid, bool resumed);
  void finish(Upload& up, const std::string& failure);
  // Deletes a shipped file where it was opened, walking to it without following links.
  void removeShipped(const Upload& up);
  // The front upload found no room in the spool: look again soon, give up after a while.
  void wait(Upload& up, int64_t nowMono, const std::string& why);
  // Forgets chunks no longer held unacked in the spool.
  void release();

  const AgentOptions& opts_;
  SpoolWriter& spool_;
  std::string spoolDir_;
  const uint64_t fileBudget_;         // spool bytes unacked chunks may hold (spoolFileBytes)
  std::deque<Upload> uploads_;        // shipped in order, a few MiB per loop turn
  std::deque<std::string> finished_;  // keys of recently finished uploads
  int64_t retryAtMono_ = 0;           // no chunk is read before this
  int failures_ = 0;                  // spool refusals in a row
  int64_t waitingSinceMono_ = 0;      // the front upload waits for room; 0: it does not
  std::deque<std::pair<uint64_t, uint64_t>> inSpool_;  // chunks in the spool: index, bytes
  uint64_t heldBytes_ = 0;                             // their bytes

  uint64_t filesShipped_ = 0;
  uint64_t filesFailed_ = 0;
  uint64_t fileBytesShipped_ = 0;
};

}  // namespace trainscope::agent
