"""trainscope.auto: routine monitoring of an unmodified PyTorch training process.

Started at interpreter start-up when TRAINSCOPE_AUTO=1: by the sitecustomize that
`trainscope run` puts on PYTHONPATH (trainscope/_boot/), or by trainscope-auto.pth where the
package is installed in a site directory. Until `torch` is imported it only waits (an import
hook); until the process trains (an optimizer exists, or the chosen step signal fires) nothing
is recorded and no probe exists, so launchers, data workers and helper interpreters cost
nothing. Then, with no change to the training script:

  steps       one per training iteration. TRAINSCOPE_STEP=optimizer (default): an iteration
              ends when the last optimizer of the iteration returns from step(); which
              optimizer is last is learned from the first one that steps twice (several
              optimizers: one step; gradient accumulation: a step per optimizer step).
              TRAINSCOPE_STEP=profiler: at each torch.profiler.profile.step().
              TRAINSCOPE_STEP=function:MODULE:QUALNAME: at each return of that function
              (e.g. function:__main__:train_step). Steps are contiguous: a step begins where
              the previous one ended (the first at the first instrumented event).
  data wait   time inside DataLoader iterators' __next__.
  phases      forward (the outermost modules called: learned during the first step, then
              hooked on those modules only), backward (torch.autograd.backward), optimizer
              (step()). They count as compute unless operators are recorded, which then are
              the compute (a phase also holds waits, e.g. DDP's wait for its last bucket).
  comm        every torch.distributed collective and point-to-point call, sync and
              async_op=True (timed to the completion of its work), with op, bytes and group
              (trainscope/_auto_dist.py); DDP's gradient buckets through a comm hook installed
              at DDP's first forward unless the user registered one (TRAINSCOPE_COMM_HOOK=0:
              never); FSDP's all-gather and reduce-scatter through the same wrappers.
  operators   every ATen operator through libtrainscope_torch.so when it is found
              (TRAINSCOPE_OPS=0: off; the library is built only where libtorch's headers are).

When the probe starts (the process trains), the node's first rank (LOCAL_RANK 0) prints one
line naming these sources, each yes or no with why (_auto_torch.sources_line); other ranks
and processes that never train print nothing.

The job is TRAINSCOPE_JOB, else SLURM_JOB_ID, else TORCHELASTIC_RUN_ID (unless "none"), else
TRAINSCOPE_JOB_DEFAULT (which `trainscope run` sets), else the probe's generated id; the rank
and world size come from torch.distributed when it is initialized at the first step, else
from RANK / WORLD_SIZE.

Nothing here may change what training computes, raises or returns: every hook calls the
original first-class, and an error inside trainscope is logged once and switches that part off.
"""

import importlib
import os
import sys
import threading
import time

__all__ = ["install", "Options", "options_from_env", "Stepper", "log"]

_time_ns = time.time_ns  # the probe's clock: CLOCK_REALTIME ns, like ts_now_ns()

_STEP_MODES = ("optimizer", "profiler", "function")


class Options(object):
    """What auto-instrumentation does; from the environment (options_from_env)."""

    def __init__(self, step="optimizer", step_function=None, ops=True, comm_hook=True):
        self.step = step                    # "optimizer", "profiler" or "function"
        self.step_function = step_function  # (module, qualname) when step == "function"
        self.ops = ops                      # record ATen operators (libtrainscope_torch.so)
        self.comm_hook = comm_hook          # install the DDP comm hook when the user has none


def _flag(environ, name, default):
    value = environ.get(name, "").strip().lower()
    if value == "":
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError("%s=%r must be 1 or 0" % (name, environ.get(name)))


def parse_step(value):
    """(mode, (module, qualname) or None) from a TRAINSCOPE_STEP value; ValueError if bad."""
    value = (value or "").strip()
    if value in ("", "optimizer"):
        return "optimizer", None
    if value == "profiler":
        return "profiler", None
    if value.startswith("function:"):
        target = value[len("function:"):]
        module, sep, qualname = target.rpartition(":")
        if sep and module and qualname and all(p.isidentifier() for p in qualname.split(".")):
            return "function", (module, qualname)
    raise ValueError("TRAINSCOPE_STEP=%r must be optimizer, profiler or "
                     "function:MODULE:QUALNAME (e.g. function:__main__:train_step)" % value)


def options_from_env(environ=None):
    """Options from TRAINSCOPE_STEP, TRAINSCOPE_OPS and TRAINSCOPE_COMM_HOOK. A bad value
    raises ValueError naming the variable."""
    environ = os.environ if environ is None else environ
    step, fn = parse_step(environ.get("TRAINSCOPE_STEP"))
    return Options(step=step, step_function=fn, ops=_flag(environ, "TRAINSCOPE_OPS", True),
                   comm_hook=_flag(environ, "TRAINSCOPE_COMM_HOOK", True))


_logged = set()


def log(message, key=None):
    """One line on stderr, once per key (default: the message)."""
    key = message if key is None else key
    if key in _logged:
        return
    _logged.add(key)
    try:
        sys.stderr.write("trainscope: %s\n" % message)
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - a closed stderr must not stop training
        pass


class Stepper(object):
    """Turns instrumented events into contiguous steps. Pure: it only calls `sink`
    (step_begin(n, t_ns), step_end(n, t_ns)); the training thread calls it.

    activity(t)       something of the iteration happened at t: opens the step if none is
                      open (it begins where the previous step ended, else at t).
    boundary(t)       the step ends at t (the next one begins there, when activity follows).
    optimizer_end(key, t)
                      an optimizer's step() returned at t. The iteration's last optimizer is
                      the one that stepped just before some optimizer stepped a second time
                      since the last boundary; until known, the boundary is placed late, at
                      the end of that previous step() (times are explicit, so that is exact).
    finish()          at exit: an iteration still being learned ends at its last step().
    """

    def __init__(self, sink):
        self.sink = sink
        self.next = 0            # number of the next step to begin
        self.open = False
        self.begin_at = None     # where the next step begins: the last boundary
        self.since = []          # optimizers that stepped since the last boundary
        self.closer = None       # the iteration's last optimizer, once learned
        self.last_end = None     # when the last optimizer step() returned
        self.prev = None         # which optimizer that was
        self.steps_ended = 0

    def activity(self, t):
        if self.open:
            return
        self.sink.step_begin(self.next, self.begin_at if self.begin_at is not None else t)
        self.open = True

    def boundary(self, t):
        if not self.open:
            self.activity(t)
        self.sink.step_end(self.next, t)
        self.next += 1
        self.open = False
        self.begin_at = t
        self.since = []
        self.steps_ended += 1

    def optimizer_end(self, key, t):
        if key in self.since:
            # Some optimizer steps again: the iteration ended with the previous step() call.
            self.boundary(self.last_end)
            self.closer = self.prev
            self.activity(t)
        self.since.append(key)
        self.prev, self.last_end = key, t
        if key == self.closer:
            self.boundary(t)

    def finish(self):
        if self.open and self.since and self.closer is None:
            self.boundary(self.last_end)


class _State(object):
    """Process-wide state of auto-instrumentation. Touched by the training thread only, except
    `on` (read everywhere; cleared in a forked child)."""

    def __init__(self):
        self.on = False          # instrumentation installed and not switched off
        self.armed = False       # the process trains: record from now on
        self.started = False     # the probe exists (or failed: then on is False)
        self.options = Options()
        self.stepper = None
        self.sink = None
        self.ops = False         # ATen operators are being recorded
        self.user_steps = False  # user code calls trainscope.step*(): auto steps stand down


state = _State()
_install_lock = threading.Lock()
_installed = False


def arm():
    """The process trains (an optimizer exists, or the step signal fired)."""
    if state.on and not state.armed:
        state.armed = True
        from trainscope import _auto_torch
        _auto_torch.on_armed()


def activity(t):
    """An event of the iteration at t: starts the probe on first use, opens the step."""
    if state.sink is None:
        if state.started or not _start():
            return
    if state.options.step == "function":
        from trainscope import _auto_torch
        _auto_torch.resolve_function()
    if not state.user_steps:
        state.stepper.activity(t)


def _job_default(environ):
    # The probe reads TRAINSCOPE_JOB, SLURM_JOB_ID and TORCHELASTIC_RUN_ID itself; torchrun's
    # TORCHELASTIC_RUN_ID is "none" unless --rdzv-id is given, which names no job.
    for name in ("TRAINSCOPE_JOB", "SLURM_JOB_ID"):
        if environ.get(name):
            return None
    run_id = environ.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id != "none":
        return None
    return environ.get("TRAINSCOPE_JOB_DEFAULT") or None


def _agent_missing_line(environ):
    """The line saying why this rank cannot reach its agent's ipc:// socket, or None: no agent
    there, or (a different fix) one this user may not connect to."""
    # `trainscope run` always sets TRAINSCOPE_AGENT (its default is the probe's).
    endpoint = environ.get("TRAINSCOPE_AGENT") or ""
    if not endpoint.startswith("ipc://") or endpoint.startswith("ipc://@"):
        return None
    path = endpoint[len("ipc://"):]
    denied = None
    try:
        os.stat(path)
    except PermissionError:
        denied = "its directory %s is closed to this user" % os.path.dirname(path)
    except OSError:
        return ("no agent at %s; this rank trains unmonitored until one starts there (the "
                "probe keeps the last 4096 steps for it)" % endpoint)
    effective = os.access in os.supports_effective_ids
    if denied is None and not os.access(path, os.W_OK, effective_ids=effective):
        denied = "its socket file is not writable by this user"
    if denied is None:
        return None
    return ("permission denied: uid %d may not connect to the agent at %s (%s: the agent's "
            "--endpoint-mode and its directory decide who may; see docs/OPERATIONS.md, "
            "\"Install on a cluster\"); this rank trains unmonitored"
            % (os.geteuid(), endpoint, denied))


def device_in_use(modules=None):
    """"cuda" once torch has initialised CUDA in this process (the model is on a GPU), else None.
    The probe then reports its operators as run on that device (StepReport.device): their times
    are launches on the host, not the kernels."""
    torch = (sys.modules if modules is None else modules).get("torch")
    try:
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            return "cuda"
    except Exception:  # noqa: BLE001 - a torch without CUDA support, or a broken one
        return None
    return None


def gpu_uuid_in_use(modules=None):
    """The UUID of the GPU this process computes on, as NVML spells it ("GPU-..."), once torch has
    initialised CUDA here, else None. The probe sends it in RankInfo, so the collector puts the
    rank's steps beside that GPU's samples from the agent."""
    torch = (sys.modules if modules is None else modules).get("torch")
    try:
        if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None
        uuid = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", None)
    except Exception:  # noqa: BLE001 - a torch without CUDA support, or a broken one
        return None
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith("GPU-") else "GPU-" + text


def _start():
    """Creates (or adopts) the probe, enables operators; False when monitoring is off."""
    state.started = True
    import trainscope
    device = device_in_use()
    if device and not os.environ.get("TRAINSCOPE_DEVICE"):
        os.environ["TRAINSCOPE_DEVICE"] = device  # read by the probe when it is created
    uuid = gpu_uuid_in_use()
    if uuid and not os.environ.get("TRAINSCOPE_GPU_UUID"):
        os.environ["TRAINSCOPE_GPU_UUID"] = uuid
    overrides = {}
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            overrides["rank"] = dist.get_rank()
            overrides["world_size"] = dist.get_world_size()
    except Exception:  # noqa: BLE001 - fall back to RANK / WORLD_SIZE
        overrides = {}
    job = _job_default(os.environ)
    if job:
        overrides["job"] = job
    try:
        if trainscope._handle is None:  # noqa: SLF001 - same package
            trainscope.init(**overrides)
            trainscope._auto_owned = True  # noqa: SLF001
    except Exception as e:  # noqa: BLE001 - no probe: training goes on unmonitored
        log("monitoring is off in this process: %s" % e)
        state.on = False
        return False
    first_on_node = os.environ.get("LOCAL_RANK", "0") == "0"
    if first_on_node:
        line = _agent_missing_line(os.environ)
        if line:
            log(line)
    state.sink = _ProbeSink()
    state.stepper = Stepper(state.sink)
    from trainscope import _auto_torch
    _auto_torch.declare_groups()  # before the first step, as the collector expects
    ops_why = "--no-ops / TRAINSCOPE_OPS=0"
    if state.options.ops:
        try:
            import trainscope.torch as tst
            state.ops = tst.enable_ops(quiet=True)  # the sources line says why not
            ops_why = None if state.ops else tst.ops_unavailable()
        except Exception as e:  # noqa: BLE001
            ops_why = repr(e)
    if first_on_node:
        log(_auto_torch.sources_line(ops_why), key="sources")
    import atexit
    atexit.register(_at_exit)  # after trainscope's own: runs before the probe shuts down
    return True


def _at_exit():
    """Before the probe shuts down: the last step, the completions still to come, then no
    more records (backend threads may still call back)."""
    try:
        if state.on and state.stepper is not None and not state.user_steps:
            state.stepper.finish()
    except Exception as e:  # noqa: BLE001
        log("at exit: %s" % e)
    _drain_at_exit()
    state.on = False
    from trainscope import _auto_torch
    missing = _auto_torch.function_unresolved()
    if missing:
        log("TRAINSCOPE_STEP=function:%s: no such function was ever defined; no steps were "
            "recorded" % missing)


def _drain_at_exit():
    try:
        from trainscope import _auto_dist
        _auto_dist.drain()
    except Exception:  # noqa: BLE001 - exit goes on
        pass


def user_steps_begin():
    """User code called trainscope.step_begin(): its steps win; ours end now."""
    if state.user_steps:
        return
    state.user_steps = True
    if state.stepper is not None and state.stepper.open:
        try:
            state.stepper.boundary(_time_ns())
        except Exception:  # noqa: BLE001
            pass
    log("the script marks its own steps (trainscope.step); automatic step detection is off",
        key="user-steps")


class _ProbeSink(object):
    """Records into this process's probe through the C ABI (no Python API layers)."""

    def __init__(self):
        import trainscope
        self._t = trainscope
        self.lib = trainscope._get_lib()  # noqa: SLF001 - same package
        self.probe = trainscope._probe()  # noqa: SLF001
        self.intern = trainscope.intern

    def step_begin(self, n, t):
        self.lib.ts_step_begin(self.probe, n, t)

    def step_end(self, n, t):
        self.lib.ts_step_end(self.probe, n, t)

    def range(self, name_id, kind, t0, t1):
        self.lib.ts_range(self.probe, name_id, kind, t0, t1)

    def collective(self, op, group_id, nbytes, t0, t1):
        self.lib.ts_collective(self.probe, op, group_id, nbytes, t0, t1)

    def p2p(self, op, group_id, peer, nbytes, t0, t1):
        self.lib.ts_p2p(self.probe, op, group_id, peer, nbytes, t0, t1)

    def wait_hint(self, since):
        self.lib.ts_wait_hint(self.probe, since)


def _after_fork_in_child():
    # A DataLoader worker or any forked child: the probe's thread stayed in the parent.
    state.on = False


class _TorchLoader(object):
    """Wraps torch's loader: runs the patches once torch's own import has finished."""

    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        create = getattr(self._inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        self._inner.exec_module(module)
        module.__loader__ = self._inner
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._inner
        _on_torch_imported()

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _TorchFinder(object):
    """A meta-path finder that only answers for `torch`, with the real spec and a loader that
    patches torch after it has been imported; then it removes itself."""

    def __init__(self):
        self._busy = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self._busy:
            return None
        self._busy = True
        try:
            spec = None
            for finder in list(sys.meta_path):
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        finally:
            self._busy = False
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _TorchLoader(spec.loader)
        return spec


def _on_torch_imported():
    try:
        from trainscope import _auto_torch
        _auto_torch.patch_torch()
    except Exception as e:  # noqa: BLE001 - torch works as before, unmonitored
        log("cannot instrument torch, monitoring is off: %r" % (e,))
        state.on = False


def install(options=None):
    """Turns auto-instrumentation on for this process (idempotent). `options`: default from
    the environment; a bad variable is logged and leaves monitoring off."""
    global _installed
    with _install_lock:
        if _installed:
            return
        _installed = True
    try:
        state.options = options if options is not None else options_from_env()
    except ValueError as e:
        log("%s; monitoring is off" % e)
        return
    state.on = True
    import atexit
    # Registered first, so it runs last: waits for callbacks of the DDP hook even when this
    # process never started a probe (see _auto_dist.drain).
    atexit.register(_drain_at_exit)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
    if "torch" in sys.modules:
        _on_torch_imported()
    else:
        sys.meta_path.insert(0, _TorchFinder())


def install_from_environment():
    """The start-up entry (sitecustomize, .pth): installs when TRAINSCOPE_AUTO is on. Never
    raises."""
    value = os.environ.get("TRAINSCOPE_AUTO", "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return
    try:
        install()
    except Exception as e:  # noqa: BLE001 - the program runs unmonitored
        log("cannot start monitoring: %r" % (e,))


def reload_for_tests():
    """Fresh state (tests only)."""
    global _installed, state
    _installed = False
    state = _State()
    importlib.invalidate_caches()
