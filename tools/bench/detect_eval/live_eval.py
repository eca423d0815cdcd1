#!/usr/bin/env python3
"""Live detection evaluation (issue 10): simulated jobs through the real processes.

Starts one trainscope-collector (default detection settings), two trainscope-agents (node0,
node1) and a busy-loop process beside them, then runs a sample of trainscope-simtrain jobs
through them: every fault kind (8 to 1,024 ranks), healthy jobs with checkpoints, jobs that end
cleanly, jobs whose ranks exit one by one (one process per rank, or --end-stagger-ms), while
node1's agent delivers in bursts (stopped with SIGSTOP for --burst-stop-s every --burst-every-s).
After the last job ended it waits --settle-s (late false alarms at a job's end show then), reads
every job's anomalies from GET /api/v1/jobs/{job}/anomalies and writes them with the simulator's
truth (--truth files) to --out. `detect_eval --live-results OUT` scores them the way it scores
its in-process runs (precision, recall, right ranks, latency, false alarms in healthy jobs).

Run it niced on a shared machine: `nice -n 10 tools/bench/detect_eval/live_eval.py`. It stops
starting jobs once --budget-s is near and kills what is left at the budget; every child process
is killed on exit. Talks to 127.0.0.1 only.
"""

import argparse
import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

CHILDREN = []  # every process started, killed on exit


def kill_children():
    for p in CHILDREN:
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGCONT)  # a stopped agent must see the SIGKILL too
                p.kill()
            except ProcessLookupError:
                pass
    for p in CHILDREN:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def start(argv, log_path):
    with open(log_path, "wb") as log:
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    CHILDREN.append(p)
    return p


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(port, target, timeout=10.0):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{target}", timeout=timeout) as r:
        return json.loads(r.read())


def wait_for(pred, timeout_s, interval_s=0.2):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(interval_s)
    return pred()


CKPT = "spike:every=75,factor=2.5"  # a checkpoint every 75 steps, 2.5x a step (healthy)


def sample(quick):
    """The scenarios: dicts with name, group (healthy or the fault's truth kind), label,
    magnitude, ranks, steps, inject list, fast, procs (processes the job is split over, one per
    rank when equal to ranks), stagger_ms (ranks end one by one), step_ms."""
    out = []

    def job(name, group, label, magnitude, ranks, steps, inject, fast=False, procs=1,
            stagger_ms=0.0, step_ms=100.0, seed=1, parallel="", edge=0.0, schedule=""):
        out.append(dict(name=name, group=group, label=label, magnitude=magnitude, ranks=ranks,
                        steps=steps, inject=inject + [CKPT], fast=fast, procs=procs,
                        stagger_ms=stagger_ms, step_ms=step_ms, seed=seed, parallel=parallel,
                        edge=edge, schedule=schedule))

    # Parallel layouts (issue 11): the jobs declare their tp/pp/dp groups; a slow stage, a slow
    # worker (tp group), from step 0 and later, and healthy pipelines (one unbalanced by design).
    job("par stage x1.3 @0 tp2pp2dp2", "stage_imbalance", "par_stage", 1.3, 8, 250,
        ["stage:pp=1,factor=1.3"], seed=31, parallel="tp=2,pp=2,dp=2")
    job("par stage x1.5 @100 tp2pp4dp2", "stage_imbalance", "par_stage", 1.5, 16, 250,
        ["stage:pp=2,factor=1.5,from=100"], seed=32, parallel="tp=2,pp=4,dp=2")
    job("par worker x1.5 @100 tp2pp2dp2", "straggler", "par_worker", 1.5, 8, 250,
        ["worker:dp=1,pp=0,factor=1.5,from=100"], seed=33, parallel="tp=2,pp=2,dp=2")
    job("par worker x1.2 @0 tp2pp4dp4", "straggler", "par_worker", 1.2, 32, 250,
        ["worker:dp=2,pp=3,factor=1.2"], seed=34, parallel="tp=2,pp=4,dp=4")
    # Work moving between replicas (seqlen), a slow pipeline link (p2p) and one slow GPU of a
    # tensor-parallel group (gpu), from step 0 and later.
    job("par seqlen cv0.15 @100 tp2pp2dp4", "workload_imbalance", "par_seqlen", 1.15, 16, 250,
        ["seqlen:cv=0.15,from=100"], seed=37, parallel="tp=2,pp=2,dp=4")
    job("par seqlen cv0.1 @0 tp2pp2dp2", "workload_imbalance", "par_seqlen", 1.1, 8, 250,
        ["seqlen:cv=0.1"], seed=38, parallel="tp=2,pp=2,dp=2")
    job("par p2p x1.5 @100 tp2pp2dp2", "slow_comm", "par_p2p", 1.5, 8, 250,
        ["p2p:from=1,to=5,factor=1.5,from=100"], seed=39, parallel="tp=2,pp=2,dp=2")
    job("par p2p x1.3 @0 tp2pp4dp2", "slow_comm", "par_p2p", 1.3, 16, 250,
        ["p2p:from=6,to=2,factor=1.3"], seed=40, parallel="tp=2,pp=4,dp=2")
    job("par gpu x1.3 @100 tp4pp2dp2", "straggler", "par_gpu", 1.3, 16, 250,
        ["gpu:rank=13,factor=1.3,from=100"], seed=41, parallel="tp=4,pp=2,dp=2")
    job("par gpu x1.2 @0 tp2pp2dp2", "straggler", "par_gpu", 1.2, 8, 250,
        ["gpu:rank=2,factor=1.2"], seed=42, parallel="tp=2,pp=2,dp=2")
    # Without data parallelism (dp 1) each stage is one worker: one slow GPU is named against
    # its tensor-parallel peers, not reported as a slow stage (label par_gpu_dp1, own rows).
    job("par gpu dp1 x1.2 @100 tp8pp2dp1", "straggler", "par_gpu_dp1", 1.2, 16, 250,
        ["gpu:rank=11,factor=1.2,from=100"], seed=61, parallel="tp=8,pp=2,dp=1")
    job("par gpu dp1 x1.5 @0 tp4pp4dp1 zb-v", "straggler", "par_gpu_dp1", 1.5, 16, 250,
        ["gpu:rank=6,factor=1.5"], seed=62, parallel="tp=4,pp=4,dp=1", schedule="zb-v")
    job("par stage dp1 x1.3 @100 tp8pp2dp1", "stage_imbalance", "par_stage_dp1", 1.3, 16, 250,
        ["stage:pp=0,factor=1.3,from=100"], seed=63, parallel="tp=8,pp=2,dp=1")
    job("par healthy dp1 tp4pp4dp1 edge 5%", "healthy", "healthy", 1.0, 16, 300, [], seed=64,
        parallel="tp=4,pp=4,dp=1", edge=0.05)
    # MoE: experts at one expert-parallel index get more tokens (experts skew), from step 0
    # and later, and a healthy MoE job with context parallelism too.
    job("par moe experts x1.5 @100 tp2pp2dp4ep2", "expert_imbalance", "par_experts", 1.5, 16,
        250, ["experts:skew=1.5,ep=1,from=100"], seed=43, parallel="tp=2,pp=2,dp=4,ep=2")
    job("par moe experts x1.3 @0 tp1pp2dp8ep4", "expert_imbalance", "par_experts", 1.3, 16,
        250, ["experts:skew=1.3,ep=2"], seed=44, parallel="tp=1,pp=2,dp=8,ep=4")
    job("par moe experts x1.2 @0 tp1pp1dp8ep8", "expert_imbalance", "par_experts", 1.2, 8,
        250, ["experts:skew=1.2,ep=5"], seed=45, parallel="tp=1,pp=1,dp=8,ep=8")
    job("par moe healthy tp2pp2dp2cp2ep2", "healthy", "healthy", 1.0, 16, 300, [], seed=46,
        parallel="tp=2,pp=2,dp=2,cp=2,ep=2")
    job("par healthy tp2pp4dp2 edge 5%", "healthy", "healthy", 1.0, 16, 400, [], seed=35,
        parallel="tp=2,pp=4,dp=2", edge=0.05)
    job("par healthy tp4pp2dp8", "healthy", "healthy", 1.0, 64, 300, [], seed=36,
        parallel="tp=4,pp=2,dp=8")

    # Pipeline schedules other than 1F1B (--schedule, 8 microbatches on pp 4): each fault kind
    # under one of interleaved:2, zb-v, dualpipe-v, and healthy jobs under each.
    tp2pp4dp2 = "tp=2,pp=4,dp=2"
    job("par sched stage x1.5 @100 tp2pp4dp2 zb-v", "stage_imbalance", "par_sched_stage", 1.5,
        16, 250, ["stage:pp=1,factor=1.5,from=100"], seed=51, parallel=tp2pp4dp2,
        schedule="zb-v")
    job("par sched worker x1.3 @0 tp2pp4dp2 interleaved:2", "straggler", "par_sched_worker",
        1.3, 16, 250, ["worker:dp=1,pp=2,factor=1.3"], seed=52, parallel=tp2pp4dp2,
        schedule="interleaved:2")
    job("par sched gpu x1.3 @100 tp2pp4dp2 dualpipe-v", "straggler", "par_sched_gpu", 1.3, 16,
        250, ["gpu:rank=9,factor=1.3,from=100"], seed=53, parallel=tp2pp4dp2,
        schedule="dualpipe-v")
    job("par sched p2p x1.5 @0 tp2pp4dp2 interleaved:2", "slow_comm", "par_sched_p2p", 1.5, 16,
        250, ["p2p:from=4,to=8,factor=1.5"], seed=54, parallel=tp2pp4dp2,
        schedule="interleaved:2")
    job("par sched seqlen cv0.15 @100 tp2pp4dp2 dualpipe-v", "workload_imbalance",
        "par_sched_seqlen", 1.15, 16, 250, ["seqlen:cv=0.15,from=100"], seed=55,
        parallel=tp2pp4dp2, schedule="dualpipe-v")
    for i, sched in enumerate(["interleaved:2", "zb-v", "dualpipe-v"]):
        job("par sched healthy tp2pp4dp2 edge 5% " + sched, "healthy", "healthy", 1.0, 16, 300,
            [], seed=56 + i, parallel=tp2pp4dp2, edge=0.05, schedule=sched)

    # Faults >= 10 %, 5 % noise, checkpoints, paced (100 ms steps) unless --fast.
    job("straggler x1.2 @60 16r", "straggler", "straggler", 1.2, 16, 250,
        ["straggler:rank=5,from=60,factor=1.2"])
    job("straggler x1.5 @0 8r", "straggler", "straggler", 1.5, 8, 200,
        ["straggler:rank=3,from=0,factor=1.5"], seed=2)
    job("step_shift x1.3 @100 16r", "step_shift", "step_shift", 1.3, 16, 250,
        ["shift:from=100,factor=1.3"], seed=3)
    job("slow_comm x2 @100 8r", "slow_comm", "slow_comm_all", 2.0, 8, 250,
        ["comm:from=100,factor=2"], seed=4)
    job("slow_comm link x3 @100 8r", "slow_comm", "slow_comm_link", 3.0, 8, 250,
        ["comm:rank=5,from=100,factor=3"], seed=5)
    job("op_all_ranks x1.5 @100 16r", "op_regression", "op_all_ranks", 1.5, 16, 250,
        ["op:name=aten::matmul,from=100,factor=1.5"], seed=6)
    job("op_one_rank x1.5 @100 16r", "op_regression", "op_one_rank", 1.5, 16, 250,
        ["op:name=aten::matmul,rank=9,from=100,factor=1.5"], seed=7)
    job("hang rank 3 @80 8r", "hang", "hang", 0.0, 8, 200, ["hang:rank=3,at=80"], seed=8)
    job("hang rank 6 @3 16r", "hang", "hang", 0.0, 16, 200, ["hang:rank=6,at=3"], seed=9)
    # Healthy: clean ends, ranks exiting one by one, one process per rank.
    job("healthy 8r stagger 500ms", "healthy", "healthy", 1.0, 8, 400, [], stagger_ms=500.0,
        seed=10)
    job("healthy 32r one process per rank", "healthy", "healthy", 1.0, 32, 300, [], procs=32,
        seed=11)
    job("healthy 64r", "healthy", "healthy", 1.0, 64, 300, [], procs=4, stagger_ms=100.0,
        seed=12)
    if quick:
        return out
    # Large jobs, --fast (timestamps ahead of the wall clock, delivery as fast as it goes).
    job("straggler x1.2 @150 512r fast", "straggler", "straggler", 1.2, 512, 260,
        ["straggler:rank=77,from=150,factor=1.2"], fast=True, seed=13)
    job("step_shift x1.3 @100 1024r fast", "step_shift", "step_shift", 1.3, 1024, 150,
        ["shift:from=100,factor=1.3"], fast=True, seed=14)
    job("healthy 512r fast", "healthy", "healthy", 1.0, 512, 250, [], fast=True, seed=15)
    job("healthy 1024r fast", "healthy", "healthy", 1.0, 1024, 150, [], fast=True, seed=16)
    # More healthy job-steps: small jobs run fast.
    for i in range(8):
        job(f"healthy 8r fast #{i}", "healthy", "healthy", 1.0, 8, 1500, [], fast=True,
            seed=20 + i)
    return out


def healthy_soak(job_steps, steps_per_job):
    """Healthy --fast jobs of 8 to 64 ranks, flat and parallel layouts (one unbalanced by
    design), ends staggered or one process per rank, until they hold `job_steps` steps in all:
    the false-alarm rate of the live product over many steps."""
    shapes = [  # ranks, procs, stagger_ms, parallel, edge
        (8, 1, 200.0, "", 0.0),
        (16, 2, 0.0, "", 0.0),
        (8, 8, 0.0, "", 0.0),
        (16, 1, 100.0, "tp=2,pp=4,dp=2", 0.05),
        (32, 4, 0.0, "", 0.0),
        (8, 2, 0.0, "tp=2,pp=2,dp=2", 0.0),
        (64, 4, 100.0, "", 0.0),
    ]
    out, total, i = [], 0, 0
    while total < job_steps:
        ranks, procs, stagger, parallel, edge = shapes[i % len(shapes)]
        steps = min(steps_per_job, job_steps - total)
        name = f"soak healthy {ranks}r {parallel or 'flat'} #{i}"
        out.append(dict(name=name, group="healthy", label="healthy", magnitude=1.0, ranks=ranks,
                        steps=steps, inject=[CKPT], fast=True, procs=procs, stagger_ms=stagger,
                        step_ms=100.0, seed=100 + i, parallel=parallel, edge=edge))
        total += steps
        i += 1
    return out


def sim_argv(a, sc, job, first, ranks, truth, agents):
    argv = [a.simtrain, "--job", job, "--ranks", str(ranks), "--first-rank", str(first),
            "--world-size", str(sc["ranks"]), "--steps", str(sc["steps"]), "--seed",
            str(sc["seed"]), "--noise", "0.05", "--step-ms", str(sc["step_ms"]),
            "--hang-hold-s", "0", "--flush-timeout-ms", "60000"]
    for ep in agents:
        argv += ["--agent", ep]
    for spec in sc["inject"]:
        argv += ["--inject", spec]
    if truth:
        argv += ["--truth", truth]
    if sc["fast"]:
        argv.append("--fast")
    if sc["stagger_ms"] > 0:
        argv += ["--end-stagger-ms", str(sc["stagger_ms"])]
    if sc["parallel"]:
        argv += ["--parallel", sc["parallel"]]
    if sc["edge"] > 0:
        argv += ["--edge-load", str(sc["edge"])]
    if sc["schedule"]:
        argv += ["--schedule", sc["schedule"]]
    return argv


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="meson build directory")
    ap.add_argument("--out", default="live_eval.json", help="results (input of detect_eval "
                    "--live-results)")
    ap.add_argument("--budget-s", type=float, default=1080.0,
                    help="wall-time bound of the whole run; no job starts after 80%% of it")
    ap.add_argument("--parallel", type=int, default=3, help="jobs running at once")
    ap.add_argument("--settle-s", type=float, default=25.0,
                    help="wait after the last job ends before reading the anomalies (2.5x the "
                    "collector's 10 s hang floor)")
    ap.add_argument("--hang-wait-s", type=float, default=40.0,
                    help="how long a hung job is kept alive after its hang")
    ap.add_argument("--burst-every-s", type=float, default=6.0,
                    help="node1's agent is stopped for --burst-stop-s this often (0: never)")
    ap.add_argument("--burst-stop-s", type=float, default=2.0)
    ap.add_argument("--no-busy-loop", action="store_true",
                    help="no busy-loop process beside the collector")
    ap.add_argument("--quick", action="store_true", help="the small jobs only (24 jobs)")
    ap.add_argument("--only", default="", help="only the jobs whose name contains this text")
    ap.add_argument("--healthy-job-steps", type=int, default=0,
                    help="instead of the sample: healthy --fast jobs (8-64 ranks, flat and "
                    "parallel) holding this many steps in all, for the false-alarm rate")
    ap.add_argument("--steps-per-job", type=int, default=5000,
                    help="steps of each job of --healthy-job-steps")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    a.collector = os.path.join(a.build, "collector/trainscope-collector")
    a.agent = os.path.join(a.build, "agent/trainscope-agent")
    a.simtrain = os.path.join(a.build, "tools/simtrain/trainscope-simtrain")
    for b in (a.collector, a.agent, a.simtrain):
        if not os.access(b, os.X_OK):
            sys.exit(f"live_eval: {b} is not built (ninja -C {a.build} {os.path.relpath(b, a.build)})")

    atexit.register(kill_children)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t0 = time.monotonic()
    work = tempfile.mkdtemp(prefix="ts-live-eval-")
    print(f"live_eval: work dir {work}", flush=True)
    http, ingest = free_port(), free_port()
    ready = os.path.join(work, "collector.ready")
    collector = start([a.collector, "--data-dir", os.path.join(work, "data"), "--ingest",
                       f"tcp://127.0.0.1:{ingest}", "--http", f"127.0.0.1:{http}",
                       "--ready-file", ready], os.path.join(work, "collector.log"))
    if not wait_for(lambda: os.path.exists(ready) or collector.poll() is not None, 30):
        sys.exit("live_eval: the collector did not start (see collector.log)")
    if collector.poll() is not None:
        sys.exit("live_eval: the collector exited: " + open(os.path.join(work, "collector.log")).read())
    agents, endpoints = [], []
    for i in range(2):
        ep = f"ipc://{work}/node{i}.sock"
        agents.append(start([a.agent, "--node", f"node{i}", "--endpoint", ep, "--collector",
                             f"tcp://127.0.0.1:{ingest}", "--spool-dir",
                             os.path.join(work, f"spool{i}")], os.path.join(work, f"agent{i}.log")))
        endpoints.append(ep)
        if not wait_for(lambda: os.path.exists(ep[len("ipc://"):]), 20):
            sys.exit(f"live_eval: agent node{i} did not start")
    if not a.no_busy_loop:
        start([sys.executable, "-c", "while True: pass"], os.path.join(work, "busy.log"))

    chosen = (healthy_soak(a.healthy_job_steps, a.steps_per_job) if a.healthy_job_steps > 0
              else sample(a.quick))
    scenarios = [sc for sc in chosen if a.only in sc["name"]]
    pending = list(scenarios)
    running = []  # (scenario, job, [procs], started, hang_seen_at)
    done = []
    next_burst = time.monotonic() + a.burst_every_s
    stopped_until = 0.0
    while pending or running:
        now = time.monotonic()
        if a.burst_every_s > 0:  # bursty delivery from node1's agent
            if stopped_until == 0.0 and now >= next_burst:
                os.kill(agents[1].pid, signal.SIGSTOP)
                stopped_until = now + a.burst_stop_s
            elif stopped_until != 0.0 and now >= stopped_until:
                os.kill(agents[1].pid, signal.SIGCONT)
                stopped_until = 0.0
                next_burst = now + a.burst_every_s
        elapsed = now - t0
        if elapsed > a.budget_s - a.settle_s - 10:
            print("live_eval: budget reached; stopping the jobs still running", flush=True)
            for r in running:
                for p in r["procs"]:
                    p.kill()
                r["cut"] = True
                done.append(r)
            running = []
            pending_left = [s["name"] for s in pending]
            pending = []
            if pending_left:
                print("live_eval: not run: " + ", ".join(pending_left), flush=True)
            break
        # A large --fast job runs alone.
        big = any(r["sc"]["ranks"] >= 512 for r in running)
        if pending and len(running) < a.parallel and not big and elapsed < 0.8 * a.budget_s:
            sc = pending[0]
            if sc["ranks"] < 512 or not running:
                pending.pop(0)
                idx = len(done) + len(running)
                job = f"live-{idx:02d}-" + sc["label"]
                truth = os.path.join(work, job + ".truth.json")
                procs, per = [], sc["ranks"] // sc["procs"]
                for k in range(sc["procs"]):
                    procs.append(start(sim_argv(a, sc, job, k * per, per,
                                                truth if k == 0 else "", endpoints),
                                       os.path.join(work, f"{job}.{k}.log")))
                running.append(dict(sc=sc, job=job, procs=procs, started=now, hang_at=None,
                                    truth=truth, cut=False))
                print(f"live_eval: [{elapsed:6.0f} s] start {job}: {sc['name']}", flush=True)
        still = []
        for r in running:
            if r["sc"]["group"] == "hang":
                if r["hang_at"] is None:
                    log = open(os.path.join(work, r["job"] + ".0.log")).read()
                    if "hangs (injected)" in log:
                        r["hang_at"] = now
                        for line in log.splitlines():
                            if "hangs (injected) at wall time" in line:
                                r["hang_wall_ns"] = int(line.split("wall time ")[1].split()[0])
                if r["hang_at"] is not None and now - r["hang_at"] > a.hang_wait_s:
                    for p in r["procs"]:
                        p.kill()
                    done.append(r)
                    continue
            if all(p.poll() is not None for p in r["procs"]):
                done.append(r)
                print(f"live_eval: [{now - t0:6.0f} s] ended {r['job']} "
                      f"({now - r['started']:.0f} s)", flush=True)
                continue
            still.append(r)
        running = still
        time.sleep(0.2)
    if stopped_until != 0.0:
        os.kill(agents[1].pid, signal.SIGCONT)

    print(f"live_eval: settling {a.settle_s:.0f} s for late anomalies", flush=True)
    time.sleep(a.settle_s)
    results = []
    for r in done:
        sc = r["sc"]
        try:
            truth = json.load(open(r["truth"]))
        except (OSError, ValueError):
            truth = []
        for t in truth:
            if t["kind"] == "hang":
                t["start_ns"] = r.get("hang_wall_ns", 0)
        got = http_json(http, "/api/v1/jobs/" + urllib.parse.quote(r["job"], safe="") +
                        "/anomalies")["anomalies"]
        results.append(dict(name=sc["name"], job=r["job"], group=sc["group"], label=sc["label"],
                            magnitude=sc["magnitude"], ranks=sc["ranks"], steps=sc["steps"],
                            noise=0.05, step_ms=sc["step_ms"], cut=r["cut"], truth=truth,
                            parallel=sc["parallel"], edge_load=sc["edge"], anomalies=got))
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=10).read()
    detect_lines = [l for l in metrics.decode().splitlines()
                    if l.startswith("trainscope_detect_")]
    with open(a.out, "w") as f:
        json.dump(dict(wall_s=time.monotonic() - t0, busy_loop=not a.no_busy_loop,
                       burst_every_s=a.burst_every_s, burst_stop_s=a.burst_stop_s,
                       collector_metrics=detect_lines, scenarios=results), f, indent=1)
    print(f"live_eval: {len(results)} jobs in {time.monotonic() - t0:.0f} s -> {a.out}",
          flush=True)
    kill_children()
    if not a.keep:
        subprocess.run(["rm", "-rf", work], check=False)


if __name__ == "__main__":
    main()
