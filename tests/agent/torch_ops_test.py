"""trainscope.torch's operator recording (libtrainscope_torch.so) in a real torch process:
ATen operators on any thread become probe op records while enabled and stop when disabled;
trainscope.shutdown() stops the callback before the probe goes; a missing library gives a
one-line warning and False, never an exception.

Run by meson under pytest (tests/pytest_run.py) with /usr/bin/python3; skips without torch or
the library. The cases share one probe and run in file order. Environment:
TRAINSCOPE_PROBE_LIB, TRAINSCOPE_TORCH_LIB, PYTHONPATH with agent/probe/python.
"""
import os
import subprocess
import sys
import threading

import pytest

torch = pytest.importorskip("torch", reason="this interpreter has no torch")
if not os.path.exists(os.environ.get("TRAINSCOPE_TORCH_LIB", "")):
    pytest.skip("libtrainscope_torch.so is not built", allow_module_level=True)

import trainscope  # noqa: E402 - only where torch and the library are there
import trainscope.torch as tst  # noqa: E402


@pytest.fixture(scope="module")
def probe():
    trainscope.init(connect_agent=1)  # fold only: no agent needed
    yield
    trainscope.shutdown(0)


@pytest.fixture(scope="module")
def x():
    return torch.randn(16, 16)


def test_disabled_operators_are_not_recorded(probe, x):
    before = trainscope.stats()["records"]
    with trainscope.step():
        for _ in range(50):
            torch.mm(x, x)
    trainscope.flush(2000)
    assert trainscope.stats()["records"] - before <= 2, "disabled: operators were recorded"
    assert tst.ops_recorded() == 0, "disabled: ops_recorded() is %d" % tst.ops_recorded()


def test_enabled_operators_on_any_thread_become_probe_ops(probe, x):
    assert tst.enable_ops() is True, "enable_ops() did not return True"
    assert tst.ops_enabled(), "ops_enabled() is False after enable_ops()"
    assert tst.enable_ops() is True, "a second enable_ops() did not return True"
    before = trainscope.stats()["records"]
    with trainscope.step():
        for _ in range(50):
            torch.mm(x, x)

        def worker():
            for _ in range(30):
                torch.relu(x)

        t = threading.Thread(target=worker)
        t.start()
        t.join()
    trainscope.flush(2000)
    recorded = tst.ops_recorded()
    assert recorded >= 80, "enabled: only %d operators recorded (want >= 80)" % recorded
    got = trainscope.stats()["records"] - before
    assert got >= 80, "enabled: the probe took only %d records (want >= 80)" % got


def test_disabled_again_operators_stop(probe, x):
    tst.disable_ops()
    assert not tst.ops_enabled(), "ops_enabled() is True after disable_ops()"
    after = tst.ops_recorded()
    for _ in range(50):
        torch.mm(x, x)
    assert tst.ops_recorded() == after, "disabled again: operators were still recorded"


def test_shutdown_stops_the_callback_before_the_probe_goes(probe, x):
    # Enabled at shutdown: the callback must stop before the probe is destroyed, and
    # operators afterwards must not touch it (this would crash or corrupt memory).
    assert tst.enable_ops() is True, "re-enable failed"
    trainscope.shutdown(0)
    assert not tst.ops_enabled(), "trainscope.shutdown() left the operator callback on"
    for _ in range(50):
        torch.mm(x, x)


def test_a_missing_library_warns_once_and_falls_back():
    code = ("import trainscope, trainscope.torch as t; trainscope.init(connect_agent=1); "
            "r = t.enable_ops(); r2 = t.enable_ops(); import torch; torch.ones(2) + 1; "
            "print('result', r, r2, t.ops_recorded(), t.ops_enabled())")
    env = dict(os.environ, TRAINSCOPE_TORCH_LIB="/nonexistent/libtrainscope_torch.so")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, "missing library: exit code %d: %s" % (p.returncode, p.stderr)
    assert "result False False 0 False" in p.stdout, "missing library: got %r" % p.stdout
    warnings = [line for line in p.stderr.splitlines() if "operators are not recorded" in line]
    assert len(warnings) == 1 and "/nonexistent/libtrainscope_torch.so" in warnings[0], \
        "missing library: want one warning naming the path, got %r" % p.stderr
