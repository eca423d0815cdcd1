#include "agent/agent.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <deque>
#include <random>
#include <string_view>
#include <vector>

#include <malloc.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <zmq.hpp>

#include "agent/clock_offset.h"
#include "agent/host_metrics.h"
#include "agent/spool.h"
#include "common/clock.h"
#include "common/log.h"
#include "schema/wire.h"

namespace trainscope::agent {
namespace {

constexpr std::string_view kLog = "agent";
constexpr int64_t kMs = 1'000'000;
// After a send finds no connected collector, wait this long before trying again.
constexpr int64_t kRetryNs = 100 * kMs;
// Messages handled per socket per loop turn, so one busy side cannot starve timers.
constexpr int kDrainLimit = 1024;
// Items larger than this could not fit a batch frame upstream.
constexpr size_t kMaxItemBytes = wire::kMaxFrameBytes - 4096;

void putVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

size_t varintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// Envelope{schema_version, batch: Batch{seq, items}} built from already-serialized item
// envelopes, so spooled records are sent without being parsed again.
std::string encodeBatchFrame(uint64_t seq, const std::vector<std::string>& items) {
  size_t body = 1 + varintSize(seq);
  for (const auto& it : items) body += 1 + varintSize(it.size()) + it.size();
  std::string out;
  out.reserve(body + 16);
  out.push_back(0x08);  // field 1 (schema_version), varint
  putVarint(out, wire::kSchemaVersion);
  putVarint(out, (17u << 3) | 2u);  // field 17 (batch), length-delimited
  putVarint(out, body);
  out.push_back(0x08);  // Batch field 1 (seq), varint
  putVarint(out, seq);
  for (const auto& it : items) {
    out.push_back(0x12);  // Batch field 2 (items), length-delimited
    putVarint(out, it.size());
    out.append(it);
  }
  return out;
}

bool readVarint(const char*& p, const char* end, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && p < end; shift += 7) {
    auto b = static_cast<unsigned char>(*p++);
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// Finds the byte ranges of the length-delimited fields numbered `field` in one message.
// Returns false on anything it does not understand; callers then fall back to re-encoding.
bool delimitedFields(std::string_view msg, uint32_t field, std::vector<std::string_view>* out) {
  const char* p = msg.data();
  const char* end = p + msg.size();
  while (p < end) {
    uint64_t tag = 0;
    if (!readVarint(p, end, &tag)) return false;
    uint64_t v = 0;
    switch (tag & 7) {
      case 0:
        if (!readVarint(p, end, &v)) return false;
        break;
      case 1:
        if (end - p < 8) return false;
        p += 8;
        break;
      case 2:
        if (!readVarint(p, end, &v) || v > static_cast<uint64_t>(end - p)) return false;
        if ((tag >> 3) == field) out->emplace_back(p, static_cast<size_t>(v));
        p += v;
        break;
      case 5:
        if (end - p < 4) return false;
        p += 4;
        break;
      default:
        return false;
    }
  }
  return true;
}

// The serialized items of a Batch envelope frame, as they arrived (no re-encoding).
bool rawBatchItems(std::string_view frame, std::vector<std::string_view>* items) {
  std::vector<std::string_view> batch;
  if (!delimitedFields(frame, 17, &batch) || batch.size() != 1) return false;
  return delimitedFields(batch[0], 2, items);
}

std::string hostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string randomHex(size_t bytes) {
  std::random_device rd;
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes; ++i) {
    unsigned v = rd() & 0xff;
    out.push_back(kHex[v >> 4]);
    out.push_back(kHex[v & 0xf]);
  }
  return out;
}

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
    return Status::error("--endpoint: " + path + " exists and is not a socket; refusing to replace it");
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

struct Agent::Impl {
  struct RankEntry {
    wire::RankInfo info;
    std::string routingId;
    int64_t lastSeenMono = 0;
  };
  struct InFlight {
    uint64_t seq = 0;  // spool index after the batch's last record
    int64_t sentMono = 0;
  };

  explicit Impl(AgentOptions o) : opts(std::move(o)), sampler(opts.procRoot) {}

  AgentOptions opts;
  zmq::context_t ctx{1};
  zmq::socket_t probes{ctx, zmq::socket_type::router};
  zmq::socket_t upstream{ctx, zmq::socket_type::dealer};
  zmq::socket_t monitor{ctx, zmq::socket_type::pair};
  int stopFd = -1;
  std::atomic<bool> stopRequested{false};
  std::string bound;
  std::string ipcPath;  // removed on exit

  std::unique_ptr<Spool> spool;
  HostSampler sampler;
  ClockOffsetEstimator offsets;
  std::map<std::pair<std::string, uint32_t>, RankEntry> ranks;

  // Upstream sending state.
  uint64_t sendCursor = 0;         // next spool index to send
  uint64_t highestSent = 0;        // highest batch seq ever sent (acks above it are bogus)
  std::string heldFrame;           // a built batch the socket refused, sent again as is
  uint64_t heldSeq = 0;            // its seq; 0 when none is held
  std::deque<InFlight> inflight;   // oldest first
  int64_t unsentSinceMono = 0;     // when the oldest unsent record was appended; 0: none
  int64_t retryAtMono = 0;         // no send attempts before this
  bool connected = false;

  // Timers (monotonic ns).
  int64_t nextSample = 0, nextHeartbeat = 0, nextHello = 0, nextSync = 0;
  int64_t nextProbeDrain = 0;  // the probe socket is not polled before this

  // What one drain of the probe socket collected: written with one append, then acked.
  std::vector<std::string> inRecords;
  std::vector<std::pair<std::string, uint64_t>> inAcks;  // routing id, batch seq
  uint64_t inBatchItems = 0;

  RateLimitedLog rejectLog{std::chrono::seconds(5)};
  RateLimitedLog upstreamLog{std::chrono::seconds(5)};
  RateLimitedLog spoolLog{std::chrono::seconds(5)};

  AgentStats counters;  // loop thread only
  mutable std::mutex statsMu;
  AgentStats published;  // guarded by statsMu

  Status start();
  Status run();
  void drainProbes(int64_t now);
  void flushProbeInput(int64_t now);
  void handleProbeFrame(const std::string& rid, const zmq::message_t& frame, int64_t now);
  void registerRank(const std::string& rid, const wire::RankInfo& info, int64_t now, bool* changed);
  void reject(const std::string& rid, const std::string& reason, const std::string& detail);
  void sendToProbe(const std::string& rid, wire::Envelope& env);
  void drainUpstream(int64_t now);
  void handleAck(uint64_t seq);
  void forwardCommand(const wire::Command& cmd);
  void drainMonitor(int64_t now);
  bool spoolItems(const std::vector<std::string>& records, int64_t now);
  void sendHello();
  void sendHeartbeat();
  void takeSample(int64_t now);
  void pumpUpstream(int64_t now);
  void restartFromAcked(const std::string& why);
  int64_t nextDeadline(int64_t now) const;
  void publish();
};

Status Agent::Impl::start() {
  if (opts.node.empty()) opts.node = hostName();
  setLogLevel(opts.logLevel);
  if (opts.endpoint.rfind("ipc://", 0) == 0) {
    ipcPath = opts.endpoint.substr(6);
    Status st = claimIpcPath(ipcPath);
    if (!st) return st;
  }
  SpoolOptions so;
  so.dir = opts.spoolDir.empty() ? "/var/tmp/trainscope/spool-" + opts.node : opts.spoolDir;
  so.maxBytes = opts.spoolMaxBytes;
  so.segmentBytes = opts.spoolSegmentBytes;
  auto sp = Spool::open(so);
  if (!sp) return Status::error("--spool-dir: " + sp.message());
  spool = std::move(*sp);
  sendCursor = spool->firstUnacked();

  try {
    probes.set(zmq::sockopt::linger, 0);
    probes.set(zmq::sockopt::router_mandatory, 1);
    probes.bind(opts.endpoint);
    bound = probes.get(zmq::sockopt::last_endpoint);

    monitor.set(zmq::sockopt::linger, 0);
    upstream.set(zmq::sockopt::linger, 0);
    upstream.set(zmq::sockopt::immediate, 1);
    upstream.set(zmq::sockopt::routing_id, "agent-" + opts.node + "-" + randomHex(8));
    std::string monEndpoint = "inproc://agent-monitor-" + randomHex(8);
    if (zmq_socket_monitor(upstream.handle(), monEndpoint.c_str(),
                           ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED) != 0) {
      return Status::error(std::string("cannot monitor the upstream socket: ") +
                           zmq_strerror(zmq_errno()));
    }
    monitor.connect(monEndpoint);
    upstream.connect(opts.collector);
  } catch (const zmq::error_t& e) {
    if (!bound.empty() || opts.endpoint.rfind("tcp://", 0) != 0 || e.num() != EADDRINUSE) {
      return Status::error("cannot open " + (bound.empty() ? "--endpoint " + opts.endpoint
                                                            : "--collector " + opts.collector) +
                           ": " + e.what());
    }
    return Status::error("--endpoint " + opts.endpoint +
                         " is already in use (another agent?): " + e.what());
  }
  stopFd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (stopFd < 0) return Status::error(std::string("eventfd: ") + std::strerror(errno));

  int64_t now = monotonicNowNs();
  nextSample = now;  // first sample at once: rates start from it
  nextHeartbeat = now;
  nextHello = now;
  nextSync = now + opts.syncIntervalMs * kMs;
  if (spool->pendingItems() > 0) unsentSinceMono = now - opts.batchLingerMs * kMs;
  logInfo(kLog, "node " + opts.node + ": probes on " + bound + ", collector " + opts.collector +
                    ", spool " + so.dir + " (" + std::to_string(spool->pendingItems()) +
                    " records to replay)");
  publish();
  return Status::ok();
}

void Agent::Impl::reject(const std::string& rid, const std::string& reason,
                         const std::string& detail) {
  ++counters.rejects[reason];
  rejectLog.log(LogLevel::kWarn, kLog, "rejected a probe frame (" + reason + "): " + detail);
  if (!rid.empty()) {
    wire::Envelope err = wire::errorReply(reason, detail);
    sendToProbe(rid, err);
  }
}

void Agent::Impl::sendToProbe(const std::string& rid, wire::Envelope& env) {
  std::string data = wire::encode(env);
  try {
    if (!probes.send(zmq::buffer(rid), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return;
    (void)probes.send(zmq::buffer(data), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    // EHOSTUNREACH: the probe disconnected; it resends what we did not ack.
    logDebug(kLog, std::string("cannot reach a probe: ") + e.what());
  }
}

void Agent::Impl::registerRank(const std::string& rid, const wire::RankInfo& info, int64_t now,
                               bool* changed) {
  auto key = std::make_pair(info.job(), info.rank());
  auto it = ranks.find(key);
  *changed = it == ranks.end() || it->second.routingId != rid ||
             it->second.info.SerializeAsString() != info.SerializeAsString();
  if (it == ranks.end()) {
    logInfo(kLog, "rank " + std::to_string(info.rank()) + " of job " + info.job() + " (pid " +
                      std::to_string(info.pid()) + ") registered");
    it = ranks.emplace(key, RankEntry{}).first;
  }
  it->second.info = info;
  it->second.routingId = rid;
  it->second.lastSeenMono = now;
}

bool Agent::Impl::spoolItems(const std::vector<std::string>& records, int64_t now) {
  if (records.empty()) return true;
  Status st = spool->append(records);
  if (!st) {
    spoolLog.log(LogLevel::kError, kLog, "cannot spool " + std::to_string(records.size()) +
                                             " items: " + st.message());
    return false;
  }
  if (unsentSinceMono == 0) unsentSinceMono = now;
  return true;
}

void Agent::Impl::handleProbeFrame(const std::string& rid, const zmq::message_t& frame,
                                   int64_t now) {
  ++counters.probeFrames;
  auto decoded = wire::decode(frame.data(), frame.size());
  if (!decoded) {
    reject(rid, wire::rejectReason(decoded.message()), decoded.message());
    return;
  }
  wire::Envelope& env = *decoded;
  switch (env.body_case()) {
    case wire::Envelope::kRankHello: {
      auto* info = env.mutable_rank_hello()->mutable_rank();
      info->set_node(opts.node);
      bool changed = false;
      registerRank(rid, *info, now, &changed);
      // Periodic hellos only refresh the registry; the collector hears of new or changed ranks.
      if (changed) inRecords.push_back(wire::encode(env));
      return;
    }
    case wire::Envelope::kRankGoodbye: {
      ranks.erase(std::make_pair(env.rank_goodbye().job(), env.rank_goodbye().rank()));
      inRecords.push_back(wire::encode(env));
      return;
    }
    case wire::Envelope::kBatch: {
      auto* batch = env.mutable_batch();
      // Items are stored as the probe serialized them when that is safe, saving a
      // re-encode per item; RankHello items are changed (node) and always re-encoded.
      std::vector<std::string_view> raw;
      std::string_view frameView(static_cast<const char*>(frame.data()), frame.size());
      if (!rawBatchItems(frameView, &raw) || raw.size() != static_cast<size_t>(batch->items_size())) {
        raw.clear();
      }
      size_t index = 0;
      for (auto& item : *batch->mutable_items()) {
        std::string_view rawItem = raw.empty() ? std::string_view() : raw[index];
        ++index;
        if (!allowedItem(item.body_case())) {
          reject("", "bad_item", "batch " + std::to_string(batch->seq()) +
                                     " holds an item of a type probes may not send (field " +
                                     std::to_string(static_cast<int>(item.body_case())) + ")");
          continue;
        }
        if (item.has_rank_hello()) {
          auto* info = item.mutable_rank_hello()->mutable_rank();
          info->set_node(opts.node);
          bool changed = false;
          registerRank(rid, *info, now, &changed);
        } else if (item.has_rank_goodbye()) {
          ranks.erase(std::make_pair(item.rank_goodbye().job(), item.rank_goodbye().rank()));
        }
        bool reuse = !rawItem.empty() && !item.has_rank_hello() &&
                     item.schema_version() == wire::kSchemaVersion;
        std::string rec = reuse ? std::string(rawItem) : wire::encode(item);
        if (rec.size() > kMaxItemBytes) {
          reject("", "item_too_large", "an item of " + std::to_string(rec.size()) + " bytes in batch " +
                                           std::to_string(batch->seq()));
          continue;
        }
        inRecords.push_back(std::move(rec));
        ++inBatchItems;
      }
      inAcks.emplace_back(rid, batch->seq());
      return;
    }
    default:
      reject(rid, "unexpected_type",
             "probes may send RankHello, RankGoodbye and Batch; got field " +
                 std::to_string(static_cast<int>(env.body_case())));
      return;
  }
}

void Agent::Impl::drainProbes(int64_t now) {
  for (int i = 0; i < kDrainLimit; ++i) {
    zmq::message_t rid;
    if (!probes.recv(rid, zmq::recv_flags::dontwait)) break;
    if (!rid.more()) continue;
    zmq::message_t frame;
    if (!probes.recv(frame, zmq::recv_flags::dontwait)) break;
    std::string ridStr = rid.to_string();
    if (frame.more()) {
      // One frame per message is the protocol; drop the extra parts.
      zmq::message_t extra;
      while (frame.more() && probes.recv(extra, zmq::recv_flags::dontwait) && extra.more()) {}
      reject(ridStr, "multipart", "a probe message must be a single frame");
      continue;
    }
    handleProbeFrame(ridStr, frame, now);
  }
  flushProbeInput(now);
}

void Agent::Impl::flushProbeInput(int64_t now) {
  // One write for everything this drain collected, then the acks: an ack always follows
  // the write of its batch, and a failed write acks nothing (the probes send again).
  bool ok = spoolItems(inRecords, now);
  if (ok) {
    counters.probeBatches += inAcks.size();
    counters.probeItems += inBatchItems;
    for (const auto& [rid, seq] : inAcks) {
      wire::Envelope ack;
      ack.mutable_ack()->set_seq(seq);
      sendToProbe(rid, ack);
    }
  }
  inRecords.clear();
  inAcks.clear();
  inBatchItems = 0;
}

void Agent::Impl::handleAck(uint64_t seq) {
  if (seq <= spool->ackedIndex()) return;  // a late ack of something already acked
  if (seq > highestSent) {
    upstreamLog.log(LogLevel::kWarn, kLog, "collector acked seq " + std::to_string(seq) +
                                                " beyond what was sent (" +
                                                std::to_string(highestSent) + "); ignoring it");
    return;
  }
  spool->ack(seq);
  // A late ack of a batch sent before a restart of sending also moves the cursor on.
  if (seq > sendCursor) {
    sendCursor = seq;
    heldSeq = 0;
    heldFrame.clear();
  }
  while (!inflight.empty() && inflight.front().seq <= seq) inflight.pop_front();
}

void Agent::Impl::forwardCommand(const wire::Command& cmd) {
  int sent = 0;
  for (auto& [key, entry] : ranks) {
    if (key.first != cmd.job()) continue;
    if (cmd.ranks_size() > 0 &&
        std::find(cmd.ranks().begin(), cmd.ranks().end(), key.second) == cmd.ranks().end()) {
      continue;
    }
    wire::Envelope env;
    *env.mutable_command() = cmd;
    sendToProbe(entry.routingId, env);
    ++sent;
  }
  counters.commandsForwarded += static_cast<uint64_t>(sent);
  if (sent == 0) {
    ++counters.commandsUnmatched;
    logWarn(kLog, "command " + cmd.id() + " names job " + cmd.job() +
                      " but no matching rank is registered on node " + opts.node);
    wire::Envelope st;
    auto* cs = st.mutable_command_status();
    cs->set_command_id(cmd.id());
    cs->set_job(cmd.job());
    cs->set_rank(cmd.ranks_size() > 0 ? cmd.ranks(0) : 0);
    cs->set_state("failed");
    cs->set_detail("no matching rank registered on node " + opts.node);
    spoolItems({wire::encode(st)}, monotonicNowNs());
  }
}

void Agent::Impl::drainUpstream(int64_t now) {
  for (int i = 0; i < kDrainLimit; ++i) {
    zmq::message_t frame;
    if (!upstream.recv(frame, zmq::recv_flags::dontwait)) return;
    auto decoded = wire::decode(frame.data(), frame.size());
    if (!decoded) {
      ++counters.upstreamErrors;
      upstreamLog.log(LogLevel::kWarn, kLog, "bad frame from the collector: " + decoded.message());
      continue;
    }
    const wire::Envelope& env = *decoded;
    switch (env.body_case()) {
      case wire::Envelope::kAck:
        handleAck(env.ack().seq());
        break;
      case wire::Envelope::kHeartbeatReply: {
        const auto& r = env.heartbeat_reply();
        ++counters.heartbeatReplies;
        if (!offsets.add(r.t1_ns(), r.t2_ns(), r.t3_ns(), wallNowNs())) {
          upstreamLog.log(LogLevel::kDebug, kLog, "heartbeat reply with impossible times ignored");
        }
        break;
      }
      case wire::Envelope::kCommand:
        forwardCommand(env.command());
        break;
      case wire::Envelope::kError:
        ++counters.upstreamErrors;
        upstreamLog.log(LogLevel::kWarn, kLog,
                        "collector rejected a frame (" + env.error().reason() +
                            "): " + env.error().detail());
        break;
      default:
        ++counters.upstreamErrors;
        upstreamLog.log(LogLevel::kWarn, kLog,
                        "unexpected message from the collector (field " +
                            std::to_string(static_cast<int>(env.body_case())) + ")");
        break;
    }
  }
  (void)now;
}

void Agent::Impl::restartFromAcked(const std::string& why) {
  uint64_t from = spool->firstUnacked();
  if (!inflight.empty() || sendCursor != from) {
    ++counters.upstreamResends;
    upstreamLog.log(LogLevel::kInfo, kLog, why + "; sending again from spool index " +
                                               std::to_string(from));
  }
  inflight.clear();
  sendCursor = from;
  heldSeq = 0;
  heldFrame.clear();
  if (spool->nextIndex() > from) unsentSinceMono = 1;  // long ago: send at once
}

void Agent::Impl::drainMonitor(int64_t now) {
  for (int i = 0; i < 64; ++i) {
    zmq::message_t ev;
    if (!monitor.recv(ev, zmq::recv_flags::dontwait)) return;
    zmq::message_t addr;
    if (ev.more()) (void)monitor.recv(addr, zmq::recv_flags::dontwait);
    if (ev.size() < 6) continue;
    uint16_t id = 0;
    std::memcpy(&id, ev.data(), sizeof id);
    if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      connected = true;
      logInfo(kLog, "connected to the collector at " + opts.collector);
      // A new connection may be a new collector process: what was in flight is lost with
      // the old one, so start from the oldest unacked record.
      restartFromAcked("collector (re)connected");
      retryAtMono = 0;
      sendHello();
      nextHello = now + opts.helloIntervalMs * kMs;
      nextHeartbeat = now;
    } else if (id == ZMQ_EVENT_DISCONNECTED) {
      if (connected) logWarn(kLog, "lost the collector at " + opts.collector + "; spooling");
      connected = false;
    }
  }
}

void Agent::Impl::sendHello() {
  wire::Envelope env;
  auto* h = env.mutable_agent_hello();
  h->set_node(opts.node);
  h->set_agent_version(kAgentVersion);
  h->set_pid(static_cast<uint32_t>(::getpid()));
  h->set_host(hostName());
  std::string data = wire::encode(env);
  (void)upstream.send(zmq::buffer(data), zmq::send_flags::dontwait);
}

void Agent::Impl::sendHeartbeat() {
  wire::Envelope env;
  auto* hb = env.mutable_heartbeat();
  hb->set_node(opts.node);
  hb->set_t1_ns(wallNowNs());
  if (offsets.hasEstimate()) {
    hb->set_offset_ns(offsets.best().offsetNs);
    hb->set_rtt_ns(offsets.best().rttNs);
  }
  SpoolStats ss = spool->stats();
  hb->set_spool_bytes(ss.bytes);
  hb->set_spool_dropped(ss.droppedItems);
  hb->set_ranks(static_cast<uint32_t>(ranks.size()));
  std::string data = wire::encode(env);
  if (upstream.send(zmq::buffer(data), zmq::send_flags::dontwait)) ++counters.heartbeatsSent;
}

void Agent::Impl::takeSample(int64_t now) {
  // Forget ranks that stopped saying hello (crashed without a goodbye).
  for (auto it = ranks.begin(); it != ranks.end();) {
    if (now - it->second.lastSeenMono > opts.rankExpiryMs * kMs) {
      logInfo(kLog, "rank " + std::to_string(it->first.second) + " of job " + it->first.first +
                        " sent no hello for " + std::to_string(opts.rankExpiryMs) +
                        " ms; forgetting it");
      it = ranks.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<WatchedProc> procs;
  procs.reserve(ranks.size());
  for (const auto& [key, entry] : ranks) {
    procs.push_back(WatchedProc{key.first, key.second, entry.info.pid()});
  }
  wire::Envelope env;
  *env.mutable_host() = sampler.sample(opts.node, procs, wallNowNs(), now);
  if (spoolItems({wire::encode(env)}, now)) ++counters.hostSamples;
}

void Agent::Impl::pumpUpstream(int64_t now) {
  if (now < retryAtMono) return;
  // Without a collector (ZMQ_IMMEDIATE refuses sends) there is nothing to try; the monitor
  // reports the handshake that opens the way again.
  if (!connected) return;
  while (inflight.size() < static_cast<size_t>(opts.windowBatches)) {
    if (sendCursor < spool->firstUnacked()) {
      sendCursor = spool->firstUnacked();  // the spool bound dropped what we were at
      heldSeq = 0;
      heldFrame.clear();
    }
    uint64_t unsent = spool->nextIndex() - sendCursor;
    if (unsent == 0) {
      unsentSinceMono = 0;
      return;
    }
    if (heldSeq == 0) {
      if (unsent < kMaxBatchItems && unsentSinceMono != 0 &&
          now - unsentSinceMono < opts.batchLingerMs * kMs) {
        return;  // let the batch fill; the loop wakes at the linger deadline
      }
      std::vector<std::string> items;
      uint64_t next = sendCursor;
      Status st = spool->read(sendCursor, kMaxBatchItems, kMaxBatchBytes, &items, &next);
      if (!st) {
        spoolLog.log(LogLevel::kError, kLog, st.message());
        retryAtMono = now + kRetryNs;
        return;
      }
      if (next == sendCursor) return;
      heldFrame = encodeBatchFrame(next, items);
      heldSeq = next;
    }
    if (!upstream.send(zmq::buffer(heldFrame), zmq::send_flags::dontwait)) {
      // The connection went away or its pipe is full: keep the frame for the next try.
      retryAtMono = now + kRetryNs;
      return;
    }
    ++counters.upstreamBatches;
    inflight.push_back(InFlight{heldSeq, now});
    highestSent = std::max(highestSent, heldSeq);
    sendCursor = heldSeq;
    heldSeq = 0;
    heldFrame.clear();
    if (sendCursor >= spool->nextIndex()) unsentSinceMono = 0;
  }
}

int64_t Agent::Impl::nextDeadline(int64_t now) const {
  int64_t d = std::min({nextSample, nextHeartbeat, nextHello, nextSync});
  if (nextProbeDrain > now) d = std::min(d, nextProbeDrain);
  if (!inflight.empty()) d = std::min(d, inflight.front().sentMono + opts.resendTimeoutMs * kMs);
  bool windowOpen = inflight.size() < static_cast<size_t>(opts.windowBatches);
  if (connected && windowOpen && unsentSinceMono != 0) {
    d = std::min(d, std::max(unsentSinceMono + opts.batchLingerMs * kMs, retryAtMono));
  }
  return std::max(d, now);
}

void Agent::Impl::publish() {
  counters.ranks = static_cast<uint32_t>(ranks.size());
  counters.upstreamAcked = spool->ackedIndex();
  counters.haveOffset = offsets.hasEstimate();
  counters.offsetNs = offsets.best().offsetNs;
  counters.rttNs = offsets.best().rttNs;
  counters.collectorConnected = connected;
  SpoolStats ss = spool->stats();
  counters.spoolBytes = ss.bytes;
  counters.spoolDropped = ss.droppedItems;
  counters.spoolPending = spool->pendingItems();
  std::lock_guard lock(statsMu);
  published = counters;
}

Status Agent::Impl::run() {
  while (!stopRequested.load()) {
    int64_t now = monotonicNowNs();
    long timeoutMs = static_cast<long>((nextDeadline(now) - now + kMs - 1) / kMs);
    timeoutMs = std::min(timeoutMs, 1000L);
    // Between drains the probe socket is left out of the poll, so messages from many ranks
    // are read, written and acked together instead of waking the loop one by one.
    bool pollProbes = now >= nextProbeDrain;
    zmq_pollitem_t items[] = {
        {probes.handle(), 0, static_cast<short>(pollProbes ? ZMQ_POLLIN : 0), 0},
        {upstream.handle(), 0, ZMQ_POLLIN, 0},
        {monitor.handle(), 0, ZMQ_POLLIN, 0},
        {nullptr, stopFd, ZMQ_POLLIN, 0},
    };
    int rc = zmq_poll(items, 4, timeoutMs);
    if (rc < 0 && zmq_errno() != EINTR) {
      return Status::error(std::string("zmq_poll: ") + zmq_strerror(zmq_errno()));
    }
    if (stopRequested.load()) break;
    now = monotonicNowNs();
    try {
      if (rc > 0) {
        if (items[0].revents & ZMQ_POLLIN) {
          drainProbes(now);
          nextProbeDrain = now + opts.probeCoalesceMs * kMs;
        }
        if (items[1].revents & ZMQ_POLLIN) drainUpstream(now);
        if (items[2].revents & ZMQ_POLLIN) drainMonitor(now);
      }
      if (now >= nextSample) {
        takeSample(now);
        nextSample = now + opts.sampleIntervalMs * kMs;
      }
      if (now >= nextHeartbeat) {
        sendHeartbeat();
        nextHeartbeat = now + opts.heartbeatIntervalMs * kMs;
      }
      if (now >= nextHello) {
        sendHello();
        nextHello = now + opts.helloIntervalMs * kMs;
      }
      if (!inflight.empty() && now - inflight.front().sentMono > opts.resendTimeoutMs * kMs) {
        restartFromAcked("no ack for upstream batch " + std::to_string(inflight.front().seq) +
                         " within " + std::to_string(opts.resendTimeoutMs) + " ms");
        retryAtMono = 0;
      }
      pumpUpstream(now);
      if (now >= nextSync) {
        Status st = spool->sync();
        if (!st) spoolLog.log(LogLevel::kError, kLog, st.message());
        nextSync = now + opts.syncIntervalMs * kMs;
      }
    } catch (const std::exception& e) {
      // The loop boundary: log, skip this turn, carry on.
      upstreamLog.log(LogLevel::kError, kLog, std::string("event loop turn failed: ") + e.what());
    }
    publish();
  }
  Status st = spool->sync();
  publish();
  logInfo(kLog, "stopping: spool synced with " + std::to_string(spool->pendingItems()) +
                    " records not yet acked");
  return st;
}

Agent::Agent(AgentOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {}

Agent::~Agent() {
  if (impl_->stopFd >= 0) ::close(impl_->stopFd);
  // Sockets close before the context; remove our socket file so no one finds it stale.
  impl_->monitor.close();
  impl_->probes.close();
  impl_->upstream.close();
  if (!impl_->ipcPath.empty() && !impl_->bound.empty()) ::unlink(impl_->ipcPath.c_str());
}

Status Agent::start() { return impl_->start(); }
Status Agent::run() { return impl_->run(); }

void Agent::stop() {
  impl_->stopRequested.store(true);
  if (impl_->stopFd >= 0) {
    uint64_t one = 1;
    ssize_t n = ::write(impl_->stopFd, &one, sizeof one);
    (void)n;
  }
}

AgentStats Agent::stats() const {
  std::lock_guard lock(impl_->statsMu);
  return impl_->published;
}

std::string Agent::boundEndpoint() const { return impl_->bound; }

namespace {
std::atomic<Agent*> gSignalAgent{nullptr};
void onSignal(int) {
  Agent* a = gSignalAgent.load();
  if (a != nullptr) a->stop();
}
}  // namespace

int run(const AgentOptions& opts) {
  // Batch frames and spool reads come and go in MiB-sized buffers; with glibc's defaults
  // each free hands the memory back (munmap or a heap trim), and the TLB shootdowns that
  // follow were a visible share of the agent's CPU. Keep freed memory for reuse instead.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  Agent agent(opts);
  Status st = agent.start();
  if (!st) {
    logError(kLog, st.message());
    return 1;
  }
  gSignalAgent.store(&agent);
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  st = agent.run();
  gSignalAgent.store(nullptr);
  if (!st) {
    logError(kLog, st.message());
    return 1;
  }
  return 0;
}

}  // namespace trainscope::agent
