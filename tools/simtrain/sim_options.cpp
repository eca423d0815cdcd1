#include "tools/simtrain/sim_options.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "common/pipeline_schedule.h"
#include "common/str_cat.h"
#include "tools/simtrain/step_model.h"

namespace trainscope::sim {
namespace {

Result<int64_t> parseInt(const std::string& spec, const std::string& key, const std::string& v,
                         int64_t min) {
  int64_t out = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || ptr != v.data() + v.size()) {
    return Result<int64_t>::error("--inject '" + spec + "': " + key + "='" + v +
                                  "' is not an integer");
  }
  if (out < min) {
    return Result<int64_t>::error("--inject '" + spec + "': " + key + "=" + v +
                                  " must be >= " + std::to_string(min));
  }
  return out;
}

Result<double> parseFactor(const std::string& spec, const std::string& v) {
  size_t used = 0;
  double out = 0;
  try {
    out = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size() || !(out > 0) || out > 1e6) {
    return Result<double>::error("--inject '" + spec + "': factor='" + v +
                                 "' must be a number > 0");
  }
  return out;
}

}  // namespace

const char* truthKindName(Inject::Kind kind) {
  switch (kind) {
    case Inject::Kind::kStraggler:
      return "straggler";
    case Inject::Kind::kShift:
      return "step_shift";
    case Inject::Kind::kComm:
      return "slow_comm";
    case Inject::Kind::kOp:
      return "op_regression";
    case Inject::Kind::kHang:
      return "hang";
    case Inject::Kind::kSpike:
      return "spike";
    case Inject::Kind::kStage:
      return "stage_imbalance";
    case Inject::Kind::kWorker:
    case Inject::Kind::kGpu:
      return "straggler";
    case Inject::Kind::kSeqlen:
      return "workload_imbalance";
    case Inject::Kind::kP2p:
      return "slow_comm";
    case Inject::Kind::kExperts:
      return "expert_imbalance";
  }
  return "unknown";
}

Result<Inject> parseInject(const std::string& spec) {
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  // "--inject 'SPEC': " and the rest of the message.
  const auto refuse = [&spec](const auto&... parts) {
    return Result<Inject>::error(strCat("--inject '", spec, "': ", parts...));
  };
  static const std::map<std::string, std::pair<Inject::Kind, std::set<std::string>>> kKinds = {
      {"straggler", {Inject::Kind::kStraggler, {"rank", "from", "factor"}}},
      {"shift", {Inject::Kind::kShift, {"from", "factor"}}},
      {"comm", {Inject::Kind::kComm, {"rank", "from", "factor"}}},
      {"op", {Inject::Kind::kOp, {"name", "from", "factor", "rank"}}},
      {"hang", {Inject::Kind::kHang, {"rank", "at"}}},
      {"spike", {Inject::Kind::kSpike, {"every", "factor"}}},
      {"stage", {Inject::Kind::kStage, {"pp", "factor", "from"}}},
      {"worker", {Inject::Kind::kWorker, {"dp", "pp", "factor", "from"}}},
      {"seqlen", {Inject::Kind::kSeqlen, {"cv", "from"}}},
      // "src" is the first from= of a p2p spec (the sending rank); see parseInject's header.
      {"p2p", {Inject::Kind::kP2p, {"from", "to", "factor"}}},
      {"gpu", {Inject::Kind::kGpu, {"rank", "factor", "from"}}},
      {"experts", {Inject::Kind::kExperts, {"skew", "ep", "from"}}},
  };
  auto k = kKinds.find(kind);
  if (k == kKinds.end()) {
    return refuse("unknown kind '", kind,
                  "' (expected straggler, shift, comm, op, hang, spike, stage, worker, seqlen, "
                  "p2p, gpu or experts)");
  }
  const auto& allowed = k->second.second;
  std::map<std::string, std::string> kv;
  if (colon != std::string::npos) {
    std::string rest = spec.substr(colon + 1);
    size_t pos = 0;
    while (pos <= rest.size()) {
      size_t comma = rest.find(',', pos);
      if (comma == std::string::npos) comma = rest.size();
      const std::string item = rest.substr(pos, comma - pos);
      const auto eq = item.find('=');
      if (eq == std::string::npos || eq == 0) {
        return refuse("'", item, "' is not key=value");
      }
      std::string key = item.substr(0, eq);
      if (!allowed.count(key)) {
        std::string list;
        for (const auto& a : allowed) list.append(list.empty() ? "" : ", ").append(a);
        return refuse("unknown key '", key, "' for ", kind, " (allowed: ", list, ")");
      }
      // p2p:from=R,to=Q,factor=F[,from=N]: the first from= names the sending rank.
      if (kind == "p2p" && key == "from" && !kv.count("src")) key = "src";
      if (!kv.emplace(key, item.substr(eq + 1)).second) {
        return refuse("key '", key, "' given ",
                      kind == "p2p" && key == "from" ? "three times" : "twice");
      }
      pos = comma + 1;
    }
  }
  for (const auto& a : allowed) {
    // Optional: an op fault on every rank, a comm fault on every link (fabric-wide).
    if ((kind == "op" || kind == "comm") && a == "rank") continue;
    if (kind == "experts" && a == "ep") continue;  // index 0 holds the hot experts
    // These faults are present from the first step unless they say otherwise.
    const bool fromOptional = kind == "stage" || kind == "worker" || kind == "seqlen" ||
                              kind == "p2p" || kind == "gpu" || kind == "experts";
    if (fromOptional && a == "from") continue;
    if (!kv.count(a)) {
      return refuse("missing key '", a, "'");
    }
  }
  if (kind == "p2p" && !kv.count("src")) {
    return refuse("missing key 'from' (the sending rank: p2p:from=R,to=Q,factor=F[,from=STEP])");
  }

  Inject in;
  in.kind = k->second.first;
  in.spec = spec;
  for (const char* key : {"rank", "src", "to"}) {
    if (!kv.count(key)) continue;
    const std::string shown = std::string(key) == "src" ? "from" : key;
    auto r = parseInt(spec, shown, kv[key], 0);
    if (!r) return r.status();
    if (*r > 1'000'000) {
      return refuse(shown, " rank too large");
    }
    if (std::string(key) == "to") {
      in.to = static_cast<uint32_t>(*r);
    } else {
      in.rank = static_cast<uint32_t>(*r);
    }
  }
  if (kv.count("cv")) {
    size_t used = 0;
    double cv = 0;
    try {
      cv = std::stod(kv["cv"], &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != kv["cv"].size() || !(cv > 0) || cv > 2) {
      return refuse("cv='" + kv["cv"] + "' must be a number in (0, 2]");
    }
    in.cv = cv;
  }
  if (kv.count("from")) {
    auto r = parseInt(spec, "from", kv["from"], 0);
    if (!r) return r.status();
    in.fromStep = *r;
  }
  for (const char* key : {"pp", "dp", "ep"}) {
    if (!kv.count(key)) continue;
    auto r = parseInt(spec, key, kv[key], 0);
    if (!r) return r.status();
    if (*r > 4096) {
      return refuse(key, " must be at most 4096");
    }
    const std::string k = key;
    (k == "pp" ? in.pp : k == "dp" ? in.dp : in.ep) = static_cast<uint32_t>(*r);
  }
  if (kv.count("skew")) {
    auto r = parseFactor(spec, kv["skew"]);
    if (!r) return refuse("skew='" + kv["skew"] + "' must be a number >= 1");
    if (*r < 1.0) {
      return refuse("skew=" + kv["skew"] + " must be >= 1 (the hot experts' tokens / the others')");
    }
    in.factor = *r;
  }
  if (kv.count("at")) {
    auto r = parseInt(spec, "at", kv["at"], 0);
    if (!r) return r.status();
    in.atStep = *r;
  }
  if (kv.count("every")) {
    auto r = parseInt(spec, "every", kv["every"], 1);
    if (!r) return r.status();
    in.every = *r;
  }
  if (kv.count("factor")) {
    auto r = parseFactor(spec, kv["factor"]);
    if (!r) return r.status();
    in.factor = *r;
    if (in.kind == Inject::Kind::kSpike && in.factor < 1.0) {
      return refuse("factor=" + kv["factor"] + " must be >= 1 for a spike");
    }
  }
  if (kv.count("name")) {
    in.op = kv["name"];
    const auto known = StepModel::knownOps();
    if (std::find(known.begin(), known.end(), in.op) == known.end()) {
      std::string list;
      for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
      return refuse("name='" + in.op + "' is not an operator of the model (known: " + list + ")");
    }
  }
  return in;
}

uint32_t ParallelLayout::rankAt(uint32_t ppIdx, uint32_t dpIdx, uint32_t tpIdx,
                                uint32_t cpIdx) const {
  return ((ppIdx * dp + dpIdx) * cp + cpIdx) * tp + tpIdx;
}

std::vector<uint32_t> ParallelLayout::tpGroup(uint32_t rank) const {
  std::vector<uint32_t> out;
  for (uint32_t t = 0; t < tp; ++t) {
    out.push_back(rankAt(ppIndex(rank), dpIndex(rank), t, cpIndex(rank)));
  }
  return out;
}

std::vector<uint32_t> ParallelLayout::ppGroup(uint32_t rank) const {
  std::vector<uint32_t> out;
  for (uint32_t s = 0; s < pp; ++s) {
    out.push_back(rankAt(s, dpIndex(rank), tpIndex(rank), cpIndex(rank)));
  }
  return out;
}

std::vector<uint32_t> ParallelLayout::dpGroup(uint32_t rank) const {
  std::vector<uint32_t> out;
  for (uint32_t d = 0; d < dp; ++d) {
    out.push_back(rankAt(ppIndex(rank), d, tpIndex(rank), cpIndex(rank)));
  }
  return out;
}

std::vector<uint32_t> ParallelLayout::cpGroup(uint32_t rank) const {
  std::vector<uint32_t> out;
  for (uint32_t c = 0; c < cp; ++c) {
    out.push_back(rankAt(ppIndex(rank), dpIndex(rank), tpIndex(rank), c));
  }
  return out;
}

std::vector<uint32_t> ParallelLayout::epGroup(uint32_t rank) const {
  std::vector<uint32_t> out;
  const uint32_t first = dpIndex(rank) - dpIndex(rank) % ep;
  for (uint32_t e = 0; e < ep; ++e) {
    out.push_back(rankAt(ppIndex(rank), first + e, tpIndex(rank), cpIndex(rank)));
  }
  return out;
}

Result<ParallelLayout> parseParallel(const std::string& spec) {
  const auto refuse = [&spec](const auto&... parts) {
    return Result<ParallelLayout>::error(strCat("--parallel '", spec, "': ", parts...));
  };
  ParallelLayout out;
  std::set<std::string> seen;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    const std::string item = spec.substr(pos, comma - pos);
    pos = comma + 1;
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return refuse("'", item, "' is not key=value (tp=T,pp=P,dp=D)");
    }
    const std::string key = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    if (key != "tp" && key != "pp" && key != "dp" && key != "cp" && key != "ep") {
      return refuse("unknown key '", key, "' (expected tp, pp, dp, cp, ep)");
    }
    if (!seen.insert(key).second) {
      return refuse("key '", key, "' given twice");
    }
    uint32_t v = 0;
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc() || ptr != value.data() + value.size() || v < 1 || v > 4096) {
      return refuse(key, "='", value, "' must be an integer in 1..4096");
    }
    (key == "tp"   ? out.tp
     : key == "pp" ? out.pp
     : key == "dp" ? out.dp
     : key == "cp" ? out.cp
                   : out.ep) = v;
  }
  return out;
}

std::vector<uint32_t> injectRanks(const SimOptions& o, const Inject& in) {
  std::vector<uint32_t> out;
  const uint32_t world = worldSizeOf(o);
  if ((in.kind == Inject::Kind::kStage || in.kind == Inject::Kind::kWorker) && o.parallel) {
    const ParallelLayout& par = *o.parallel;
    for (uint32_t r = 0; r < world; ++r) {
      if (par.ppIndex(r) != in.pp) continue;
      if (in.kind == Inject::Kind::kWorker && par.dpIndex(r) != in.dp) continue;
      out.push_back(r);
    }
    return out;
  }
  if (in.kind == Inject::Kind::kExperts && o.parallel) {
    for (uint32_t r = 0; r < world; ++r) {
      if (o.parallel->epIndex(r) == in.ep) out.push_back(r);
    }
    return out;
  }
  if (in.kind == Inject::Kind::kP2p && in.rank) return {*in.rank, in.to};
  if (in.rank) return {*in.rank};
  for (uint32_t r = 0; r < world; ++r) out.push_back(r);
  return out;
}

uint32_t worldSizeOf(const SimOptions& o) {
  return o.worldSize != 0 ? o.worldSize : o.firstRank + o.ranks;
}

Status validate(const SimOptions& o, bool needAgents) {
  if (needAgents && o.agents.empty()) return Status::error("--agent: at least one is required");
  for (const auto& a : o.agents) {
    if (a.rfind("ipc://", 0) != 0 && a.rfind("tcp://", 0) != 0 && a.rfind("inproc://", 0) != 0) {
      return Status::error("--agent '" + a + "': expected ipc://PATH or tcp://HOST:PORT");
    }
  }
  if (o.ranks == 0 || o.ranks > 4096) return Status::error("--ranks must be in 1..4096");
  if (o.worldSize > 65536) return Status::error("--world-size must be at most 65536");
  if (o.firstRank > 65536) return Status::error("--first-rank must be at most 65536");
  const uint32_t world = worldSizeOf(o);
  if (o.worldSize != 0 && o.firstRank + o.ranks > o.worldSize) {
    return Status::error("--first-rank " + std::to_string(o.firstRank) + " + --ranks " +
                         std::to_string(o.ranks) + " exceeds --world-size " +
                         std::to_string(o.worldSize));
  }
  if (o.steps < 0) return Status::error("--steps must be >= 0 (0 runs until killed)");
  if (!(o.stepMs > 0) || o.stepMs > 3.6e6) return Status::error("--step-ms must be > 0");
  if (!(o.noise >= 0) || o.noise > 2) return Status::error("--noise must be in 0..2");
  if (o.warmup < 0) return Status::error("--warmup must be >= 0");
  if (o.flushTimeoutMs < 0) return Status::error("--flush-timeout-ms must be >= 0");
  if (!(o.hangHoldS >= 0)) return Status::error("--hang-hold-s must be >= 0");
  if (o.parallel) {
    const ParallelLayout& par = *o.parallel;
    const uint64_t made = static_cast<uint64_t>(par.tp) * par.cp * par.pp * par.dp;
    if (made != world) {
      return Status::error("--parallel tp=" + std::to_string(par.tp) +
                           ",pp=" + std::to_string(par.pp) + ",dp=" + std::to_string(par.dp) +
                           ",cp=" + std::to_string(par.cp) + " makes " + std::to_string(made) +
                           " ranks, but the job has " + std::to_string(world) +
                           " (--ranks/--world-size)");
    }
    if (par.dp % par.ep != 0) {
      return Status::error("--parallel: ep=" + std::to_string(par.ep) +
                           " must divide dp=" + std::to_string(par.dp) +
                           " (expert-parallel groups are carved out of the data-parallel "
                           "replicas)");
    }
    const auto schedule = pipeline::parseSchedule(o.schedule);
    if (!schedule) return Status::error("--schedule " + schedule.message());
    if (o.microbatches > 4096) return Status::error("--microbatches must be in 1..4096");
    const uint32_t micro = o.microbatches > 0 ? o.microbatches : 2 * par.pp;
    if (const std::string p = pipeline::microbatchProblem(*schedule, par.pp, micro); !p.empty()) {
      return Status::error("--schedule " + o.schedule + " with --microbatches " +
                           std::to_string(micro) + ": " + p);
    }
    for (const auto& in : o.injects) {
      if (in.kind == Inject::Kind::kHang) {
        return Status::error("--inject '" + in.spec + "': hang is not modelled with --parallel");
      }
      if (in.kind == Inject::Kind::kStage && in.pp >= par.pp) {
        return Status::error("--inject '" + in.spec + "': pp=" + std::to_string(in.pp) +
                             " is not below the pipeline's " + std::to_string(par.pp) + " stages");
      }
      if (in.kind == Inject::Kind::kWorker && (in.pp >= par.pp || in.dp >= par.dp)) {
        return Status::error(
            "--inject '" + in.spec + "': " +
            (in.pp >= par.pp ? "pp=" + std::to_string(in.pp) + " is not below the pipeline's " +
                                   std::to_string(par.pp) + " stages"
                             : "dp=" + std::to_string(in.dp) + " is not below the " +
                                   std::to_string(par.dp) + " data-parallel replicas"));
      }
      if (in.kind == Inject::Kind::kP2p && in.rank && *in.rank < world && in.to < world) {
        const uint32_t a = *in.rank, b = in.to;
        const bool neighbours =
            par.dpIndex(a) == par.dpIndex(b) && par.tpIndex(a) == par.tpIndex(b) &&
            (par.ppIndex(a) + 1 == par.ppIndex(b) || par.ppIndex(b) + 1 == par.ppIndex(a));
        if (!neighbours) {
          return Status::error("--inject '" + in.spec + "': ranks " + std::to_string(a) + " and " +
                               std::to_string(b) +
                               " are not neighbouring stages of one pipeline (same dp and tp "
                               "index, stages one apart), so no p2p link joins them");
        }
      }
      if (in.kind == Inject::Kind::kExperts && (par.ep < 2 || in.ep >= par.ep)) {
        return Status::error("--inject '" + in.spec + "': " +
                             (par.ep < 2 ? std::string("experts needs --parallel ep=E with E >= 2 "
                                                       "(an expert-parallel MoE job)")
                                         : "ep=" + std::to_string(in.ep) +
                                               " is not below the expert-parallel size " +
                                               std::to_string(par.ep)));
      }
      if (in.kind == Inject::Kind::kComm && in.rank) {
        return Status::error("--inject '" + in.spec +
                             "': with --parallel, comm slows every data-parallel all_reduce; "
                             "rank= (one ring link) is not modelled");
      }
    }
    if (!(o.edgeLoad >= 0) || o.edgeLoad > 10) {
      return Status::error("--edge-load must be in 0..10");
    }
  } else if (o.microbatches != 0 || o.schedule != "1f1b" || o.edgeLoad != 0) {
    return Status::error("--microbatches, --schedule and --edge-load need --parallel");
  } else {
    for (const auto& in : o.injects) {
      if (in.kind == Inject::Kind::kStage || in.kind == Inject::Kind::kWorker ||
          in.kind == Inject::Kind::kP2p || in.kind == Inject::Kind::kGpu ||
          in.kind == Inject::Kind::kExperts) {
        return Status::error("--inject '" + in.spec +
                             "': stage, worker, p2p, gpu and experts faults need --parallel "
                             "(stages, replicas, tensor- and expert-parallel groups)");
      }
    }
  }
  if (!(o.endStaggerMs >= 0) || o.endStaggerMs > 3.6e6) {
    return Status::error("--end-stagger-ms must be in 0..3600000");
  }
  int hangs = 0;
  for (const auto& in : o.injects) {
    if (in.kind == Inject::Kind::kP2p && in.to >= world) {
      return Status::error("--inject '" + in.spec + "': to=" + std::to_string(in.to) +
                           " is not below " +
                           (o.worldSize != 0 || o.firstRank != 0 ? "--world-size " : "--ranks ") +
                           std::to_string(world));
    }
    if (in.rank && *in.rank >= world) {
      return Status::error("--inject '" + in.spec +
                           "': " + (in.kind == Inject::Kind::kP2p ? "from=" : "rank=") +
                           std::to_string(*in.rank) + " is not below " +
                           (o.worldSize != 0 || o.firstRank != 0 ? "--world-size " : "--ranks ") +
                           std::to_string(world));
    }
    if (in.kind == Inject::Kind::kHang && ++hangs > 1) {
      return Status::error("--inject '" + in.spec + "': only one hang per run");
    }
  }
  return Status::ok();
}

}  // namespace trainscope::sim
