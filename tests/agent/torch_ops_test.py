"""trainscope.torch's operator recording (libtrainscope_torch.so) in a real torch process:
ATen operators on any thread become probe op records while enabled and stop when disabled;
trainscope.shutdown() stops the callback before the probe goes; a missing library gives a
one-line warning and False, never an exception.

Run by meson with /usr/bin/python3 (exit 77 without torch or the library). Environment:
TRAINSCOPE_PROBE_LIB, TRAINSCOPE_TORCH_LIB, PYTHONPATH with agent/probe/python.
"""
import os
import subprocess
import sys
import threading

try:
    import torch
except ImportError:
    print("skipped: this interpreter has no torch", file=sys.stderr)
    sys.exit(77)

if not os.path.exists(os.environ.get("TRAINSCOPE_TORCH_LIB", "")):
    print("skipped: libtrainscope_torch.so is not built", file=sys.stderr)
    sys.exit(77)

import trainscope
import trainscope.torch as tst

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED: " + what, file=sys.stderr)


def missing_library_falls_back():
    code = ("import trainscope, trainscope.torch as t; trainscope.init(connect_agent=1); "
            "r = t.enable_ops(); r2 = t.enable_ops(); import torch; torch.ones(2) + 1; "
            "print('result', r, r2, t.ops_recorded(), t.ops_enabled())")
    env = dict(os.environ, TRAINSCOPE_TORCH_LIB="/nonexistent/libtrainscope_torch.so")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    check(p.returncode == 0, "missing library: exit code %d: %s" % (p.returncode, p.stderr))
    check("result False False 0 False" in p.stdout, "missing library: got %r" % p.stdout)
    warnings = [l for l in p.stderr.splitlines() if "operators are not recorded" in l]
    check(len(warnings) == 1 and "/nonexistent/libtrainscope_torch.so" in warnings[0],
          "missing library: want one warning naming the path, got %r" % p.stderr)


def main():
    trainscope.init(connect_agent=1)  # fold only: no agent needed
    x = torch.randn(16, 16)

    before = trainscope.stats()["records"]
    with trainscope.step():
        for _ in range(50):
            torch.mm(x, x)
    trainscope.flush(2000)
    check(trainscope.stats()["records"] - before <= 2, "disabled: operators were recorded")
    check(tst.ops_recorded() == 0, "disabled: ops_recorded() is %d" % tst.ops_recorded())

    check(tst.enable_ops() is True, "enable_ops() did not return True")
    check(tst.ops_enabled(), "ops_enabled() is False after enable_ops()")
    check(tst.enable_ops() is True, "a second enable_ops() did not return True")
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
    check(recorded >= 80, "enabled: only %d operators recorded (want >= 80)" % recorded)
    got = trainscope.stats()["records"] - before
    check(got >= 80, "enabled: the probe took only %d records (want >= 80)" % got)

    tst.disable_ops()
    check(not tst.ops_enabled(), "ops_enabled() is True after disable_ops()")
    after = tst.ops_recorded()
    for _ in range(50):
        torch.mm(x, x)
    check(tst.ops_recorded() == after, "disabled again: operators were still recorded")

    # Enabled at shutdown: the callback must stop before the probe is destroyed, and
    # operators afterwards must not touch it (this would crash or corrupt memory).
    check(tst.enable_ops() is True, "re-enable failed")
    trainscope.shutdown(0)
    check(not tst.ops_enabled(), "trainscope.shutdown() left the operator callback on")
    for _ in range(50):
        torch.mm(x, x)

    missing_library_falls_back()
    if failures:
        print("%d check(s) failed" % len(failures), file=sys.stderr)
        return 1
    print("ok: %d operators recorded" % recorded)
    return 0


if __name__ == "__main__":
    sys.exit(main())
