// What a trace event means for a step report: the names, categories and arguments by which the
// PyTorch profiler (Kineto), trainscope captures and other Chrome-trace writers mark steps,
// device kernels, collectives and data loading, and the arithmetic of a collective's size.
// Pure functions; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "importer/trace_reader.h"
#include "schema/trainscope.pb.h"

namespace trainscope::importer {

// What an event is, before the file as a whole decides which of them count (a CPU operator is
// compute only when the trace has no device kernels, and so on).
enum class EventKind : uint8_t {
  kOther,           // runtime calls, Python frames, annotations that are neither of below
  kProfilerStep,    // "ProfilerStep#N" on the host (the profiler's step() marks)
  kCaptureStep,     // cat "step" in a trainscope capture
  kDeviceKernel,    // cat "kernel" that is not a communication kernel
  kDeviceComm,      // an NCCL/RCCL kernel ("ncclKernel_AllReduce_...", "ncclDevKernel_...")
  kDeviceCopy,      // cat "gpu_memcpy" / "gpu_memset"
  kCpuOp,           // cat "cpu_op" (an ATen or autograd operator)
  kCommAnnotation,  // "nccl:all_reduce", "gloo:broadcast", ... (the host side of a collective)
  kParamComms,      // "record_param_comms" (host side, with the collective's arguments)
  kC10dOp,          // "c10d::allreduce_" and the like
  kDataLoad,        // "enumerate(DataLoader)#...__next__"
  kCaptureOp,       // cat "op" in a trainscope capture
  kCaptureRange,    // cat "range" (args.kind says compute, data, comm or other)
  kCaptureColl,     // cat "collective"
  kGeneric,         // an event of some other tool: an operator unless its name says otherwise
};

// The kind of an event from its category and name. `trainscopeFormat` says the file is a
// trainscope capture (its "op", "range", "collective" and "step" categories then apply).
EventKind kindOf(std::string_view cat, std::string_view name, bool trainscopeFormat);

// N of "ProfilerStep#N"; nullopt for any other name.
std::optional<int64_t> profilerStepNumber(std::string_view name);
// A step number at the end of a name ("train_step#12", "iteration 12"); nullopt when none.
std::optional<int64_t> trailingNumber(std::string_view name);

// The collective op named by a profiler string: "allreduce", "all_reduce", "_allgather_base",
// "reduce_scatter_tensor_coalesced", "alltoall_base", "broadcast", ...; COLL_UNKNOWN when none
// fits.
wire::CollectiveOp collectiveOpFromName(std::string_view name);
// The op of an NCCL kernel from its name ("ncclKernel_AllReduce_RING_LL_Sum_float(...)",
// "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL"); SendRecv reads as SEND.
wire::CollectiveOp collectiveOpFromKernel(std::string_view kernelName);
// A generic event's collective op from its name ("all_reduce", "AllReduce", "nccl:send", ...);
// nullopt when the name is not a collective's.
std::optional<wire::CollectiveOp> genericCollectiveOp(std::string_view name);
// The data-loading wait a generic trace names ("dataloader", "data_load", "next_batch").
bool genericDataName(std::string_view name, std::string_view cat);

// Bytes of one element of a profiler dtype: c10 names ("Float", "BFloat16", "Long") and the
// "Input type" spellings ("float", "c10::Half", "long int", "unsigned char"); 0 when unknown.
uint32_t dtypeBytes(std::string_view dtype);

// What the arguments of a collective event say about it.
struct CollectiveArgs {
  wire::CollectiveOp op = wire::COLL_UNKNOWN;
  uint64_t bytes = 0;  // of one call: the larger of its input and output buffers
  std::string group;   // process group description, else its name; "" when none
  bool sized = false;  // bytes came from the arguments
};
// Reads Kineto's collective arguments ("Collective name", "In msg nelems", "Out msg nelems",
// "dtype", "Process Group Name"/"Description") or the older "Input Dims" and "Input type",
// or a trainscope capture's "bytes", "op" and "group". Unknown fields are left as they are.
Status readCollectiveArgs(std::string_view argsText, CollectiveArgs* out);

// Whether a host annotation's time is its collective's time: true for backends that run the
// collective on the calling thread ("gloo:all_reduce", mpi, ucc), false for those that only
// enqueue it on a device stream ("nccl:", "hccl:", "rccl:", "xccl:", "mccl:"), whose time lives
// in the device kernels.
bool hostTimedAnnotation(std::string_view name);
// Whether a process group backend string ("nccl", "cuda:nccl", "mtia:hccl,cpu:gloo") names a
// device backend (see hostTimedAnnotation).
bool deviceBackend(std::string_view backend);

// A step number from args ("step", else "iteration"); nullopt when none is a number.
std::optional<int64_t> stepArg(std::string_view argsText);

// An operator name as reported: long C++ kernel signatures are cut to kMaxOpNameBytes (at a
// UTF-8 boundary), so a report stays small and one kernel template keeps one name. An event
// without a name (or one cut to nothing) keeps its time as kUnnamedOp: ingest refuses an
// operator whose name is empty.
inline constexpr size_t kMaxOpNameBytes = 256;
inline constexpr std::string_view kUnnamedOp = "(unnamed)";
std::string_view reportName(std::string_view name);

}  // namespace trainscope::importer
