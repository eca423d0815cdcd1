#include "importer/classify.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "schema/wire.h"

namespace trainscope::importer {
namespace {

bool startsWith(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

bool startsWithNoCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  }
  return true;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Lower case without '_', '-' and spaces: "All_Reduce" and "allreduce" read the same.
std::string squeezed(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '_' || c == '-' || c == ' ') continue;
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

// "nccl:all_reduce" -> "all_reduce" when the part before ':' is a communication backend.
std::optional<std::string_view> backendOp(std::string_view name) {
  const size_t colon = name.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 >= name.size()) return {};
  if (name.size() > colon + 1 && name[colon + 1] == ':') return {};  // "c10d::x", "aten::x"
  static constexpr std::string_view kBackends[] = {"nccl", "gloo", "hccl", "mpi",
                                                   "ucc",  "xccl", "rccl", "mccl"};
  const std::string_view backend = name.substr(0, colon);
  for (std::string_view b : kBackends) {
    if (backend == b) return name.substr(colon + 1);
  }
  return {};
}

}  // namespace

std::optional<int64_t> profilerStepNumber(std::string_view name) {
  constexpr std::string_view kPrefix = "ProfilerStep#";
  if (!startsWith(name, kPrefix) || name.size() == kPrefix.size() || name.size() > 32) return {};
  int64_t n = 0;
  for (size_t i = kPrefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return {};
    n = n * 10 + (name[i] - '0');
  }
  return n;
}

std::optional<int64_t> trailingNumber(std::string_view name) {
  size_t i = name.size();
  while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9') --i;
  if (i == name.size() || name.size() - i > 17) return {};
  int64_t n = 0;
  for (size_t k = i; k < name.size(); ++k) n = n * 10 + (name[k] - '0');
  return n;
}

EventKind kindOf(std::string_view cat, std::string_view name, bool trainscopeFormat) {
  if (trainscopeFormat) {
    if (cat == "step") return EventKind::kCaptureStep;
    if (cat == "op") return EventKind::kCaptureOp;
    if (cat == "range") return EventKind::kCaptureRange;
    if (cat == "collective") return EventKind::kCaptureColl;
  }
  if (cat == "kernel") {
    return startsWithNoCase(name, "nccl") ? EventKind::kDeviceComm : EventKind::kDeviceKernel;
  }
  if (cat == "gpu_memcpy" || cat == "gpu_memset") return EventKind::kDeviceCopy;
  if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "python_function" ||
      cat == "gpu_user_annotation" || cat == "Trace" || cat == "ac2g" || cat == "fwdbwd" ||
      cat == "cpu_instant_event" || cat == "overhead" || cat == "cuda_sync") {
    return EventKind::kOther;
  }
  const bool kineto = cat == "cpu_op" || cat == "user_annotation";
  if (profilerStepNumber(name)) return EventKind::kProfilerStep;
  if (backendOp(name)) return EventKind::kCommAnnotation;
  if (name == "record_param_comms") return EventKind::kParamComms;
  if (startsWith(name, "c10d::")) return EventKind::kC10dOp;
  if (startsWith(name, "enumerate(DataLoader)")) return EventKind::kDataLoad;
  if (cat == "cpu_op") return EventKind::kCpuOp;
  if (kineto) return EventKind::kOther;  // "## forward ##", "Optimizer.step#SGD.step", ...
  return EventKind::kGeneric;
}

wire::CollectiveOp collectiveOpFromName(std::string_view name) {
  std::string s = squeezed(name);
  if (backendOp(name)) s = squeezed(*backendOp(name));
  if (startsWith(s, "c10d::")) s = s.substr(6);
  // Variants: "_base", "_coalesced", "_into_tensor", "_tensor", "v", a trailing '_' (c10d).
  for (std::string_view suffix : {"coalesced", "base", "intotensor", "tensor"}) {
    if (s.size() > suffix.size() &&
        s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0) {
      s.resize(s.size() - suffix.size());
    }
  }
  if (s == "alltoallv" || s == "alltoallsingle") s = "alltoall";
  if (s == "allreduce") return wire::ALL_REDUCE;
  if (s == "allgather") return wire::ALL_GATHER;
  if (s == "reducescatter") return wire::REDUCE_SCATTER;
  if (s == "alltoall") return wire::ALL_TO_ALL;
  if (s == "broadcast") return wire::BROADCAST;
  if (s == "reduce") return wire::REDUCE;
  if (s == "send" || s == "isend") return wire::SEND;
  if (s == "recv" || s == "irecv" || s == "recvanysource") return wire::RECV;
  if (s == "barrier" || s == "monitoredbarrier") return wire::BARRIER;
  return wire::COLL_UNKNOWN;
}

wire::CollectiveOp collectiveOpFromKernel(std::string_view kernelName) {
  std::string_view s = kernelName;
  for (std::string_view prefix : {"ncclKernel_", "ncclDevKernel_", "ncclKernel", "ncclDevKernel"}) {
    if (startsWith(s, prefix)) {
      s = s.substr(prefix.size());
      break;
    }
  }
  const size_t cut = s.find_first_of("_(<");
  const std::string op = lower(s.substr(0, cut));
  if (op == "allreduce") return wire::ALL_REDUCE;
  if (op == "allgather") return wire::ALL_GATHER;
  if (op == "reducescatter") return wire::REDUCE_SCATTER;
  if (op == "broadcast") return wire::BROADCAST;
  if (op == "reduce") return wire::REDUCE;
  if (op == "sendrecv" || op == "send") return wire::SEND;
  if (op == "recv") return wire::RECV;
  if (op == "alltoall") return wire::ALL_TO_ALL;
  return wire::COLL_UNKNOWN;
}

std::optional<wire::CollectiveOp> genericCollectiveOp(std::string_view name) {
  if (auto b = backendOp(name)) return collectiveOpFromName(*b);
  if (startsWithNoCase(name, "nccl")) return collectiveOpFromKernel(name);
  const wire::CollectiveOp op = collectiveOpFromName(name);
  if (op != wire::COLL_UNKNOWN && op != wire::REDUCE && op != wire::SEND && op != wire::RECV) {
    return op;  // plain "reduce"/"send"/"recv" are too common as other names to count
  }
  return {};
}

bool genericDataName(std::string_view name, std::string_view cat) {
  const std::string n = squeezed(name);
  const std::string c = squeezed(cat);
  return c == "data" || c == "dataloader" || c == "dataload" ||
         n.find("dataloader") != std::string::npos || n == "dataload" || n == "loaddata" ||
         n == "loadbatch" || n == "nextbatch" || n == "dataloading";
}

uint32_t dtypeBytes(std::string_view dtype) {
  std::string s = lower(dtype);
  if (startsWith(s, "c10::")) s = s.substr(5);
  if (s == "float" || s == "float32" || s == "int" || s == "int32" || s == "f32" ||
      s == "unsigned int" || s == "uint32" || s == "i32") {
    return 4;
  }
  if (s == "double" || s == "float64" || s == "long" || s == "int64" || s == "long int" ||
      s == "long long" || s == "f64" || s == "i64" || s == "uint64" || s == "complexfloat" ||
      s == "c10::complex<float>") {
    return 8;
  }
  if (s == "half" || s == "bfloat16" || s == "float16" || s == "short" || s == "short int" ||
      s == "int16" || s == "f16" || s == "bf16" || s == "uint16") {
    return 2;
  }
  if (s == "byte" || s == "char" || s == "bool" || s == "uint8" || s == "int8" ||
      s == "unsigned char" || s == "signed char" || s == "i8" || s == "u8" ||
      startsWith(s, "float8")) {
    return 1;
  }
  if (s == "complexdouble" || s == "complex<double>") return 16;
  return 0;
}

namespace {

// The product of the first shape in "Input Dims" ([[3, 4], [], ...]); 0 when none.
uint64_t firstShapeElements(std::string_view dimsText) {
  // A small hand scan: the first inner list of numbers.
  const size_t open = dimsText.find('[', 1);
  if (open == std::string_view::npos) return 0;
  const size_t close = dimsText.find(']', open);
  if (close == std::string_view::npos) return 0;
  uint64_t product = 1;
  bool any = false;
  uint64_t cur = 0;
  bool inNumber = false;
  for (size_t i = open + 1; i <= close; ++i) {
    const char c = dimsText[i];
    if (c >= '0' && c <= '9') {
      cur = cur * 10 + static_cast<uint64_t>(c - '0');
      inNumber = true;
    } else if (inNumber) {
      product *= cur;
      any = true;
      cur = 0;
      inNumber = false;
    }
    if (product > (uint64_t{1} << 50)) return 0;  // not a real tensor size
  }
  return any ? product : 0;
}

// The first string of a JSON list of strings (["float", "Scalar"]) decoded.
std::string firstListString(std::string_view listText) {
  const size_t q = listText.find('"');
  if (q == std::string_view::npos) return {};
  const size_t end = listText.find('"', q + 1);
  if (end == std::string_view::npos) return {};
  return std::string(listText.substr(q + 1, end - q - 1));
}

}  // namespace

Status readCollectiveArgs(std::string_view argsText, CollectiveArgs* out) {
  int64_t inElems = -1;
  int64_t outElems = -1;
  std::string dtype;
  std::string pgName;
  std::string pgDesc;
  uint64_t dimsElems = 0;
  std::string inputType;
  std::string scratch;
  Status s = forEachMember(argsText, [&](std::string_view key, const JsonValue& v) {
    if (key == "Collective name" || key == "op") {
      const wire::CollectiveOp op = collectiveOpFromName(stringOf(v, &scratch));
      if (op != wire::COLL_UNKNOWN) out->op = op;
    } else if (key == "In msg nelems" || key == "In msg size") {
      intOf(v, &inElems);
    } else if (key == "Out msg nelems" || key == "Out msg size") {
      intOf(v, &outElems);
    } else if (key == "dtype") {
      dtype = std::string(stringOf(v, &scratch));
    } else if (key == "Process Group Name" || key == "pg_name") {
      pgName = std::string(stringOf(v, &scratch));
      if (pgName.empty()) {
        int64_t n = 0;
        if (intOf(v, &n)) pgName = std::to_string(n);
      }
    } else if (key == "Process Group Description") {
      pgDesc = std::string(stringOf(v, &scratch));
    } else if (key == "group") {
      out->group = std::string(stringOf(v, &scratch));
    } else if (key == "bytes") {
      int64_t b = 0;
      if (intOf(v, &b) && b >= 0) {
        out->bytes = static_cast<uint64_t>(b);
        out->sized = true;
      }
    } else if (key == "Input Dims" && v.type == JsonValue::Type::kArray) {
      dimsElems = firstShapeElements(v.text);
    } else if (key == "Input type" && v.type == JsonValue::Type::kArray) {
      inputType = firstListString(v.text);
    }
    return true;
  });
  if (!s) return s;
  const uint32_t elemBytes = dtypeBytes(dtype);
  const int64_t elems = std::max(inElems, outElems);
  if (elems >= 0 && elemBytes > 0) {
    out->bytes = static_cast<uint64_t>(elems) * elemBytes;
    out->sized = true;
  } else if (!out->sized && dimsElems > 0 && dtypeBytes(inputType) > 0) {
    out->bytes = dimsElems * dtypeBytes(inputType);
    out->sized = true;
  }
  if (out->group.empty()) {
    out->group = !pgDesc.empty() && pgDesc != "undefined" ? pgDesc : pgName;
  }
  return Status::ok();
}

bool hostTimedAnnotation(std::string_view name) {
  return startsWith(name, "gloo:") || startsWith(name, "mpi:") || startsWith(name, "ucc:");
}

bool deviceBackend(std::string_view backend) {
  for (std::string_view b : {"nccl", "hccl", "rccl", "xccl", "mccl"}) {
    if (backend.find(b) != std::string_view::npos) return true;
  }
  return false;
}

std::optional<int64_t> stepArg(std::string_view argsText) {
  std::optional<int64_t> step;
  std::optional<int64_t> iteration;
  (void)forEachMember(argsText, [&](std::string_view key, const JsonValue& v) {
    int64_t n = 0;
    if (key == "step" && intOf(v, &n)) step = n;
    if (key == "iteration" && intOf(v, &n)) iteration = n;
    return !step.has_value();
  });
  return step ? step : iteration;
}

std::string_view reportName(std::string_view name) {
  size_t cut = std::min(name.size(), kMaxOpNameBytes);
  if (cut < name.size()) {
    while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;
  }
  return cut == 0 ? kUnnamedOp : name.substr(0, cut);
}

}  // namespace trainscope::importer
