"""A small real DDP training job for the e2e tests: two CPU ranks (gloo), an MLP on random
data, reporting to trainscope through the Python package, with every ATen operator recorded
by the torch integration (trainscope.torch.enable_ops).

Environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torch.distributed), TRAINSCOPE_AGENT,
TRAINSCOPE_JOB, TRAINSCOPE_PROBE_LIB (the probe), TRAINSCOPE_TORCH_LIB (optional: the operator
library, else found next to the probe), TRAINSCOPE_CAPTURE_DIR (optional: where captures are
written), PYTHONPATH with agent/probe/python.
Flags: --steps N (default 30), --step-sleep-ms MS (default 0), --no-ops, --require-ops.
"""
import argparse
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import trainscope
import trainscope.torch


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=30, help="training steps (default 30)")
    parser.add_argument("--step-sleep-ms", type=float, default=0.0,
                        help="extra time per step inside the step, in ms, so a test has time "
                             "to ask for a capture (default 0)")
    parser.add_argument("--no-ops", action="store_true",
                        help="do not record ATen operators (default: record them)")
    parser.add_argument("--require-ops", action="store_true",
                        help="exit 3 when the operator library cannot be loaded (default: warn "
                             "and train without operators)")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1234 + rank)
    torch.set_num_threads(1)

    trainscope.init()
    ops = False
    if not args.no_ops:
        ops = trainscope.torch.enable_ops()
        if not ops and args.require_ops:
            print(f"rank {rank}: --require-ops: the operator library is not available",
                  file=sys.stderr, flush=True)
            return 3
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
            if args.step_sleep_ms > 0:
                time.sleep(args.step_sleep_ms / 1000.0)

    recorded = trainscope.torch.ops_recorded()
    trainscope.shutdown()  # also stops the operator callback first
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: done, {args.steps} steps, last loss {loss.item():.4f}, "
          f"{recorded} operators recorded" + ("" if ops else " (operator recording off)"),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
