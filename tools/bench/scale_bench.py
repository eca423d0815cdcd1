#!/usr/bin/env python3
"""Scale: one collector taking a job of many simulated ranks at 1 step/s, for a bounded time.

Starts trainscope-collector (a fresh data dir), --agents trainscope-agent processes and --sims
trainscope-simtrain processes that host the job's --ranks between them (each simulator's ranks
spread over every agent), paced in real time at --step-ms for --duration-s, with one straggler
injected (rank --straggler-rank from the middle step, 1.3x compute) so detection has something
to find. While the job runs, a client asks the job's summary API every --summary-every-s and
the collector's RSS is sampled. At the end it waits for the rows and prints:
  - step rows stored against ranks x steps (each stored once: the store's key is idempotent);
  - the straggler's detection latency in steps (detected_step - injected step) and its rank;
  - the summary API's p50/p99/max latency during the run;
  - the collector's peak RSS (VmHWM) and its RSS at the end.
With --clickhouse the collector stores into a clickhouse-server started for the run (the
tools/clickhouse/ config, as tools/bench/store_bench.py starts it), and the inserts into its
steps table and the parts it holds at the end are printed as well.
Exit 0 when every row is stored and the straggler found, 1 otherwise. Loopback only; standard
library only. docs/BENCHMARKS.md states what size was run on which machine.

Example: tools/bench/scale_bench.py --build build-release --ranks 4096 --sims 4 --agents 4 \
             --duration-s 120
"""
import argparse
import json
import os
import subprocess
import sys
import shutil
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from soak import Processes, binaries, free_port, http_get, rss_kib, stored_rows  # noqa: E402
import store_bench  # noqa: E402


def peak_rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def percentile(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build-release", help="build directory (build-release)")
    p.add_argument("--ranks", type=int, default=4096, help="ranks of the job (4096)")
    p.add_argument("--sims", type=int, default=4, help="trainscope-simtrain processes (4)")
    p.add_argument("--agents", type=int, default=4, help="trainscope-agent processes (4)")
    p.add_argument("--step-ms", type=float, default=1000, help="step time (1000: 1 step/s)")
    p.add_argument("--duration-s", type=float, default=120, help="length of the job (120)")
    p.add_argument("--straggler-rank", type=int, default=-1,
                   help="rank made 1.3x slower from the middle step (default: ranks / 3)")
    p.add_argument("--summary-every-s", type=float, default=0.5,
                   help="summary API request interval during the run (0.5)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--clickhouse", action="store_true",
                   help="store into a clickhouse-server started for the run, not SQLite")
    p.add_argument("--commit-gap-ms", type=int,
                   help="the collector's --commit-gap-ms (default: its engine's)")
    args = p.parse_args()

    bins = binaries(args.build, "scale_bench")
    if min(args.ranks, args.sims, args.agents) <= 0 or args.step_ms <= 0 or args.duration_s <= 0:
        sys.exit("scale_bench: --ranks, --sims, --agents, --step-ms and --duration-s must be > 0")
    if args.sims > args.ranks:
        sys.exit("scale_bench: --sims must not exceed --ranks")
    steps = int(args.duration_s * 1000 / args.step_ms)
    if steps < 40:
        sys.exit("scale_bench: fewer than 40 steps: detection needs a baseline (longer "
                 "--duration-s or shorter --step-ms)")
    straggler = args.straggler_rank if args.straggler_rank >= 0 else args.ranks // 3
    if straggler >= args.ranks:
        sys.exit("scale_bench: --straggler-rank must be below --ranks")
    onset = steps // 2
    job = "scale-%d" % args.ranks

    work = tempfile.mkdtemp(prefix="trainscope-scale-")
    ingest, http_port = free_port(), free_port()
    run = Processes(work)

    ok = False
    server = None
    try:
        extra = ["--auto-capture-interval", "0"]
        if args.commit_gap_ms is not None:
            extra += ["--commit-gap-ms", str(args.commit_gap_ms)]
        if args.clickhouse:
            chdir = os.path.join(work, "clickhouse")
            os.makedirs(chdir)
            server, ch_port = store_bench.start_server(
                shutil.which("clickhouse-server") or "/usr/sbin/clickhouse-server", chdir)
            extra += ["--store", "clickhouse://127.0.0.1:%d/scale" % ch_port]
        collector = run.start_collector(bins["collector"], ingest, http_port, extra)
        endpoints = [run.start_agent(bins["agent"], ingest, "node%d" % a)
                     for a in range(args.agents)]
        t0 = time.time()
        sims = []
        first = 0
        for s in range(args.sims):
            n = args.ranks // args.sims + (1 if s < args.ranks % args.sims else 0)
            argv = [bins["simtrain"], "--job", job, "--ranks", str(n), "--first-rank", str(first),
                    "--world-size", str(args.ranks), "--steps", str(steps),
                    "--step-ms", str(args.step_ms), "--seed", str(s + 1), "--quiet",
                    "--flush-timeout-ms", "60000"]
            if first <= straggler < first + n:
                argv += ["--inject", "straggler:rank=%d,from=%d,factor=1.3" % (straggler, onset)]
            for ep in endpoints:
                argv += ["--agent", ep]
            sims.append(run.start("sim%d" % s, argv))
            first += n

        latencies = []  # summary API, ms
        rss = []
        stop = threading.Event()

        def ask():
            while not stop.is_set():
                t = time.time()
                try:
                    status, _ = http_get(http_port, "/api/v1/jobs/%s/summary" % job)
                    if status == 200:
                        latencies.append((time.time() - t) * 1000)
                except OSError:
                    pass
                stop.wait(args.summary_every_s)

        asker = threading.Thread(target=ask)
        asker.start()
        while any(s.poll() is None for s in sims):
            rss.append(rss_kib(collector.pid))
            print("scale_bench: %5.0f s  collector RSS %s KiB  rows %s" %
                  (time.time() - t0, rss[-1], stored_rows(http_port, job)), flush=True)
            time.sleep(10)
        stop.set()
        asker.join()
        want = args.ranks * steps
        deadline = time.time() + 120
        rows = stored_rows(http_port, job)
        while rows != want and time.time() < deadline:
            time.sleep(1)
            rows = stored_rows(http_port, job)
        time.sleep(5)  # late anomalies
        _, body = http_get(http_port, "/api/v1/jobs/%s/anomalies" % job)
        anomalies = json.loads(body).get("anomalies", [])
        found = [a for a in anomalies if a.get("kind") == "straggler" and
                 straggler in a.get("ranks", [])]
        others = [a for a in anomalies if a not in found]
        print("scale_bench: %d ranks (%d simtrain, %d agents) x %d steps at %.0f ms in %.0f s"
              % (args.ranks, args.sims, args.agents, steps, args.step_ms, time.time() - t0))
        print("scale_bench: simtrain exits %s" % [s.returncode for s in sims])
        print("scale_bench: rows stored %s of %d (%s)"
              % (rows, want, "ok" if rows == want else "MISSING"))
        if found:
            a = found[0]
            print("scale_bench: straggler rank %d found: onset step %s, detected at step %s "
                  "(latency %s steps after the injected step %d)"
                  % (straggler, a.get("onset_step"), a.get("detected_step"),
                     a.get("detected_step", 0) - onset, onset))
        else:
            print("scale_bench: straggler rank %d NOT found" % straggler)
        print("scale_bench: other anomalies: %d %s" % (len(others), sorted(
            set((a.get("kind"), tuple(a.get("ranks", [])[:4])) for a in others))[:5]))
        print("scale_bench: summary API during the run: %d requests, p50 %.1f ms, p99 %.1f ms, "
              "max %.1f ms" % (len(latencies), percentile(latencies, 0.5),
                               percentile(latencies, 0.99), max(latencies or [float("nan")])))
        print("scale_bench: collector RSS peak %s KiB (VmHWM), at the end %s KiB"
              % (peak_rss_kib(collector.pid), rss_kib(collector.pid)))
        if server is not None:
            def ch(sql):
                req = urllib.request.Request("http://127.0.0.1:%d/" % ch_port, sql.encode())
                with urllib.request.urlopen(req, timeout=30) as r:
                    return r.read().decode().strip()
            print("scale_bench: ClickHouse: %s parts of steps made by inserts (level 0; merged ones stay 8 min) in %.0f s, %s active parts"
                  % (ch("SELECT count() FROM system.parts WHERE database = 'scale' AND "
                        "table = 'steps' AND level = 0"), time.time() - t0,
                     ch("SELECT count() FROM system.parts WHERE database = 'scale' AND "
                        "table = 'steps' AND active")))
        ok = rows == want and bool(found)
    finally:
        run.stop(timeout=30)
        if server is not None:
            server.terminate()
            server.wait()
        if args.keep or not ok:
            print("scale_bench: logs and data in %s" % work)
        else:
            subprocess.call(["rm", "-rf", work])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
