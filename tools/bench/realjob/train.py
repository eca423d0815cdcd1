"""A real PyTorch training job for trainscope's real-job evaluation (tools/bench/realjob/), as a
user writes one: no trainscope in it. Run it under `trainscope run`, one process per rank,
with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (gloo, CPU).

Model shapes (--model): mlp, cnn (a small conv net on 3x32x32 images), transformer (a small
encoder over token sequences). DDP over every rank, SGD, a DataLoader with a
DistributedSampler and --workers worker processes. Options a real loop has: --accum K
(gradient accumulation: K micro-batches per optimizer step, DDP's no_sync on the first K-1),
--val-every N (a validation pass of --val-batches batches under no_grad every N steps),
--ckpt-every N (rank 0 writes a checkpoint every N steps).

Faults (--fault, repeatable; each KIND:rank=R,from=S[,to=E][,ms=M]), injected into this
process when its RANK is R, over optimizer steps S..E (E open when left out):
  busy        a busy loop of M ms on the training thread in every step (a slower rank)
  data        M ms of sleep in the input pipeline (collate_fn) per batch: a slow data loader
  comm        the gradient all-reduce slowed by M ms per bucket (a DDP comm hook whose future
              completes M ms late: a slow link or NIC on this rank)
  stop        the process stopped (SIGSTOP) for M ms at step S, then continued
  hang        the training thread blocks forever at step S (a deadlock)
A faulted rank prints "fault KIND rank R from S" when the fault starts, with the wall time.
At the end every rank prints "rank R: done, N steps".
"""
import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


def parse_fault(text):
    kind, _, rest = text.partition(":")
    if kind not in ("busy", "data", "comm", "stop", "hang"):
        raise argparse.ArgumentTypeError("unknown fault kind %r" % kind)
    fields = {"kind": kind, "rank": 0, "from": 0, "to": None, "ms": 0.0}
    for part in filter(None, rest.split(",")):
        key, _, value = part.partition("=")
        if key not in ("rank", "from", "to", "ms"):
            raise argparse.ArgumentTypeError("unknown fault field %r in %r" % (key, text))
        fields[key] = float(value) if key == "ms" else int(value)
    return fields


class Samples(Dataset):
    """Deterministic random samples; each item carries its index, so collate_fn knows the step."""

    def __init__(self, n, shape, classes, tokens):
        self.n, self.shape, self.classes, self.tokens = n, shape, classes, tokens

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        if self.tokens:
            x = torch.randint(0, self.tokens, self.shape, generator=g)
        else:
            x = torch.randn(self.shape, generator=g)
        return x, int(torch.randint(0, self.classes, (1,), generator=g)), i


class Collate(object):
    """Stacks a batch; sleeps for a "data" fault when the batch's step is in its range."""

    def __init__(self, faults, per_step):
        self.faults, self.per_step = faults, per_step

    def __call__(self, items):
        step = min(i for _, _, i in items) // self.per_step
        for f in self.faults:
            if f["kind"] == "data" and active(f, step):
                time.sleep(f["ms"] / 1000.0)
        xs = torch.stack([x for x, _, _ in items])
        ys = torch.tensor([y for _, y, _ in items])
        return xs, ys


def active(fault, step):
    return step >= fault["from"] and (fault["to"] is None or step <= fault["to"])


class Transformer(nn.Module):
    def __init__(self, tokens, width, classes):
        super().__init__()
        self.embed = nn.Embedding(tokens, width)
        layer = nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=2 * width,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x)).mean(dim=1))


def build(model, width):
    """(model, sample shape, classes, token count or 0)."""
    if model == "mlp":
        return (nn.Sequential(nn.Linear(256, width), nn.ReLU(), nn.Linear(width, width),
                              nn.ReLU(), nn.Linear(width, 10)), (256,), 10, 0)
    if model == "cnn":
        return (nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(32 * 8 * 8, width), nn.ReLU(),
                              nn.Linear(width, 10)), (3, 32, 32), 10, 0)
    return Transformer(1000, 64, 10), (32,), 10, 1000


def busy(ms):
    end = time.perf_counter() + ms / 1000.0
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


def slow_comm_hook(ms, step_of):
    """A DDP comm hook: the default all-reduce, its future completing `ms` late while the
    fault is active (a sleep in the completion callback, on the backend's thread)."""
    def hook(state, bucket):
        tensor = bucket.buffer()
        tensor.div_(dist.get_world_size())
        fut = dist.all_reduce(tensor, async_op=True).get_future()
        delay = ms / 1000.0 if step_of() else 0.0

        def done(f):
            if delay:
                time.sleep(delay)
            return f.value()[0]
        return fut.then(done)
    return hook


def say(text):
    print("%.6f %s" % (time.time(), text), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=("mlp", "cnn", "transformer"), default="mlp")
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps (default 200)")
    parser.add_argument("--batch", type=int, default=32, help="micro-batch per rank")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    parser.add_argument("--val-every", type=int, default=0)
    parser.add_argument("--val-batches", type=int, default=4)
    parser.add_argument("--ckpt-every", type=int, default=0)
    parser.add_argument("--step-sleep-ms", type=float, default=0.0,
                        help="sleep after each step (a lighter load on a shared machine)")
    parser.add_argument("--fault", type=parse_fault, action="append", default=[])
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    faults = [f for f in args.fault if f["rank"] == rank]

    model, shape, classes, tokens = build(args.model, args.width)
    per_step = args.batch * world * args.accum  # samples of one optimizer step, all ranks
    samples = (args.steps + 1) * per_step
    data = Samples(samples, shape, classes, tokens)
    collate = Collate(faults, per_step)
    loader = DataLoader(data, batch_size=args.batch, collate_fn=collate,
                        sampler=DistributedSampler(data, shuffle=False),
                        num_workers=args.workers, persistent_workers=args.workers > 0)
    val = DataLoader(Samples(args.val_batches * args.batch, shape, classes, tokens),
                     batch_size=args.batch, collate_fn=Collate([], 1 << 30))
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)
    step = 0
    comm = [f for f in faults if f["kind"] == "comm"]
    if comm:
        ddp.register_comm_hook(None, slow_comm_hook(comm[0]["ms"],
                                                    lambda: active(comm[0], step)))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    ckpt_dir = tempfile.mkdtemp(prefix="realjob-ckpt-")
    started = set()

    micro = 0
    for x, y in loader:
        for f in faults:
            if active(f, step) and id(f) not in started:
                started.add(id(f))
                say("fault %s rank %d from %d" % (f["kind"], rank, step))
                if f["kind"] == "stop":  # the continue comes from a process outside
                    subprocess.Popen(["sh", "-c", "kill -STOP %d; sleep %.3f; kill -CONT %d"
                                      % (os.getpid(), f["ms"] / 1000.0, os.getpid())])
                    time.sleep(0.5)
                if f["kind"] == "hang":
                    threading.Event().wait()
        last = micro % args.accum == args.accum - 1
        if last:
            loss = loss_fn(ddp(x), y) / args.accum
            loss.backward()
        else:
            with ddp.no_sync():
                loss = loss_fn(ddp(x), y) / args.accum
                loss.backward()
        micro += 1
        if not last:
            continue
        for f in faults:
            if f["kind"] == "busy" and active(f, step):
                busy(f["ms"])
        opt.step()
        opt.zero_grad()
        step += 1
        if args.val_every and step % args.val_every == 0:
            with torch.no_grad():
                for vx, vy in val:
                    loss_fn(ddp(vx), vy)
        if args.ckpt_every and step % args.ckpt_every == 0 and rank == 0:
            torch.save(model.state_dict(), os.path.join(ckpt_dir, "ckpt.pt"))
        if args.step_sleep_ms:
            time.sleep(args.step_sleep_ms / 1000.0)
        if step >= args.steps:
            break
    dist.barrier()
    dist.destroy_process_group()
    say("rank %d: done, %d steps" % (rank, step))
    return 0


if __name__ == "__main__":
    sys.exit(main())
