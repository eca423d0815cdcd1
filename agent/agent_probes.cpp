// The probe side of the agent: the ROUTER on the local endpoint, the rank registry, batch
// intake into the spool with acks after the write, rejects, and commands handed to probes.
// Runs on the agent's loop thread only.
#include "agent/agent_impl.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include <zmq.hpp>

#include "common/clock.h"
#include "common/log.h"
#include "schema/wire.h"

namespace trainscope::agent {
using namespace internal;  // NOLINT(google-build-using-namespace): the agent's own constants

namespace {

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

}  // namespace

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
    if (!probes.send(zmq::buffer(rid), zmq::send_flags::sndmore | zmq::send_flags::dontwait))
      return;
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
      if (!rawBatchItems(frameView, &raw) ||
          raw.size() != static_cast<size_t>(batch->items_size())) {
        raw.clear();
      }
      size_t index = 0;
      for (auto& item : *batch->mutable_items()) {
        std::string_view rawItem = raw.empty() ? std::string_view() : raw[index];
        ++index;
        if (!allowedItem(item.body_case())) {
          reject("", "bad_item",
                 "batch " + std::to_string(batch->seq()) +
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
        } else if (item.has_command_status() && item.command_status().state() == "uploading" &&
                   !item.command_status().file_path().empty()) {
          // Shipped once the status itself is in the spool (flushProbeInput).
          inUploads.push_back(item.command_status());
        }
        bool reuse = !rawItem.empty() && !item.has_rank_hello() &&
                     item.schema_version() == wire::kSchemaVersion;
        std::string rec = reuse ? std::string(rawItem) : wire::encode(item);
        if (rec.size() > kMaxItemBytes) {
          reject("", "item_too_large",
                 "an item of " + std::to_string(rec.size()) + " bytes in batch " +
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
      while (frame.more() && probes.recv(extra, zmq::recv_flags::dontwait) && extra.more()) {
      }
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
    // The statuses are spooled: their files' chunks follow them.
    for (const auto& status : inUploads) queueUpload(status, false);
  }
  inUploads.clear();
  inRecords.clear();
  inAcks.clear();
  inBatchItems = 0;
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
  }
  // Every named rank without a probe here is answered at once, so the collector does not
  // wait for its deadline (docs/CAPTURE.md step 2).
  std::vector<uint32_t> answered;
  for (uint32_t rank : cmd.ranks()) {
    if (ranks.count(std::make_pair(cmd.job(), rank)) != 0) continue;
    if (std::find(answered.begin(), answered.end(), rank) != answered.end()) continue;
    answered.push_back(rank);
    spoolCommandStatus(cmd.id(), cmd.job(), rank, "failed",
                       "rank " + std::to_string(rank) + " is not connected to agent " + opts.node);
  }
  if (cmd.ranks_size() == 0 && sent == 0) {
    spoolCommandStatus(cmd.id(), cmd.job(), 0, "failed",
                       "no rank of job " + cmd.job() + " is connected to agent " + opts.node);
  }
}

}  // namespace trainscope::agent
