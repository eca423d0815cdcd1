/* trainscope probe: the C ABI that training processes call.
 *
 * A probe instance stands for one rank. Most processes use the default instance, created
 * from the environment (TRAINSCOPE_AGENT, TRAINSCOPE_JOB / SLURM_JOB_ID / TORCHELASTIC_RUN_ID,
 * RANK, WORLD_SIZE, LOCAL_RANK); a simulator may create many instances in one process.
 *
 * Threads: every record call (ts_step_*, ts_range_*, ts_op, ts_collective*, ts_link_transfer,
 * ts_p2p, ts_device_collective, ts_device_p2p) may be called from any thread and is wait-free
 * there: a clock read and a store into that thread's ring for that instance. No locks, no
 * allocation, no syscalls, except the very first record a thread makes for an instance, which
 * registers the thread's ring. ts_set_flops and ts_device_dropped are atomic stores.
 * ts_probe_create, ts_probe_destroy, ts_intern, ts_declare_group and ts_device_group may lock
 * and allocate; call them outside the hot loop.
 *
 * Errors: no function here throws, aborts or blocks training. A probe that cannot reach its
 * agent keeps a bounded backlog and reconnects; a full ring drops the record and counts it.
 * Every time argument is nanoseconds since the Unix epoch (CLOCK_REALTIME); 0 means "now".
 */
#ifndef TRAINSCOPE_PROBE_H
#define TRAINSCOPE_PROBE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The C ABI is ts_snake_case (docs/STYLE.md), outside the C++ naming that clang-tidy checks. */
/* NOLINTBEGIN(readability-identifier-naming) */

#define TS_PROBE_VERSION "0.1.0"

typedef struct ts_probe ts_probe;

/* An interned name (operator, range, process group). 0 is "no name". */
typedef uint32_t ts_name;

/* What a range's time counts as in the step report. */
enum ts_range_kind {
  TS_RANGE_OTHER = 0,   /* user range: shown in traces, not counted as compute or data */
  TS_RANGE_COMPUTE = 1, /* forward, backward, optimizer: counted as compute */
  TS_RANGE_DATA = 2,    /* data loading: counted as data wait */
  TS_RANGE_COMM = 3     /* blocked on communication (a synchronous collective, waiting for
                           async work, DDP's end-of-backward wait for its gradient buckets):
                           counted as exposed communication and never as compute */
};

/* Collective ops; the numbers match trainscope.wire.CollectiveOp. */
enum ts_collective_op {
  TS_COLL_UNKNOWN = 0,
  TS_COLL_ALL_REDUCE = 1,
  TS_COLL_ALL_GATHER = 2,
  TS_COLL_REDUCE_SCATTER = 3,
  TS_COLL_ALL_TO_ALL = 4,
  TS_COLL_BROADCAST = 5,
  TS_COLL_REDUCE = 6,
  TS_COLL_SEND = 7,
  TS_COLL_RECV = 8,
  TS_COLL_BARRIER = 9
};

/* What a process group is for in the parallel layout; the numbers match
 * trainscope.wire.GroupKind. */
enum ts_group_kind {
  TS_GROUP_OTHER = 0, /* any other group (embedding, model-parallel, a user's own) */
  TS_GROUP_DP = 1,    /* data parallel: replicas that reduce gradients together */
  TS_GROUP_TP = 2,    /* tensor parallel: ranks that split each layer */
  TS_GROUP_PP = 3,    /* pipeline parallel: ranks in stage order */
  TS_GROUP_CP = 4,    /* context parallel: ranks that split the sequence */
  TS_GROUP_EP = 5     /* expert parallel: ranks that exchange tokens in all-to-all */
};

typedef struct ts_probe_config {
  const char* agent_endpoint; /* NULL: $TRAINSCOPE_AGENT, else the node agent's
                                 ipc:///run/trainscope/agent.sock when it exists, else this
                                 user's own agent's $XDG_RUNTIME_DIR/trainscope/agent.sock;
                                 docs/OPERATIONS.md "Security") */
  const char* job;            /* NULL: $TRAINSCOPE_JOB, $SLURM_JOB_ID, $TORCHELASTIC_RUN_ID,
                                 else generated from host, pid and time */
  int32_t rank;               /* <0: $RANK, else 0 */
  int32_t world_size;         /* <=0: $WORLD_SIZE, else 1 */
  int32_t local_rank;         /* <0: $LOCAL_RANK, else rank */
  const char* host;           /* NULL: gethostname() */
  uint32_t pid;               /* 0: getpid() */
  uint32_t flight_steps;      /* 0: 256 steps of full records kept for captures */
  uint64_t flight_max_bytes;  /* 0: 64 MiB bound on the flight recorder */
  uint32_t ring_records;      /* 0: 16384 records per thread ring (power of two) */
  uint32_t backlog_reports;   /* 0: 4096 step reports kept while the agent is away */
  uint32_t top_ops;           /* 0: 32 operators per step report */
  uint32_t connect_agent;     /* 0: connect to the agent; 1: fold only (benchmarks, tests) */
} ts_probe_config;

typedef struct ts_probe_stats {
  uint64_t records;         /* records taken from rings */
  uint64_t dropped;         /* records dropped because a ring was full */
  uint64_t steps_folded;    /* step reports built */
  uint64_t reports_sent;    /* step reports handed to the transport (first sends) */
  uint64_t reports_acked;   /* step reports the agent confirmed */
  uint64_t backlog;         /* step reports waiting for an ack now */
  uint64_t backlog_dropped; /* step reports dropped from a full backlog */
  uint64_t unattributed;    /* records outside any step */
  uint64_t flight_bytes;    /* bytes the flight recorder holds now */
  uint64_t flight_steps;    /* steps the flight recorder holds now */
  uint32_t connected;       /* 1 when the agent acknowledged recently */
} ts_probe_stats;

/* Fills `config` with the defaults above (all "from the environment"). */
void ts_config_init(ts_probe_config* config);

/* Creates an instance. Returns NULL only when the configuration is invalid; the reason is
 * logged and available from ts_last_error(). */
ts_probe* ts_probe_create(const ts_probe_config* config);

/* Folds what is left, sends a goodbye, waits up to `timeout_ms` for the agent's ack, and
 * frees the instance. Record calls on it afterwards are undefined. */
void ts_probe_destroy(ts_probe* probe, int32_t timeout_ms);

/* The process's default instance, created from the environment on first use. Never NULL.
 * ts_init creates it with an explicit config; it returns 0, or -1 if it already existed or
 * the config is invalid. */
ts_probe* ts_default(void);
int32_t ts_init(const ts_probe_config* config);
/* Destroys the default instance (also done at exit). */
void ts_shutdown(int32_t timeout_ms);
/* How long a process that exits now should give ts_shutdown, in milliseconds, so that it is
 * never held for long and never drops what a live agent can still take: 200 when the agent
 * acknowledged recently, 500 when the default probe recorded something and the agent never
 * acknowledged a report of it (a job shorter than its first round trip), else 0 (also without
 * a default instance). The wait ends at the goodbye's ack. The exit hooks (C's atexit, the
 * Python package's) use it. */
int32_t ts_exit_wait_ms(void);

/* Interns a name for record calls. Thread-safe; the same string gives the same id. */
ts_name ts_intern(const char* name);
/* The string of an interned name, or "" for an unknown id. */
const char* ts_name_str(ts_name name);

/* The clock every record uses, in ns since the epoch. */
int64_t ts_now_ns(void);

/* Steps. A step is [begin, end): records whose start falls inside it belong to it, so a record
 * starting at the very moment a step ends belongs to the next step. */
void ts_step_begin(ts_probe* probe, int64_t step, int64_t t_ns);
void ts_step_end(ts_probe* probe, int64_t step, int64_t t_ns);

/* Nested ranges on the calling thread (push/pop pair on the same thread). */
void ts_range_push(ts_probe* probe, ts_name name, uint32_t kind, int64_t t_ns);
void ts_range_pop(ts_probe* probe, int64_t t_ns);
/* A complete range with both ends known. */
void ts_range(ts_probe* probe, ts_name name, uint32_t kind, int64_t start_ns, int64_t end_ns);

/* One operator (kernel) execution. */
void ts_op(ts_probe* probe, ts_name name, int64_t start_ns, int64_t duration_ns);

/* One collective: the time this rank arrived and the time it completed. */
void ts_collective(ts_probe* probe, uint32_t op, ts_name group, uint64_t bytes, int64_t arrive_ns,
                   int64_t complete_ns);
/* The same as a begin/end pair on one thread (end closes the latest open begin). */
void ts_collective_begin(ts_probe* probe, uint32_t op, ts_name group, uint64_t bytes, int64_t t_ns);
void ts_collective_end(ts_probe* probe, int64_t t_ns);
/* Where the rank is, for hang reports only (not counted in any step): from `since_ns` the
 * training thread may be blocked on communication (0: it is not). For waits that start before
 * they are known to be waits — DDP hands each gradient bucket to its all-reduce and, after the
 * last, waits for all of them — call it at each launch and with 0 when the wait is over; a
 * rank that stops while it is set is reported as waiting in a collective, not stuck. */
void ts_wait_hint(ts_probe* probe, int64_t since_ns);

/* One transfer this rank sent to one peer inside a collective (a ring or tree hop), as a
 * communication library's profiler hooks report it (NCCL profiler plugin proxy send steps):
 * `bytes` posted at `posted_ns` and delivered to `peer` (global rank) at `delivered_ns`. Only
 * the time in flight counts: post when the data is ready and the peer can take it, so a slow
 * link or NIC shows on its sender and waiting does not. Folded per (peer, group) into the
 * step report of the step `posted_ns` falls in (StepReport.links). */
void ts_link_transfer(ts_probe* probe, ts_name group, uint32_t peer, uint64_t bytes,
                      int64_t posted_ns, int64_t delivered_ns);

/* Declares a process group this rank belongs to: `ranks` holds `count` global ranks in group
 * order (for TS_GROUP_PP: stage order), so this rank's index in it is its coordinate along
 * `kind` (its pipeline stage, its data-parallel index, ...). Declare every group the rank is
 * in, before its first step; the collector derives the job's layout and each rank's
 * coordinates from them (GET /api/v1/jobs/{job}/topology). Declaring a name again replaces
 * that group (a restarted or re-configured job declares again); the same set again changes
 * nothing. The probe sends the rank's groups to the agent in its next hello, at once.
 * Refused (logged once, ts_last_error set, nothing declared): a NULL probe, name 0, an unknown
 * kind, count outside 1..1048576, a rank below 0 or not below the world size, a rank twice, or
 * `ranks` without this rank; ts_last_error() is "" after a declaration it took. Locks and
 * allocates: not for the training loop. */
void ts_declare_group(ts_probe* probe, ts_name group, uint32_t kind, const int32_t* ranks,
                      int32_t count);

/* One point-to-point transfer (a pipeline send or receive): `op` is TS_COLL_SEND or
 * TS_COLL_RECV, `peer` the global rank at the other end, `bytes` its size, `arrive_ns` when
 * this rank posted it (called send/recv or isend/irecv) and `complete_ns` when it completed
 * (the wait returned). A receive's time thus includes waiting for the sender: where compute
 * does not overlap it, that wait is the pipeline bubble. Folded per (peer, group, op) into
 * the step report of the step `arrive_ns` falls in (StepReport.p2p, p2p_ns, bubble_ns) and
 * counted in its communication time. A negative peer or another op is dropped. */
void ts_p2p(ts_probe* probe, uint32_t op, ts_name group, int32_t peer, uint64_t bytes,
            int64_t arrive_ns, int64_t complete_ns);

/* What this rank computes per step, for MFU and HFU: `model_flops_per_step` the FLOPs of the
 * model's math this rank does in one step (its share of the job's), `hardware_flops_per_step`
 * what its hardware executes including recomputation (0: not known), `peak_flops` the device's
 * peak FLOP/s for the data type used. Every step report folded afterwards carries them, so the
 * collector serves MFU = model_flops / (step time * peak) and HFU likewise. Call it again
 * whenever the work per step changes; zeros stop it. Negative or non-finite values are taken
 * as 0. Any thread, wait-free. */
void ts_set_flops(ts_probe* probe, double model_flops_per_step, double hardware_flops_per_step,
                  double peak_flops);

/* Device-timed communication, as trainscope's NCCL profiler plugin
 * (libnccl-profiler-trainscope.so, docs/GPU.md) reports it from NCCL's own events. The record
 * calls (ts_device_collective, ts_device_p2p, ts_device_dropped) are wait-free like the other
 * record calls and are made from NCCL's proxy thread; ts_device_group locks and allocates and
 * is called once per communicator. Device times are on the probe's clock (the plugin converts
 * the GPU's timer), so they fold with host records: in the step report a collective key
 * (op, group, bytes of one call) or a p2p key (peer, group, op) that has device times carries
 * them in place of the host's (CollectiveTotal.device_timed), and StepReport.device_comm_ns is
 * the union of the device time. */

/* What NCCL chose for an operation; packed by TS_DEVICE_INFO into the `info` argument. */
enum ts_nccl_algo {
  TS_ALGO_UNKNOWN = 0,
  TS_ALGO_TREE = 1,
  TS_ALGO_RING = 2,
  TS_ALGO_COLLNET_DIRECT = 3,
  TS_ALGO_COLLNET_CHAIN = 4,
  TS_ALGO_NVLS = 5,
  TS_ALGO_NVLS_TREE = 6,
  TS_ALGO_PAT = 7
};
enum ts_nccl_proto {
  TS_PROTO_UNKNOWN = 0,
  TS_PROTO_LL = 1,
  TS_PROTO_LL128 = 2,
  TS_PROTO_SIMPLE = 3
};
enum ts_dtype {
  TS_DTYPE_UNKNOWN = 0,
  TS_DTYPE_INT8 = 1,
  TS_DTYPE_UINT8 = 2,
  TS_DTYPE_INT32 = 3,
  TS_DTYPE_UINT32 = 4,
  TS_DTYPE_INT64 = 5,
  TS_DTYPE_UINT64 = 6,
  TS_DTYPE_FLOAT16 = 7,
  TS_DTYPE_FLOAT32 = 8,
  TS_DTYPE_FLOAT64 = 9,
  TS_DTYPE_BFLOAT16 = 10,
  TS_DTYPE_FLOAT8E4M3 = 11,
  TS_DTYPE_FLOAT8E5M2 = 12
};
/* algorithm, protocol and data type as above, channels 0..255 */
#define TS_DEVICE_INFO(algo, proto, dtype, channels)                         \
  ((uint32_t)(algo) | ((uint32_t)(proto) << 8) | ((uint32_t)(dtype) << 16) | \
   ((uint32_t)(channels) << 24))

/* The default instance if it exists, else NULL (never creates one): a plugin loaded into a
 * process that never started the probe does nothing. Wait-free. */
ts_probe* ts_default_existing(void);

/* The process group of an NCCL communicator of `nranks` ranks in which this rank is `rank`:
 * "world" when it spans the world, else the one declared group (ts_declare_group) that has
 * `nranks` ranks with this rank at index `rank`, else `comm_name` when NCCL has one, else
 * "nccl-<comm_hash in hex>". When `global_ranks` is not NULL it gets the global rank of each
 * communicator rank (room for `nranks`), or -1 where they are not known (no matching group).
 * Returns 0 for a NULL probe or nranks outside 1..1048576. Locks and allocates. */
ts_name ts_device_group(ts_probe* probe, uint64_t comm_hash, const char* comm_name, int32_t nranks,
                        int32_t rank, int32_t* global_ranks);

/* One collective as the device ran it: `op` a ts_collective_op, `bytes` those of one call
 * counted as ts_collective counts them (all_gather: the gathered output; reduce_scatter: the
 * input), `seq` NCCL's sequence number of the call in its communicator, `info` TS_DEVICE_INFO,
 * `launch_ns` when the host enqueued it (it belongs to the step that launched it: the GPU runs
 * behind the host, and a step stays open a while for its device records), [start_ns, end_ns)
 * the earliest kernel-channel start to the latest stop. */
void ts_device_collective(ts_probe* probe, uint32_t op, ts_name group, uint64_t bytes, uint64_t seq,
                          uint32_t info, int64_t launch_ns, int64_t start_ns, int64_t end_ns);
/* One point-to-point transfer as the device ran it: `op` TS_COLL_SEND or TS_COLL_RECV, `peer`
 * the global rank at the other end (a negative peer or another op is dropped); the rest as for
 * ts_device_collective. */
void ts_device_p2p(ts_probe* probe, uint32_t op, ts_name group, int32_t peer, uint64_t bytes,
                   uint32_t info, int64_t launch_ns, int64_t start_ns, int64_t end_ns);
/* `count` more operations the plugin saw but could not time; the next step report carries
 * them (StepReport.device_dropped). Any thread, wait-free. */
void ts_device_dropped(ts_probe* probe, uint64_t count);

/* Waits up to `timeout_ms` until every step ended so far is folded and acknowledged by the
 * agent. Returns 0 when all are acknowledged, 1 on time-out. Not for the training loop. */
int32_t ts_probe_flush(ts_probe* probe, int32_t timeout_ms);

void ts_probe_get_stats(ts_probe* probe, ts_probe_stats* out);

/* A language runtime's stack provider, for stack captures (the Python package sets one).
 * It writes into `buf` (room for `cap` bytes) a JSON object that maps native thread ids
 * (decimal strings) to that thread's frames, innermost first:
 *   {"1234": [{"function": "train_step", "file": "train.py", "line": 42}, ...], ...}
 * and returns the length the JSON needs; when that is more than `cap`, nothing needs to be
 * written and the probe calls again with that much room. It returns -1 on failure. The probe
 * calls it from a short-lived thread of its own (never a signal handler, never the training
 * thread) and waits at most about 2 s: a provider blocked on a lock (Python's GIL) leaves the
 * capture without language stacks ("python": false) instead of hanging it, and the provider
 * call finishes later on its own. Process-wide; NULL unregisters. Thread-safe. */
typedef int64_t (*ts_stack_provider)(char* buf, int64_t cap, void* user);
void ts_probe_set_stack_provider(ts_stack_provider provider, void* user);

/* Takes a stack capture now, as if the agent had sent a stacks command with this capture id:
 * the file goes to $TRAINSCOPE_CAPTURE_DIR (default /tmp/trainscope-captures)
 * /<capture_id>/rank-<R>.json.gz and its statuses to the agent. Returns at once; the dump
 * takes up to ~2.5 s on a thread of the probe's own. When `path_out` is not NULL it gets the
 * file's path (NUL-terminated, cut to `path_cap` bytes). Returns 0, or -1 for a NULL probe or
 * an id that is not a plain file name (letters, digits, '-', '_', '.'; see ts_last_error). */
int32_t ts_probe_request_stacks(ts_probe* probe, const char* capture_id, char* path_out,
                                int32_t path_cap);

/* The last configuration error on this thread, or "". */
const char* ts_last_error(void);

/* NOLINTEND(readability-identifier-naming) */

#ifdef __cplusplus
}
#endif

#endif /* TRAINSCOPE_PROBE_H */
