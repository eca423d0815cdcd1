"""What trainscope's PyTorch operator recording costs a training loop, next to torch.profiler.

Run with Debian's interpreter (it has torch 1.13), after building the probe and the operator
library (`ninja -C build-x agent/probe/libtrainscope_probe.so agent/torch/libtrainscope_torch.so`):

    /usr/bin/python3 tools/bench/torch_overhead.py [--build build-x] [--reps 5] [--steps 40]

One process, CPU, one thread (torch.set_num_threads(1)): a small MLP (4 Linear layers, ReLU,
cross-entropy, Adam) on random data. Every repetition runs each mode once, interleaved, on the
same model, in a shuffled order, so drift (thermal, other load) hits all modes alike:

  base      nothing recorded
  always    trainscope as it runs all the time: steps, compute ranges, and every ATen operator
            through libtrainscope_torch.so (trainscope.torch.enable_ops)
  capture   as `always`, with a trace capture recording the measured steps in full detail: a
            capture command from a fake agent (a child process speaking the wire protocol over
            libzmq through ctypes), the probe writing the gzip Chrome trace as steps fold
  profiler  torch.profiler.profile(activities=[CPU]) around the same steps, prof.step() per
            step; its post-processing at exit is reported apart, not in the step times

Prints per mode the median and mean step time, the overhead against `base` (per step and per
operator), and the ratio of trainscope's overhead to the profiler's. Flags: --help.
"""
import argparse
import ctypes
import gc
import os
import random
import select
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# --------------------------------------------------------------------------------------------
# Just enough protobuf for the fake agent: trainscope.wire.Envelope and the messages it uses
# (schema/trainscope.proto field numbers).

SCHEMA_VERSION = 1
ENV_SCHEMA, ENV_RANK_HELLO, ENV_BATCH, ENV_ACK, ENV_COMMAND, ENV_STATUS = 1, 10, 17, 18, 19, 20


def _varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _field_int(num, v):
    return _varint(num << 3) + _varint(v)


def _field_bytes(num, b):
    if isinstance(b, str):
        b = b.encode()
    return _varint((num << 3) | 2) + _varint(len(b)) + b


def _fields(buf):
    """(number, value) pairs of one message: ints for varints, bytes for length-delimited."""
    i, n = 0, len(buf)
    while i < n:
        key, i = _read_varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _read_varint(buf, i)
        elif wt == 2:
            ln, i = _read_varint(buf, i)
            v, i = buf[i:i + ln], i + ln
        elif wt == 1:
            v, i = None, i + 8
        elif wt == 5:
            v, i = None, i + 4
        else:
            raise ValueError("unsupported wire type %d" % wt)
        yield num, v


def _read_varint(buf, i):
    v, shift = 0, 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return v, i
        shift += 7


def _envelope(field, body):
    return _field_int(ENV_SCHEMA, SCHEMA_VERSION) + _field_bytes(field, body)


def _capture_command(capture_id, job, rank, start_step, steps, history):
    cap = (_field_bytes(1, capture_id) + _field_int(2, start_step) + _field_int(3, steps) +
           _field_int(4, history))
    cmd = (_field_bytes(1, capture_id) + _field_bytes(2, job) + _field_int(3, rank) +
           _field_bytes(10, cap))
    return _envelope(ENV_COMMAND, cmd)


def _statuses(items):
    for item in items:
        for num, v in _fields(item):
            if num == ENV_STATUS:
                st = {n: x for n, x in _fields(v)}
                yield (st.get(1, b"").decode(), st.get(4, b"").decode(), st.get(5, b"").decode(),
                       st.get(6, b"").decode(), st.get(7, 0))


def fake_agent(endpoint):
    """The child process: a ROUTER on `endpoint` that acks the probe's batches, sends capture
    commands read from stdin ("capture ID JOB RANK START STEPS HISTORY"), prints the probe's
    command statuses to stdout ("status ID STATE BYTES DETAIL") and deletes uploaded files."""
    zmq = ctypes.CDLL("libzmq.so.5")
    zmq.zmq_ctx_new.restype = ctypes.c_void_p
    zmq.zmq_socket.restype = ctypes.c_void_p
    zmq.zmq_socket.argtypes = [ctypes.c_void_p, ctypes.c_int]
    zmq.zmq_bind.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    zmq.zmq_setsockopt.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    zmq.zmq_recv.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    zmq.zmq_send.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    zmq_router, zmq_rcvtimeo, zmq_linger, zmq_sndmore = 6, 27, 17, 2
    ctx = zmq.zmq_ctx_new()
    sock = zmq.zmq_socket(ctx, zmq_router)
    timeout = ctypes.c_int(20)
    zmq.zmq_setsockopt(sock, zmq_rcvtimeo, ctypes.byref(timeout), 4)
    zero = ctypes.c_int(0)
    zmq.zmq_setsockopt(sock, zmq_linger, ctypes.byref(zero), 4)
    if zmq.zmq_bind(sock, endpoint.encode()) != 0:
        print("error cannot bind " + endpoint, flush=True)
        return 1
    print("ready", flush=True)
    rid_buf = ctypes.create_string_buffer(256)
    frame_buf = ctypes.create_string_buffer(16 << 20)
    rid = None

    def send(data):
        zmq.zmq_send(sock, rid, len(rid), zmq_sndmore)
        zmq.zmq_send(sock, data, len(data), 0)

    while True:
        if select.select([sys.stdin], [], [], 0)[0]:
            line = sys.stdin.readline()
            if not line or line.strip() == "quit":
                return 0
            parts = line.split()
            if parts[0] == "capture" and rid is not None:
                cid, job, rank, start, steps, hist = parts[1:7]
                send(_capture_command(cid, job, int(rank), int(start), int(steps), int(hist)))
        n = zmq.zmq_recv(sock, rid_buf, 256, 0)
        if n < 0:
            continue
        rid = rid_buf.raw[:n]
        n = zmq.zmq_recv(sock, frame_buf, len(frame_buf), 0)
        if n < 0:
            continue
        frame = frame_buf.raw[:n]
        for num, v in _fields(frame):
            if num != ENV_BATCH:
                continue
            seq, items = 0, []
            for bn, bv in _fields(v):
                if bn == 1:
                    seq = bv
                elif bn == 2:
                    items.append(bv)
            for cid, state, detail, path, nbytes in _statuses(items):
                if state == "uploading" and path:
                    try:
                        os.unlink(path)
                        os.rmdir(os.path.dirname(path))
                    except OSError:
                        pass
                print("status %s %s %d %s" % (cid, state, nbytes, detail.replace("\n", " ")),
                      flush=True)
            send(_envelope(ENV_ACK, _field_int(1, seq)))


# --------------------------------------------------------------------------------------------
# The benchmark.

def find_lib(build, rel):
    if build:
        path = os.path.join(os.path.abspath(build), rel)
        return path if os.path.exists(path) else None
    import glob
    found = glob.glob(os.path.join(REPO, "build*", rel))
    return max(found, key=os.path.getmtime) if found else None


class Agent:
    """The fake agent child process and its stdout lines."""

    def __init__(self, endpoint):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--fake-agent",
                                      endpoint], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            raise SystemExit("torch_overhead: the fake agent did not start: " + line)

    def capture(self, cid, job, rank, start, steps, history=0):
        self.proc.stdin.write("capture %s %s %d %d %d %d\n" % (cid, job, rank, start, steps,
                                                               history))
        self.proc.stdin.flush()

    def wait_status(self, cid, states, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not select.select([self.proc.stdout], [], [], 0.1)[0]:
                continue
            parts = self.proc.stdout.readline().split(" ", 4)
            if len(parts) >= 4 and parts[0] == "status" and parts[1] == cid:
                if parts[2] in states or parts[2] == "failed":
                    return parts[2], int(parts[3]), parts[4].strip() if len(parts) > 4 else ""
        raise SystemExit("torch_overhead: capture %s: no %s status within %.0f s"
                         % (cid, "/".join(states), timeout))

    def close(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(5)
        except Exception:  # noqa: BLE001 - cleanup
            self.proc.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="",
                        help="meson build directory with the probe and operator libraries "
                             "(default: the newest build*/ under the repository)")
    parser.add_argument("--reps", type=int, default=5,
                        help="repetitions; each runs every mode once (default 5)")
    parser.add_argument("--steps", type=int, default=40,
                        help="measured steps per mode per repetition (default 40)")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed steps before each measured run (default 3)")
    parser.add_argument("--width", type=int, default=512,
                        help="hidden width of the MLP; smaller means cheaper ops, so the "
                             "per-operator cost weighs more (default 512)")
    parser.add_argument("--batch", type=int, default=32, help="batch size (default 32)")
    parser.add_argument("--clock", choices=("wall", "thread"), default="wall",
                        help="what a step's time is: wall (perf_counter; includes waiting for "
                             "the CPU) or thread (the training thread's CPU time; steady on a "
                             "loaded machine, but leaves out the probe's and the profiler's "
                             "other threads) (default wall)")
    parser.add_argument("--fake-agent", metavar="ENDPOINT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fake_agent:
        return fake_agent(args.fake_agent)
    for name in ("reps", "steps", "width", "batch"):
        if getattr(args, name) <= 0:
            parser.error("--%s must be positive" % name)

    probe_lib = find_lib(args.build, "agent/probe/libtrainscope_probe.so")
    torch_lib = find_lib(args.build, "agent/torch/libtrainscope_torch.so")
    if probe_lib is None or torch_lib is None:
        raise SystemExit("torch_overhead: build the probe and operator libraries first (see "
                         "--help); --build names the build directory")
    tmp = tempfile.mkdtemp(prefix="ts-torch-bench-")
    os.environ["TRAINSCOPE_PROBE_LIB"] = probe_lib
    os.environ["TRAINSCOPE_TORCH_LIB"] = torch_lib
    os.environ["TRAINSCOPE_CAPTURE_DIR"] = os.path.join(tmp, "captures")
    sys.path.insert(0, os.path.join(REPO, "agent", "probe", "python"))

    import torch
    import torch.nn as nn
    import trainscope
    import trainscope.torch as tst

    endpoint = "ipc://" + os.path.join(tmp, "agent.sock")
    agent = Agent(endpoint)
    job = "torch-overhead-bench"
    trainscope.init(agent_endpoint=endpoint, job=job, rank=0, world_size=1)

    torch.manual_seed(0)
    torch.set_num_threads(1)
    w = args.width
    model = nn.Sequential(nn.Linear(256, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(),
                          nn.Linear(w, w), nn.ReLU(), nn.Linear(w, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(args.batch, 256)
    y = torch.randint(0, 10, (args.batch,))

    def plain_step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    def traced_step():
        with trainscope.step():
            with trainscope.range("forward", "compute"):
                loss = loss_fn(model(x), y)
            with trainscope.range("backward", "compute"):
                opt.zero_grad()
                loss.backward()
            with trainscope.range("optimizer", "compute"):
                opt.step()

    clock = time.thread_time if args.clock == "thread" else time.perf_counter

    def timed(step_fn, n, after=None):
        out = []
        for _ in range(n):
            t0 = clock()
            step_fn()
            out.append(clock() - t0)
            if after is not None:
                after()
        return out

    times = {m: [] for m in ("base", "always", "capture", "profiler")}
    rep_medians = {m: [] for m in times}  # per repetition: overheads are paired within one
    ops_per_step = []
    capture_bytes = []
    profiler_close = []
    next_step = [0]

    def run_traced(n):
        start = next_step[0]
        next_step[0] += n
        before = tst.ops_recorded()
        out = timed(traced_step, n)
        ops_per_step.append((tst.ops_recorded() - before) / n)
        return start, out

    from torch.profiler import ProfilerActivity, profile

    def run_base(rep):
        timed(plain_step, args.warmup)
        times["base"] += timed(plain_step, args.steps)

    def run_always(rep):
        if not tst.enable_ops():
            raise SystemExit("torch_overhead: the operator library did not load")
        for _ in range(args.warmup):
            run_traced(1)
        times["always"] += run_traced(args.steps)[1]
        tst.disable_ops()

    def run_capture(rep):
        # The command names the first measured step; the run waits for "recording" first.
        tst.enable_ops()
        for _ in range(args.warmup):
            run_traced(1)
        cid = "bench-%d" % rep
        start = next_step[0] + 1
        agent.capture(cid, job, 0, start, args.steps, 0)
        state, _, detail = agent.wait_status(cid, ("recording",))
        if state != "recording":
            raise SystemExit("torch_overhead: capture refused: " + detail)
        run_traced(1)  # the step before the start step
        times["capture"] += run_traced(args.steps)[1]
        run_traced(1)  # lets the probe fold the last captured step
        state, nbytes, detail = agent.wait_status(cid, ("uploading",))
        if state != "uploading":
            raise SystemExit("torch_overhead: capture failed: " + detail)
        capture_bytes.append(nbytes)
        tst.disable_ops()

    def run_profiler(rep):
        prof = profile(activities=[ProfilerActivity.CPU])
        prof.__enter__()
        timed(plain_step, args.warmup, prof.step)
        times["profiler"] += timed(plain_step, args.steps, prof.step)
        t0 = time.perf_counter()
        prof.__exit__(None, None, None)
        profiler_close.append(time.perf_counter() - t0)

    # Every repetition runs the modes in a new order (seeded), so no mode always follows the
    # profiler's heavy exit or always runs first.
    modes = [run_base, run_always, run_capture, run_profiler]
    order_rng = random.Random(1)
    for rep in range(args.reps):
        order_rng.shuffle(modes)
        for run in modes:
            gc.collect()
            run(rep)
        for m in times:
            rep_medians[m].append(statistics.median(times[m][-args.steps:]))
        print("rep %d/%d: base %.3f  always %.3f  capture %.3f  profiler %.3f ms (this rep's medians)"
              % (rep + 1, args.reps, *(1e3 * rep_medians[m][-1] for m in times)),
              file=sys.stderr, flush=True)

    trainscope.shutdown()
    agent.close()
    ops = statistics.mean(ops_per_step)
    base = statistics.median(times["base"])
    print("torch %s, %d thread, MLP width %d, batch %d, %d reps x %d steps per mode, %.0f "
          "operators per step (trainscope count), %s clock"
          % (torch.__version__, torch.get_num_threads(), w, args.batch, args.reps, args.steps, ops,
             args.clock))
    # Overhead: the median over repetitions of (mode median - base median) of that repetition,
    # so slow drift of the machine cancels out.
    print("%-9s %10s %10s %10s %12s" % ("mode", "median ms", "mean ms", "overhead", "ns per op"))
    over = {}
    for m, ts in times.items():
        med = statistics.median(ts)
        over[m] = statistics.median(r - b for r, b in zip(rep_medians[m], rep_medians["base"]))
        print("%-9s %10.3f %10.3f %9.1f%% %12s" % (
            m, 1e3 * med, 1e3 * statistics.mean(ts), 100.0 * over[m] / base,
            "-" if m == "base" else "%.0f" % (1e9 * over[m] / ops)))
    print("capture files: %.0f KiB per %d steps; profiler exit (event post-processing): %.0f ms"
          % (statistics.mean(capture_bytes) / 1024, args.steps,
             1e3 * statistics.median(profiler_close)))
    if over["profiler"] > 0:
        print("trainscope/profiler overhead ratio: always-on %.2f, capture %.2f"
              % (over["always"] / over["profiler"], over["capture"] / over["profiler"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
