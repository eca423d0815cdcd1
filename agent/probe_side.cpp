#include "agent/probe_side.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent/internal.h"
#include "agent/private_dir.h"
#include "common/agent_endpoint.h"
#include "common/clock.h"
#include "common/log.h"
#include "schema/capture_state.h"

namespace trainscope::agent {
using namespace internal;  // NOLINT(google-build-using-namespace): the agent's own constants

namespace {

// Items larger than this could not fit a batch frame upstream.
constexpr size_t kMaxItemBytes = wire::kMaxFrameBytes - 4096;
// Ranks remembered after their goodbye (see ProbeSide::endedRanks_).
constexpr size_t kEndedRanksKept = 4096;

bool allowedItem(wire::Envelope::BodyCase c) {
  switch (c) {
    case wire::Envelope::kStep:
    case wire::Envelope::kRankHello:
    case wire::Envelope::kRankGoodbye:
    case wire::Envelope::kCommandStatus:
    case wire::Envelope::kFileChunk:
      return true;
    default:
      return false;
  }
}

// Checks an ipc:// endpoint's socket file: a live listener means another agent owns it; a
// dead one is removed so we can bind.
Status claimIpcPath(const std::string& path) {
  struct stat sb {};
  if (::lstat(path.c_str(), &sb) != 0) return Status::ok();
  if (!S_ISSOCK(sb.st_mode)) {
    return Status::error("--endpoint: " + path +
                         " exists and is not a socket; refusing to replace it");
  }
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) {
    return Status::error("--endpoint: ipc path is longer than " +
                         std::to_string(sizeof addr.sun_path - 1) + " bytes: " + path);
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::error(std::string("socket(): ") + std::strerror(errno));
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int err = errno;
  ::close(fd);
  if (rc == 0) {
    return Status::error("another agent is already listening on ipc://" + path +
                         "; stop it first or pass a different --endpoint");
  }
  if (err != ECONNREFUSED && err != ENOENT) {
    return Status::error("--endpoint: cannot probe ipc://" + path + ": " + std::strerror(err));
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Status::error("--endpoint: cannot remove stale socket " + path + ": " +
                         std::strerror(errno));
  }
  logInfo(kLog, "removed stale socket " + path + " left by an agent that is gone");
  return Status::ok();
}

}  // namespace

ProbeSide::ProbeSide(zmq::context_t& ctx, const AgentOptions& opts, SpoolWriter& spool)
    : opts_(opts), spool_(spool), socket_(ctx, zmq::socket_type::router) {}

ProbeSide::~ProbeSide() {
  socket_.close();
  // Remove our socket file so no one finds it stale.
  if (!ipcPath_.empty() && !bound_.empty()) ::unlink(ipcPath_.c_str());
}

Status ProbeSide::claimEndpoint(const AgentOptions& opts) {
  if (opts.endpoint.rfind("ipc://", 0) != 0) return Status::ok();
  const std::string path = opts.endpoint.substr(6);
  if (opts.endpoint == defaultAgentEndpoint()) {
    // Root's default is the node agent's, which every user's probes must reach; any other
    // user's default is that user's own (common/agent_endpoint.h).
    const std::string dir = defaultAgentSocketDir();
    Status st = dir == kNodeAgentSocketDir ? ensureNodeSocketDir(dir, "--endpoint")
                                           : ensurePrivateDir(dir, "--endpoint");
    if (!st) return st;
  }
  return claimIpcPath(path);
}

namespace {

// Gives the socket file we just bound `mode` and, unless `gid` is -1, that group. The file is
// opened O_PATH|O_NOFOLLOW and changed through its descriptor, so a link swapped in at `path`
// (a directory others may write to) is never followed to another file. The group is set
// before the mode, so the socket is never open to the agent's own group's users in between.
Status setSocketMode(const std::string& path, uint32_t mode, gid_t gid) {
  const int fd = ::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return Status::error("--endpoint-mode: cannot open the socket file " + path + ": " +
                         std::strerror(errno));
  }
  struct stat sb {};
  std::string why;
  const bool statted = ::fstat(fd, &sb) == 0;
  if (statted && (!S_ISSOCK(sb.st_mode) || sb.st_uid != ::geteuid())) {
    why = "it is no longer the socket this agent bound";
  } else if (statted && gid != static_cast<gid_t>(-1) &&
             ::fchownat(fd, "", static_cast<uid_t>(-1), gid, AT_EMPTY_PATH) != 0) {
    why = "cannot give it group " + std::to_string(gid) + ": " + std::strerror(errno);
  } else if (!statted || ::chmod(("/proc/self/fd/" + std::to_string(fd)).c_str(), mode) != 0) {
    why = std::strerror(errno);  // fchmod() refuses O_PATH descriptors
  }
  ::close(fd);
  if (!why.empty()) {
    return Status::error("--endpoint-mode: cannot set the mode of " + path + ": " + why);
  }
  return Status::ok();
}

}  // namespace

Status ProbeSide::bind() {
  if (opts_.endpoint.rfind("ipc://", 0) == 0) ipcPath_ = opts_.endpoint.substr(6);
  try {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::router_mandatory, 1);
    // Byte bounds on what probes can make us hold (see the header): no frame larger than any
    // hop accepts is read into memory, and only a few wait per connection.
    socket_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(wire::kMaxFrameBytes));
    socket_.set(zmq::sockopt::rcvhwm, kProbeRcvHwm);
    socket_.bind(opts_.endpoint);
    bound_ = socket_.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    if (opts_.endpoint.rfind("tcp://", 0) != 0 || e.num() != EADDRINUSE) {
      return Status::error("cannot open --endpoint " + opts_.endpoint + ": " + e.what());
    }
    return Status::error("--endpoint " + opts_.endpoint +
                         " is already in use (another agent?): " + e.what());
  }
  // An abstract socket (ipc://@name) has no file.
  if (bound_.rfind("ipc://", 0) == 0 && bound_.size() > 6 && bound_[6] != '@') {
    gid_t gid = static_cast<gid_t>(-1);
    if (!opts_.endpointGroup.empty()) {
      auto g = groupId(opts_.endpointGroup);
      if (!g) return g.status();
      gid = *g;
    }
    if (Status st = setSocketMode(bound_.substr(6), opts_.endpointMode, gid); !st) return st;
  }
  return Status::ok();
}

uint32_t ProbeSide::peerUid(const zmq::message_t& frame) const {
  // libzmq reports an ipc peer as "<host>:<uid>:<gid>:<pid>" from SO_PEERCRED, taken when the
  // connection was accepted (so the process cannot change it later). A tcp peer's address
  // is an IP (with colons, for IPv6), so only ipc addresses are read.
  if (ipcPath_.empty()) return kUnknownUid;
  const char* addr = zmq_msg_gets(frame.handle(), "Peer-Address");
  if (addr == nullptr) return kUnknownUid;
  std::string_view a(addr);
  size_t pidColon = a.rfind(':');
  if (pidColon == std::string_view::npos || pidColon == 0) return kUnknownUid;
  size_t gidColon = a.rfind(':', pidColon - 1);
  if (gidColon == std::string_view::npos || gidColon == 0) return kUnknownUid;
  size_t uidColon = a.rfind(':', gidColon - 1);
  if (uidColon == std::string_view::npos) return kUnknownUid;
  std::string_view uid = a.substr(uidColon + 1, gidColon - uidColon - 1);
  uint64_t v = 0;
  if (uid.empty() || uid.size() > 10) return kUnknownUid;
  for (char c : uid) {
    if (c < '0' || c > '9') return kUnknownUid;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v < kUnknownUid ? static_cast<uint32_t>(v) : kUnknownUid;
}

void ProbeSide::expireRanks(int64_t now) {
  for (auto it = ranks_.begin(); it != ranks_.end();) {
    if (now - it->second.lastSeenMono > opts_.rankExpiryMs * kMs) {
      logInfo(kLog, "rank " + std::to_string(it->first.second) + " of job " + it->first.first +
                        " sent no hello for " + std::to_string(opts_.rankExpiryMs) +
                        " ms; forgetting it");
      it = ranks_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<WatchedProc> ProbeSide::watchedProcs() const {
  std::vector<WatchedProc> procs;
  procs.reserve(ranks_.size());
  for (const auto& [key, entry] : ranks_) {
    procs.push_back(WatchedProc{key.first, key.second, entry.info.pid()});
  }
  return procs;
}

void ProbeSide::fill(AgentStats& s) const {
  s.probeFrames = probeFrames_;
  s.probeBatches = probeBatches_;
  s.probeItems = probeItems_;
  s.rejects = rejects_;
  s.ranks = rankCount();
  s.hellosAfterGoodbye = hellosAfterGoodbye_;
  s.probeDrainsCut = drainsCut_;
  s.commandsForwarded = commandsForwarded_;
  s.commandsUnmatched = commandsUnmatched_;
}

void ProbeSide::reject(const std::string& rid, const std::string& reason,
                       const std::string& detail) {
  ++rejects_[reason];
  rejectLog_.log(LogLevel::kWarn, kLog, "rejected a probe frame (" + reason + "): " + detail);
  if (!rid.empty()) {
    wire::Envelope err = wire::errorReply(reason, detail);
    send(rid, err);
  }
}

void ProbeSide::send(const std::string& rid, wire::Envelope& env) {
  std::string data = wire::encode(env);
  try {
    if (!socket_.send(zmq::buffer(rid), zmq::send_flags::sndmore | zmq::send_flags::dontwait))
      return;
    (void)socket_.send(zmq::buffer(data), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    // EHOSTUNREACH: the probe disconnected; it resends what we did not ack.
    logDebug(kLog, std::string("cannot reach a probe: ") + e.what());
  }
}

bool ProbeSide::mayClaim(const std::string& rid, const std::string& job, uint32_t rank,
                         uint32_t uid, const char* what) {
  auto it = ranks_.find(std::make_pair(job, rank));
  if (it == ranks_.end() || it->second.uid == uid) return true;
  // Over tcp:// both uids are unknown and equal; over ipc:// every connection has one.
  reject(rid, "rank_claimed",
         std::string(what) + " for rank " + std::to_string(rank) + " of job " + job + " from uid " +
             (uid == kUnknownUid ? "unknown" : std::to_string(uid)) + ", but uid " +
             (it->second.uid == kUnknownUid ? "unknown" : std::to_string(it->second.uid)) +
             " registered that rank; refused");
  return false;
}

bool ProbeSide::registerRank(const std::string& rid, const wire::RankInfo& info, uint32_t uid,
                             int64_t now, bool* changed) {
  *changed = false;
  if (!mayClaim(rid, info.job(), info.rank(), uid, "a hello")) return false;
  auto key = std::make_pair(info.job(), info.rank());
  auto it = ranks_.find(key);
  *changed = it == ranks_.end() || it->second.routingId != rid ||
             it->second.info.SerializeAsString() != info.SerializeAsString();
  if (it == ranks_.end()) {
    logInfo(kLog, "rank " + std::to_string(info.rank()) + " of job " + info.job() + " (pid " +
                      std::to_string(info.pid()) + ") registered");
    it = ranks_.emplace(key, RankEntry{}).first;
    it->second.uid = uid;
  }
  // A new pid or connection of the same uid takes the rank over: a restarted rank
  // re-registers before its old entry expires, and the uid could signal or trace the old
  // process anyway, so this grants it nothing.
  it->second.info = info;
  it->second.routingId = rid;
  it->second.lastSeenMono = now;
  return true;
}

bool ProbeSide::endRank(const std::string& rid, const std::string& job, uint32_t rank,
                        uint32_t uid) {
  if (!mayClaim(rid, job, rank, uid, "a goodbye")) return false;
  auto it = ranks_.find(std::make_pair(job, rank));
  EndedRank e{job, rank, 0, rid};
  if (it != ranks_.end()) {
    e.pid = it->second.info.pid();
    ranks_.erase(it);
  }
  endedRanks_.push_back(std::move(e));
  if (endedRanks_.size() > kEndedRanksKept) endedRanks_.pop_front();
  return true;
}

bool ProbeSide::helloAfterGoodbye(const std::string& rid, const wire::RankInfo& info) {
  for (auto it = endedRanks_.begin(); it != endedRanks_.end(); ++it) {
    if (it->rank != info.rank() || it->job != info.job()) continue;
    const bool sameProcess = it->pid != 0 ? it->pid == info.pid() : it->routingId == rid;
    if (!sameProcess) {
      endedRanks_.erase(it);  // the rank runs again in a new process
      return false;
    }
    ++hellosAfterGoodbye_;
    return true;
  }
  return false;
}

void ProbeSide::handleFrame(const std::string& rid, const zmq::message_t& frame, int64_t now) {
  ++probeFrames_;
  if (takeSplitBatch(rid, frame, now)) return;
  auto decoded = wire::decode(frame.data(), frame.size());
  if (!decoded) {
    reject(rid, wire::rejectReason(decoded.status()), decoded.message());
    return;
  }
  wire::Envelope& env = *decoded;
  switch (env.body_case()) {
    case wire::Envelope::kRankHello: {
      auto* info = env.mutable_rank_hello()->mutable_rank();
      if (helloAfterGoodbye(rid, *info)) return;
      info->set_node(opts_.node);
      bool changed = false;
      if (!registerRank(rid, *info, peerUid(frame), now, &changed)) return;
      // Periodic hellos only refresh the registry; the collector hears of new or changed ranks_.
      if (changed) inRecords_.push_back(wire::encode(env));
      return;
    }
    case wire::Envelope::kRankGoodbye: {
      if (!endRank(rid, env.rank_goodbye().job(), env.rank_goodbye().rank(), peerUid(frame))) {
        return;
      }
      inRecords_.push_back(wire::encode(env));
      return;
    }
    case wire::Envelope::kBatch: {
      // A batch takeSplitBatch refused yet decode() accepted (its fields in another order,
      // say): every item decoded, and re-encoded.
      auto* batch = env.mutable_batch();
      for (auto& item : *batch->mutable_items()) {
        takeItem(rid, frame, batch->seq(), item, std::string_view(), now);
      }
      inAcks_.emplace_back(rid, batch->seq());
      return;
    }
    default:
      reject(rid, "unexpected_type",
             "probes may send RankHello, RankGoodbye and Batch; got field " +
                 std::to_string(static_cast<int>(env.body_case())));
      return;
  }
}

bool ProbeSide::takeSplitBatch(const std::string& rid, const zmq::message_t& frame, int64_t now) {
  wire::BatchFrame& split = split_;
  if (!wire::splitBatch(frame.data(), frame.size(), &split)) return false;
  // Step reports, nearly every item, are kept as the probe serialized them without being
  // parsed (the collector parses and validates each one); the few other items are decoded
  // first, all of them, so a malformed one leaves the frame to decode() and its reject before
  // anything of it is taken.
  splitOthers_.clear();
  for (size_t i = 0; i < split.items.size(); ++i) {
    const std::string_view item = split.items[i];
    uint32_t version = 0;
    std::string_view step;
    if (wire::stepItem(item, &version, &step) && version == wire::kSchemaVersion) continue;
    wire::Envelope env;
    if (!env.ParseFromArray(item.data(), static_cast<int>(item.size()))) return false;
    splitOthers_.emplace_back(i, std::move(env));
  }
  size_t other = 0;
  for (size_t i = 0; i < split.items.size(); ++i) {
    if (other < splitOthers_.size() && splitOthers_[other].first == i) {
      takeItem(rid, frame, split.seq, splitOthers_[other++].second, split.items[i], now);
    } else {
      takeRecord(std::string(split.items[i]), split.seq);
    }
  }
  inAcks_.emplace_back(rid, split.seq);
  return true;
}

void ProbeSide::takeItem(const std::string& rid, const zmq::message_t& frame, uint64_t seq,
                         wire::Envelope& item, std::string_view raw, int64_t now) {
  if (!allowedItem(item.body_case())) {
    reject("", "bad_item",
           "batch " + std::to_string(seq) + " holds an item of a type probes may not send (field " +
               std::to_string(static_cast<int>(item.body_case())) + ")");
    return;
  }
  if (item.has_rank_hello()) {
    auto* info = item.mutable_rank_hello()->mutable_rank();
    if (helloAfterGoodbye(rid, *info)) return;  // not spooled: the rank has ended
    info->set_node(opts_.node);
    bool changed = false;
    // Not spooled when refused: the collector must not hear of the claim either.
    if (!registerRank(rid, *info, peerUid(frame), now, &changed)) return;
  } else if (item.has_rank_goodbye()) {
    if (!endRank(rid, item.rank_goodbye().job(), item.rank_goodbye().rank(), peerUid(frame))) {
      return;
    }
  } else if (item.has_command_status() &&
             wire::commandState(item.command_status()) == wire::RankState::kUploading &&
             !item.command_status().file_path().empty()) {
    // Shipped once the status itself is in the spool (flushProbeInput).
    inUploads_.emplace_back(item.command_status(), peerUid(frame));
  }
  // Stored as the probe serialized it when that is safe, saving a re-encode; RankHello items
  // are changed (node) and always re-encoded.
  const bool reuse =
      !raw.empty() && !item.has_rank_hello() && item.schema_version() == wire::kSchemaVersion;
  takeRecord(reuse ? std::string(raw) : wire::encode(item), seq);
}

void ProbeSide::takeRecord(std::string rec, uint64_t seq) {
  if (rec.size() > kMaxItemBytes) {
    reject("", "item_too_large",
           "an item of " + std::to_string(rec.size()) + " bytes in batch " + std::to_string(seq));
    return;
  }
  inRecords_.push_back(std::move(rec));
  ++inBatchItems_;
}

void ProbeSide::drain(int64_t now) {
  for (int i = 0; i < kDrainLimit; ++i) {
    if (inBytes_ >= kDrainByteLimit) {
      // The rest waits in ZeroMQ (at most kProbeRcvHwm messages a connection) for the next
      // drain, after this one is spooled and its memory freed.
      ++drainsCut_;
      rejectLog_.log(LogLevel::kWarn, kLog,
                     "probes sent more than " + std::to_string(kDrainByteLimit >> 20) +
                         " MiB in one drain; the rest waits for the next");
      break;
    }
    zmq::message_t rid;
    if (!socket_.recv(rid, zmq::recv_flags::dontwait)) break;
    if (!rid.more()) continue;
    zmq::message_t frame;
    if (!socket_.recv(frame, zmq::recv_flags::dontwait)) break;
    std::string ridStr = rid.to_string();
    inBytes_ += frame.size();
    if (frame.more()) {
      // One frame per message is the protocol; drop the extra parts.
      zmq::message_t extra;
      while (frame.more() && socket_.recv(extra, zmq::recv_flags::dontwait) && extra.more()) {
      }
      reject(ridStr, "multipart", "a probe message must be a single frame");
      continue;
    }
    handleFrame(ridStr, frame, now);
  }
  flush(now);
}

void ProbeSide::flush(int64_t now) {
  // One write for everything this drain collected, then the acks: an ack always follows
  // the write of its batch, and a failed write acks nothing (the probes send again).
  bool ok = spool_.append(inRecords_, now);
  if (ok) {
    probeBatches_ += inAcks_.size();
    probeItems_ += inBatchItems_;
    for (const auto& [rid, seq] : inAcks_) {
      wire::Envelope ack;
      ack.mutable_ack()->set_seq(seq);
      send(rid, ack);
    }
    // The statuses are spooled: their files' chunks follow them.
    if (onUploading) {
      for (const auto& [status, uid] : inUploads_) onUploading(status, uid);
    }
  }
  inUploads_.clear();
  inRecords_.clear();
  inAcks_.clear();
  inBatchItems_ = 0;
  inBytes_ = 0;
}

void ProbeSide::forwardCommand(const wire::Command& cmd) {
  int sent = 0;
  for (auto& [key, entry] : ranks_) {
    if (key.first != cmd.job()) continue;
    if (cmd.ranks_size() > 0 &&
        std::find(cmd.ranks().begin(), cmd.ranks().end(), key.second) == cmd.ranks().end()) {
      continue;
    }
    wire::Envelope env;
    *env.mutable_command() = cmd;
    send(entry.routingId, env);
    ++sent;
  }
  commandsForwarded_ += static_cast<uint64_t>(sent);
  if (sent == 0) {
    ++commandsUnmatched_;
    logWarn(kLog, "command " + cmd.id() + " names job " + cmd.job() +
                      " but no matching rank is registered on node " + opts_.node);
  }
  // Every named rank without a probe here is answered at once, so the collector does not
  // wait for its deadline (docs/CAPTURE.md step 2).
  std::vector<uint32_t> answered;
  for (uint32_t rank : cmd.ranks()) {
    if (ranks_.count(std::make_pair(cmd.job(), rank)) != 0) continue;
    if (std::find(answered.begin(), answered.end(), rank) != answered.end()) continue;
    answered.push_back(rank);
    spool_.commandStatus(
        cmd.id(), cmd.job(), rank, wire::RankState::kFailed,
        "rank " + std::to_string(rank) + " is not connected to agent " + opts_.node);
  }
  if (cmd.ranks_size() == 0 && sent == 0) {
    spool_.commandStatus(cmd.id(), cmd.job(), 0, wire::RankState::kFailed,
                         "no rank of job " + cmd.job() + " is connected to agent " + opts_.node);
  }
}

}  // namespace trainscope::agent
