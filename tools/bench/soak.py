#!/usr/bin/env python3
"""Soak: a simulated job through a real agent and collector for a long time while hostile
traffic hits the collector on the side; prints whether memory stayed flat and nothing was lost.

Starts trainscope-collector (a fresh data dir), one trainscope-agent and trainscope-simtrain
(--ranks at --step-ms, paced in real time, for --duration-s), and beside them, until the job
ends:
  - a fake agent speaking ZMTP 3.0 (NULL mechanism, a DEALER) to the ingest port, sending
    mutated copies of the frame fuzz target's corpus (tests/fuzz/frame/corpus) and random bytes;
  - raw TCP connections that send garbage instead of a ZMTP greeting;
  - HTTP clients asking the API for random paths, queries and methods, with junk bodies.
Every --sample-s it records the collector's RSS (VmRSS), its heap in use, SQLite's memory and
the step summaries its store caches (/metrics), and the rows stored. At the end it
waits for the job's rows and checks: every step of every rank stored once (rows == ranks x
steps), the collector alive, its RSS in the last third of the run no higher than in the
second third plus --rss-slack-mb (flat, not growing), and the rejects it counted (/metrics).
Exit 0 when all hold, 1 otherwise. Loopback only. Uses only the standard library.

Example (a figure of docs/BENCHMARKS.md): tools/bench/soak.py --build build-release --duration-s 600
The issue's soak is --ranks 64 --step-ms 100 --duration-s 7200 (two hours).
"""
import argparse
import http.client
import os
import random
import re
import shlex
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def stop_processes(procs, timeout=20):
    """SIGTERM to each still running (last started first), then waits; kills the stragglers."""
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()


def binaries(build, tool):
    """The collector, agent and simtrain of `build`; exits naming the missing one."""
    bins = {
        "collector": os.path.join(build, "collector", "trainscope-collector"),
        "agent": os.path.join(build, "agent", "trainscope-agent"),
        "simtrain": os.path.join(build, "tools", "simtrain", "trainscope-simtrain"),
    }
    for name, path in bins.items():
        if not os.access(path, os.X_OK):
            sys.exit("%s: %s not found at %s (build it, or give --build)" % (tool, name, path))
    return bins


class Processes(object):
    """The processes of one run, each logging to WORK/NAME.log; stop() ends them."""

    def __init__(self, work):
        self.work = work
        self.procs = []

    def start(self, name, argv):
        log = open(os.path.join(self.work, name + ".log"), "w")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def start_collector(self, binary, ingest, http_port, extra=(), wrap=()):
        """A collector on the loopback ports with its data under WORK/data, once it is ready;
        exits naming its log when it does not start within 30 s. `wrap`: a command it runs
        under (e.g. heaptrack)."""
        ready = os.path.join(self.work, "collector.ready")
        collector = self.start("collector", list(wrap) + [
            binary, "--data-dir", os.path.join(self.work, "data"),
            "--ingest", "tcp://127.0.0.1:%d" % ingest, "--http", "127.0.0.1:%d" % http_port,
            "--ready-file", ready] + list(extra))
        deadline = time.time() + 30
        while not os.path.exists(ready):
            if time.time() > deadline or collector.poll() is not None:
                sys.exit("the collector did not start (see %s/collector.log)" % self.work)
            time.sleep(0.1)
        return collector

    def start_agent(self, binary, ingest, name):
        """An agent named NAME for the collector at `ingest`, once its socket is there; returns
        its probe endpoint."""
        sock = os.path.join(self.work, name + ".sock")
        self.start(name, [binary, "--collector", "tcp://127.0.0.1:%d" % ingest,
                          "--endpoint", "ipc://" + sock, "--node", name,
                          "--spool-dir", os.path.join(self.work, "spool-" + name)])
        while not os.path.exists(sock):
            time.sleep(0.1)
        return "ipc://" + sock

    def stop(self, timeout=20):
        stop_processes(self.procs, timeout)


def http_get(port, target, timeout=10):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", target)
        r = conn.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    finally:
        conn.close()


def stored_rows(port, job):
    try:
        status, body = http_get(port, "/api/v1/jobs")
    except OSError:
        return None
    if status != 200:
        return None
    import json
    for j in json.loads(body).get("jobs", []):
        if j.get("job") == job:
            return j.get("step_rows", j.get("rows"))
    return 0


def memory_gauges(port):
    """From the collector's /metrics: (heap in use KiB, SQLite's memory KiB, step summaries
    cached, ingest connections known), each None when absent: where a growing heap goes."""
    try:
        status, body = http_get(port, "/metrics")
    except OSError:
        return None, None, None, None

    def gauge(pattern, scale):
        m = re.search("^" + pattern + r" (\S+)$", body, re.M) if status == 200 else None
        return int(float(m.group(1)) / scale) if m else None

    return (gauge(r'trainscope_process_heap_bytes\{state="in_use"\}', 1024),
            gauge("trainscope_storage_memory_bytes", 1024),
            gauge("trainscope_storage_cached_step_rollups", 1),
            gauge("trainscope_ingest_peers", 1))


# ---- hostile traffic ------------------------------------------------------------------------

def zmtp_dealer(port):
    """A connected socket that has done the ZMTP 3.0 NULL handshake as a DEALER."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    greeting = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + \
        b"\x00" + b"\x00" * 31
    s.sendall(greeting)
    peer = b""
    while len(peer) < 64:
        chunk = s.recv(64 - len(peer))
        if not chunk:
            raise OSError("closed during the greeting")
        peer += chunk
    name, value = b"Socket-Type", b"DEALER"
    body = b"\x05READY" + bytes([len(name)]) + name + struct.pack(">I", len(value)) + value
    s.sendall(bytes([0x04, len(body)]) + body)
    return s


def zmtp_frame(payload, more=False):
    flags = 0x01 if more else 0x00
    if len(payload) > 255:
        return bytes([flags | 0x02]) + struct.pack(">Q", len(payload)) + payload
    return bytes([flags, len(payload)]) + payload


def mutate(data, rng):
    data = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.randint(0, 3)
        if op == 0 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif op == 1:
            data.insert(rng.randint(0, len(data)), rng.randrange(256))
        elif op == 2 and data:
            del data[rng.randrange(len(data))]
        else:
            cut = rng.randint(0, len(data))
            data = data[:cut]
    return bytes(data)


SIDE_KINDS = ("frames", "garbage", "http")


class Traffic(object):
    def __init__(self, ingest_port, http_port, seed, kinds=SIDE_KINDS):
        self.kinds = kinds
        self.ingest_port = ingest_port
        self.http_port = http_port
        self.stop = threading.Event()
        self.counts = {"frames": 0, "garbage_connections": 0, "http": 0, "errors": 0}
        self.lock = threading.Lock()
        corpus_dir = os.path.join(ROOT, "tests", "fuzz", "frame", "corpus")
        self.corpus = []
        for name in sorted(os.listdir(corpus_dir)):
            with open(os.path.join(corpus_dir, name), "rb") as f:
                self.corpus.append(f.read())
        self.seed = seed

    def count(self, key, n=1):
        with self.lock:
            self.counts[key] += n

    def frames(self):
        rng = random.Random(self.seed)
        while not self.stop.is_set():
            try:
                s = zmtp_dealer(self.ingest_port)
                for _ in range(200):
                    if self.stop.is_set():
                        break
                    if rng.random() < 0.2:
                        payload = bytes(rng.randrange(256) for _ in range(rng.randint(0, 512)))
                    else:
                        payload = mutate(rng.choice(self.corpus), rng)
                    s.sendall(zmtp_frame(payload))
                    self.count("frames")
                    time.sleep(0.01)
                s.close()
            except OSError:
                self.count("errors")
                time.sleep(0.2)

    def garbage(self):
        rng = random.Random(self.seed + 1)
        while not self.stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", self.ingest_port), timeout=2) as s:
                    s.sendall(bytes(rng.randrange(256) for _ in range(rng.randint(1, 2048))))
                    self.count("garbage_connections")
            except OSError:
                self.count("errors")
            time.sleep(0.2)

    def http(self):
        rng = random.Random(self.seed + 2)
        paths = ["/api/v1/jobs", "/api/v1/jobs/soak/steps", "/api/v1/jobs/soak/summary",
                 "/api/v1/jobs/soak/heatmap", "/api/v1/jobs/soak/ranks", "/api/v1/nodes",
                 "/api/v1/jobs/soak/anomalies", "/api/v1/anomalies", "/metrics",
                 "/api/v1/jobs/soak/captures", "/api/v1/captures/x", "/api/v1/jobs/%00/steps",
                 "/../../etc/passwd", "/api/v1/jobs/soak/topology", "/index.html"]
        params = ["from", "to", "rank", "limit", "detail", "since"]
        values = ["-1", "0", "9223372036854775807", "-9223372036854775808", "abc", "1e9",
                  "%ff", "", "18446744073709551616", "3"]
        while not self.stop.is_set():
            target = rng.choice(paths)
            q = "&".join("%s=%s" % (rng.choice(params), rng.choice(values))
                         for _ in range(rng.randint(0, 3)))
            if q:
                target += "?" + q
            method = rng.choice(["GET", "GET", "GET", "POST", "PUT", "DELETE"])
            body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 300))) \
                if method != "GET" else None
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=10)
                conn.request(method, target, body=body,
                             headers={"Content-Type": "application/json"})
                conn.getresponse().read()
                conn.close()
                self.count("http")
            except (OSError, http.client.HTTPException):
                self.count("errors")
            time.sleep(0.02)

    def start(self):
        self.threads = [threading.Thread(target=getattr(self, kind), daemon=True)
                        for kind in self.kinds]
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=15)


# ---- the run ----------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build", help="build directory (default: build)")
    p.add_argument("--duration-s", type=float, default=600, help="length of the job (600)")
    p.add_argument("--ranks", type=int, default=64, help="simulated ranks (64)")
    p.add_argument("--step-ms", type=float, default=100, help="step time (100: 10 steps/s)")
    p.add_argument("--sample-s", type=float, default=10, help="RSS sampling interval (10)")
    p.add_argument("--rss-slack-mb", type=float, default=16,
                   help="allowed RSS growth from the second to the last third (16)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--side", default=",".join(SIDE_KINDS),
                   help="the side traffic, a comma-separated subset of %s, or 'none' (all)"
                   % ",".join(SIDE_KINDS))
    p.add_argument("--wrap", default="",
                   help="run the collector under this command, e.g. 'heaptrack -o FILE' to find "
                   "what grows (RSS is then the wrapper's process: read the tool's report)")
    args = p.parse_args()
    side = () if args.side == "none" else tuple(k for k in args.side.split(",") if k)
    for kind in side:
        if kind not in SIDE_KINDS:
            sys.exit("soak: --side: unknown kind '%s' (%s, or none)" % (kind, ",".join(SIDE_KINDS)))

    bins = binaries(args.build, "soak")
    if args.duration_s <= 0 or args.ranks <= 0 or args.step_ms <= 0:
        sys.exit("soak: --duration-s, --ranks and --step-ms must be > 0")

    work = tempfile.mkdtemp(prefix="trainscope-soak-")
    ingest, http_port = free_port(), free_port()
    steps = int(args.duration_s * 1000 / args.step_ms)
    run = Processes(work)

    ok = True
    try:
        collector = run.start_collector(bins["collector"], ingest, http_port,
                                        wrap=shlex.split(args.wrap))
        endpoint = run.start_agent(bins["agent"], ingest, "soak0")
        traffic = Traffic(ingest, http_port, args.seed, side)
        traffic.start()
        t0 = time.time()
        sim = run.start("simtrain", [bins["simtrain"], "--agent", endpoint, "--job", "soak",
                                 "--ranks", str(args.ranks), "--steps", str(steps),
                                 "--step-ms", str(args.step_ms), "--quiet"])
        # (seconds, rss KiB, rows, heap in use KiB, SQLite KiB, summaries cached, peers)
        samples = []
        while sim.poll() is None:
            samples.append((time.time() - t0, rss_kib(collector.pid),
                            stored_rows(http_port, "soak")) + memory_gauges(http_port))
            print("soak: %6.0f s  collector RSS %s KiB  rows %s  heap in use %s KiB (SQLite %s "
                  "KiB, %s step summaries cached, %s ingest connections)" % samples[-1],
                  flush=True)
            time.sleep(args.sample_s)
        traffic.finish()
        want = args.ranks * steps
        deadline = time.time() + 60
        rows = stored_rows(http_port, "soak")
        while rows != want and time.time() < deadline:
            time.sleep(1)
            rows = stored_rows(http_port, "soak")
        alive = collector.poll() is None
        status, metrics = http_get(http_port, "/metrics") if alive else (0, "")
        rejects = {}
        for m in re.finditer(r'^trainscope_ingest_rejected_\w+\{reason="(\w+)"\} (\S+)$',
                             metrics, re.M):
            rejects[m.group(1)] = rejects.get(m.group(1), 0) + float(m.group(2))
        third = max(1, len(samples) // 3)
        mid = [s[1] for s in samples[third:2 * third] if s[1]]
        last = [s[1] for s in samples[2 * third:] if s[1]]
        flat = bool(mid and last) and max(last) <= max(mid) + args.rss_slack_mb * 1024
        print("soak: %d ranks x %d steps at %.0f ms in %.0f s, simtrain exit %s"
              % (args.ranks, steps, args.step_ms, time.time() - t0, sim.returncode))
        print("soak: side traffic: %s" % traffic.counts)
        print("soak: collector rejects counted: %s" % {k: int(v) for k, v in rejects.items()})
        print("soak: rows stored %s of %d (%s)" % (rows, want, "ok" if rows == want else "LOST"))
        if mid and last:
            print("soak: collector RSS first %d KiB, max of second third %d KiB, max of last "
                  "third %d KiB: %s" % (samples[0][1] or 0, max(mid), max(last),
                                        "flat" if flat else "GROWING"))
        heap_mid = [s[3] for s in samples[third:2 * third] if s[3]]
        heap_last = [s[3] for s in samples[2 * third:] if s[3]]
        if heap_mid and heap_last:
            # Beside the RSS: growth here is memory the collector holds, not malloc's free pages.
            print("soak: collector heap in use first %d KiB, max of second third %d KiB, max of "
                  "last third %d KiB" % (samples[0][3] or 0, max(heap_mid), max(heap_last)))
            print("soak: at the end SQLite held %s KiB, the store %s step summaries, ingest %s "
                  "connections" % (samples[-1][4], samples[-1][5], samples[-1][6]))
        print("soak: collector %s" % ("alive" if alive else "DIED"))
        ok = rows == want and alive and flat and sim.returncode == 0
    finally:
        run.stop()
        if args.keep or not ok:
            print("soak: logs and data in %s" % work)
        else:
            subprocess.call(["rm", "-rf", work])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
