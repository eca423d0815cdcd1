"""A plain DDP training script, as a user writes one: no trainscope in it. The e2e tests run it
under `trainscope run` (zero-code monitoring) and without, and compare what it prints.

CPU ranks over gloo, launched by the caller with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
an MLP on a random dataset through a DataLoader with a DistributedSampler, SGD. At the end it
prints the last loss and a digest of the trained parameters (the same with and without
monitoring, or monitoring changed the training).
Flags: --steps N (default 30), --step-sleep-ms MS (default 0: extra time per step, so a test
has time to ask for a capture), --batch N (default 64), --width N (default 1024), --no-destroy
(exit without destroy_process_group, as many scripts do), --report-step-times (print the
median and mean wall time, and the median CPU time of the whole process, between optimizer
steps after the first 3 steps, for tools/bench/run_overhead.py).
"""
import argparse
import hashlib
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--step-sleep-ms", type=float, default=0.0)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--no-destroy", action="store_true")
    parser.add_argument("--report-step-times", action="store_true")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1234)
    torch.set_num_threads(1)

    samples = args.steps * args.batch * dist.get_world_size()
    data = TensorDataset(torch.randn(samples, 256), torch.randint(0, 10, (samples,)))
    loader = DataLoader(data, batch_size=args.batch, sampler=DistributedSampler(data))
    model = nn.Sequential(nn.Linear(256, args.width), nn.ReLU(), nn.Linear(args.width, args.width),
                          nn.ReLU(), nn.Linear(args.width, 10))
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()

    steps = 0
    ends = []
    cpu = []
    for x, y in loader:
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        steps += 1
        ends.append(time.perf_counter())
        cpu.append(time.process_time())
        if args.step_sleep_ms > 0:
            time.sleep(args.step_sleep_ms / 1000.0)

    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().numpy().tobytes())
    dist.barrier()
    if not args.no_destroy:
        dist.destroy_process_group()
    if args.report_step_times and len(ends) > 4:
        times = sorted(b - a for a, b in zip(ends[3:], ends[4:]))
        cpus = sorted(b - a for a, b in zip(cpu[3:], cpu[4:]))
        print(f"rank {rank}: step_ms median {1e3 * times[len(times) // 2]:.3f} "
              f"mean {1e3 * sum(times) / len(times):.3f} "
              f"cpu_ms median {1e3 * cpus[len(cpus) // 2]:.3f}", flush=True)
    print(f"rank {rank}: done, {steps} steps, last loss {loss.item():.6f}, "
          f"params {digest.hexdigest()[:16]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
