"""tests/e2e/fsdp_train_plain.py adapted for the device check (no trainscope in it): the same
MLP, each Linear an FSDP unit inside a root FSDP, on a random dataset through a DataLoader
with a DistributedSampler, SGD; launched with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT.

Differences from the e2e script: --device cuda puts the ranks on cuda:(LOCAL_RANK %
device_count) (backend nccl by default), --device cpu passes device_id=cpu explicitly (torch
>= 2.6 FSDP otherwise takes the accelerator as its compute device, or refuses to run without
one); the digest of the shards is taken without numpy; each iteration is timed after a
synchronize; --times-out FILE as in ddp_gpu_train.py. Exits 77 when CUDA is asked for and
not available.
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
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import devices  # this folder's: the script runs from it


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--backend", default="")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--times-out", default="")
    args = ap.parse_args()
    dev, sync = devices.pick(args.device)
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    backend = args.backend or ("nccl" if args.device == "cuda" else "gloo")
    dist.init_process_group(backend)
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.manual_seed(1234)
    torch.set_num_threads(1)

    samples = args.steps * args.batch * dist.get_world_size()
    data = TensorDataset(torch.randn(samples, 128), torch.randint(0, 10, (samples,)))
    loader = DataLoader(data, batch_size=args.batch, sampler=DistributedSampler(data))
    wrap = lambda m: FSDP(m, device_id=dev)  # noqa: E731
    model = nn.Sequential(wrap(nn.Linear(128, args.width)), nn.ReLU(),
                          wrap(nn.Linear(args.width, args.width)), nn.ReLU(),
                          wrap(nn.Linear(args.width, 10)))
    model = wrap(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()

    steps = 0
    times = []
    sync()
    prev = time.perf_counter()
    for x, y in loader:
        x, y = x.to(dev), y.to(dev)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        steps += 1
        sync()
        now = time.perf_counter()
        times.append(now - prev)
        prev = now

    digest = hashlib.sha256()
    for p in model.parameters():
        t = p.detach().to("cpu").contiguous()
        digest.update(ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()))
    dist.barrier()
    dist.destroy_process_group()
    kept = sorted(times[args.warmup:]) or sorted(times)
    print(f"rank {rank}: step_ms median {1e3 * kept[len(kept) // 2]:.3f} (synchronized)",
          flush=True)
    done = (f"rank {rank}: done, {steps} steps, last loss {loss.item():.6f}, "
            f"shard {digest.hexdigest()[:16]}")
    print(done, flush=True)
    if args.times_out:
        with open(args.times_out.replace("{rank}", str(rank)), "w") as f:
            json.dump({"rank": rank, "world": world,
                       "steps": steps, "warmup": args.warmup, "step_s": times, "done": done,
                       "device": str(dev), "backend": backend}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
