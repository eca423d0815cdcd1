#!/usr/bin/env python3
"""Storage engines side by side: SQLite against ClickHouse on the same synthetic job.

Starts Debian's clickhouse-server (18.16 here) in a temp dir on a free loopback port with a
config of its own (HTTP only, small caches, two threads a query), then runs api_bench twice
with the same flags: once on SQLite in a temp dir and once with --store
clickhouse://127.0.0.1:PORT/bench. api_bench fills the store through Store::write (the rate
it prints is the engine's ingest rate for the batch size given) and times the JSON API's job
summary through the collector's HTTP server (p50/p99/max). The server is stopped at the end,
also on failure or Ctrl-C. Prints api_bench's output for each engine; asserts nothing.

Example: nice -n 10 tools/bench/store_bench.py --build build --ranks 256 --steps 4000 \\
             --rows-per-txn 4096 --requests 50
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

CONFIG = """<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>{dir}/server.log</log>
    <errorlog>{dir}/server.err.log</errorlog><console>0</console></logger>
  <http_port>{port}</http_port>
  <listen_host>127.0.0.1</listen_host>
  <path>{dir}/data/</path>
  <tmp_path>{dir}/tmp/</tmp_path>
  <user_files_path>{dir}/user_files/</user_files_path>
  <format_schema_path>{dir}/format_schemas/</format_schema_path>
  <users_config>{dir}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>268435456</mark_cache_size>
  <uncompressed_cache_size>268435456</uncompressed_cache_size>
</yandex>
"""
USERS = """<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>4000000000</max_memory_usage>
    <max_threads>2</max_threads></default></profiles>
  <users><default><password></password>
    <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
    <profile>default</profile><quota>default</quota></default></users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>
    <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time>
  </interval></default></quotas>
</yandex>
"""


def start_server(binary, workdir):
    port = free_port()
    with open(os.path.join(workdir, "config.xml"), "w") as f:
        f.write(CONFIG.format(dir=workdir, port=port))
    with open(os.path.join(workdir, "users.xml"), "w") as f:
        f.write(USERS.format(dir=workdir))
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
    p.add_argument("--rows-per-txn", type=int, default=4096,
                   help="rows per Store::write, as ingest batches them (4096)")
    p.add_argument("--requests", type=int, default=50, help="requests timed per kind (50)")
    args = p.parse_args()
    bench = os.path.join(args.build, "tools", "bench", "api_bench")
    if not os.access(bench, os.X_OK):
        sys.exit("no %s: ninja -C %s tools/bench/api_bench" % (bench, args.build))
    if not os.access(args.server, os.X_OK):
        sys.exit("no clickhouse-server (apt-get install clickhouse-server)")
    common = ["--ranks", str(args.ranks), "--steps", str(args.steps), "--rows-per-txn",
              str(args.rows_per_txn), "--requests", str(args.requests)]
    workdir = tempfile.mkdtemp(prefix="trainscope-store-bench-")
    server = None
    try:
        server, port = start_server(args.server, workdir)
        for name, extra in (("SQLite", []),
                            ("ClickHouse", ["--store", "clickhouse://127.0.0.1:%d/bench" % port])):
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
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
