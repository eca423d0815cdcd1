"""trainscope.torch's parallel-layout helpers in a real 4-process torch.distributed job (gloo,
CPU, tp2 x pp2): watch_new_groups() declares every new_group that holds the rank, with the kind
kind_of() names and its ranks in order; trace_p2p() times send/recv, isend/irecv and
batch_isend_irecv with their peer, so each rank's probe folds exactly its transfers into the
step. Probes run fold-only (no agent). Run under pytest (tests/pytest_run.py); skips without
torch.distributed.

Env: TRAINSCOPE_PROBE_LIB (the .so), PYTHONPATH=<repo>/agent/probe/python.
"""

import os
import queue
import socket

import pytest

WORLD = 4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, world, port, out):
    import torch
    import torch.distributed as dist
    import trainscope
    import trainscope.torch as tst

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    trainscope.init(connect_agent=1, job="torch-topology", rank=rank, world_size=world)
    declared = []
    real_declare = trainscope.declare_group

    def spy(name, kind, ranks):
        declared.append((kind, list(ranks)))
        return real_declare(name, kind, ranks)

    trainscope.declare_group = spy
    # rank = pp * 2 + tp: tp groups {0,1} {2,3}, pp groups (stage order) {0,2} {1,3}.
    tp_groups = ([0, 1], [2, 3])
    tst.watch_new_groups(kind_of=lambda ranks: "tp" if ranks in tp_groups else "pp")
    for ranks in ([0, 1], [2, 3], [0, 2], [1, 3]):
        dist.new_group(ranks)  # every rank creates every group, as torch requires
    tst.trace_p2p()

    stage, peer = rank // 2, (rank + 2) % 4
    t = torch.ones(256)
    with trainscope.step(0):
        if stage == 0:
            dist.send(t, peer)
            dist.isend(t, peer).wait()
            for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, t, peer)]):
                w.wait()
        else:
            dist.recv(t, peer)
            dist.irecv(t, peer).wait()
            for w in dist.batch_isend_irecv([dist.P2POp(dist.irecv, t, peer)]):
                w.wait()
    ok = trainscope.flush(5000)
    s = trainscope.stats()
    out.put((rank, declared, ok, s["records"], s["unattributed"]))
    dist.barrier()
    trainscope.shutdown()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def job():
    """Runs the 4 ranks; returns {rank: (declared, flushed, records, unattributed)} and the
    workers' exit codes."""
    dist = pytest.importorskip("torch.distributed")
    mp = pytest.importorskip("torch.multiprocessing")
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, WORLD, port, out)) for r in range(WORLD)]
    for p in procs:
        p.start()
    results = {}
    try:
        for _ in range(WORLD):
            try:
                rank, declared, ok, records, unattributed = out.get(timeout=60)
            except queue.Empty:
                pytest.fail("a worker did not report (see its traceback above)")
            results[rank] = (declared, ok, records, unattributed)
    finally:
        for p in procs:
            p.join(30)
            if p.exitcode is None:
                p.kill()
                p.join()
    return results, [p.exitcode for p in procs]


@pytest.mark.parametrize("rank", range(WORLD))
def test_groups_declared_and_transfers_folded_on_rank(job, rank):
    declared, ok, records, unattributed = job[0][rank]
    tp = [0, 1] if rank < 2 else [2, 3]
    pp = [rank % 2, rank % 2 + 2]
    want = [("tp", tp), ("pp", pp)]
    assert declared == want, "rank %d declared %s, want %s" % (rank, declared, want)
    assert ok, "rank %d flushed" % rank
    # step begin + end + three transfers (send/recv, isend/irecv, batched)
    assert records == 5, "rank %d recorded %d records, want 5" % (rank, records)
    assert unattributed == 0, "rank %d: transfers inside the step" % rank


def test_every_worker_exits_cleanly(job):
    assert job[1] == [0] * WORLD, "worker exit codes %s" % job[1]
