// The fixed-size record every probe call appends to a thread's ring, and the record kinds.
// Plain data: any thread may build one; the drainer (runtime thread) interprets them.
#pragma once

#include <cstdint>

namespace trainscope::probe {

enum class RecordType : uint8_t {
  kStepBegin = 1,    // step = step number, t0 = begin, t1 = the marking thread's run delay
                     // then (cpu_wait.h; -1: not measured)
  kStepEnd = 2,      // step = step number, t0 = end, t1 = run delay as for kStepBegin
  kRangePush = 3,    // name, kind, t0; paired with the next kRangePop on the same ring
  kRangePop = 4,     // t0 = end of the innermost open range
  kRange = 5,        // name, kind, [t0, t1]; also what a paired push/pop becomes
  kOp = 6,           // name, [t0, t1]
  kCollective = 7,   // kind = op, group, bytes, [t0 = arrival, t1 = completion]
  kCollBegin = 8,    // kind = op, group, bytes, t0 = arrival
  kCollEnd = 9,      // t0 = completion of the latest open begin on the same ring
  kLink = 10,        // name = peer rank (not a name), group, bytes, [t0 = posted, t1 = delivered]
  kP2p = 11,         // kind = op (send/recv), name = peer rank, group, bytes,
                     // [t0 = posted, t1 = completed]
  kWaitHint = 12,    // t0 = since when the training thread may be blocked on communication;
                     // 0: it is not (progress only: the step reports do not count it)
  kDeviceColl = 13,  // kind = op, group, bytes, seq, info, [t0, t1] = device time of the
                     // kernel channels on the probe's clock, step = when the host launched it
                     // (attribution; the step number once folded) (ts_device_collective)
  kDeviceP2p = 14,   // kind = op (send/recv), name = peer rank, group, bytes, info,
                     // [t0, t1] = device time, step = launch time as above (ts_device_p2p)
};

// One cache line per record, so a producer never shares a line with the record being read.
struct alignas(64) Record {
  RecordType type;
  uint8_t kind;  // ts_range_kind for ranges, ts_collective_op for collectives
  uint16_t reserved;
  uint32_t name;   // ts_name of the range or operator; the peer's global rank for kLink/kP2p
  uint32_t group;  // ts_name of the collective's process group
  uint32_t ring;   // index of the ring it came from; set by the folder (trace `tid`)
  int64_t step;    // step number for step records; the step it was folded into otherwise
  int64_t t0;      // ns since the epoch
  int64_t t1;      // ns since the epoch (end), where the type has one
  uint64_t bytes;  // collective bytes of one call
  uint64_t seq;    // kDeviceColl: NCCL's sequence number of the call in its communicator
  uint32_t info;   // kDevice*: TS_DEVICE_INFO (algorithm, protocol, data type, channels)
  uint32_t pad;
};
static_assert(sizeof(Record) == 64, "a record is one cache line");

}  // namespace trainscope::probe
