"""The trainscope Python package over libtrainscope_probe.so, in fold-only mode (no agent):
steps, ranges, collectives and ops reach the probe and fold into steps; the PyTorch DDP hook
records the gradient all_reduce. Run under pytest (tests/pytest_run.py) with /usr/bin/python3
(Debian's torch 1.13); the torch case skips when torch is missing.

The cases share one probe and run in file order: the counts of the fold-only cases are exact,
the torch case measures what it adds.

Env: TRAINSCOPE_PROBE_LIB (the .so), PYTHONPATH=<repo>/agent/probe/python.
"""

import os
import tempfile
import time

import pytest


@pytest.fixture(scope="module")
def trainscope():
    import trainscope
    trainscope.init(connect_agent=1, job="py-test", rank=0, world_size=1)
    yield trainscope
    trainscope.shutdown()
    trainscope.shutdown()  # idempotent


def test_a_second_init_is_refused(trainscope):
    with pytest.raises(trainscope.ProbeError, match="already exists"):
        trainscope.init(connect_agent=1)


def test_a_bad_range_kind_is_refused(trainscope):
    with pytest.raises(ValueError, match="range kind"):
        trainscope.range("x", kind="gpu").__enter__()


def test_now_ns_is_epoch_time_and_names_intern_once(trainscope):
    assert abs(trainscope.now_ns() - time.time_ns()) < 1e9, "now_ns is epoch time"
    assert trainscope.intern("fwd") == trainscope.intern("fwd") != 0, "names intern once"


def test_steps_ranges_collectives_and_ops_fold(trainscope):
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
    assert n == 4, "steps are numbered 0..4"
    with trainscope.step(100):
        now = trainscope.now_ns()
        trainscope.record_collective("all_gather", 4096, now, now + 500, group="tp")
        trainscope.record_link_transfer(1, 4096, now + 10, now + 300, group="tp")
    with pytest.raises(ValueError, match="peer"):
        trainscope.record_link_transfer(-1, 4096, now, now + 300)
    assert trainscope.flush(5000), "flush folds every ended step"
    s = trainscope.stats()
    assert s["steps_folded"] == 6, "six steps folded (got %d)" % s["steps_folded"]
    # Per step: begin, end, 2 range push/pop pairs, collective begin/end, op = 9 records;
    # step 100: begin, end, a collective and a link transfer.
    assert s["records"] == 5 * 9 + 4, "records counted (got %d)" % s["records"]
    assert s["dropped"] == 0, "nothing dropped"
    assert s["unattributed"] == 0, "nothing unattributed"
    # Complete intervals: 4 per auto step; the collective and the link transfer of step 100.
    assert s["flight_steps"] == 6 and s["flight_bytes"] == (5 * 4 + 2) * 64, (
        "flight recorder holds the steps (%d steps, %d bytes)"
        % (s["flight_steps"], s["flight_bytes"]))
    assert s["connected"] == 0 and s["reports_sent"] == 0, "fold-only mode sends nothing"


def test_the_ddp_hook_records_the_gradient_all_reduce(trainscope):
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import trainscope.torch as tst

    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "pg"),
                                rank=0, world_size=1)
        try:
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
            assert trainscope.flush(5000), "torch steps folded"
            after = trainscope.stats()
        finally:
            dist.destroy_process_group()
    new = after["records"] - before["records"]
    # Per step: begin + end, forward push/pop, backward push/pop, optimizer push/pop,
    # and at least one bucket's all_reduce.
    assert new >= steps * 9, "DDP hook and ranges recorded (%d records)" % new
    assert after["steps_folded"] - before["steps_folded"] == steps, "torch steps counted"
    assert after["unattributed"] == before["unattributed"], "hook records fall inside their steps"
