"""trainscope helpers for PyTorch 1.13: every ATen operator recorded as a probe op (through
libtrainscope_torch.so, a global at::RecordFunction callback), a DDP communication hook that
records the gradient all_reduce as a collective, and compute ranges for forward, backward and
the optimizer.

    import trainscope, trainscope.torch as tst
    tst.enable_ops()                     # aten::* operators -> op records (False if no lib)
    model = DDP(net)
    model.register_comm_hook(None, tst.allreduce_hook)   # state None: the default group
    tst.instrument_module(model)         # forward -> compute range
    tst.instrument_optimizer(opt)        # opt.step() -> compute range
    for batch in loader:
        with trainscope.step():
            loss = loss_fn(model(batch))
            tst.backward(loss)           # loss.backward() -> compute range

Operators are recorded on the thread that ran them, from the operator's start to its end
(nested ones too: aten::linear and the aten::addmm inside it). The library is found at
$TRAINSCOPE_TORCH_LIB, else next to the probe library that trainscope loaded (an installed
copy), else in the same meson build tree (agent/torch/ beside agent/probe/); when it is
missing, enable_ops() warns once and returns False, and training goes on without operators.

The hook runs where DDP calls it (the autograd thread); completion is recorded from the
future's callback, on whichever thread completes it. Both are safe: the probe keeps one ring
per thread and a collective with both times is a single record.
"""

import contextlib
import ctypes
import os
import sys
import threading

import torch  # noqa: F401 - fail early without torch; also loads libtorch_cpu for the callback
import torch.distributed as dist

import trainscope

__all__ = ["allreduce_hook", "group_name", "compute", "backward", "instrument_module",
           "instrument_optimizer", "enable_ops", "disable_ops", "ops_enabled", "ops_recorded",
           "ops_unavailable", "torch_lib_path", "declare_process_group", "declare_megatron_groups",
           "watch_new_groups", "trace_p2p"]

_TORCH_LIB_NAME = "libtrainscope_torch.so"
_torch_lib = None
_torch_lib_error = None
_ops_refused = None
_warned = False
_shutdown_wrapped = False


def _torch_lib_candidates():
    env = os.environ.get("TRAINSCOPE_TORCH_LIB")
    if env:
        return [env]
    probe_path = getattr(trainscope._get_lib(), "_name", None)  # noqa: SLF001 - same package
    if not probe_path:
        return []
    probe_dir = os.path.dirname(os.path.abspath(probe_path))
    # Installed: both libraries side by side. Build tree: agent/probe/ and agent/torch/.
    return [os.path.join(probe_dir, _TORCH_LIB_NAME),
            os.path.join(probe_dir, "..", "torch", _TORCH_LIB_NAME)]


def torch_lib_path():
    """The path of libtrainscope_torch.so that enable_ops() would load, or None."""
    for path in _torch_lib_candidates():
        if os.path.exists(path):
            return os.path.abspath(path)
    return None


def _load_torch_lib():
    global _torch_lib, _torch_lib_error
    if _torch_lib is not None or _torch_lib_error is not None:
        return _torch_lib
    path = torch_lib_path()
    if path is None:
        tried = ", ".join(_torch_lib_candidates()) or "nothing"
        _torch_lib_error = ("cannot find %s (tried: %s); it is built only where libtorch's "
                            "headers are (Debian: libtorch-dev; the Meson summary says), or set "
                            "TRAINSCOPE_TORCH_LIB to its path" % (_TORCH_LIB_NAME, tried))
        return None
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        _torch_lib_error = "cannot load %s: %s" % (path, e)
        return None
    lib.trainscope_torch_enable.restype = ctypes.c_int32
    lib.trainscope_torch_enable.argtypes = [ctypes.c_void_p]
    lib.trainscope_torch_disable.restype = None
    lib.trainscope_torch_disable.argtypes = []
    lib.trainscope_torch_enabled.restype = ctypes.c_int32
    lib.trainscope_torch_enabled.argtypes = []
    lib.trainscope_torch_ops_recorded.restype = ctypes.c_uint64
    lib.trainscope_torch_ops_recorded.argtypes = []
    _torch_lib = lib
    return lib


def _wrap_shutdown():
    # Record calls on a destroyed probe are undefined, so the callback must stop before the
    # probe goes: trainscope.shutdown() (explicit or at exit) disables it first.
    global _shutdown_wrapped
    if _shutdown_wrapped:
        return
    inner = trainscope.shutdown

    def shutdown(*args, **kwargs):
        disable_ops()
        return inner(*args, **kwargs)

    shutdown.__doc__ = inner.__doc__
    trainscope.shutdown = shutdown
    _shutdown_wrapped = True


def enable_ops(quiet=False):
    """Records every PyTorch operator (RecordFunction scopes FUNCTION and USER_SCOPE) as a
    probe op on this process's probe. Returns True when recording, False (after a one-line
    warning on stderr, once, unless `quiet`) when libtrainscope_torch.so is missing or refused;
    ops_unavailable() then says why."""
    global _warned, _ops_refused
    lib = _load_torch_lib()
    if lib is None:
        if not _warned and not quiet:
            _warned = True
            print("trainscope: PyTorch operators are not recorded: " + _torch_lib_error,
                  file=sys.stderr, flush=True)
        return False
    probe = trainscope._probe()  # noqa: SLF001 - same package; creates the probe first
    _wrap_shutdown()
    if lib.trainscope_torch_enable(probe) != 0:
        _ops_refused = "the operator callback was refused (see the log line above)"
        if not _warned and not quiet:
            _warned = True
            print("trainscope: PyTorch operators are not recorded: " + _ops_refused,
                  file=sys.stderr, flush=True)
        return False
    return True


def ops_unavailable():
    """Why enable_ops() returned False, or None when it has not failed."""
    return _torch_lib_error or _ops_refused


def disable_ops():
    """Stops recording operators. Safe to call when not enabled."""
    if _torch_lib is not None:
        _torch_lib.trainscope_torch_disable()


def ops_enabled():
    """True while operators are being recorded."""
    return _torch_lib is not None and _torch_lib.trainscope_torch_enabled() == 1


def ops_recorded():
    """Operators recorded so far (all threads), 0 when the library is not loaded."""
    return 0 if _torch_lib is None else int(_torch_lib.trainscope_torch_ops_recorded())


def group_name(process_group):
    """A stable name for a process group: its c10d name, 'world' for the default group."""
    if process_group is None or process_group is dist.group.WORLD:
        return "world"
    try:
        name = dist.distributed_c10d._pg_names.get(process_group)  # private in 1.13
        if name:
            return str(name)
    except Exception:  # noqa: BLE001 - naming must never break training
        pass
    return "pg%d" % id(process_group)


def allreduce_hook(state, bucket):
    """DDP communication hook: averages the bucket like DDP's default and records the
    all_reduce (arrival = hook call, completion = future done, bytes = bucket buffer size).
    `state` is the process group to use, or None for the default group."""
    group = state if state is not None else dist.group.WORLD
    tensor = bucket.buffer()
    nbytes = tensor.numel() * tensor.element_size()
    name = group_name(group)
    arrive = trainscope.now_ns()
    tensor.div_(group.size() if hasattr(group, "size") else dist.get_world_size(group))
    # Under TRAINSCOPE_AUTO=1 dist.all_reduce records itself; this hook records the bucket.
    all_reduce = getattr(dist.all_reduce, "__wrapped__", dist.all_reduce)
    fut = all_reduce(tensor, group=group, async_op=True).get_future()

    def done(f):
        try:
            trainscope.record_collective("all_reduce", nbytes, arrive, trainscope.now_ns(),
                                         group=name)
        except Exception:  # noqa: BLE001 - telemetry must never fail the step
            pass
        return f.value()[0]

    return fut.then(done)


@contextlib.contextmanager
def compute(name):
    """A compute range: counted as compute time in the step report."""
    with trainscope.range(name, "compute"):
        yield


def backward(loss, *args, **kwargs):
    """loss.backward(...) inside a 'backward' compute range."""
    with trainscope.range("backward", "compute"):
        loss.backward(*args, **kwargs)


def instrument_module(module, name="forward"):
    """Marks every forward of `module` as a compute range. Returns the hook handles."""
    lib = trainscope._get_lib()  # noqa: SLF001 - same package
    nid = trainscope.intern(name)

    def pre(_mod, _inputs):
        lib.ts_range_push(trainscope._probe(), nid, trainscope.RANGE_COMPUTE, 0)

    def post(_mod, _inputs, _output):
        lib.ts_range_pop(trainscope._probe(), 0)

    return [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]


def instrument_optimizer(optimizer, name="optimizer"):
    """Wraps optimizer.step so each call is a compute range. Idempotent."""
    if getattr(optimizer, "_trainscope_wrapped", False):
        return optimizer
    inner = optimizer.step

    def step(*args, **kwargs):
        with trainscope.range(name, "compute"):
            return inner(*args, **kwargs)

    optimizer.step = step
    optimizer._trainscope_wrapped = True
    return optimizer



# --- Parallel layout: process groups and point-to-point transfers --------------------------

# Megatron-LM's parallel_state getters and the kind each group is (megatron.core).
_MEGATRON_GROUPS = (
    ("get_tensor_model_parallel_group", "tp"),
    ("get_pipeline_model_parallel_group", "pp"),
    ("get_data_parallel_group", "dp"),
    ("get_context_parallel_group", "cp"),
    ("get_expert_model_parallel_group", "ep"),
)


def _group_ranks(group):
    if group is None or group is dist.group.WORLD:
        return list(range(dist.get_world_size()))
    return list(dist.get_process_group_ranks(group))


def declare_process_group(group, kind="other", name=None):
    """Declares a torch.distributed process group to trainscope (trainscope.declare_group):
    its global ranks in group order, `kind` "dp", "tp", "pp" (ranks in stage order), "cp",
    "ep" or "other", named `name` or its c10d name. A group that does not hold this rank is
    skipped (returns False), as torch hands non-members a placeholder."""
    ranks = _group_ranks(group)
    if dist.get_rank() not in ranks:
        return False
    trainscope.declare_group(name or group_name(group), kind, ranks)
    return True


def megatron_groups():
    """Megatron-LM's tensor-, pipeline-, data-, context- and expert-parallel groups as
    [(group, kind)] (megatron.core.parallel_state, once initialize_model_parallel ran); []
    without Megatron."""
    try:
        from megatron.core import parallel_state  # pylint: disable=import-outside-toplevel
    except Exception:  # noqa: BLE001 - Megatron is optional
        return []
    found = []
    for getter, kind in _MEGATRON_GROUPS:
        fn = getattr(parallel_state, getter, None)
        try:
            group = fn() if fn is not None else None
        except Exception:  # noqa: BLE001 - a group this layout does not build asserts
            group = None
        if group is not None:
            found.append((group, kind))
    return found


def declare_megatron_groups():
    """Declares Megatron-LM's groups (megatron_groups()), each named after its kind. Returns
    the kinds declared; [] without Megatron."""
    return [kind for group, kind in megatron_groups()
            if declare_process_group(group, kind, name=kind)]


def watch_new_groups(kind_of=None):
    """Wraps torch.distributed.new_group so that every group created from now on that holds
    this rank is declared (with its c10d name). `kind_of(ranks)` names its kind ("tp", ...);
    without it, or when it returns None, the group is declared as "other". Idempotent;
    a declaration that fails warns and never breaks group creation."""
    global _kind_of
    _kind_of = kind_of
    if getattr(dist.new_group, "_trainscope_wrapped", False):
        return
    inner = dist.new_group

    def new_group(*args, **kwargs):
        group = inner(*args, **kwargs)
        try:
            if group is not None and group is not dist.GroupMember.NON_GROUP_MEMBER:
                kind = (_kind_of(_group_ranks(group)) if _kind_of else None) or "other"
                declare_process_group(group, kind)
        except Exception as e:  # noqa: BLE001 - telemetry must never fail group creation
            print("trainscope: could not declare a process group: %s" % e, file=sys.stderr)
        return group

    new_group._trainscope_wrapped = True
    dist.new_group = new_group


_kind_of = None
_batching = threading.local()  # inside batch_isend_irecv: its isend/irecv stay torch's own


def _nbytes(tensor):
    return tensor.numel() * tensor.element_size()


class _TimedWork:
    """An isend/irecv request: records the transfer when its wait() returns (posted at the
    isend/irecv call). Everything else goes to the torch Work it wraps."""

    def __init__(self, work, op, peer, nbytes, group, posted):
        self._work = work
        self._what = (op, peer, nbytes, group, posted)

    def wait(self, *args, **kwargs):
        out = self._work.wait(*args, **kwargs)
        if self._what is not None:
            op, peer, nbytes, group, posted = self._what
            self._what = None
            _record_p2p(op, peer, nbytes, posted, group)
        return out

    def __getattr__(self, name):
        return getattr(self._work, name)


def _record_p2p(op, peer, nbytes, posted, group):
    try:
        trainscope.record_p2p(op, int(peer), nbytes, posted, trainscope.now_ns(),
                              group=group_name(group))
    except Exception:  # noqa: BLE001 - telemetry must never fail the transfer
        pass


def trace_p2p():
    """Times torch.distributed.send, recv, isend and irecv as trainscope p2p transfers with
    their peer and bytes (a blocking call from entry to return; isend/irecv from the call to
    the request's wait(); batch_isend_irecv's transfers likewise). Idempotent. all_to_all is not
    traced yet."""
    if getattr(dist.send, "_trainscope_wrapped", False):
        return

    send, recv, isend, irecv = dist.send, dist.recv, dist.isend, dist.irecv
    batch = dist.batch_isend_irecv

    def t_send(tensor, dst, group=None, tag=0):
        posted = trainscope.now_ns()
        out = send(tensor, dst, group=group, tag=tag)
        _record_p2p("send", dst, _nbytes(tensor), posted, group)
        return out

    def t_recv(tensor, src=None, group=None, tag=0):
        posted = trainscope.now_ns()
        out = recv(tensor, src=src, group=group, tag=tag)
        _record_p2p("recv", src if src is not None else out, _nbytes(tensor), posted, group)
        return out

    def t_isend(tensor, dst, group=None, tag=0):
        posted = trainscope.now_ns()
        work = isend(tensor, dst, group=group, tag=tag)
        if not work or getattr(_batching, "on", False):
            return work
        return _TimedWork(work, "send", dst, _nbytes(tensor), group, posted)

    def t_irecv(tensor, src=None, group=None, tag=0):
        posted = trainscope.now_ns()
        work = irecv(tensor, src=src, group=group, tag=tag)
        # A receive from any source names its peer only later; in a batch, torch needs the
        # requests themselves (they are timed by t_batch).
        if not work or src is None or getattr(_batching, "on", False):
            return work
        return _TimedWork(work, "recv", src, _nbytes(tensor), group, posted)

    def t_batch(p2p_op_list):
        posted = trainscope.now_ns()
        _batching.on = True
        try:
            works = batch(p2p_op_list)
        finally:
            _batching.on = False
        if not works or len(works) != len(p2p_op_list):
            return works  # coalesced into fewer requests: no per-peer times to give
        return [_TimedWork(w, "send" if p.op is t_isend else "recv", p.peer, _nbytes(p.tensor),
                           p.group, posted) for p, w in zip(p2p_op_list, works)]

    # Replaced in distributed_c10d too: P2POp checks its op against that module's isend/irecv,
    # and batch_isend_irecv calls the op it holds, so batched transfers are timed as well.
    c10d = dist.distributed_c10d
    for name, fn in (("send", t_send), ("recv", t_recv), ("isend", t_isend), ("irecv", t_irecv),
                     ("batch_isend_irecv", t_batch)):
        fn._trainscope_wrapped = True
        setattr(dist, name, fn)
        setattr(c10d, name, fn)
