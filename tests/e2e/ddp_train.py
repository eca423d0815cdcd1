"""A small real DDP training job for the e2e test: two CPU ranks (gloo), an MLP on random
data, reporting to trainscope through the Python package.

Environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torch.distributed), TRAINSCOPE_AGENT,
TRAINSCOPE_JOB, TRAINSCOPE_PROBE_LIB (the probe), PYTHONPATH with agent/probe/python.
Flags: --steps N (default 30).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import trainscope
import trainscope.torch


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=30, help="training steps (default 30)")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1234 + rank)
    torch.set_num_threads(1)

    trainscope.init()
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10))
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)
    ddp.register_comm_hook(None, trainscope.torch.allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()

    for _ in range(args.steps):
        with trainscope.step():
            with trainscope.range("data_loading", kind="data"):
                x = torch.randn(64, 256)
                y = torch.randint(0, 10, (64,))
            with trainscope.range("forward", kind="compute"):
                loss = loss_fn(ddp(x), y)
            with trainscope.range("backward", kind="compute"):
                opt.zero_grad()
                loss.backward()
            with trainscope.range("optimizer", kind="compute"):
                opt.step()

    trainscope.shutdown()
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: done, {args.steps} steps, last loss {loss.item():.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
