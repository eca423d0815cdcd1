"""The trainscope Python package over libtrainscope_probe.so, in fold-only mode (no agent):
steps, ranges, collectives and ops reach the probe and fold into steps; the PyTorch DDP hook
records the gradient all_reduce. Run with /usr/bin/python3 (Debian's torch 1.13); exits 77
when torch is missing for the torch part.

Env: TRAINSCOPE_PROBE_LIB (the .so), PYTHONPATH=<repo>/agent/probe/python.
"""

import os
import sys
import tempfile
import time

SKIP = 77


def check(cond, what):
    if not cond:
        print("FAILED: " + what, file=sys.stderr)
        sys.exit(1)
    print("ok: " + what)


def main():
    import trainscope

    trainscope.init(connect_agent=1, job="py-test", rank=0, world_size=1)
    try:
        trainscope.init(connect_agent=1)
        check(False, "a second init is refused")
    except trainscope.ProbeError as e:
        check("already exists" in str(e), "a second init is refused")
    try:
        trainscope.range("x", kind="gpu").__enter__()
        check(False, "a bad range kind is refused")
    except ValueError as e:
        check("range kind" in str(e), "a bad range kind is refused")

    t = trainscope.now_ns()
    check(abs(t - time.time_ns()) < 1e9, "now_ns is epoch time")
    check(trainscope.intern("fwd") == trainscope.intern("fwd") != 0, "names intern once")

    # Five auto-numbered steps: data range, compute range, collective, an explicit op.
    for _ in range(5):
        with trainscope.step() as n:
            with trainscope.range("load", "data"):
                time.sleep(0.001)
            with trainscope.range("forward", "compute"):
                time.sleep(0.001)
            with trainscope.collective("all_reduce", 1 << 20, group="dp"):
                time.sleep(0.001)
            start = trainscope.now_ns()
            trainscope.op("matmul", start, 1000)
    check(n == 4, "steps are numbered 0..4")
    with trainscope.step(100):
        now = trainscope.now_ns()
        trainscope.record_collective("all_gather", 4096, now, now + 500, group="tp")
        trainscope.record_link_transfer(1, 4096, now + 10, now + 300, group="tp")
    try:
        trainscope.record_link_transfer(-1, 4096, now, now + 300)
        check(False, "a negative peer is refused")
    except ValueError as e:
        check("peer" in str(e), "a negative peer is refused")
    check(trainscope.flush(5000), "flush folds every ended step")
    s = trainscope.stats()
    check(s["steps_folded"] == 6, "six steps folded (got %d)" % s["steps_folded"])
    # Per step: begin, end, 2 range push/pop pairs, collective begin/end, op = 9 records;
    # step 100: begin, end, a collective and a link transfer.
    check(s["records"] == 5 * 9 + 4, "records counted (got %d)" % s["records"])
    check(s["dropped"] == 0, "nothing dropped")
    check(s["unattributed"] == 0, "nothing unattributed")
    # Complete intervals: 4 per auto step; the collective and the link transfer of step 100.
    check(s["flight_steps"] == 6 and s["flight_bytes"] == (5 * 4 + 2) * 64,
          "flight recorder holds the steps (%d steps, %d bytes)"
          % (s["flight_steps"], s["flight_bytes"]))
    check(s["connected"] == 0 and s["reports_sent"] == 0, "fold-only mode sends nothing")

    try:
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        import trainscope.torch as tst
    except ImportError as e:
        print("torch part skipped: %s" % e)
        trainscope.shutdown()
        return SKIP

    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "pg"),
                                rank=0, world_size=1)
        net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                  torch.nn.Linear(64, 1))
        model = DDP(net)
        model.register_comm_hook(None, tst.allreduce_hook)
        tst.instrument_module(model)
        opt = tst.instrument_optimizer(torch.optim.SGD(model.parameters(), lr=0.01))
        before = trainscope.stats()
        steps = 4
        for _ in range(steps):
            with trainscope.step():
                x = torch.randn(8, 64)
                loss = model(x).pow(2).mean()
                tst.backward(loss)
                opt.step()
                opt.zero_grad()
        check(trainscope.flush(5000), "torch steps folded")
        after = trainscope.stats()
        new = after["records"] - before["records"]
        # Per step: begin + end, forward push/pop, backward push/pop, optimizer push/pop,
        # and at least one bucket's all_reduce.
        check(new >= steps * 9, "DDP hook and ranges recorded (%d records)" % new)
        check(after["steps_folded"] - before["steps_folded"] == steps, "torch steps counted")
        check(after["unattributed"] == before["unattributed"],
              "hook records fall inside their steps")
        dist.destroy_process_group()

    trainscope.shutdown()
    trainscope.shutdown()  # idempotent
    return 0


if __name__ == "__main__":
    sys.exit(main())
