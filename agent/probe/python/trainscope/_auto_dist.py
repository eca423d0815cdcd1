"""Times every torch.distributed collective and point-to-point call for trainscope.auto.

Each call in CALLS is replaced, in torch.distributed and in torch.distributed.distributed_c10d
(whose own helpers, e.g. all_gather_object or batch_isend_irecv, call them through that
module's globals, so they are recorded as the primitives they use), by a wrapper that calls the
original unchanged and then records one collective: op, bytes of one call, process group,
arrival (the call) and completion. A synchronous call completes when it returns; an
async_op=True call or isend/irecv when its work's future completes (a callback, so the time
does not depend on when the caller waits), or, for work without a future (gloo's
point-to-point in torch 1.13), when Work.wait() or is_completed() first reports it done. A send
or receive whose peer is known (dst; src, or what a blocking recv from any source returns) is
recorded as a point-to-point transfer with that peer (ts_p2p: the pipeline's p2p and bubble),
an irecv from any source as a collective "recv". Calls made inside another wrapped call (a
deprecated name forwarding to its successor) are recorded once, by the outermost.

Time the training thread is blocked on communication is also recorded, as a wait (the probe's
range kind "comm": exposed communication, never compute): the whole of a synchronous call, and
each Work.wait(). DDP's wait for its gradient buckets at the end of backward is _auto_torch's.

Bytes of one call, the same on every rank: all_reduce, broadcast, reduce, send, recv: the
tensor; all_gather (list, coalesced, into_tensor, _all_gather_base): the gathered output;
reduce_scatter (list, tensor, _reduce_scatter_base): the input; all_to_all: the input;
gather and scatter (op "unknown": the wire has no such op): this rank's tensor; barriers: 0.
"""

import functools
import inspect
import threading
import time

__all__ = ["CALLS", "patch", "wrap_call"]

_time_ns = time.time_ns

# name: (op, parameter holding the data, how to count it, peer parameter for link transfers)
CALLS = {
    "all_reduce": ("all_reduce", "tensor", "one", None),
    "all_reduce_coalesced": ("all_reduce", "tensors", "list", None),
    "all_gather": ("all_gather", "tensor_list", "list", None),
    "all_gather_coalesced": ("all_gather", "output_tensor_lists", "lists", None),
    "all_gather_into_tensor": ("all_gather", "output_tensor", "one", None),
    "_all_gather_base": ("all_gather", "output_tensor", "one", None),
    "reduce_scatter": ("reduce_scatter", "input_list", "list", None),
    "reduce_scatter_tensor": ("reduce_scatter", "input", "one", None),
    "_reduce_scatter_base": ("reduce_scatter", "input", "one", None),
    "all_to_all": ("all_to_all", "input_tensor_list", "list", None),
    "all_to_all_single": ("all_to_all", "input", "one", None),
    "broadcast": ("broadcast", "tensor", "one", None),
    "reduce": ("reduce", "tensor", "one", None),
    "gather": ("unknown", "tensor", "one", None),
    "scatter": ("unknown", "tensor", "one", None),
    "barrier": ("barrier", None, None, None),
    "monitored_barrier": ("barrier", None, None, None),
    "send": ("send", "tensor", "one", "dst"),
    "recv": ("recv", "tensor", "one", "src"),
    "isend": ("send", "tensor", "one", "dst"),
    "irecv": ("recv", "tensor", "one", "src"),
}
_ALWAYS_ASYNC = ("isend", "irecv")

_MAX_PENDING_WAITS = 65536  # works without a future awaiting wait(); oldest dropped past it

# Python callbacks attached to futures run on the backend's threads, and torch releases each
# one there (taking the GIL) just after it ran. A thread that wants the GIL while the
# interpreter finalizes is killed mid-C++ and the process aborts (SIGABRT at exit, seen in 1 of
# 3 runs of a gloo DDP script that exits without destroy_process_group). So the callbacks are
# counted, and drain() at exit waits for them; see trainscope.auto._at_exit.
_callbacks = {"in_flight": 0, "last_done_ns": 0}  # guarded by _callbacks_lock
_callbacks_lock = threading.Lock()


class _Local(threading.local):
    depth = 0  # wrapped calls in progress on this thread


_tls = _Local()
_pending_waits = {}  # id(work) -> (work, record(t1)); guarded by _pending_lock
_pending_lock = threading.Lock()


def _tensor_bytes(t):
    try:
        return t.numel() * t.element_size()
    except Exception:  # noqa: BLE001 - not a tensor (None on a non-root rank)
        return 0


def _count(value, how):
    if how == "one":
        return _tensor_bytes(value)
    if how == "list":
        return sum(_tensor_bytes(t) for t in value or ())
    if how == "lists":
        return sum(_tensor_bytes(t) for lst in value or () for t in lst)
    return 0


def _getter(fn, name):
    """(args, kwargs) -> the value of parameter `name` of `fn` (its default when not given)."""
    if name is None:
        return lambda args, kwargs: None
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    for i, p in enumerate(params):
        if p.name == name:
            default = None if p.default is inspect.Parameter.empty else p.default

            def get(args, kwargs, i=i, name=name, default=default):
                return args[i] if len(args) > i else kwargs.get(name, default)
            return get
    return lambda args, kwargs: None


def _record_on_completion(work, record):
    """Calls record(t_ns) once `work` has completed."""
    try:
        fut = work.get_future()
    except Exception:  # noqa: BLE001 - no future for this work: time it at wait()
        with _pending_lock:
            if len(_pending_waits) >= _MAX_PENDING_WAITS:
                _pending_waits.pop(next(iter(_pending_waits)))
            _pending_waits[id(work)] = (work, record)
        return

    then(fut, lambda _value: record(_time_ns()))


def then(fut, on_done, result=None):
    """fut.then() with a counted callback: on_done(value) when the future succeeded (its errors
    are swallowed); the chained future's value is result(value) (default: value), and a failed
    future's error passes on unchanged."""
    def done(f):
        try:
            value = f.value()  # raises when the work failed: nothing completed
            try:
                on_done(value)
            except Exception:  # noqa: BLE001 - telemetry must not fail the chain
                pass
            return value if result is None else result(value)
        finally:
            with _callbacks_lock:
                _callbacks["in_flight"] -= 1
                _callbacks["last_done_ns"] = _time_ns()

    with _callbacks_lock:
        _callbacks["in_flight"] += 1
    try:
        return fut.then(done)
    except Exception:
        with _callbacks_lock:
            _callbacks["in_flight"] -= 1
        raise


def drain(timeout_s=1.0, settle_s=0.05):
    """At exit: waits (bounded) for counted callbacks still to run, then lets the backend's
    threads release the last ones while the interpreter still serves the GIL."""
    deadline = time.monotonic() + timeout_s
    while _callbacks["in_flight"] > 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    if _time_ns() - _callbacks["last_done_ns"] < 1e9:
        time.sleep(settle_s)


def _completed(work):
    if not _pending_waits:
        return
    with _pending_lock:
        entry = _pending_waits.pop(id(work), None)
    if entry is not None and entry[0] is work:
        entry[1](_time_ns())


def _blocked(t0):
    """The calling thread was blocked on communication from t0 until now (Work.wait(), a
    synchronous collective): a wait range for the recorder, which keeps the training thread's."""
    recorder = _waits["recorder"]
    if recorder is not None:
        try:
            recorder.wait(t0, _time_ns())
        except Exception as e:  # noqa: BLE001 - telemetry must not fail the wait
            recorder.fail("Work.wait", e)


_waits = {"recorder": None}  # set by patch()


def _patch_work(work_cls):
    if getattr(work_cls, "_trainscope_patched", False):
        return
    orig_wait = work_cls.wait
    orig_done = work_cls.is_completed

    @functools.wraps(orig_wait)
    def wait(self, *args, **kwargs):
        t0 = _time_ns()
        # Inside a wrapped synchronous call (which waits on its own work) the call is the wait.
        recorder = _waits["recorder"] if not _tls.depth else None
        if recorder is not None:
            recorder.blocked(t0)
        try:
            result = orig_wait(self, *args, **kwargs)
        finally:
            if recorder is not None:
                recorder.blocked(0)
        _completed(self)
        if recorder is not None:
            _blocked(t0)
        return result

    @functools.wraps(orig_done)
    def is_completed(self, *args, **kwargs):
        result = orig_done(self, *args, **kwargs)
        if result:
            _completed(self)
        return result

    work_cls.wait = wait
    work_cls.is_completed = is_completed
    work_cls._trainscope_patched = True


def wrap_call(fn, name, recorder):
    """`fn` (torch.distributed.<name>) wrapped to record through `recorder`, an object with
    active() -> bool, group_key(group) -> (group id, is member), collective(op, group id,
    bytes, t0, t1), p2p(op, group id, peer, bytes, t0, t1), wait(t0, t1) (the calling thread
    blocked on communication; the recorder keeps only its training thread's), blocked(since)
    (the same, while it lasts: since the call, 0 when it returned; for hang reports) and
    fail(what, exc)."""
    op, data_param, how, peer_param = CALLS[name]
    get_data = _getter(fn, data_param)
    get_group = _getter(fn, "group")
    get_peer = _getter(fn, peer_param)
    always_async = name in _ALWAYS_ASYNC
    get_async = _getter(fn, "async_op")

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _tls.depth or not recorder.active():
            return fn(*args, **kwargs)
        t0 = _time_ns()
        blocking = not (always_async or get_async(args, kwargs))
        if blocking:
            recorder.blocked(t0)  # a rank that stops in here waits in a collective
        _tls.depth += 1
        try:
            result = fn(*args, **kwargs)
        finally:
            _tls.depth -= 1
            if blocking:
                recorder.blocked(0)
        try:
            gid, member = recorder.group_key(get_group(args, kwargs))
            if not member:
                return result  # this rank is not in the group: nothing was sent
            nbytes = _count(get_data(args, kwargs), how)
            peer = get_peer(args, kwargs) if peer_param else None
            if peer is None and name == "recv" and isinstance(result, int):
                peer = result  # a blocking recv from any source returns the sender

            def record(t1):
                if peer is not None and int(peer) >= 0:
                    recorder.p2p(op, gid, int(peer), nbytes, t0, t1)
                else:
                    recorder.collective(op, gid, nbytes, t0, t1)

            if always_async or get_async(args, kwargs):
                if result is not None:
                    _record_on_completion(result, record)
            else:
                t1 = _time_ns()
                record(t1)
                recorder.wait(t0, t1)  # a synchronous call blocks its caller throughout
        except Exception as e:  # noqa: BLE001 - the call's result stands
            recorder.fail("torch.distributed." + name, e)
        return result

    wrapper._trainscope_wrapped = True
    return wrapper


def patch(dist, recorder):
    """Wraps every call of CALLS that this torch has, in both namespaces; patches Work."""
    c10d = dist.distributed_c10d
    done = []
    for name in CALLS:
        orig = getattr(c10d, name, None)
        if orig is None or getattr(orig, "_trainscope_wrapped", False):
            continue
        wrapped = wrap_call(orig, name, recorder)
        setattr(c10d, name, wrapped)
        if getattr(dist, name, None) is orig:
            setattr(dist, name, wrapped)
        done.append(name)
    work_cls = getattr(c10d, "Work", None) or getattr(dist, "Work", None)
    _waits["recorder"] = recorder
    if work_cls is not None:
        _patch_work(work_cls)
    return done
