#include "collector/capture/request.h"

#include <algorithm>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "common/json_limits.h"
#include "common/timed_id.h"
#include "schema/wire.h"

namespace trainscope::capture {
namespace {

using nlohmann::json;

// A rank at or above the protocol's world size limit can never exist: refusing it bounds what
// a spec names ("0-4000000000") to kMaxWorldSize ranks.
std::string beyondLimit(uint64_t rank) {
  return "ranks: " + std::to_string(rank) + " is not below the world size limit " +
         std::to_string(wire::kMaxWorldSize);
}

Result<uint32_t> parseRankNumber(std::string_view text, std::string_view whole) {
  if (text.empty() || text.size() > 10 ||
      text.find_first_not_of("0123456789") != std::string_view::npos) {
    return Result<uint32_t>::error("ranks: '" + shortForMessage(text) + "' in '" +
                                   shortForMessage(whole) + "' is not a rank number");
  }
  const uint64_t v = std::stoull(std::string(text));
  if (v >= wire::kMaxWorldSize) return Result<uint32_t>::error(beyondLimit(v));
  return static_cast<uint32_t>(v);
}

std::string typeName(const json& j) {
  return j.is_null() ? "null" : std::string(j.type_name());
}

}  // namespace

Result<RankSpec> parseRankSpec(std::string_view text) {
  RankSpec spec;
  if (text == "all") return spec;
  spec.all = false;
  if (text.empty()) {
    return Result<RankSpec>::error(
        "ranks: empty; expected \"all\", a spec like \"0,3,5-7\" or a list of ranks");
  }
  std::set<uint32_t> ranks;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view part = text.substr(pos, comma - pos);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    size_t dash = part.find('-');
    if (dash == std::string_view::npos) {
      auto r = parseRankNumber(part, text);
      if (!r) return r.status();
      ranks.insert(*r);
    } else {
      auto lo = parseRankNumber(part.substr(0, dash), text);
      if (!lo) return lo.status();
      auto hi = parseRankNumber(part.substr(dash + 1), text);
      if (!hi) return hi.status();
      if (*lo > *hi) {
        return Result<RankSpec>::error("ranks: range '" + shortForMessage(part) +
                                       "' ends before it starts");
      }
      for (uint32_t r = *lo; r <= *hi; ++r) ranks.insert(r);  // both below kMaxWorldSize
    }
    pos = comma + 1;
  }
  spec.ranks.assign(ranks.begin(), ranks.end());
  return spec;
}

Result<CaptureRequest> parseCaptureRequest(std::string_view body) {
  using R = Result<CaptureRequest>;
  CaptureRequest req;
  bool blank = std::all_of(body.begin(), body.end(),
                           [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; });
  if (blank) return req;
  std::string why;
  auto doc = parseJsonBounded(body, kMaxRequestJsonDepth, &why);
  if (doc.is_discarded()) return R::error("body: " + why + "; expected a JSON object");
  if (!doc.is_object()) {
    return R::error("body: expected a JSON object, got " + typeName(doc));
  }
  auto unsignedField = [&](const char* name, const json& v, uint64_t max) -> Result<uint64_t> {
    if (!v.is_number_integer() || (v.is_number_integer() && !v.is_number_unsigned())) {
      return Result<uint64_t>::error(std::string(name) + ": expected a non-negative integer, got " +
                                     describeJsonValue(v));
    }
    const auto n = v.get<uint64_t>();
    if (n > max) {
      return Result<uint64_t>::error(std::string(name) + ": must be at most " +
                                     std::to_string(max) + ", got " + std::to_string(n));
    }
    return n;
  };
  for (const auto& [key, v] : doc.items()) {
    if (key == "ranks") {
      if (v.is_string()) {
        auto spec = parseRankSpec(v.get<std::string>());
        if (!spec) return spec.status();
        req.ranks = std::move(spec.value());
      } else if (v.is_array()) {
        std::set<uint32_t> ranks;
        for (const auto& r : v) {
          if (!r.is_number_unsigned()) {
            return R::error("ranks: list entries must be non-negative integers, got " +
                            describeJsonValue(r));
          }
          if (r.get<uint64_t>() >= wire::kMaxWorldSize)
            return R::error(beyondLimit(r.get<uint64_t>()));
          ranks.insert(r.get<uint32_t>());
        }
        if (ranks.empty()) return R::error("ranks: the list is empty");
        req.ranks.all = false;
        req.ranks.ranks.assign(ranks.begin(), ranks.end());
      } else {
        return R::error(
            "ranks: expected \"all\", a spec like \"0,3,5-7\" or a list of ranks, "
            "got " +
            typeName(v));
      }
    } else if (key == "steps") {
      auto n = unsignedField("steps", v, kMaxSteps);
      if (!n) return n.status();
      if (*n == 0) return R::error("steps: must be at least 1, got 0");
      req.steps = static_cast<uint32_t>(*n);
    } else if (key == "history") {
      auto n = unsignedField("history", v, kMaxHistory);
      if (!n) return n.status();
      req.history = static_cast<uint32_t>(*n);
    } else if (key == "start_step") {
      if (!v.is_number_integer()) {
        return R::error("start_step: expected an integer step, got " + describeJsonValue(v));
      }
      // Checked before it is read as int64_t: a value past INT64_MAX would wrap negative.
      if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(wire::kMaxStep)) {
        return R::error("start_step: must be at most " + std::to_string(wire::kMaxStep) +
                        " (the protocol's step limit), got " + describeJsonValue(v));
      }
      req.startStep = v.get<int64_t>();
      if (*req.startStep < 0) {
        return R::error("start_step: must be >= 0, got " + std::to_string(*req.startStep));
      }
    } else if (key == "max_bytes") {
      auto n = unsignedField("max_bytes", v, kMaxMaxBytes);
      if (!n) return n.status();
      if (*n == 0) return R::error("max_bytes: must be at least 1, got 0");
      req.maxBytes = *n;
    } else if (key == "reason") {
      if (!v.is_string()) return R::error("reason: expected a string, got " + typeName(v));
      req.reason = v.get<std::string>();
      if (req.reason.size() > 1000) {
        return R::error("reason: at most 1000 bytes, got " + std::to_string(req.reason.size()));
      }
      if (req.reason.empty()) req.reason = kDefaultReason;
    } else if (key == "kind") {
      if (!v.is_string() || (v.get<std::string>() != "trace" && v.get<std::string>() != "stacks")) {
        return R::error("kind: must be \"trace\" or \"stacks\", got " + describeJsonValue(v));
      }
      req.kind = v.get<std::string>();
    } else {
      return R::error("unknown field '" + shortForMessage(key) +
                      "' (allowed: ranks, steps, start_step, history, max_bytes, reason, kind)");
    }
  }
  return req;
}

Result<std::vector<uint32_t>> resolveRanks(const RankSpec& spec, uint32_t worldSize,
                                           const std::vector<uint32_t>& knownRanks) {
  using R = Result<std::vector<uint32_t>>;
  if (worldSize > wire::kMaxWorldSize) {
    // Only a database written before the limit existed holds such a job.
    return R::error("ranks: the job's world size " + std::to_string(worldSize) +
                    " exceeds the limit of " + std::to_string(wire::kMaxWorldSize));
  }
  if (spec.all) {
    std::vector<uint32_t> out;
    if (worldSize == 0) {
      out = knownRanks;
      std::sort(out.begin(), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
    } else {
      out.resize(worldSize);
      for (uint32_t r = 0; r < worldSize; ++r) out[r] = r;
    }
    if (out.empty()) return R::error("ranks: the job has no known ranks");
    return out;
  }
  std::vector<uint32_t> known = knownRanks;  // sorted once: a spec may name 65,536 ranks
  std::sort(known.begin(), known.end());
  for (uint32_t r : spec.ranks) {
    const bool isKnown = std::binary_search(known.begin(), known.end(), r);
    if (worldSize != 0 ? r >= worldSize : !isKnown) {
      return R::error("ranks: rank " + std::to_string(r) + " is outside 0.." +
                      (worldSize == 0 ? std::string("(unknown)") : std::to_string(worldSize - 1)) +
                      " (world size " + std::to_string(worldSize) + ")");
    }
  }
  return spec.ranks;
}

std::string newCaptureId(int64_t nowNs) {
  return timedId("cap", nowNs);
}

}  // namespace trainscope::capture
