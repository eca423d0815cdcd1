#!/usr/bin/env python3
"""Storage engines side by side: SQLite against ClickHouse on the same synthetic job.

Starts Debian's clickhouse-server (18.16 here) in a temp dir on free loopback ports with the
config under tools/clickhouse/ (the tests' as well; two threads a query), then runs api_bench
twice with the same flags: once on SQLite in a temp dir and once with --store
clickhouse://127.0.0.1:PORT/bench. api_bench fills the store through Store::write (the rate
it prints is the engine's ingest rate for the batch size given) and times the JSON API's job
summary and heatmap through the collector's HTTP server (p50/p99/max). The server is stopped
at the end, also on failure or Ctrl-C. Prints api_bench's output for each engine; asserts
nothing.

Big runs (100 M rows: 29 GB of SQLite, 8 GB of ClickHouse) can keep both databases in
--workdir and time the requests again later with --reuse, without filling again.

Example: nice -n 10 tools/bench/store_bench.py --build build --ranks 256 --steps 4000 \\
             --requests 50
         tools/bench/store_bench.py --ranks 1024 --steps 97657 --workdir /var/tmp/sb
         tools/bench/store_bench.py --ranks 1024 --steps 97657 --workdir /var/tmp/sb --reuse
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from soak import free_port  # noqa: E402

TEMPLATES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         "clickhouse")


def fill_template(name, **values):
    """tools/clickhouse/NAME (the tests' server config too) with every {KEY} replaced."""
    with open(os.path.join(TEMPLATES, name)) as f:
        text = f.read()
    for key, value in values.items():
        text = text.replace("{%s}" % key, str(value))
    return text


def start_server(binary, workdir):
    port = free_port()
    with open(os.path.join(workdir, "config.xml"), "w") as f:
        f.write(fill_template("config.xml", DIR=workdir, HTTP_PORT=port, TCP_PORT=free_port(),
                              CACHE_BYTES=268435456, REMOTE_SERVERS=""))
    with open(os.path.join(workdir, "users.xml"), "w") as f:
        f.write(fill_template("users.xml", MAX_MEMORY=4000000000))
    log = open(os.path.join(workdir, "stdout.log"), "w")
    proc = subprocess.Popen([binary, "--config-file=" + os.path.join(workdir, "config.xml")],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("clickhouse-server exited at start; see " + workdir)
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/ping" % port, timeout=1) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("clickhouse-server did not answer within 60 s")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build-release", help="build directory (build-release)")
    p.add_argument("--server", default=shutil.which("clickhouse-server") or
                   "/usr/sbin/clickhouse-server", help="clickhouse-server binary")
    p.add_argument("--ranks", type=int, default=256, help="ranks of the synthetic job (256)")
    p.add_argument("--steps", type=int, default=4000, help="steps (rows = ranks x steps; 4000)")
    p.add_argument("--rows-per-txn", type=int,
                   help="rows per Store::write for both engines (default: as the collector's "
                   "ingest batches for each: 4096 for SQLite, 32768 for ClickHouse, whose every "
                   "insert makes a part)")
    p.add_argument("--requests", type=int, default=50, help="requests timed per kind (50)")
    p.add_argument("--workdir", help="keep both databases here (made if missing) instead of a "
                   "temp dir removed at the end")
    p.add_argument("--reuse", action="store_true",
                   help="time the requests on the databases already in --workdir, no fill")
    p.add_argument("--only", choices=("sqlite", "clickhouse"), help="run one engine only")
    args = p.parse_args()
    if args.reuse and not args.workdir:
        sys.exit("--reuse needs --workdir")
    bench = os.path.join(args.build, "tools", "bench", "api_bench")
    if not os.access(bench, os.X_OK):
        sys.exit("no %s: ninja -C %s tools/bench/api_bench" % (bench, args.build))
    if not os.access(args.server, os.X_OK):
        sys.exit("no clickhouse-server (apt-get install clickhouse-server)")
    common = ["--ranks", str(args.ranks), "--steps", str(args.steps),
              "--requests", str(args.requests)]
    if args.reuse:
        common.append("--reuse")
    workdir = args.workdir or tempfile.mkdtemp(prefix="trainscope-store-bench-")
    sqlite_dir = os.path.join(workdir, "sqlite")
    clickhouse_dir = os.path.join(workdir, "clickhouse")
    for d in (sqlite_dir, clickhouse_dir):
        os.makedirs(d, exist_ok=True)
    server = None
    try:
        engines = []
        if args.only != "clickhouse":
            engines.append(("SQLite", ["--data-dir", sqlite_dir, "--rows-per-txn",
                                       str(args.rows_per_txn or 4096)]))
        if args.only != "sqlite":
            server, port = start_server(args.server, clickhouse_dir)
            engines.append(("ClickHouse", ["--store", "clickhouse://127.0.0.1:%d/bench" % port,
                                           "--rows-per-txn", str(args.rows_per_txn or 32768)]))
        for name, extra in engines:
            print("== %s ==" % name, flush=True)
            rc = subprocess.call([bench] + common + extra)
            if rc != 0:
                return rc
        return 0
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
