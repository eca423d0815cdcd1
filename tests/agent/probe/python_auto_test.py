"""trainscope.auto without a training job: the Stepper's steps (one optimizer, several
optimizers, gradient accumulation), TRAINSCOPE_STEP parsing, the start-up hook (chains to an
existing sitecustomize, installs only with TRAINSCOPE_AUTO on, leaves sys.path as it was), and
the torch.distributed wrappers against real gloo calls in one process (world size 1): sync and
async_op=True, timed to completion, results unchanged. Run under pytest (tests/pytest_run.py)
with /usr/bin/python3; the torch cases skip when torch is missing, the cases that ask as
another user whether the agent is reachable skip when not root.

Env: TRAINSCOPE_PROBE_LIB (the .so), PYTHONPATH=<repo>/agent/probe/python.
"""

import functools
import os
import socket
import subprocess
import sys
import tempfile
import types

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BOOT = os.path.normpath(os.path.join(HERE, "..", "..", "..", "agent", "probe", "python",
                                     "trainscope", "_boot"))


class Sink(object):
    def __init__(self):
        self.steps = []  # (n, begin, end)
        self._begun = {}

    def step_begin(self, n, t):
        self._begun[n] = t

    def step_end(self, n, t):
        self.steps.append((n, self._begun.pop(n), t))


def test_stepper_one_optimizer_one_step_per_step_call():
    from trainscope.auto import Stepper

    # A step per step(); contiguous; the first is closed once it steps again.
    sink = Sink()
    s = Stepper(sink)
    t = 0
    for _ in range(4):
        s.activity(t + 1)          # forward
        s.optimizer_end("A", t + 10)
        t += 10
    s.finish()
    assert [x[0] for x in sink.steps] == [0, 1, 2, 3], "one optimizer: one step per step()"
    assert sink.steps[0] == (0, 1, 10) and sink.steps[1] == (1, 10, 20), \
        "steps are contiguous and end at the optimizer's return"


def test_stepper_two_optimizers_one_step_per_iteration():
    from trainscope.auto import Stepper

    # Two optimizers per iteration (a GAN): one step per iteration, ending at the second.
    sink = Sink()
    s = Stepper(sink)
    t = 0
    for _ in range(3):
        s.activity(t + 1)
        s.optimizer_end("G", t + 5)
        s.optimizer_end("D", t + 10)
        t += 10
    s.finish()
    assert [x[0] for x in sink.steps] == [0, 1, 2], "two optimizers: one step per iteration"
    assert [x[2] for x in sink.steps] == [10, 20, 30], "each iteration ends at its last step()"


def test_stepper_gradient_accumulation_one_step_per_optimizer_step():
    from trainscope.auto import Stepper

    # Backward 4 times, one step(): a step per step().
    sink = Sink()
    s = Stepper(sink)
    t = 0
    for _ in range(3):
        for k in range(4):
            s.activity(t + k)
        s.optimizer_end("A", t + 10)
        t += 10
    s.finish()
    assert len(sink.steps) == 3, "gradient accumulation: a step per optimizer step"


def test_trainscope_step_parsing():
    from trainscope.auto import parse_step
    assert parse_step("") == ("optimizer", None), "TRAINSCOPE_STEP defaults to optimizer"
    assert parse_step("function:__main__:T.step") == ("function", ("__main__", "T.step")), \
        "function:MODULE:QUALNAME"


@pytest.mark.parametrize("bad", ["epoch", "function:f", "function:m:1x"])
def test_a_bad_trainscope_step_is_refused(bad):
    from trainscope.auto import parse_step
    with pytest.raises(ValueError, match="TRAINSCOPE_STEP"):
        parse_step(bad)


def test_a_bad_flag_names_its_variable():
    from trainscope.auto import options_from_env
    with pytest.raises(ValueError, match="TRAINSCOPE_OPS"):
        options_from_env({"TRAINSCOPE_OPS": "maybe"})


def test_startup_hook_chains_sitecustomize_and_installs_only_when_on():
    with tempfile.TemporaryDirectory() as other:
        with open(os.path.join(other, "sitecustomize.py"), "w") as f:
            f.write("import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = '1'\n")
        probe = ("import os, sys; print(os.environ.get('USER_SITECUSTOMIZE_RAN'), "
                 "'trainscope.auto' in sys.modules and sys.modules['trainscope.auto'].state.on, "
                 "any(p.endswith('agent/probe/python') for p in sys.path))")
        env = dict(os.environ)
        env["PYTHONPATH"] = BOOT + os.pathsep + other
        env["TRAINSCOPE_AUTO"] = "1"
        out = subprocess.run([sys.executable, "-c", probe], env=env, check=True,
                             capture_output=True, text=True)
        assert out.stdout.split() == ["1", "True", "False"], (
            "start-up hook: the user's sitecustomize runs, auto is on, sys.path unchanged "
            "(got %r, stderr %r)" % (out.stdout, out.stderr))
        env["TRAINSCOPE_AUTO"] = "0"
        out = subprocess.run([sys.executable, "-c", probe], env=env, check=True,
                             capture_output=True, text=True)
        assert out.stdout.split() == ["1", "False", "False"], \
            "start-up hook: TRAINSCOPE_AUTO=0 leaves trainscope out"
        env["TRAINSCOPE_AUTO"] = "1"
        env["TRAINSCOPE_STEP"] = "epoch"
        out = subprocess.run([sys.executable, "-c", "print('ran')"], env=env, check=True,
                             capture_output=True, text=True)
        assert out.stdout.strip() == "ran" and "TRAINSCOPE_STEP" in out.stderr, \
            "a bad setting is one line on stderr and the program runs"


class Recorder(object):
    def __init__(self):
        self.records = []
        self.waits = []  # the caller blocked on communication (sync calls, Work.wait())
        self.hints = []  # blocked(since) calls: since when, then 0 once it returned

    def active(self):
        return True

    def group_key(self, group):
        return 7, True

    def collective(self, op, gid, nbytes, t0, t1):
        self.records.append((op, gid, nbytes, t0, t1))

    def p2p(self, op, gid, peer, nbytes, t0, t1):
        self.records.append(("p2p-" + op, gid, nbytes, t0, t1, peer))

    def wait(self, t0, t1):
        self.waits.append((t0, t1))

    def blocked(self, since):
        self.hints.append(since)

    def fail(self, what, exc):
        raise AssertionError("%s: %r" % (what, exc))


class FakeTensor(object):
    def numel(self):
        return 256

    def element_size(self):
        return 4


def test_p2p_calls_with_a_known_peer_are_transfers_with_it():
    """send/recv/isend/irecv with a known peer are point-to-point transfers with that peer;
    a receive from any source that names its sender too; an irecv from any source stays a
    collective "recv" (its peer is not known)."""
    from trainscope import _auto_dist

    def send(tensor, dst, group=None, tag=0):
        return None

    def recv(tensor, src=None, group=None, tag=0):
        return 3 if src is None else src

    def irecv(tensor, src=None, group=None, tag=0):
        return None  # no work: nothing to time

    rec = Recorder()
    _auto_dist.wrap_call(send, "send", rec)(FakeTensor(), 5)
    assert (rec.records[-1][0] == "p2p-send" and rec.records[-1][5] == 5
            and rec.records[-1][2] == 1024), "a send is a p2p transfer with its dst and bytes"
    _auto_dist.wrap_call(recv, "recv", rec)(FakeTensor(), src=2)
    assert rec.records[-1][0] == "p2p-recv" and rec.records[-1][5] == 2, \
        "a recv names its src as the peer"
    _auto_dist.wrap_call(recv, "recv", rec)(FakeTensor())
    assert rec.records[-1][0] == "p2p-recv" and rec.records[-1][5] == 3, \
        "a recv from any source names the sender it returned"
    n = len(rec.records)
    _auto_dist.wrap_call(irecv, "irecv", rec)(FakeTensor())
    assert len(rec.records) == n, "an irecv without work records nothing"


def _fake_torch(patcher, version):
    """A torch module as far as _patch_optimizer sees it: an Optimizer whose __init__ calls
    `patcher` (None: no such method), which wraps the class's step() once, marked "hooked", as
    torch does for its profiler (_hook_for_profile before 2.0, _patch_step_function since)."""

    class Optimizer(object):
        def __init__(self):
            if patcher is not None:
                getattr(self, patcher)()

    def patch(self):
        cls = type(self)
        if not getattr(cls.step, "hooked", None):
            inner = cls.step

            @functools.wraps(inner)
            def profiled(*args, **kwargs):
                return inner(*args, **kwargs)

            cls.step = profiled
            cls.step.hooked = True

    if patcher is not None:
        setattr(Optimizer, patcher, patch)
    return types.SimpleNamespace(__version__=version,
                                 optim=types.SimpleNamespace(Optimizer=Optimizer))


@pytest.mark.parametrize("patcher,version", [("_hook_for_profile", "1.13.1"),
                                             ("_patch_step_function", "2.11.0")])
def test_steps_come_from_optimizer_step_under_torch_1_and_2(patcher, version):
    """The patch finds the method each torch version calls when an optimizer is made."""
    from trainscope import _auto_torch

    torch = _fake_torch(patcher, version)
    _auto_torch._patch_optimizer(torch)

    class SGD(torch.optim.Optimizer):
        calls = 0

        def step(self, closure=None):
            SGD.calls += 1
            return "stepped"

    opt = SGD()
    SGD()  # a second optimizer of the class wraps nothing again
    assert getattr(SGD.step, "_trainscope_step", False), \
        "torch %s: the optimizer class's step() is wrapped when one is made" % version
    assert getattr(SGD.step, "hooked", False), \
        "torch %s: torch's own mark is kept, so torch does not wrap it again" % version
    assert opt.step() == "stepped" and SGD.calls == 1, \
        "torch %s: the wrapped step() runs the original once, with its result" % version


def test_a_torch_without_either_optimizer_method_is_refused_naming_them():
    from trainscope import _auto_torch
    with pytest.raises(AttributeError) as e:
        _auto_torch._patch_optimizer(_fake_torch(None, "9.0"))
    assert "_patch_step_function" in str(e.value) and "9.0" in str(e.value), \
        "a torch without either method is refused, naming the methods and version"


def test_the_device_is_cuda_once_torch_initialised_it():
    from trainscope.auto import device_in_use

    def fake(available, initialized):
        cuda = types.SimpleNamespace(is_available=lambda: available,
                                     is_initialized=lambda: initialized)
        return {"torch": types.SimpleNamespace(cuda=cuda)}

    assert device_in_use({}) is None, "no torch imported: no device"
    assert device_in_use(fake(True, False)) is None, "CUDA present but not used: no device"
    assert device_in_use(fake(False, False)) is None, "no CUDA: no device"
    assert device_in_use(fake(True, True)) == "cuda", "CUDA initialised: cuda"
    broken = {"torch": types.SimpleNamespace()}
    assert device_in_use(broken) is None, "a torch without torch.cuda: no device"

    from trainscope.auto import gpu_uuid_in_use

    def with_uuid(uuid, initialized=True):
        props = types.SimpleNamespace(uuid=uuid)
        cuda = types.SimpleNamespace(is_available=lambda: True,
                                     is_initialized=lambda: initialized,
                                     current_device=lambda: 0,
                                     get_device_properties=lambda d: props)
        return {"torch": types.SimpleNamespace(cuda=cuda)}

    assert gpu_uuid_in_use({}) is None, "no torch imported: no GPU UUID"
    assert gpu_uuid_in_use(with_uuid("3b2e-aa", initialized=False)) is None, \
        "CUDA not initialised: no GPU UUID"
    assert gpu_uuid_in_use(with_uuid("3b2e-aa")) == "GPU-3b2e-aa", \
        "torch's UUID gets NVML's GPU- prefix"
    assert gpu_uuid_in_use(with_uuid("GPU-3b2e-aa")) == "GPU-3b2e-aa", "one prefix, not two"
    assert gpu_uuid_in_use(with_uuid(None)) is None, "a torch without uuid: none"
    assert gpu_uuid_in_use(broken) is None, "a torch without torch.cuda: no GPU UUID"


@pytest.fixture(scope="module")
def dist():
    pytest.importorskip("torch")
    import torch.distributed as dist
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=0,
                            world_size=1)
    yield dist
    dist.destroy_process_group()


def test_torch_distributed_calls_are_timed_to_completion_results_unchanged(dist):
    import torch
    from trainscope import _auto_dist
    rec = Recorder()
    _auto_dist.patch(dist, rec)
    t = torch.ones(1000)
    dist.all_reduce(t)
    assert rec.records[-1][0] == "all_reduce" and rec.records[-1][2] == 4000, \
        "a sync all_reduce is recorded with its bytes"
    assert rec.waits and rec.waits[-1] == tuple(rec.records[-1][3:5]), \
        "a sync all_reduce blocks its caller throughout: one wait over the same span"
    assert rec.hints[-2:] == [rec.records[-1][3], 0] and len(rec.hints) == 2, \
        "a sync all_reduce is hinted as a wait from its call until it returned"
    assert torch.equal(t, torch.ones(1000)), "the result is unchanged"
    waits = len(rec.waits)
    work = dist.all_reduce(t, async_op=True)
    assert len(rec.waits) == waits, "an async_op=True call does not block: no wait"
    work.wait()
    assert len(rec.records) == 2 and rec.records[-1][3] <= rec.records[-1][4], \
        "an async_op=True all_reduce is recorded at completion"
    assert len(rec.waits) == waits + 1, "Work.wait() is a wait"
    out = [torch.zeros(10)]
    dist.all_gather(out, torch.ones(10))
    assert rec.records[-1][0] == "all_gather" and rec.records[-1][2] == 40, \
        "all_gather counts the gathered bytes"
    dist.barrier()
    assert rec.records[-1][0] == "barrier", "barrier is recorded (inner calls once)"
    before = len(rec.records)
    dist.broadcast(t, src=0)
    assert len(rec.records) == before + 1, "broadcast is recorded once"


_TRAIN = """
import torch
m = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    m(torch.randn(8, 4)).sum().backward()
    opt.step()
print("trained")
"""
_NO_TRAIN = "import torch\nm = torch.nn.Linear(4, 1)\nm(torch.randn(2, 4))\nprint('ran')\n"


@pytest.fixture
def run_auto():
    """Runs code as `trainscope run` starts it (auto-instrumented, no agent); returns its
    stderr lines that start with "trainscope:"."""
    pytest.importorskip("torch")

    def run(code, **extra):
        env = dict(os.environ, TRAINSCOPE_AUTO="1", TRAINSCOPE_JOB="sources-test",
                   TRAINSCOPE_AGENT="tcp://127.0.0.1:9",  # no agent, and no line about it
                   TRAINSCOPE_TORCH_LIB="/nonexistent/libtrainscope_torch.so")
        env["PYTHONPATH"] = BOOT + os.pathsep + env.get("PYTHONPATH", "")
        env.pop("LOCAL_RANK", None)
        env.update(extra)
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0, "exit 0 (stderr %r)" % p.stderr[-2000:]
        return [line for line in p.stderr.splitlines() if line.startswith("trainscope:")]
    return run


def test_a_training_process_names_its_sources_in_one_line(run_auto):
    """On the node's first rank only; a process that does not train prints nothing."""
    lines = run_auto(_TRAIN)
    assert (len(lines) == 1 and lines[0].startswith(
        "trainscope: sources: steps yes (optimizer.step()), data wait yes, collectives yes, "
        "DDP hook yes, ATen operators no (cannot find libtrainscope_torch.so")
        and "libtorch-dev" in lines[0]), \
        "a training process: one line, ATen operators no with why (got %r)" % lines
    lines = run_auto(_TRAIN, TRAINSCOPE_OPS="0", TRAINSCOPE_COMM_HOOK="0")
    assert lines == ["trainscope: sources: steps yes (optimizer.step()), data wait yes, "
                     "collectives yes, DDP hook no (--no-comm-hook / TRAINSCOPE_COMM_HOOK=0), "
                     "ATen operators no (--no-ops / TRAINSCOPE_OPS=0)"], \
        "parts switched off are named with the switch (got %r)" % lines
    assert run_auto(_TRAIN, RANK="1", LOCAL_RANK="1", WORLD_SIZE="2") == [], \
        "the node's other ranks print nothing"
    assert run_auto(_NO_TRAIN) == [], "a process that does not train prints nothing"


def _line_as(uid, endpoint):
    """auto._agent_missing_line for `endpoint`, computed in a child running as `uid`."""
    code = ("import sys\nfrom trainscope import auto\n"
            "sys.stdout.write(repr(auto._agent_missing_line({'TRAINSCOPE_AGENT': sys.argv[1]})))")

    def drop():
        if uid != os.geteuid():
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
    out = subprocess.run([sys.executable, "-c", code, endpoint], preexec_fn=drop, check=True,
                         stdout=subprocess.PIPE, env=dict(os.environ)).stdout.decode()
    return eval(out)  # noqa: S307 - our own repr() of a str or None


def test_an_unreachable_agent_is_told_as_missing():
    from trainscope import auto
    line = auto._agent_missing_line({"TRAINSCOPE_AGENT": "ipc:///nonexistent/agent.sock"})
    assert line is not None and line.startswith("no agent at ipc:///nonexistent/agent.sock"), \
        "no socket file: 'no agent at'"
    assert auto._agent_missing_line({"TRAINSCOPE_AGENT": "tcp://127.0.0.1:1"}) is None, \
        "tcp endpoints are not judged"


def test_an_agent_the_user_may_not_reach_is_told_as_permission_denied():
    if os.geteuid() != 0:
        pytest.skip("not root: cannot ask as another user whether the agent is reachable")
    nobody = 65534
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        shared, private = os.path.join(tmp, "shared"), os.path.join(tmp, "private")
        os.mkdir(shared, 0o755)
        os.mkdir(private, 0o700)
        socks = []
        try:
            for d in (shared, private):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(os.path.join(d, "agent.sock"))
                s.listen(1)
            open_ep = "ipc://" + os.path.join(shared, "agent.sock")
            closed_ep = "ipc://" + os.path.join(private, "agent.sock")
            os.chmod(os.path.join(shared, "agent.sock"), 0o666)
            assert _line_as(nobody, open_ep) is None, "another user reaches a socket open to it"
            assert _line_as(0, closed_ep) is None, "root reaches any socket"
            line = _line_as(nobody, closed_ep)
            assert (line is not None
                    and line.startswith("permission denied: uid 65534 may not connect "
                                        "to the agent at " + closed_ep)
                    and "directory" in line and "no agent" not in line), \
                "a socket in a directory closed to the user: permission denied, not 'no agent'"
            os.chmod(os.path.join(shared, "agent.sock"), 0o600)
            line = _line_as(nobody, open_ep)
            assert (line is not None and line.startswith("permission denied")
                    and "socket file" in line), \
                "a socket file the user may not write: permission denied"
        finally:
            for s in socks:
                s.close()
