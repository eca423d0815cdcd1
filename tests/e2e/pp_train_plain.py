"""A plain two-stage pipeline training script, as a user writes one without a framework: no
trainscope in it. Rank 0 holds the first half of an MLP, rank 1 the second half and the loss;
each step rank 0 sends its activations to rank 1 (dist.send), rank 1 sends the activations'
gradient back (dist.recv / isend+wait), both step their SGD optimizers. The stages talk through a
process group made with dist.new_group([0, 1]). The e2e tests run it under `trainscope run` and
check that the group and the point-to-point transfers (peer, bytes) reach the collector.

CPU ranks over gloo, launched by the caller with RANK, WORLD_SIZE=2, MASTER_ADDR, MASTER_PORT.
Prints "rank N: done, loss L, digest D" at the end. Flags: --steps N (default 10), --width N
(default 128), --batch N (default 32).
"""
import argparse
import hashlib

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if dist.get_world_size() != 2:
        raise SystemExit("pp_train_plain.py needs WORLD_SIZE=2")
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    pipe = dist.new_group([0, 1])

    first = nn.Sequential(nn.Linear(64, args.width), nn.ReLU())
    second = nn.Sequential(nn.Linear(args.width, 10))
    stage = first if rank == 0 else second
    opt = torch.optim.SGD(stage.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(args.steps, args.batch, 64)
    y = torch.randint(0, 10, (args.steps, args.batch))

    loss_value = 0.0
    for step in range(args.steps):
        opt.zero_grad()
        if rank == 0:
            act = first(x[step])
            dist.send(act.detach(), 1, group=pipe)
            grad = torch.empty_like(act)
            dist.recv(grad, 1, group=pipe)
            act.backward(grad)
        else:
            act = torch.empty(args.batch, args.width)
            dist.recv(act, 0, group=pipe)
            act.requires_grad_(True)
            loss = loss_fn(second(act), y[step])
            loss.backward()
            dist.isend(act.grad, 0, group=pipe).wait()
            loss_value = loss.item()
        opt.step()

    digest = hashlib.sha256()
    for p in stage.parameters():
        digest.update(p.detach().numpy().tobytes())
    print("rank %d: done, loss %.6f, digest %s" % (rank, loss_value, digest.hexdigest()[:16]),
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
