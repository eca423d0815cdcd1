"""A plain DDP training script (no trainscope in it), for the device check: an MLP on batches
that live on the device, launched by the caller with RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT (LOCAL_RANK optional). Every rank uses cuda:(LOCAL_RANK % device_count), so two
ranks on one GPU share cuda:0 (backend gloo: NCCL refuses two ranks on one GPU).

Each iteration: zero_grad, forward, loss, backward (DDP's gradient all_reduce), opt.step(),
an all_reduce of the loss for logging (as training loops do), then torch.cuda.synchronize()
so the iteration's wall time is the device's. Prints the median/p10/p90 of those times
(after --warmup iterations), and at the end the last (rank-averaged) loss and a digest of the
trained parameters (the same with and without monitoring, or monitoring changed training).
--times-out FILE writes {"rank", "steps", "step_s": [...], "done": LINE} as JSON ("{rank}" in
FILE is replaced by the rank). --device cpu runs the same on CPU (a control without a GPU).
Exits 77 when --device cuda is asked for and CUDA is not available.
"""
import argparse
import ctypes
import hashlib
import json
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import devices  # this folder's: the script runs from it


def digest_of(params):
    h = hashlib.sha256()
    for p in params:
        t = p.detach().to("cpu").contiguous()
        h.update(ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()))  # no numpy needed
    return h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backend", default="gloo")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--batches", type=int, default=8, help="distinct batches, cycled")
    ap.add_argument("--times-out", default="")
    args = ap.parse_args()

    dev, sync = devices.pick(args.device)
    if args.device != "cuda":
        torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True, warn_only=True)

    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    world = dist.get_world_size()

    torch.manual_seed(1234)
    layers = []
    for _ in range(args.depth):
        layers += [nn.Linear(args.width, args.width), nn.GELU(), nn.LayerNorm(args.width)]
    model = nn.Sequential(*layers, nn.Linear(args.width, 10)).to(dev)
    ddp = nn.parallel.DistributedDataParallel(
        model, device_ids=[dev.index] if args.device == "cuda" else None, bucket_cap_mb=4)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    g = torch.Generator(device="cpu")
    g.manual_seed(4321 + rank)
    batches = [(torch.randn(args.batch, args.width, generator=g).to(dev),
                torch.randint(0, 10, (args.batch,), generator=g).to(dev))
               for _ in range(args.batches)]

    times = []
    sync()
    prev = time.perf_counter()
    logged = None
    for i in range(args.steps):
        x, y = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        logged = loss.detach().clone()
        dist.all_reduce(logged)
        sync()
        now = time.perf_counter()
        times.append(now - prev)
        prev = now

    last_loss = logged.item() / world
    digest = digest_of(model.parameters())
    dist.barrier()
    dist.destroy_process_group()
    kept = sorted(times[args.warmup:]) or sorted(times)
    q = lambda f: 1e3 * kept[min(len(kept) - 1, int(f * len(kept)))]  # noqa: E731
    print(f"rank {rank}: step_ms median {q(0.5):.3f} p10 {q(0.1):.3f} p90 {q(0.9):.3f} "
          f"(synchronized, {len(kept)} iterations after {args.warmup})", flush=True)
    done = (f"rank {rank}: done, {len(times)} steps, last loss {last_loss:.6f}, "
            f"params {digest}")
    print(done, flush=True)
    if args.times_out:
        path = args.times_out.replace("{rank}", str(rank))
        with open(path, "w") as f:
            json.dump({"rank": rank, "world": world, "steps": len(times), "warmup": args.warmup,
                       "step_s": times, "done": done, "device": str(dev),
                       "backend": args.backend}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
