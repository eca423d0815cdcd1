"""Stack captures from the Python package: a thread parked in a named Python function shows it
in its Python frames (innermost first) next to its native frames, and a main thread that holds
the GIL makes the capture come back with native stacks only ("python": false and why) instead
of hanging it. Run under pytest (tests/pytest_run.py) with /usr/bin/python3,
TRAINSCOPE_PROBE_LIB and PYTHONPATH set (meson does).
"""
import ctypes
import gzip
import json
import os
import subprocess
import tempfile
import threading
import time

import pytest


@pytest.fixture(scope="module")
def ts():
    try:
        import trainscope
    except Exception as e:  # noqa: BLE001 - the library cannot be loaded here
        pytest.skip("cannot import trainscope: %s" % e)
    with tempfile.TemporaryDirectory(prefix="ts-pystacks-") as tmp:
        os.environ["TRAINSCOPE_CAPTURE_DIR"] = tmp
        trainscope.init(connect_agent=1, job="py-stacks", rank=2, world_size=4)
        yield trainscope
        trainscope.shutdown(0)


def read_when_complete(path, timeout_s=10.0):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            with gzip.open(path) as f:
                return json.load(f)
        except (OSError, EOFError, ValueError):
            time.sleep(0.05)
    raise AssertionError("no complete stacks file at %s within %.0f s" % (path, timeout_s))


def blocked_in_python_function(parked, release):
    parked.set()
    release.wait()


def test_python_frames_per_native_thread(ts):
    release, parked = threading.Event(), threading.Event()
    t = threading.Thread(target=blocked_in_python_function, args=(parked, release),
                         name="parked", daemon=True)
    t.start()
    try:
        parked.wait()
        path = ts.dump_stacks("cap-py-1")
        assert path.endswith("/cap-py-1/rank-2.json.gz"), path
        doc = read_when_complete(path)
    finally:
        release.set()
        t.join()
    meta = doc["trainscope"]
    assert meta["kind"] == "stacks", meta
    assert meta["python"] is True, meta
    assert meta["rank"] == 2 and meta["job"] == "py-stacks", meta
    threads = {th["tid"]: th for th in doc["threads"]}
    th = threads[t.native_id]
    funcs = [f["function"] for f in th["python"]]
    assert "blocked_in_python_function" in funcs, funcs
    assert funcs[0] == "wait", funcs  # innermost first: threading's Condition.wait
    assert funcs.index("blocked_in_python_function") < funcs.index("_bootstrap"), funcs
    assert th["native"], th  # native frames too
    frame = th["python"][funcs.index("blocked_in_python_function")]
    assert frame["file"].endswith("python_stacks_test.py") and frame["line"] > 0, frame
    main = threads[threading.main_thread().native_id]
    assert any(f["function"] == "read_when_complete" for f in main["python"]), main["python"]


def test_a_gil_held_past_the_deadline_leaves_native_stacks_only(ts):
    # The main thread holds the GIL (a blocking read through PyDLL keeps it) for ~3 s: the
    # capture still completes, with native stacks and the reason there are no Python ones.
    r, w = os.pipe()
    child = subprocess.Popen(["/bin/sh", "-c", "sleep 3; printf x"], stdout=w)
    try:
        path = ts.dump_stacks("cap-py-gil")
        buf = ctypes.create_string_buffer(1)
        ctypes.PyDLL(None).read(r, buf, 1)  # GIL held until the child writes
    finally:
        child.wait()
        os.close(r)
        os.close(w)
    doc = read_when_complete(path)
    meta = doc["trainscope"]
    assert meta["python"] is False, meta
    assert "did not answer" in meta["detail"] and "GIL" in meta["detail"], meta
    assert any(th["native"] for th in doc["threads"]), doc["threads"]
