"""`meson install` end to end: installs the build into a temporary DESTDIR and runs the
installed binaries from there. The layout (binaries, libraries, Python package with its
start-up hook and .pth, dashboard, config files, systemd units, sysusers) is where the build
says; the installed collector, started with only --config, serves the installed dashboard;
the installed agent runs from --config; the installed `trainscope run` finds the installed
package and libraries by itself and an unmodified PyTorch script's steps reach the collector;
TRAINSCOPE_AUTO=1 through the installed .pth turns monitoring on. Loopback only, free ports,
every process stopped at the end. Run under pytest (tests/pytest_run.py); skips when
/usr/bin/python3 has no torch. The cases share the installed tree and its daemons and run in
file order.

Env (tests/e2e/meson.build): TRAINSCOPE_BUILD_ROOT, TRAINSCOPE_INSTALL_PREFIX,
TRAINSCOPE_INSTALL_PYTHONDIR, TRAINSCOPE_INSTALL_SYSCONFDIR, TRAINSCOPE_INSTALL_UNITDIR.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import types
import urllib.error
import urllib.request

import pytest

TRAIN = r"""
import torch, torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
data = TensorDataset(torch.randn(40, 8), torch.randint(0, 2, (40,)))
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(data, batch_size=8):
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
print("trained")
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if pred():
                return True
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.1)
    return False


def http_get(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as r:
        return r.status, r.read()


def under(destdir, path):
    return os.path.join(destdir, path.lstrip("/"))



@pytest.fixture(scope="module")
def tmp():
    if subprocess.run(["/usr/bin/python3", "-c", "import torch"],
                      capture_output=True).returncode != 0:
        pytest.skip("/usr/bin/python3 cannot import torch")
    path = tempfile.mkdtemp(prefix="ts-install-")
    yield path
    if os.environ.get("TRAINSCOPE_TEST_KEEP"):
        print("kept " + path)
    else:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def installed(tmp):
    """`meson install` of the build into tmp/dest: where the binaries, package, config files
    and units landed."""
    build = os.environ["TRAINSCOPE_BUILD_ROOT"]
    prefix = os.environ["TRAINSCOPE_INSTALL_PREFIX"]
    pydir = os.environ["TRAINSCOPE_INSTALL_PYTHONDIR"]
    confdir = os.environ["TRAINSCOPE_INSTALL_SYSCONFDIR"]
    unitdir = os.environ["TRAINSCOPE_INSTALL_UNITDIR"]
    dest = os.path.join(tmp, "dest")
    r = subprocess.run(["meson", "install", "-C", build, "--destdir", dest, "--no-rebuild",
                        "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, "meson install --destdir (%s)" % (r.stdout + r.stderr)[-2000:]
    return types.SimpleNamespace(
        dest=dest, prefix=prefix, root=under(dest, prefix),
        pkg=under(dest, pydir if pydir.startswith("/") else os.path.join(prefix, pydir)),
        conf=under(dest, confdir if confdir.startswith("/") else os.path.join(prefix, confdir)),
        units=under(dest, unitdir))


@pytest.fixture(scope="module")
def daemons(tmp, installed):
    """The installed collector and agent, from config files only (loopback, free ports);
    stopped at the end. Gives the collector's HTTP port and the agent's socket."""
    ingest, http = free_port(), free_port()
    sock = os.path.join(tmp, "agent.sock")
    with open(os.path.join(tmp, "collector.conf"), "w") as f:
        f.write("data-dir = %s\ningest = tcp://127.0.0.1:%d\nhttp = 127.0.0.1:%d\n"
                % (os.path.join(tmp, "data"), ingest, http))
    with open(os.path.join(tmp, "agent.conf"), "w") as f:
        f.write("collector = tcp://127.0.0.1:%d\nendpoint = ipc://%s\nnode = inst\n"
                "spool-dir = %s\n" % (ingest, sock, os.path.join(tmp, "spool")))
    procs = []
    with open(os.path.join(tmp, "daemons.log"), "w") as log:
        try:
            procs.append(subprocess.Popen(
                [os.path.join(installed.root, "bin", "trainscope-collector"),
                 "--config", os.path.join(tmp, "collector.conf")],
                stdout=log, stderr=log, cwd=tmp))
            procs.append(subprocess.Popen(
                [os.path.join(installed.root, "bin", "trainscope-agent"),
                 "--config", os.path.join(tmp, "agent.conf")],
                stdout=log, stderr=log, cwd=tmp))
            yield types.SimpleNamespace(http=http, sock=sock)
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


@pytest.fixture(scope="module")
def run_env():
    """The environment of the installed `trainscope run`: nothing of the build or source tree,
    and the python3 command (a sanitizer build's probe library needs the runtime preloaded
    into python3, and only there: the sanitized `trainscope` binary carries its own)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TRAINSCOPE_")
           and k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "NCCL_PROFILER_PLUGIN")}
    env["OMP_NUM_THREADS"] = "1"
    python = ["/usr/bin/python3"]
    if os.environ.get("TRAINSCOPE_PYTHON_PRELOAD"):
        python = ["/usr/bin/env", "LD_PRELOAD=" + os.environ["TRAINSCOPE_PYTHON_PRELOAD"],
                  "ASAN_OPTIONS=detect_leaks=0"] + python
    return env, python


def test_the_layout_is_where_the_build_says(installed):
    root, pkg, conf, units = installed.root, installed.pkg, installed.conf, installed.units
    missing = [os.path.relpath(path, installed.dest) for path in
               [os.path.join(root, "bin", b) for b in
                ("trainscope", "trainscope-agent", "trainscope-collector")] + [
                   os.path.join(pkg, "trainscope", "__init__.py"),
                   os.path.join(pkg, "trainscope", "auto.py"),
                   os.path.join(pkg, "trainscope", "_layout.py"),
                   os.path.join(pkg, "trainscope", "_boot", "sitecustomize.py"),
                   os.path.join(pkg, "trainscope-auto.pth"),
                   os.path.join(root, "share", "trainscope", "web", "index.html"),
                   os.path.join(root, "share", "trainscope", "prometheus", "trainscope-rules.yml"),
                   os.path.join(root, "share", "trainscope", "grafana", "trainscope-dashboard.json"),
                   os.path.join(conf, "agent.conf"), os.path.join(conf, "collector.conf"),
                   os.path.join(units, "trainscope-agent.service"),
                   os.path.join(units, "trainscope-collector.service")]
               if not os.path.exists(path)]
    assert missing == [], "not installed: %s" % missing
    with open(os.path.join(units, "trainscope-collector.service")) as f:
        unit = f.read()
    assert ("ExecStart=%s/bin/trainscope-collector --config %s/collector.conf"
            % (installed.prefix, conf[len(installed.dest):]) in unit), \
        "the collector unit runs it with --config"


def test_the_installed_daemons_run_from_config_and_serve_the_dashboard(daemons):
    assert wait_for(lambda: http_get(daemons.http, "/healthz")[0] == 200, 20), \
        "the installed collector runs from --config"
    status, body = http_get(daemons.http, "/")
    assert status == 200 and b"<html" in body.lower(), \
        "it serves the installed dashboard without --web-root"
    assert wait_for(lambda: os.path.exists(daemons.sock), 20), \
        "the installed agent runs from --config"


def test_trainscope_run_finds_the_installed_package_and_probe(installed, run_env):
    env, _ = run_env
    r = subprocess.run([os.path.join(installed.root, "bin", "trainscope"), "run",
                        "--print-env", "--job", "inst"], env=env, capture_output=True,
                       text=True)
    plan = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    assert (r.returncode == 0 and plan.get("PYTHONPATH", "").startswith(installed.pkg)
            and plan.get("TRAINSCOPE_PROBE_LIB", "").startswith(installed.root)
            and plan.get("NCCL_PROFILER_PLUGIN", "").startswith(installed.root)
            and plan["NCCL_PROFILER_PLUGIN"].endswith("/libnccl-profiler-trainscope.so")), \
        ("trainscope run finds the installed package, probe and NCCL profiler plugin (%r %r)"
         % (plan, r.stderr))


def test_an_unmodified_scripts_steps_reach_the_collector(installed, daemons, run_env):
    env, python = run_env
    assert wait_for(lambda: os.path.exists(daemons.sock), 20), \
        "the installed agent runs from --config"
    r = subprocess.run([os.path.join(installed.root, "bin", "trainscope"), "run",
                        "--job", "inst", "--agent", "ipc://" + daemons.sock, "--"]
                       + python + ["-c", TRAIN], env=env, capture_output=True,
                       text=True, timeout=300)
    said = [line for line in r.stderr.splitlines() if line.startswith("trainscope:")]
    assert (r.returncode == 0 and "trained" in r.stdout and len(said) == 1
            and said[0].startswith("trainscope: sources: steps yes")), \
        "an unmodified script runs under the installed trainscope run (%s)" % r.stderr[-2000:]

    def rows():
        # The job is unknown (404) until the agent delivered its first report: none yet.
        try:
            _, b = http_get(daemons.http, "/api/v1/jobs/inst/steps?limit=1000")
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return []
            raise
        return json.loads(b)["steps"]
    assert wait_for(lambda: len(rows()) == 5, 30), \
        "its 5 optimizer steps reach the collector (%d rows)" % len(rows())
    assert all(r["data_ns"] > 0 and r["compute_ns"] > 0 for r in rows()), \
        "each with data wait and compute"


@pytest.mark.parametrize("value,want", [("1", "True"), ("0", "False")])
def test_trainscope_auto_through_the_installed_pth(installed, run_env, value, want):
    # A site directory's .pth files run at start-up; addsitedir runs them the same way.
    env, python = run_env
    probe = ("import site, sys; site.addsitedir(%r); "
             "m = sys.modules.get('trainscope.auto'); print(bool(m and m.state.on))"
             % installed.pkg)
    r = subprocess.run(python + ["-c", probe], env=dict(env, TRAINSCOPE_AUTO=value),
                       capture_output=True, text=True)
    assert r.stdout.strip() == want, "TRAINSCOPE_AUTO=%s with the installed .pth: " \
        "monitoring %s (%r)" % (value, want, r.stdout + r.stderr)
