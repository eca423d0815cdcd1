"""The PyTorch side of trainscope.auto: patches applied once torch is imported.

patch_torch() (at torch's import) wraps Optimizer step() (per class, once), DataLoader
iterators' __next__, torch.autograd.backward, torch.distributed's calls (_auto_dist.py),
DistributedDataParallel (the automatic comm hook), and, per TRAINSCOPE_STEP,
torch.profiler.profile.step or the named function. on_armed() (the process trains) adds the
global module hooks that find the outermost modules during the first step; at the first step
boundary they are replaced by hooks on those modules only, so later steps pay for a hook per
outermost module call, not per module.

Every wrapper calls the original with the same arguments and returns or raises exactly what it
did; trainscope's own work runs in guard() and a failure there is logged once and switches
that part off. Training-thread only, except the collective recorder (any thread).
"""

import functools
import sys
import threading
import time

import trainscope
from trainscope import auto
from trainscope import _auto_dist

_time_ns = time.time_ns
_TRAINING = threading.main_thread()  # the thread whose waits the step is exposed to
_MAX_ROOTS = 64  # outermost modules hooked after the first step; a model has a few

_names = {}


def _name(text):
    nid = _names.get(text)
    if nid is None:
        nid = _names[text] = trainscope.intern(text)
    return nid


def _phase_kind():
    # With operators recorded, they are the compute (a phase range would also count the
    # interpreter's time between them); waits inside a phase are recorded as such either way.
    return trainscope.RANGE_OTHER if auto.state.ops else trainscope.RANGE_COMPUTE


_broken = set()


def _fail(part, exc):
    _broken.add(part)
    auto.log("%s: %r; that part is not recorded from now on" % (part, exc), key="fail-" + part)


def _ok(part):
    return auto.state.on and part not in _broken


def _phase(name, t0, t1):
    sink = auto.state.sink
    if sink is not None:
        sink.range(_name(name), _phase_kind(), t0, t1)


# ---- steps from the optimizer -------------------------------------------------------------

_opt = {"depth": 0}


def _wrap_optimizer_step(fn):
    @functools.wraps(fn)
    def step(self, *args, **kwargs):
        if _opt["depth"] or not auto.state.armed or not _ok("optimizer"):
            return fn(self, *args, **kwargs)
        t0 = _time_ns()
        try:
            auto.activity(t0)
        except Exception as e:  # noqa: BLE001
            _fail("optimizer", e)
        _opt["depth"] += 1
        try:
            result = fn(self, *args, **kwargs)
        finally:
            _opt["depth"] -= 1
        try:
            t1 = _time_ns()
            _phase("optimizer", t0, t1)
            if auto.state.options.step == "optimizer" and not auto.state.user_steps:
                stepper = auto.state.stepper
                before = stepper.steps_ended
                stepper.optimizer_end(id(self), t1)
                if stepper.steps_ended != before:
                    _after_boundary()
        except Exception as e:  # noqa: BLE001
            _fail("optimizer", e)
        return result

    step._trainscope_step = True
    return step


# The method torch's Optimizer.__init__ calls to wrap its class's step() for the profiler, once
# per class: _patch_step_function from torch 2.0 on, _hook_for_profile before.
_STEP_PATCHERS = ("_patch_step_function", "_hook_for_profile")


def _patch_optimizer(torch):
    Optimizer = torch.optim.Optimizer
    name = next((n for n in _STEP_PATCHERS if callable(getattr(Optimizer, n, None))), None)
    if name is None:
        raise AttributeError("torch.optim.Optimizer (torch %s) has none of %s, which torch calls "
                             "when an optimizer is made" % (getattr(torch, "__version__", "?"),
                                                           ", ".join(_STEP_PATCHERS)))
    orig = getattr(Optimizer, name)

    @functools.wraps(orig)
    def patch_step(self):
        orig(self)
        try:
            cls = type(self)
            if not getattr(cls.step, "_trainscope_step", False):
                # functools.wraps carries torch's "hooked" mark, so torch keeps ours outside.
                cls.step = _wrap_optimizer_step(cls.step)
            resolve_function()
            auto.arm()
        except Exception as e:  # noqa: BLE001
            _fail("optimizer", e)

    setattr(Optimizer, name, patch_step)


# ---- data wait ----------------------------------------------------------------------------

def _patch_dataloader(torch):
    it_cls = torch.utils.data.dataloader._BaseDataLoaderIter
    orig = it_cls.__next__

    @functools.wraps(orig)
    def __next__(self):
        if not auto.state.armed or not _ok("data"):
            return orig(self)
        t0 = _time_ns()
        try:
            auto.activity(t0)
        except Exception as e:  # noqa: BLE001
            _fail("data", e)
        try:
            return orig(self)
        finally:
            # StopIteration too: the wait for the epoch's end is data wait of this step.
            try:
                sink = auto.state.sink
                if sink is not None:
                    sink.range(_name("data"), trainscope.RANGE_DATA, t0, _time_ns())
            except Exception as e:  # noqa: BLE001
                _fail("data", e)

    it_cls.__next__ = __next__


# ---- forward: the outermost modules -------------------------------------------------------

class _Forward(object):
    depth = 0          # module calls in progress on the training thread
    t0 = 0             # when the outermost one began
    learning = True    # global hooks in place, collecting roots
    roots = {}         # id(module) -> module, outermost modules seen while learning
    handles = []


def _forward_pre(module, _inputs):
    if _Forward.depth == 0:
        if not auto.state.armed or not _ok("forward"):
            return None
        try:
            t = _time_ns()
            _Forward.t0 = t
            auto.activity(t)
            if _Forward.learning and len(_Forward.roots) < _MAX_ROOTS:
                _Forward.roots[id(module)] = module
        except Exception as e:  # noqa: BLE001
            _fail("forward", e)
    _Forward.depth += 1
    return None


def _forward_post(_module, _inputs, _output):
    if _Forward.depth == 0:
        return None  # hooks added while a forward ran
    _Forward.depth -= 1
    if _Forward.depth == 0 and _ok("forward"):
        try:
            _phase("forward", _Forward.t0, _time_ns())
        except Exception as e:  # noqa: BLE001
            _fail("forward", e)
    return None  # never replaces the output


def _start_forward_learning(torch):
    mod = torch.nn.modules.module
    _Forward.handles = [mod.register_module_forward_pre_hook(_forward_pre),
                        mod.register_module_forward_hook(_forward_post)]


def _after_boundary():
    # An exception inside a forward skips its post hook; a step boundary is outside every
    # forward, so the depth starts over here.
    _Forward.depth = 0
    if not _Forward.learning:
        return
    _Forward.learning = False
    for h in _Forward.handles:
        h.remove()
    _Forward.handles = []
    for module in _Forward.roots.values():
        module.register_forward_pre_hook(_forward_pre)
        module.register_forward_hook(_forward_post)
    _Forward.roots = {}


# ---- backward -----------------------------------------------------------------------------

def _patch_backward(torch):
    orig = torch.autograd.backward

    @functools.wraps(orig)
    def backward(*args, **kwargs):
        if not auto.state.armed or not _ok("backward"):
            return orig(*args, **kwargs)
        t0 = _time_ns()
        try:
            auto.activity(t0)
        except Exception as e:  # noqa: BLE001
            _fail("backward", e)
        _ddp["last_bucket_ns"] = 0
        try:
            result = orig(*args, **kwargs)
        finally:
            if _ddp["last_bucket_ns"]:
                _hint(0)
        try:
            t1 = _time_ns()
            _phase("backward", t0, t1)
            last = _ddp["last_bucket_ns"]
            if t0 < last <= t1 and auto.state.sink is not None:
                # DDP launched its last gradient bucket at `last`; from there to the end of
                # backward the reducer waits for every bucket's all-reduce (finalize_backward):
                # blocked on communication, however long the other ranks took to arrive.
                auto.state.sink.range(_name("ddp wait"), trainscope.RANGE_COMM, last, t1)
        except Exception as e:  # noqa: BLE001
            _fail("backward", e)
        return result

    torch.autograd.backward = backward


# ---- torch.distributed --------------------------------------------------------------------

class _DistRecorder(object):
    """_auto_dist's recorder: into this process's probe, once it exists (any thread)."""

    def __init__(self, dist):
        self._dist = dist
        self._groups = {}  # id(group) -> (name id, member); process groups live for the job
        self._ops = trainscope.COLLECTIVE_OPS

    def active(self):
        if auto.state.sink is None and auto.state.armed and auto.state.on and \
                threading.current_thread() is threading.main_thread():
            # Communication can be the first thing of a step (a pipeline stage's recv): in a
            # process that trains, it starts the probe and opens the step as any activity does.
            auto.activity(_time_ns())
        return auto.state.sink is not None and auto.state.on and "collectives" not in _broken

    def group_key(self, group):
        key = 0 if group is None else id(group)
        found = self._groups.get(key)
        if found is None:
            import trainscope.torch as tst
            member = True
            if group is not None and group is not self._dist.GroupMember.WORLD:
                member = not self._dist.distributed_c10d._rank_not_in_group(group)
            found = self._groups[key] = (_name(tst.group_name(group)), member)
        return found

    def collective(self, op, gid, nbytes, t0, t1):
        auto.state.sink.collective(self._ops[op], gid, nbytes, t0, t1)

    def p2p(self, op, gid, peer, nbytes, t0, t1):
        auto.state.sink.p2p(self._ops[op], gid, peer, nbytes, t0, t1)

    def wait(self, t0, t1):
        sink = auto.state.sink
        if sink is not None and auto.state.on and threading.current_thread() is _TRAINING:
            sink.range(_name("wait"), trainscope.RANGE_COMM, t0, t1)

    def blocked(self, since):
        _hint(since)

    def fail(self, what, exc):
        _fail("collectives", "%s: %r" % (what, exc))


def _patch_distributed(torch):
    dist = torch.distributed
    if not dist.is_available():
        return
    _auto_dist.patch(dist, _DistRecorder(dist))
    _patch_new_group(dist)
    _patch_ddp(torch, dist)


# ---- process groups: declared to the probe (the collector derives each rank's coordinates) --

_new_groups = []  # groups created before the probe started, declared by declare_groups()
_groups_declared = False


def _declare(group):
    import trainscope.torch as tst
    try:
        tst.declare_process_group(group)
    except Exception as e:  # noqa: BLE001 - a refused declaration costs only itself
        _fail("groups", e)


def _patch_new_group(dist):
    """new_group() returns as before; every group that holds this rank is declared (kind
    "other", its c10d name), at once when the probe runs, else when it starts."""
    inner = dist.new_group
    if getattr(inner, "_trainscope_wrapped", False):
        return

    @functools.wraps(inner)
    def new_group(*args, **kwargs):
        group = inner(*args, **kwargs)
        try:
            if group is not None and group is not dist.GroupMember.NON_GROUP_MEMBER:
                if _groups_declared:
                    _declare(group)
                else:
                    _new_groups.append(group)
        except Exception as e:  # noqa: BLE001 - group creation is never affected
            _fail("groups", e)
        return group

    new_group._trainscope_wrapped = True
    dist.new_group = new_group
    dist.distributed_c10d.new_group = new_group


def declare_groups():
    """At the probe's start: Megatron-LM's groups by kind (tp, pp, dp, cp, ep) when
    megatron.core.parallel_state has them, then the other groups created so far."""
    global _groups_declared
    _groups_declared = True
    if "groups" in _broken:
        return
    megatron = []
    try:
        import trainscope.torch as tst
        megatron = tst.megatron_groups()
        for group, kind in megatron:
            tst.declare_process_group(group, kind, name=kind)
    except Exception as e:  # noqa: BLE001
        _fail("groups", e)
    known = {id(group) for group, _kind in megatron}
    pending, _new_groups[:] = list(_new_groups), []
    for group in pending:
        if id(group) not in known:
            _declare(group)


# ---- DDP: the gradient buckets -------------------------------------------------------------

class _AutoHookState(object):
    """State of the automatic DDP hook: the group, and the user's hook once they register one
    after ours (DDP allows one hook per model; theirs then runs inside ours)."""

    def __init__(self, group):
        self.group = group
        self.user = None  # (state, hook)


_ddp = {"last_bucket_ns": 0}  # when this backward's latest bucket was handed to the hook


def _hint(since):
    """ts_wait_hint from the training thread: for hang reports, the rank may be blocked on
    communication from `since` (0: it is not)."""
    sink = auto.state.sink
    if sink is not None and threading.current_thread() is _TRAINING:
        try:
            sink.wait_hint(since)
        except Exception as e:  # noqa: BLE001
            _fail("ddp", e)


def _auto_allreduce_hook(state, bucket):
    """DDP's default gradient averaging, bit for bit: multiply by 1/size (what the reducer's
    mul_out does without a hook; div_ rounds differently for sizes that are not powers of
    two), all_reduce (recorded by the torch.distributed wrapper), the tensor as result. The
    time a bucket arrives here is the rank's arrival at its all-reduce; the last one's starts
    the wait that ends backward (see _patch_backward)."""
    now = _ddp["last_bucket_ns"] = _time_ns()
    _hint(now)  # from here the rank may wait for its buckets (see ts_wait_hint)
    if state.user is not None:
        return state.user[1](state.user[0], bucket)
    group = state.group
    tensor = bucket.buffer()
    tensor.mul_(1.0 / group.size())
    import torch.distributed as dist
    fut = dist.all_reduce(tensor, group=group, async_op=True).get_future()
    return _auto_dist.then(fut, lambda _value: None, result=lambda value: value[0])


def _why_no_hook(ddp):
    if not auto.state.options.comm_hook:
        return "TRAINSCOPE_COMM_HOOK=0"
    if getattr(ddp, "gradient_as_bucket_view", False):
        # The reducer averages aliased buckets with div_ and copied ones with mul_out; a hook
        # cannot tell which it would have done, and the rounding differs.
        return "gradient_as_bucket_view=True (a hook would change the gradients' rounding)"
    if getattr(ddp, "_divide_by_initial_world_size", True) is False:
        return "join(divide_by_initial_world_size=False) (DDP divides by the ranks left)"
    for m in ddp.module.modules():
        if getattr(m, "sparse", False) is True:
            return "the model has sparse gradients"
    return None


def _install_hook(ddp):
    if getattr(ddp, "_trainscope_user_hook", False) or getattr(ddp, "_trainscope_hook", None):
        return
    why = _why_no_hook(ddp)
    if why is not None:
        auto.log("DDP gradient buckets are not timed: %s" % why, key="ddp-" + why)
        ddp._trainscope_user_hook = True
        return
    state = _AutoHookState(ddp.process_group)
    ddp._trainscope_hook = state
    ddp._trainscope_registering = True
    try:
        ddp.register_comm_hook(state, _auto_allreduce_hook)
    finally:
        ddp._trainscope_registering = False


def _patch_ddp(torch, dist):
    DDP = torch.nn.parallel.DistributedDataParallel
    orig_init = DDP.__init__
    orig_register = DDP.register_comm_hook
    orig_builtin = DDP._register_builtin_comm_hook

    @functools.wraps(orig_init)
    def __init__(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        if not _ok("ddp"):
            return
        try:
            def first_forward(module, _inputs):
                handle.remove()
                if _ok("ddp"):
                    try:
                        _install_hook(module)
                    except Exception as e:  # noqa: BLE001 - DDP runs without our hook
                        _fail("ddp", e)
                return None

            # Users register their hook before training: wait for the first forward.
            handle = self.register_forward_pre_hook(first_forward)
        except Exception as e:  # noqa: BLE001
            _fail("ddp", e)

    @functools.wraps(orig_register)
    def register_comm_hook(self, state, hook):
        ours = getattr(self, "_trainscope_hook", None)
        if ours is not None and not getattr(self, "_trainscope_registering", False):
            self._check_comm_hook(hook)
            ours.user = (state, hook)  # runs inside ours, which DDP already holds
            return None
        if not getattr(self, "_trainscope_registering", False):
            self._trainscope_user_hook = True
        return orig_register(self, state, hook)

    @functools.wraps(orig_builtin)
    def _register_builtin_comm_hook(self, comm_hook_type):
        self._trainscope_user_hook = True
        return orig_builtin(self, comm_hook_type)

    DDP.__init__ = __init__
    DDP.register_comm_hook = register_comm_hook
    DDP._register_builtin_comm_hook = _register_builtin_comm_hook


# ---- other step signals -------------------------------------------------------------------

def _boundary_now():
    if auto.state.user_steps:
        return
    if auto.state.sink is None:
        auto.arm()
        auto.activity(_time_ns())
        if auto.state.sink is None:
            return
    stepper = auto.state.stepper
    stepper.boundary(_time_ns())
    _after_boundary()


def _patch_profiler(torch):
    profile = torch.profiler.profile
    orig = profile.step

    @functools.wraps(orig)
    def step(self, *args, **kwargs):
        result = orig(self, *args, **kwargs)
        if _ok("profiler-step"):
            try:
                _boundary_now()
            except Exception as e:  # noqa: BLE001
                _fail("profiler-step", e)
        return result

    profile.step = step


_function = {"resolved": False, "depth": 0}


def _wrap_step_function(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _function["depth"] or not _ok("step-function"):
            return fn(*args, **kwargs)
        try:
            auto.arm()
            auto.activity(_time_ns())
        except Exception as e:  # noqa: BLE001
            _fail("step-function", e)
        _function["depth"] += 1
        try:
            return fn(*args, **kwargs)
        finally:
            _function["depth"] -= 1
            try:
                _boundary_now()
            except Exception as e:  # noqa: BLE001
                _fail("step-function", e)

    wrapper._trainscope_step = True
    return wrapper


def resolve_function():
    """TRAINSCOPE_STEP=function:MODULE:QUALNAME: wraps it once its module has run far enough
    to define it (tried at torch's import, when an optimizer is made and at each activity);
    only modules already imported are looked at, never imported here."""
    opts = auto.state.options
    if opts.step != "function" or _function["resolved"]:
        return
    module_name, qualname = opts.step_function
    owner = sys.modules.get(module_name)
    parts = qualname.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part, None) if owner is not None else None
    fn = getattr(owner, parts[-1], None) if owner is not None else None
    if fn is None or not callable(fn):
        return
    _function["resolved"] = True
    if not getattr(fn, "_trainscope_step", False):
        setattr(owner, parts[-1], _wrap_step_function(fn))


def function_unresolved():
    """The TRAINSCOPE_STEP function that was never found, or None."""
    opts = auto.state.options
    if opts.step == "function" and not _function["resolved"]:
        return "%s:%s" % opts.step_function
    return None


# ---- entry points -------------------------------------------------------------------------

def patch_torch():
    import torch
    parts = [("optimizer", _patch_optimizer), ("data", _patch_dataloader),
             ("backward", _patch_backward), ("collectives", _patch_distributed)]
    if auto.state.options.step == "profiler":
        parts.append(("profiler-step", _patch_profiler))
    for part, patch in parts:
        try:
            patch(torch)
        except Exception as e:  # noqa: BLE001 - that part stays as torch made it
            _fail(part, e)
    resolve_function()


def sources_line(ops_why):
    """The one line a training process's first rank on the node prints when monitoring starts:
    what is recorded, and for each part that is not, why. `ops_why`: why ATen operators are
    not recorded, None when they are."""
    def part(name, ok, why="it failed (logged above)"):
        return "%s %s" % (name, "yes" if ok else "no (%s)" % why)

    opts = auto.state.options
    dist = sys.modules.get("torch.distributed")
    have_dist = dist is not None and getattr(dist, "is_available", lambda: False)()
    step_signal = {"optimizer": "optimizer.step()", "profiler": "profiler.step()"}.get(
        opts.step, "function:%s:%s" % (opts.step_function or ("?", "?")))
    step_part = {"optimizer": "optimizer", "profiler": "profiler-step"}.get(opts.step,
                                                                          "step-function")
    no_dist = "torch.distributed is not available"
    parts = [
        "steps yes (%s)" % step_signal if step_part not in _broken else
        part("steps", False),
        part("data wait", "data" not in _broken),
        part("collectives", have_dist and "collectives" not in _broken,
             no_dist if not have_dist else "it failed (logged above)"),
        part("DDP hook", have_dist and opts.comm_hook and "ddp" not in _broken
             and "collectives" not in _broken,
             no_dist if not have_dist else
             "--no-comm-hook / TRAINSCOPE_COMM_HOOK=0" if not opts.comm_hook else
             "it failed (logged above)"),
        part("ATen operators", ops_why is None, ops_why),
    ]
    return "sources: " + ", ".join(parts)


def on_armed():
    import torch
    try:
        _start_forward_learning(torch)
    except Exception as e:  # noqa: BLE001
        _fail("forward", e)
