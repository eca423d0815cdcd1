"""trainscope: the Python side of the trainscope probe (ctypes over libtrainscope_probe.so).

Every call here goes to the probe's default instance, which stands for this process's rank.
Record calls (step, range, collective, op) cost a ctypes call plus the probe's ring store;
names are interned once and cached.

Finding the library (first match wins):
  1. $TRAINSCOPE_PROBE_LIB: the path of libtrainscope_probe.so;
  2. libtrainscope_probe.so next to this package, or where `meson install` put it (_layout.py);
  3. <repo>/build*/agent/probe/libtrainscope_probe.so, the sibling meson build directories of
     a source checkout (newest first).

Configuration comes from the environment (TRAINSCOPE_AGENT, TRAINSCOPE_JOB, SLURM_JOB_ID,
TORCHELASTIC_RUN_ID, RANK, WORLD_SIZE, LOCAL_RANK) unless init(**overrides) names a field of
ts_probe_config: agent_endpoint, job, rank, world_size, local_rank, host, pid, flight_steps,
flight_max_bytes, ring_records, backlog_reports, top_ops, connect_agent (1 = fold only).
init() also takes flops_per_step, hardware_flops_per_step and peak_flops (see set_flops).

Parallel layout: declare_group() names each process group the rank is in (data, tensor,
pipeline, context, expert parallel) so the collector knows every rank's coordinates;
record_p2p() / p2p() time pipeline sends and receives with their peer; set_flops() states the
work per step for MFU and HFU.

Stack captures (docs/CAPTURE.md) show each thread's Python frames: creating the probe here
registers a stack provider (sys._current_frames() matched to threads by native_id) that the
probe calls from a thread of its own with a 2 s deadline, so a rank stuck holding the GIL gets
native stacks and "python": false rather than a hung capture. dump_stacks() takes one now.
"""

import atexit
import contextlib
import ctypes
import glob
import json
import os
import sys
import threading

__all__ = [
    "init", "step", "step_begin", "step_end", "range", "collective", "record_collective",
    "record_link_transfer", "op", "flush", "stats", "shutdown", "now_ns", "intern", "dump_stacks", "ProbeError",
    "declare_group", "record_p2p", "p2p", "set_flops",
    "RANGE_OTHER", "RANGE_COMPUTE", "RANGE_DATA", "RANGE_COMM", "COLLECTIVE_OPS", "GROUP_KINDS",
    "GROUP_OTHER", "GROUP_DP", "GROUP_TP", "GROUP_PP", "GROUP_CP", "GROUP_EP",
]

RANGE_OTHER = 0
RANGE_COMPUTE = 1
RANGE_DATA = 2
RANGE_COMM = 3  # blocked on communication: exposed communication, never compute
_RANGE_KINDS = {"other": RANGE_OTHER, "compute": RANGE_COMPUTE, "data": RANGE_DATA,
                "comm": RANGE_COMM}

# Names match trainscope.wire.CollectiveOp and ts_collective_op.
COLLECTIVE_OPS = {
    "unknown": 0, "all_reduce": 1, "all_gather": 2, "reduce_scatter": 3, "all_to_all": 4,
    "broadcast": 5, "reduce": 6, "send": 7, "recv": 8, "barrier": 9,
}


# Names match trainscope.wire.GroupKind and ts_group_kind.
GROUP_OTHER = 0
GROUP_DP = 1
GROUP_TP = 2
GROUP_PP = 3
GROUP_CP = 4
GROUP_EP = 5
GROUP_KINDS = {"other": GROUP_OTHER, "dp": GROUP_DP, "tp": GROUP_TP, "pp": GROUP_PP,
               "cp": GROUP_CP, "ep": GROUP_EP}

_FLOPS_SETTINGS = ("flops_per_step", "hardware_flops_per_step", "peak_flops")


class ProbeError(RuntimeError):
    """The probe library is missing or refused a configuration."""


class _Config(ctypes.Structure):
    _fields_ = [
        ("agent_endpoint", ctypes.c_char_p),
        ("job", ctypes.c_char_p),
        ("rank", ctypes.c_int32),
        ("world_size", ctypes.c_int32),
        ("local_rank", ctypes.c_int32),
        ("host", ctypes.c_char_p),
        ("pid", ctypes.c_uint32),
        ("flight_steps", ctypes.c_uint32),
        ("flight_max_bytes", ctypes.c_uint64),
        ("ring_records", ctypes.c_uint32),
        ("backlog_reports", ctypes.c_uint32),
        ("top_ops", ctypes.c_uint32),
        ("connect_agent", ctypes.c_uint32),
    ]


class _Stats(ctypes.Structure):
    _fields_ = [
        ("records", ctypes.c_uint64),
        ("dropped", ctypes.c_uint64),
        ("steps_folded", ctypes.c_uint64),
        ("reports_sent", ctypes.c_uint64),
        ("reports_acked", ctypes.c_uint64),
        ("backlog", ctypes.c_uint64),
        ("backlog_dropped", ctypes.c_uint64),
        ("unattributed", ctypes.c_uint64),
        ("flight_bytes", ctypes.c_uint64),
        ("flight_steps", ctypes.c_uint64),
        ("connected", ctypes.c_uint32),
    ]


_LIB_NAME = "libtrainscope_probe.so"

# ts_stack_provider: int64_t (*)(char* buf, int64_t cap, void* user)
_STACK_PROVIDER_T = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                                     ctypes.c_void_p)
_MAX_PY_FRAMES = 256  # per thread; deeper stacks keep their innermost frames


def _candidates():
    env = os.environ.get("TRAINSCOPE_PROBE_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, _LIB_NAME)
    try:  # an installed package: _layout.py says where meson put the libraries
        from trainscope import _layout
        yield os.path.normpath(os.path.join(os.path.dirname(here), _layout.LIBDIR, _LIB_NAME))
    except ImportError:
        pass
    # <repo>/agent/probe/python/trainscope -> <repo>
    repo = os.path.abspath(os.path.join(here, "..", "..", "..", ".."))
    found = glob.glob(os.path.join(repo, "build*", "agent", "probe", _LIB_NAME))
    for path in sorted(found, key=os.path.getmtime, reverse=True):
        yield path


def _load():
    tried = []
    for path in _candidates():
        tried.append(path)
        if os.path.exists(path):
            return ctypes.CDLL(path)
    raise ProbeError(
        "cannot find %s (tried: %s); set TRAINSCOPE_PROBE_LIB to its path"
        % (_LIB_NAME, ", ".join(tried) or "nothing"))


def _bind(lib):
    P = ctypes.c_void_p
    i64, u32, u64, i32 = ctypes.c_int64, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32
    sigs = {
        "ts_config_init": (None, [ctypes.POINTER(_Config)]),
        "ts_init": (i32, [ctypes.POINTER(_Config)]),
        "ts_default": (P, []),
        "ts_shutdown": (None, [i32]),
        "ts_exit_wait_ms": (i32, []),
        "ts_intern": (u32, [ctypes.c_char_p]),
        "ts_name_str": (ctypes.c_char_p, [u32]),
        "ts_now_ns": (i64, []),
        "ts_step_begin": (None, [P, i64, i64]),
        "ts_step_end": (None, [P, i64, i64]),
        "ts_range_push": (None, [P, u32, u32, i64]),
        "ts_range_pop": (None, [P, i64]),
        "ts_range": (None, [P, u32, u32, i64, i64]),
        "ts_op": (None, [P, u32, i64, i64]),
        "ts_collective": (None, [P, u32, u32, u64, i64, i64]),
        "ts_collective_begin": (None, [P, u32, u32, u64, i64]),
        "ts_collective_end": (None, [P, i64]),
        "ts_wait_hint": (None, [P, i64]),
        "ts_link_transfer": (None, [P, u32, u32, u64, i64, i64]),
        "ts_declare_group": (None, [P, u32, u32, ctypes.POINTER(i32), i32]),
        "ts_p2p": (None, [P, u32, u32, i32, u64, i64, i64]),
        "ts_set_flops": (None, [P, ctypes.c_double, ctypes.c_double, ctypes.c_double]),
        "ts_probe_flush": (i32, [P, i32]),
        "ts_probe_get_stats": (None, [P, ctypes.POINTER(_Stats)]),
        "ts_last_error": (ctypes.c_char_p, []),
        "ts_probe_set_stack_provider": (None, [_STACK_PROVIDER_T, P]),
        "ts_probe_request_stacks": (i32, [P, ctypes.c_char_p, ctypes.c_char_p, i32]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


_lock = threading.Lock()
_stack_provider_ref = None  # keeps the ctypes callback alive while the probe may call it
_lib = None
_handle = None
_names = {}
_next_step = 0
_open_steps = []  # step numbers begun by step()/step_begin() and not ended yet
_auto_owned = False  # the probe was started by trainscope.auto (TRAINSCOPE_AUTO=1)


def _auto_module():
    """trainscope.auto's state when auto-instrumentation is on in this process, else None."""
    auto = sys.modules.get("trainscope.auto")
    return auto if auto is not None and auto.state.on else None


def _python_stacks():
    """{native thread id: [frames, innermost first]} for every thread running Python."""
    native = {t.ident: getattr(t, "native_id", None) for t in threading.enumerate()}
    out = {}
    for ident, frame in sys._current_frames().items():
        nid = native.get(ident)
        if nid is None:
            continue  # the probe's own caller thread, or a thread threading does not know
        frames = []
        f = frame
        while f is not None and len(frames) < _MAX_PY_FRAMES:
            code = f.f_code
            frames.append({"function": code.co_name, "file": code.co_filename,
                           "line": f.f_lineno})
            f = f.f_back
        out[str(nid)] = frames
    return out


def _stack_provider(buf, cap, _user):
    # Runs on a probe thread (ctypes takes the GIL for it). Never raises into C.
    try:
        data = json.dumps(_python_stacks()).encode()
        if len(data) <= cap:
            ctypes.memmove(buf, data, len(data))
        return len(data)
    except Exception:  # noqa: BLE001 - a failed provider means "no Python stacks"
        return -1


def _install_stack_provider(lib):
    global _stack_provider_ref
    if _stack_provider_ref is None:
        _stack_provider_ref = _STACK_PROVIDER_T(_stack_provider)
        lib.ts_probe_set_stack_provider(_stack_provider_ref, None)


def _get_lib():
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                _lib = _bind(_load())
    return _lib


def _probe():
    global _handle
    if _handle is None:
        lib = _get_lib()
        with _lock:
            if _handle is None:
                _handle = lib.ts_default()
                _install_stack_provider(lib)
                atexit.register(_shutdown_at_exit)
    return _handle


def init(**overrides):
    """Creates this process's probe with ts_probe_config fields overridden by keyword.

    flops_per_step, hardware_flops_per_step and peak_flops are passed to set_flops() once the
    probe exists. Unknown fields raise TypeError; a configuration the probe refuses raises
    ProbeError with its reason. Calling any record function first creates the probe from the
    environment. Under TRAINSCOPE_AUTO=1 the probe may already run; then this returns it (the
    overrides are ignored, said once on stderr).
    """
    global _handle
    if _handle is not None and _auto_owned:
        sys.modules["trainscope.auto"].log(
            "init(): the probe was already started by TRAINSCOPE_AUTO=1; its settings stay")
        return _handle
    flops = {k: overrides.pop(k) for k in _FLOPS_SETTINGS if k in overrides}
    lib = _get_lib()
    cfg = _Config()
    lib.ts_config_init(ctypes.byref(cfg))
    keep = []  # keeps encoded strings alive until ts_init copied them
    known = {f[0] for f in _Config._fields_}
    for key, value in overrides.items():
        if key not in known:
            raise TypeError("init(): unknown probe setting %r (known: %s)"
                            % (key, ", ".join(sorted(known))))
        if isinstance(value, str):
            value = value.encode()
            keep.append(value)
        setattr(cfg, key, value)
    with _lock:
        if _handle is not None:
            raise ProbeError("init(): the probe already exists in this process")
        if lib.ts_init(ctypes.byref(cfg)) != 0:
            raise ProbeError("init(): " + lib.ts_last_error().decode(errors="replace"))
        _handle = lib.ts_default()
        _install_stack_provider(lib)
        atexit.register(_shutdown_at_exit)
    if flops:
        set_flops(**flops)
    return _handle


def intern(name):
    """The probe's id for `name` (interned once, then cached here)."""
    nid = _names.get(name)
    if nid is None:
        nid = _get_lib().ts_intern(name.encode())
        _names[name] = nid
    return nid


def now_ns():
    """The probe's clock: ns since the Unix epoch (CLOCK_REALTIME)."""
    return _get_lib().ts_now_ns()


def step_begin(step=None, t_ns=0):
    """Begins a step; without a number, the one after the last step begun. Returns it."""
    global _next_step
    auto = _auto_module()
    if auto is not None:
        auto.user_steps_begin()
    if step is None:
        step = _next_step
    _next_step = step + 1
    _open_steps.append(step)
    _get_lib().ts_step_begin(_probe(), step, t_ns)
    return step


def step_end(step=None, t_ns=0):
    """Ends a step; without a number, the step begun last."""
    if step is None:
        if not _open_steps:
            raise ValueError("step_end(): no step is open")
        step = _open_steps.pop()
    elif step in _open_steps:
        _open_steps.remove(step)
    _get_lib().ts_step_end(_probe(), step, t_ns)


@contextlib.contextmanager
def step(number=None):
    """Context manager around one training step (auto-numbered unless `number` is given)."""
    n = step_begin(number)
    try:
        yield n
    finally:
        step_end(n)


def _kind(kind):
    if isinstance(kind, int):
        return kind
    try:
        return _RANGE_KINDS[kind]
    except KeyError:
        raise ValueError("range kind must be one of %s, not %r"
                         % (", ".join(_RANGE_KINDS), kind)) from None


@contextlib.contextmanager
def range(name, kind="other"):  # noqa: A001 (the API name the team agreed on)
    """Context manager for a named range: kind 'compute', 'data', 'comm' (the thread blocked on
    communication: counted as exposed communication, never as compute) or 'other'."""
    lib = _get_lib()
    p = _probe()
    lib.ts_range_push(p, intern(name), _kind(kind), 0)
    try:
        yield
    finally:
        lib.ts_range_pop(p, 0)


def _op_code(op):
    if isinstance(op, int):
        return op
    try:
        return COLLECTIVE_OPS[op]
    except KeyError:
        raise ValueError("collective op must be one of %s, not %r"
                         % (", ".join(COLLECTIVE_OPS), op)) from None


@contextlib.contextmanager
def collective(op, nbytes, group="default"):
    """Context manager timing one collective from arrival to completion on this thread."""
    lib = _get_lib()
    p = _probe()
    lib.ts_collective_begin(p, _op_code(op), intern(group), int(nbytes), 0)
    try:
        yield
    finally:
        lib.ts_collective_end(p, 0)


def record_collective(op, nbytes, arrive_ns, complete_ns, group="default"):
    """Records a collective whose arrival and completion times are known (ns, epoch)."""
    _get_lib().ts_collective(_probe(), _op_code(op), intern(group), int(nbytes),
                             int(arrive_ns), int(complete_ns))


def record_link_transfer(peer, nbytes, posted_ns, delivered_ns, group="default"):
    """Records one transfer this rank sent to global rank `peer`, in flight from posted_ns to
    delivered_ns (ns, epoch); folded per (peer, group) into the step's link totals."""
    if int(peer) < 0:
        raise ValueError("peer must be a global rank >= 0, not %r" % (peer,))
    _get_lib().ts_link_transfer(_probe(), intern(group), int(peer), int(nbytes),
                                int(posted_ns), int(delivered_ns))


def _group_kind(kind):
    if isinstance(kind, int) and not isinstance(kind, bool):
        if kind not in GROUP_KINDS.values():
            raise ValueError("group kind must be 0..5 or one of %s, not %r"
                             % (", ".join(GROUP_KINDS), kind))
        return kind
    try:
        return GROUP_KINDS[kind]
    except (KeyError, TypeError):
        raise ValueError("group kind must be one of %s, not %r"
                         % (", ".join(GROUP_KINDS), kind)) from None


def declare_group(name, kind, ranks):
    """Declares a process group this rank belongs to.

    name: the group's name (the same name on every member); kind: "dp", "tp", "pp", "cp",
    "ep" or "other" (or GROUP_*); ranks: its members' global ranks in group order (for "pp":
    stage order), this rank among them. Declare every group before the first step; declaring
    a name again replaces it. Raises ValueError with the probe's reason when refused (a rank
    outside the world, a rank twice, this rank not a member).
    """
    code = _group_kind(kind)
    members = [int(r) for r in ranks]
    if not members:
        raise ValueError("declare_group(%r): ranks is empty" % (name,))
    if any(r < -2**31 or r >= 2**31 for r in members):
        raise ValueError("declare_group(%r): ranks must be 32-bit integers" % (name,))
    lib = _get_lib()
    arr = (ctypes.c_int32 * len(members))(*members)
    lib.ts_declare_group(_probe(), intern(name), code, arr, len(members))
    err = lib.ts_last_error().decode(errors="replace")
    if err:
        raise ValueError(err)


def _p2p_op(op):
    code = _op_code(op)
    if code not in (COLLECTIVE_OPS["send"], COLLECTIVE_OPS["recv"]):
        raise ValueError("p2p op must be 'send' or 'recv', not %r" % (op,))
    return code


def record_p2p(op, peer, nbytes, arrive_ns, complete_ns, group="default"):
    """Records one point-to-point transfer: op "send" or "recv", `peer` the global rank at the
    other end, posted at arrive_ns and completed at complete_ns (ns, epoch); folded per
    (peer, group, op) into the step's p2p totals, the part not overlapped by compute counted as
    the pipeline bubble."""
    if int(peer) < 0:
        raise ValueError("peer must be a global rank >= 0, not %r" % (peer,))
    _get_lib().ts_p2p(_probe(), _p2p_op(op), intern(group), int(peer), int(nbytes),
                      int(arrive_ns), int(complete_ns))


@contextlib.contextmanager
def p2p(op, peer, nbytes, group="default"):
    """Context manager timing one blocking send or recv with `peer` from entry to exit."""
    code = _p2p_op(op)
    if int(peer) < 0:
        raise ValueError("peer must be a global rank >= 0, not %r" % (peer,))
    lib = _get_lib()
    t0 = lib.ts_now_ns()
    try:
        yield
    finally:
        lib.ts_p2p(_probe(), code, intern(group), int(peer), int(nbytes), t0, lib.ts_now_ns())


def set_flops(flops_per_step=0.0, peak_flops=0.0, hardware_flops_per_step=0.0):
    """States the FLOPs of the model's math this rank does per step, the device's peak FLOP/s
    and, for HFU, the FLOPs its hardware executes per step (recomputation included). Every step
    folded afterwards carries them; the collector serves MFU and HFU from them."""
    values = []
    for name, v in (("flops_per_step", flops_per_step),
                    ("hardware_flops_per_step", hardware_flops_per_step),
                    ("peak_flops", peak_flops)):
        v = float(v)
        if not v >= 0 or v == float("inf"):
            raise ValueError("%s must be a finite number >= 0, not %r" % (name, v))
        values.append(v)
    _get_lib().ts_set_flops(_probe(), values[0], values[1], values[2])


def op(name, start_ns, duration_ns):
    """Records one operator (kernel) execution."""
    _get_lib().ts_op(_probe(), intern(name), int(start_ns), int(duration_ns))


def flush(timeout_ms=1000):
    """Waits until every ended step is folded (and acknowledged when connected). True if so."""
    return _get_lib().ts_probe_flush(_probe(), int(timeout_ms)) == 0


def stats():
    """The probe's counters as a dict (see ts_probe_stats)."""
    s = _Stats()
    _get_lib().ts_probe_get_stats(_probe(), ctypes.byref(s))
    return {name: getattr(s, name) for name, _ in _Stats._fields_}


def dump_stacks(capture_id=None):
    """Takes a stack capture of this process now (every thread, native and Python frames).

    Returns the path the gzip JSON file will have ($TRAINSCOPE_CAPTURE_DIR, default
    /tmp/trainscope-captures, then <capture_id>/rank-<R>.json.gz); it appears within ~2.5 s
    and its statuses go to the agent like an agent-requested capture's.
    """
    if capture_id is None:
        capture_id = "stacks-%d-%d" % (os.getpid(), now_ns() // 1000000)
    lib = _get_lib()
    path = ctypes.create_string_buffer(4096)
    if lib.ts_probe_request_stacks(_probe(), capture_id.encode(), path, len(path)) != 0:
        raise ValueError("dump_stacks(): " + lib.ts_last_error().decode(errors="replace"))
    return path.value.decode(errors="replace")


def _shutdown_at_exit():
    # Never hold the interpreter's exit for long, and never drop what a live agent can still
    # take: the probe's own rule (ts_exit_wait_ms).
    try:
        wait = _lib.ts_exit_wait_ms() if _handle is not None and _lib is not None else 0
    except Exception:  # noqa: BLE001 - exit must go on
        wait = 0
    shutdown(wait)


def shutdown(timeout_ms=500):
    """Folds what is left, says goodbye to the agent and frees the probe. Idempotent."""
    global _handle
    auto = _auto_module()
    if auto is not None:
        auto.state.on = False  # its hooks hold the probe: no record after it is gone
    with _lock:
        if _handle is None or _lib is None:
            return
        _handle = None
    # A provider call racing interpreter shutdown would run Python code too late.
    _lib.ts_probe_set_stack_provider(_STACK_PROVIDER_T(), None)
    _lib.ts_shutdown(int(timeout_ms))
