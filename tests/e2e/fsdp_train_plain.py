"""A plain FSDP training script, as a user writes one: no trainscope in it. The e2e tests run it
under `trainscope run` (zero-code monitoring) and without, and compare what it prints.

CPU ranks over gloo, launched by the caller with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
an MLP whose Linear layers are each an FSDP unit (parameters sharded over the ranks, gathered
with all_gather for forward and backward, gradients reduce-scattered), on a random dataset
through a DataLoader with a DistributedSampler, SGD. At the end it prints the last loss and a
digest of this rank's parameter shards (the same with and without monitoring, or monitoring
changed the training).
Flags: --steps N (default 20), --step-sleep-ms MS (default 0), --batch N (default 32),
--width N (default 256).
"""
import argparse
import hashlib
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--step-sleep-ms", type=float, default=0.0)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--width", type=int, default=256)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1234)
    torch.set_num_threads(1)

    samples = args.steps * args.batch * dist.get_world_size()
    data = TensorDataset(torch.randn(samples, 128), torch.randint(0, 10, (samples,)))
    loader = DataLoader(data, batch_size=args.batch, sampler=DistributedSampler(data))
    # Where CUDA is visible, torch 2's FSDP computes on it and refuses CPU parameters unless
    # told otherwise.
    on = {"device_id": torch.device("cpu")} if torch.cuda.is_available() else {}
    model = nn.Sequential(FSDP(nn.Linear(128, args.width), **on), nn.ReLU(),
                          FSDP(nn.Linear(args.width, args.width), **on), nn.ReLU(),
                          FSDP(nn.Linear(args.width, 10), **on))
    model = FSDP(model, **on)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()

    steps = 0
    for x, y in loader:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        steps += 1
        if args.step_sleep_ms > 0:
            time.sleep(args.step_sleep_ms / 1000.0)

    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().numpy().tobytes())
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: done, {steps} steps, last loss {loss.item():.6f}, "
          f"shard {digest.hexdigest()[:16]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
