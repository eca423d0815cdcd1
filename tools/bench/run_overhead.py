"""What `trainscope run` costs an unmodified training job: the same 2-rank DDP script
(tests/e2e/ddp_train_plain.py, CPU, gloo, no trainscope in it) side by side with and without
`trainscope run`, reporting to a real agent and collector.

    /usr/bin/python3 tools/bench/run_overhead.py [--build build] [--reps 4] [--steps 40]
        [--width 512] [--modes plain,run,run-no-ops]

Modes (every repetition runs each once, in a shuffled order, so drift and the load of other
processes hit all alike):
  plain       /usr/bin/python3 ddp_train_plain.py
  run         trainscope run -- the same: steps, phases, data wait, every torch.distributed
              call, DDP's buckets through the automatic comm hook, ATen operators
  run-no-ops  trainscope run --no-ops: as `run` without the ATen operator callback

Each rank prints the median wall time between optimizer steps after the first 3 (the
script's own clock, so start-up and the probe's start are not counted) and the median CPU time
its whole process (all threads: the probe's, gloo's) spent per step, which other processes'
load disturbs far less than wall time; a run's figure is the mean of its two ranks. Printed:
per mode and measure the median over repetitions and the overhead against `plain`, with the
spread of `plain` itself (its max/min over repetitions) as the noise to compare with.
"""
import argparse
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCRIPT = os.path.join(REPO, "tests", "e2e", "ddp_train_plain.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def run_job(mode, args, cli, endpoint, tmp, rep):
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        env.pop("PYTHONPATH", None)
        cmd = ["/usr/bin/python3", SCRIPT, "--steps", str(args.steps), "--width",
               str(args.width), "--report-step-times"]
        if mode != "plain":
            flags = ["--job", "bench-%s-%d" % (mode, rep), "--agent", endpoint]
            if mode == "run-no-ops":
                flags.append("--no-ops")
            cmd = [cli, "run"] + flags + ["--"] + cmd
        log = open(os.path.join(tmp, "%s-%d-rank%d.log" % (mode, rep, rank)), "w+")
        procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    times = []
    for p, log in procs:
        rc = p.wait(timeout=900)
        log.seek(0)
        text = log.read()
        m = re.search(r"step_ms median ([0-9.]+) mean [0-9.]+ cpu_ms median ([0-9.]+)", text)
        if rc != 0 or not m:
            sys.exit("%s failed (rc %d):\n%s" % (mode, rc, text[-3000:]))
        times.append((float(m.group(1)), float(m.group(2))))
    return tuple(sum(t[i] for t in times) / len(times) for i in (0, 1))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(REPO, "build"),
                        help="the meson build directory (default: build)")
    parser.add_argument("--reps", type=int, default=4, help="repetitions (default 4)")
    parser.add_argument("--steps", type=int, default=40, help="steps per run (default 40)")
    parser.add_argument("--width", type=int, default=512, help="MLP width (default 512)")
    parser.add_argument("--modes", default="plain,run,run-no-ops",
                        help="comma-separated modes (default plain,run,run-no-ops)")
    args = parser.parse_args()
    modes = args.modes.split(",")
    for m in modes:
        if m not in ("plain", "run", "run-no-ops"):
            parser.error("--modes: unknown mode %r" % m)
    cli = os.path.join(args.build, "tools", "cli", "trainscope")
    collector = os.path.join(args.build, "collector", "trainscope-collector")
    agent = os.path.join(args.build, "agent", "trainscope-agent")
    for b in (cli, collector, agent):
        if not os.access(b, os.X_OK):
            sys.exit("not built: %s (ninja -C %s tools/cli/trainscope collector/trainscope-"
                     "collector agent/trainscope-agent)" % (b, args.build))

    with tempfile.TemporaryDirectory(prefix="ts-run-bench-") as tmp:
        ingest = "tcp://127.0.0.1:%d" % free_port()
        endpoint = "ipc://" + os.path.join(tmp, "agent.sock")
        daemons = [
            subprocess.Popen([collector, "--data-dir", os.path.join(tmp, "data"), "--ingest",
                              ingest, "--http", "127.0.0.1:%d" % free_port()],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
            subprocess.Popen([agent, "--collector", ingest, "--endpoint", endpoint, "--node",
                              "bench", "--spool-dir", os.path.join(tmp, "spool")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        ]
        try:
            if not wait_for(lambda: os.path.exists(endpoint[len("ipc://"):]), 15):
                sys.exit("the agent did not start")
            results = {m: [] for m in modes}
            for rep in range(args.reps):
                order = list(modes)
                random.shuffle(order)
                for m in order:
                    results[m].append(run_job(m, args, cli, endpoint, tmp, rep))
                print("rep %d: %s" % (rep, ", ".join(
                    "%s %.2f ms (cpu %.2f ms)" % ((m,) + results[m][-1]) for m in modes)),
                    flush=True)
        finally:
            for d in daemons:
                d.terminate()
            for d in daemons:
                d.wait(timeout=30)

    print("\nDDP MLP width %d, 2 ranks, %d steps, %d repetitions; medians per step:"
          % (args.width, args.steps, args.reps))
    for i, measure in enumerate(("wall", "process CPU")):
        print(" %s:" % measure)
        series = {m: [r[i] for r in results[m]] for m in modes}
        base = statistics.median(series["plain"]) if "plain" in series else None
        for m in modes:
            med = statistics.median(series[m])
            line = "  %-11s %9.2f ms" % (m, med)
            if base:
                line += "  %+6.2f %%" % (100.0 * (med - base) / base)
            print(line)
        if "plain" in series and len(series["plain"]) > 1:
            p = series["plain"]
            print("  noise: plain's own spread over repetitions %.1f %% (max/min)"
                  % (100.0 * (max(p) / min(p) - 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
