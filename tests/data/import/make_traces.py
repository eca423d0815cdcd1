#!/usr/bin/env python3
"""Writes synthetic traces in the shapes `trainscope import` reads, for its tests and benchmark.

Nothing here is copied from a real trace: the structure follows what the PyTorch profiler
(Kineto) writes, as published in its documentation and seen in public traces:
  - a top-level object with schemaVersion, deviceProperties, distributedInfo (backend, rank,
    world_size, pg_config), traceEvents, traceName, displayTimeUnit and, in newer versions,
    baseTimeNanoseconds (then every ts is relative to it);
  - "M" metadata events process_name / process_labels ("CPU", "GPU 0") / process_sort_index /
    thread_name;
  - host events on pid = the process id: "ProfilerStep#N" and DataLoader "user_annotation"s,
    "cpu_op"s (aten::...), "cuda_runtime" launches carrying a "correlation" id, NCCL host calls
    ("record_param_comms" cpu_op, "nccl:all_reduce" user_annotation);
  - device events on pid = the device index, tid = the stream: "kernel"s (compute kernels, and
    NCCL kernels named ncclDevKernel_... whose args carry "Collective name", "In msg nelems",
    "Out msg nelems", "dtype", "Process Group Name/Description/Ranks" -- or, in the legacy
    shape, ncclKernel_... kernels with no size arguments), "gpu_memcpy"s with bytes;
  - "s"/"f" flow events (cat "ac2g") linking launches to kernels, and a "Trace" span whose pid
    is a string.
Times are microseconds with three decimals (nanoseconds), as Kineto writes them.

Besides each trace it writes FILE.expected.json: per step the compute, communication, exposed
communication and data time computed here independently of trainscope's fold (unions of the
intervals this script generated), so the tests compare two implementations.

Usage:
  make_traces.py --fixtures DIR            the small fixtures committed under tests/data/import
  make_traces.py --job DIR [options]       one multi-rank GPU job (for the e2e test, the bench)
"""

import argparse
import gzip
import json
import os
import random
import re

EPOCH_US = 1_700_000_000_000_000  # a 2023 Unix time in microseconds


class Micros(int):
    """Nanoseconds to be written as Kineto's fractional microseconds, exactly ("...123.456"):
    a float would lose the nanoseconds of a Unix time. dumps() writes them."""


def us(ns):
    return Micros(ns)


def dumps(doc):
    def mark(o):
        if isinstance(o, Micros):
            return "@@us:%d@@" % int(o)
        if isinstance(o, dict):
            return {k: mark(v) for k, v in o.items()}
        if isinstance(o, list):
            return [mark(v) for v in o]
        return o

    def fmt(m):
        ns = int(m.group(1))
        sign = "-" if ns < 0 else ""
        ns = abs(ns)
        return "%s%d.%03d" % (sign, ns // 1000, ns % 1000)

    text = json.dumps(mark(doc), separators=(", ", ": "))
    return re.sub(r'"@@us:(-?\d+)@@"', fmt, text)


def union(intervals):
    total = 0
    end = None
    start = None
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if end is None or a > end:
            if end is not None:
                total += end - start
            start, end = a, b
        else:
            end = max(end, b)
    if end is not None:
        total += end - start
    return total


def merged(intervals):
    out = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def overlap(a, b):
    ma, mb = merged(a), merged(b)
    i = j = total = 0
    while i < len(ma) and j < len(mb):
        lo, hi = max(ma[i][0], mb[j][0]), min(ma[i][1], mb[j][1])
        if hi > lo:
            total += hi - lo
        if ma[i][1] < mb[j][1]:
            i += 1
        else:
            j += 1
    return total


def clip(iv, lo, hi):
    return (max(iv[0], lo), min(iv[1], hi))


class Rank:
    """Events of one rank, and the intervals behind its expected step figures."""

    def __init__(self, rank, world, device, legacy, base_ns, skew_ns, gpu=True):
        self.rank = rank
        self.gpu = gpu
        self.world = world
        self.device = device
        self.legacy = legacy
        self.base_ns = base_ns  # baseTimeNanoseconds (0: ts are Unix times)
        self.skew_ns = skew_ns  # this rank's clock minus the true time
        self.pid = 4000 + rank
        self.autograd_tid = self.pid + 11
        self.events = []
        self.corr = 1000
        self.ext = 1
        self.steps = []  # (step, begin_ns, end_ns) on the true clock
        self.compute = []
        self.comm = []
        self.data = []
        self.collectives = []  # (begin_ns, end_ns, bytes)

    def ts(self, ns):
        return us(ns + self.skew_ns - self.base_ns)

    def x(self, cat, name, pid, tid, t0, t1, args=None):
        e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
             "ts": self.ts(t0), "dur": us(t1 - t0)}
        if args is not None:
            e["args"] = args
        self.events.append(e)
        return e

    def launch(self, tid, t, kernel_name, k0, k1, stream, extra_args=None, cat="kernel"):
        """A host launch at t and its kernel on `stream` over [k0, k1]."""
        self.corr += 1
        self.ext += 1
        c = self.corr
        self.x("cuda_runtime", "cudaLaunchKernel", self.pid, tid, t, t + 4_000,
               {"External id": self.ext, "cbid": 211, "correlation": c})
        args = {"External id": self.ext, "queued": 0, "device": self.device, "context": 1,
                "stream": stream, "correlation": c, "registers per thread": 32,
                "shared memory": 0, "grid": [128, 1, 1], "block": [256, 1, 1]}
        if extra_args:
            args.update(extra_args)
        self.x(cat, kernel_name, self.device, stream, k0, k1, args)
        self.events.append({"ph": "s", "id": c, "pid": self.pid, "tid": tid,
                            "ts": self.ts(t), "cat": "ac2g", "name": "ac2g"})
        self.events.append({"ph": "f", "id": c, "pid": self.device, "tid": stream,
                            "ts": self.ts(k0), "cat": "ac2g", "name": "ac2g", "bp": "e"})

    def metadata(self):
        host, dev = self.pid, self.device
        if not self.gpu:
            return [{"name": "process_name", "ph": "M", "pid": host, "tid": 0,
                     "args": {"name": "python3"}}]
        meta = [
            ("process_name", host, 0, {"name": "python3"}),
            ("process_labels", host, 0, {"labels": "CPU"}),
            ("process_sort_index", host, 0, {"sort_index": host}),
            ("process_name", dev, 0, {"name": "python3"}),
            ("process_labels", dev, 0, {"labels": f"GPU {dev}"}),
            ("process_sort_index", dev, 0, {"sort_index": 16777216 + dev}),
            ("thread_name", host, host, {"name": "thread %d (python3)" % host}),
            ("thread_name", host, self.autograd_tid, {"name": "thread %d (autograd)" % self.autograd_tid}),
            ("thread_name", dev, 7, {"name": "stream 7"}),
            ("thread_name", dev, 20, {"name": "stream 20 (nccl)"}),
        ]
        return [{"name": n, "ph": "M", "ts": self.ts(self.steps[0][1]), "pid": p, "tid": t,
                 "args": a} for n, p, t, a in meta]

    def document(self):
        doc = {"schemaVersion": 1,
               "deviceProperties": [{"id": i, "name": "Synthetic GPU", "totalGlobalMem": 85899345920,
                                     "computeMajor": 9, "computeMinor": 0, "numSms": 132}
                                    for i in range(2)],
               "distributedInfo": {"backend": "nccl", "rank": self.rank, "world_size": self.world,
                                   "pg_count": 1,
                                   "pg_config": [{"pg_name": "0", "pg_desc": "default_pg",
                                                  "backend_config": "cuda:nccl",
                                                  "pg_size": self.world,
                                                  "ranks": list(range(self.world))}],
                                   "nccl_version": "2.21.5"},
               "record_shapes": 1,
               "traceEvents": self.metadata() + self.events,
               "traceName": "/tmp/synthetic_rank%d.pt.trace.json" % self.rank,
               "displayTimeUnit": "ms"}
        if self.base_ns:
            doc["baseTimeNanoseconds"] = self.base_ns
        # A span Kineto adds with a string pid and tid.
        first, last = self.steps[0][1], self.steps[-1][2]
        doc["traceEvents"].append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)",
                                   "pid": "Spans", "tid": "PyTorch Profiler",
                                   "ts": self.ts(first - 50_000), "dur": us(last - first + 100_000),
                                   "args": {"Op count": 0}})
        return doc

    def expected(self):
        out = []
        for step, b, e in self.steps:
            comp = [clip(iv, b, e) for iv in self.compute if b <= iv[0] < e]
            comm = [clip(iv, b, e) for iv in self.comm if b <= iv[0] < e]
            data = [clip(iv, b, e) for iv in self.data if b <= iv[0] < e]
            colls = [c for c in self.collectives if b <= c[0] < e]
            comm_ns = union(comm)
            out.append({"step": step, "duration_ns": e - b, "compute_ns": union(comp),
                        "comm_ns": comm_ns, "exposed_comm_ns": comm_ns - overlap(comp, comm),
                        "data_ns": union(data), "collectives": len(colls),
                        "collective_bytes": sum(c[2] for c in colls)})
        return {"rank": self.rank, "world_size": self.world, "skew_ns": self.skew_ns,
                "steps": out}


def gpu_job(ranks, steps, kernels, straggler=None, factor=1.3, onset=None, legacy=(), skew=None,
            base=None, first_step=10, seed=7):
    """A data-parallel GPU job: per step data loading, a forward and a backward pass of
    `kernels` kernels each, a gradient all-reduce overlapping the backward pass and a last
    bucket's all-reduce after it (exposed), and an optimizer kernel. `straggler` runs its
    compute `factor` times slower from step `onset`; the others then wait in the last
    all-reduce. `legacy` ranks write the older NCCL shape (no size arguments on the kernel)."""
    rng = random.Random(seed)
    skew = skew or {}
    base = base or {}
    out = [Rank(r, ranks, r % 8, r in legacy, base.get(r, 0), skew.get(r, 0)) for r in range(ranks)]
    t = EPOCH_US * 1000
    for i in range(steps):
        step = first_step + i
        slow = {r: (factor if straggler is not None and r == straggler and onset is not None
                    and step >= onset else 1.0) for r in range(ranks)}
        k_ns = [int(rng.uniform(180_000, 220_000)) for _ in range(kernels)]
        data_ns = int(rng.uniform(1_500_000, 2_500_000))
        bucket_bytes = 25 * 1024 * 1024
        last_bytes = 8 * 1024 * 1024
        # All ranks leave the last all-reduce together: when the slowest has sent its part.
        compute_of = {r: int(sum(k_ns) * 2 * slow[r]) for r in range(ranks)}
        slowest = max(compute_of.values())
        for rk in out:
            r = rk.rank
            b = t
            rk.x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                 rk.pid, rk.pid, b + 20_000, b + 20_000 + data_ns, {"External id": rk.ext})
            rk.data.append((b + 20_000, b + 20_000 + data_ns))
            # H2D copy of the batch.
            c0 = b + data_ns + 60_000
            rk.corr += 1
            rk.x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", rk.device, 7, c0, c0 + 90_000,
                 {"device": rk.device, "context": 1, "stream": 7, "correlation": rk.corr,
                  "bytes": 3_145_728, "memory bandwidth (GB/s)": 34.95})
            rk.compute.append((c0, c0 + 90_000))
            cursor = c0 + 100_000
            host = b + data_ns + 50_000
            # Forward on the main thread, backward on the autograd thread.
            for phase, tid in (("forward", rk.pid), ("backward", rk.autograd_tid)):
                op0 = host
                for j, kn in enumerate(k_ns):
                    dur = int(kn * slow[r])
                    name = ("aten::addmm" if phase == "forward" else "AddmmBackward0")
                    rk.x("cpu_op", name, rk.pid, tid, host, host + 25_000,
                         {"External id": rk.ext, "Sequence number": j})
                    kname = ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>"
                             "(cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4::Params)"
                             if j % 2 == 0 else
                             "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>")
                    k0 = max(cursor, host + 10_000)
                    rk.launch(tid, host + 5_000, kname, k0, k0 + dur, 7)
                    rk.compute.append((k0, k0 + dur))
                    cursor = k0 + dur + 3_000
                    host += 30_000
                if phase == "backward":
                    # The first bucket's all-reduce overlaps the second half of the backward.
                    ar0 = op0 + 40_000
                    k0 = ar0 + 20_000
                    rk.collectives.append(coll(rk, tid, ar0, k0, k0 + 1_200_000, bucket_bytes))
            # The last bucket: starts after the backward's kernels; ends when the slowest rank
            # could have sent its part.
            start = cursor + 5_000
            wait = slowest - compute_of[r]
            rk.collectives.append(coll(rk, rk.autograd_tid, host, start, start + 600_000 + wait,
                                       last_bytes))
            cursor = start + 600_000 + wait + 3_000
            o0 = cursor
            rk.x("cpu_op", "Optimizer.step#AdamW.step", rk.pid, rk.pid, host, host + 40_000)
            rk.launch(rk.pid, host + 5_000, "void at::native::multi_tensor_apply_kernel<AdamW>", o0,
                      o0 + 250_000, 7)
            rk.compute.append((o0, o0 + 250_000))
            e = o0 + 250_000 + 40_000
            rk.steps.append((step, b, e))
        t = max(rk.steps[-1][2] for rk in out)
        # Every rank's ProfilerStep ends at the same true time (the next one begins there).
        for rk in out:
            s, b, _ = rk.steps[-1]
            rk.steps[-1] = (s, b, t)
            rk.x("user_annotation", "ProfilerStep#%d" % s, rk.pid, rk.pid, b, t,
                 {"External id": rk.ext})
    return out


def coll(rk, tid, host_t, k0, k1, nbytes):
    """An all-reduce of `nbytes`: its host calls at host_t and its NCCL kernel on stream 20."""
    nelems = nbytes // 4
    ranks = "[" + ", ".join(str(i) for i in range(rk.world)) + "]"
    if rk.legacy:
        rk.x("user_annotation", "nccl:all_reduce", rk.pid, tid, host_t, host_t + 60_000,
             {"External id": rk.ext, "Input Dims": [[nelems]], "Input type": ["float"]})
        rk.x("cpu_op", "record_param_comms", rk.pid, tid, host_t + 1_000, host_t + 50_000,
             {"External id": rk.ext})
        rk.launch(tid, host_t + 10_000, "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
                  k0, k1, 20)
    else:
        params = {"Collective name": "allreduce", "In msg nelems": nelems,
                  "Out msg nelems": nelems, "Group size": rk.world, "dtype": "Float",
                  "In split size": "[]", "Out split size": "[]", "Process Group Name": "0",
                  "Process Group Description": "default_pg", "Process Group Ranks": ranks}
        rk.x("cpu_op", "record_param_comms", rk.pid, tid, host_t, host_t + 50_000,
             dict(params, **{"External id": rk.ext}))
        rk.x("user_annotation", "nccl:all_reduce", rk.pid, tid, host_t + 1_000, host_t + 45_000,
             {"External id": rk.ext})
        rk.launch(tid, host_t + 10_000,
                  "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                  k0, k1, 20, params)
    rk.comm.append((k0, k1))
    return (k0, k1, nbytes)


def write_json(path, doc, gz=False):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    text = dumps(doc)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def write_rank(dir_, name, rk, gz=False):
    write_json(os.path.join(dir_, name), rk.document(), gz)
    write_json(os.path.join(dir_, name.split(".json")[0] + ".expected.json"), rk.expected())


def cpu_job(ranks, steps):
    """A CPU-only (gloo) job: host operators are the compute, gloo:all_reduce the comm."""
    out = []
    for r in range(ranks):
        rk = Rank(r, ranks, 0, False, 0, 0, gpu=False)
        t = EPOCH_US * 1000 + 10_000_000_000
        for i in range(steps):
            b = t
            rk.x("user_annotation", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
                 rk.pid, rk.pid, b + 10_000, b + 1_010_000)
            rk.data.append((b + 10_000, b + 1_010_000))
            h = b + 1_100_000
            for j in range(6):
                rk.x("cpu_op", "aten::mm", rk.pid, rk.pid, h, h + 800_000 + 1000 * j,
                     {"External id": j})
                rk.compute.append((h, h + 800_000 + 1000 * j))
                # A nested operator: the union counts it once.
                rk.x("cpu_op", "aten::resolve_conj", rk.pid, rk.pid, h + 100, h + 900)
                rk.compute.append((h + 100, h + 900))
                h += 900_000
            c0 = h + 10_000
            rk.x("cpu_op", "c10d::allreduce_", rk.pid, rk.pid, c0 - 5_000, c0 + 2_005_000)
            rk.x("user_annotation", "gloo:all_reduce", rk.pid, rk.pid, c0, c0 + 2_000_000,
                 {"Input Dims": [[1048576]], "Input type": ["float"], "Concrete Inputs": [""]})
            rk.comm.append((c0, c0 + 2_000_000))
            rk.collectives.append((c0, c0 + 2_000_000, 4 * 1048576))
            e = c0 + 2_100_000
            rk.x("user_annotation", "ProfilerStep#%d" % i, rk.pid, rk.pid, b, e)
            rk.steps.append((i, b, e))
            t = e
        out.append(rk)
    return out


def generic_trace():
    """Another tool's trace: a bare event list (Chrome's JSON Array format), steps as events
    named train_step with a step argument, B/E pairs, times from 0 (a relative clock)."""
    ev = []
    t = 0
    exp = []
    for step in range(3):
        b = t
        ev.append({"name": "train_step", "ph": "B", "ts": b, "pid": 1, "tid": 1,
                   "args": {"step": step}})
        ev.append({"name": "load_batch", "ph": "X", "ts": b + 100, "dur": 400, "pid": 1, "tid": 1})
        ev.append({"name": "forward", "ph": "X", "ts": b + 600, "dur": 2000, "pid": 1, "tid": 1,
                   "args": {"step": step}})
        ev.append({"name": "forward", "ph": "X", "ts": b + 700, "dur": 500, "pid": 1, "tid": 2,
                   "args": {"step": step}})
        ev.append({"name": "backward", "ph": "B", "ts": b + 2700, "pid": 1, "tid": 1})
        ev.append({"name": "backward", "ph": "E", "ts": b + 5700, "pid": 1, "tid": 1})
        ev.append({"name": "all_reduce", "ph": "X", "ts": b + 5000, "dur": 1500, "pid": 1,
                   "tid": 3, "args": {"bytes": 1000000}})
        ev.append({"name": "train_step", "ph": "E", "ts": b + 7000, "pid": 1, "tid": 1})
        ev.append({"name": "marker", "ph": "i", "s": "t", "ts": b + 50, "pid": 1, "tid": 1})
        # compute: [600,2600] u [700,1200] u [2700,5700] = 5000; comm [5000,6500]: 1500,
        # overlapped by [5000,5700] -> exposed 800; data 400.
        exp.append({"step": step, "duration_ns": 7_000_000, "compute_ns": 5_000_000,
                    "comm_ns": 1_500_000, "exposed_comm_ns": 800_000, "data_ns": 400_000,
                    "collectives": 1, "collective_bytes": 1000000})
        t += 8000
    return ev, {"rank": 0, "world_size": 1, "skew_ns": 0, "steps": exp}


def fixtures(dir_):
    # Two GPU ranks, rank 1's clock 5 ms ahead; rank 1 gzip; baseTimeNanoseconds on rank 1.
    job = gpu_job(2, 4, kernels=6, skew={1: 5_000_000}, base={1: 1_699_990_000_000_000_000},
                  first_step=20)
    write_rank(os.path.join(dir_, "kineto_gpu"), "rank-0.json", job[0])
    write_rank(os.path.join(dir_, "kineto_gpu"), "rank-1.json.gz", job[1], gz=True)
    # Rank 3 of four in the legacy NCCL shape (sizes from the host calls); its rank only in its
    # file name.
    legacy = gpu_job(4, 3, kernels=4, legacy=(3,), first_step=100)
    doc = legacy[3].document()
    del doc["distributedInfo"]["rank"]
    write_json(os.path.join(dir_, "kineto_legacy", "trace_rank3.pt.trace.json.gz"), doc, gz=True)
    write_json(os.path.join(dir_, "kineto_legacy", "trace_rank3.expected.json"),
               legacy[3].expected())
    # CPU only, gloo.
    for rk in cpu_job(2, 3):
        write_rank(os.path.join(dir_, "kineto_cpu"), "rank-%d.json" % rk.rank, rk)
    # Another tool's trace.
    ev, exp = generic_trace()
    write_json(os.path.join(dir_, "chrome_generic", "worker.json"), ev)
    write_json(os.path.join(dir_, "chrome_generic", "worker.expected.json"), exp)
    # Broken files: cut short (gzip of 60% of a trace), and not JSON at all.
    os.makedirs(os.path.join(dir_, "bad"), exist_ok=True)
    text = dumps(job[0].document())
    with gzip.open(os.path.join(dir_, "bad", "truncated.json.gz"), "wt") as f:
        f.write(text[: len(text) * 6 // 10])
    with open(os.path.join(dir_, "bad", "not_a_trace.json"), "w") as f:
        f.write('{"traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "ts": 1, "dur": 2},\n'
                '  {"ph": "X", "name": "aten::mm", "ts": 1.5 "dur": 0.5}]}\n')


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--fixtures", help="write the committed fixtures into this directory")
    p.add_argument("--job", help="write one GPU job's rank files (rank-R.json[.gz]) here")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--kernels", type=int, default=8, help="kernels per forward/backward pass")
    p.add_argument("--straggler", type=int, help="this rank computes --factor slower from --onset")
    p.add_argument("--factor", type=float, default=1.3)
    p.add_argument("--onset", type=int, default=60)
    p.add_argument("--gzip", action="store_true")
    a = p.parse_args()
    if a.fixtures:
        fixtures(a.fixtures)
    if a.job:
        job = gpu_job(a.ranks, a.steps, a.kernels, straggler=a.straggler, factor=a.factor,
                      onset=a.onset, skew={r: 1_000_000 * r for r in range(a.ranks)})
        for rk in job:
            write_rank(a.job, "rank-%d.json%s" % (rk.rank, ".gz" if a.gzip else ""), rk, a.gzip)
    if not a.fixtures and not a.job:
        p.error("give --fixtures DIR or --job DIR")


if __name__ == "__main__":
    main()
