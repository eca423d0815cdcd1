"""A real tensor x pipeline x data parallel training job written by hand (tp2 x pp2 x dp2 = 8
CPU ranks over gloo), reporting to trainscope through the Python package. The e2e tests check
that its process groups (kinds, ranks), each rank's coordinates, its pipeline p2p peers, its
tp and dp all-reduces and its stated FLOPs reach the collector, and that it trains exactly as
the same model unsharded (--reference, one process).

Layout: rank = pp * 4 + dp * 2 + tp. Each pipeline stage holds a Megatron-style tensor-parallel
MLP block (a column-parallel Linear, ReLU, a row-parallel Linear whose partial outputs are
all-reduced over the tp group; the input's gradient all-reduced likewise); stage 1 adds a
replicated head and the loss. Each step runs --microbatches microbatches: stage 0 sends every
microbatch's activations to its stage-1 peer (rank + 4) with isend, then receives their
gradients; stage 1 receives, runs forward and backward, and sends the gradient back. Then the
gradients are all-reduced over the dp group (mean). Groups are declared through
trainscope.torch.watch_new_groups with their kind; p2p is timed by trainscope.torch.trace_p2p;
collectives by trainscope.collective; forward and backward are compute ranges.

Environment: RANK, WORLD_SIZE=8, MASTER_ADDR, MASTER_PORT (torch.distributed), TRAINSCOPE_AGENT,
TRAINSCOPE_JOB, TRAINSCOPE_PROBE_LIB, PYTHONPATH with agent/probe/python. With --reference: one
plain process, no torch.distributed and no trainscope. Prints "rank N: done, loss L" (stage 1
ranks: the mean loss of their replica's last step) or "reference: done, loss L" (the whole
batch's).
Flags: --steps N (default 8), --microbatches M (default 2), --batch B (per microbatch and
replica, default 8), --reference.
"""
import argparse

import torch
import torch.nn.functional as F

IN, HIDDEN, OUT = 32, 64, 10
TP, PP, DP = 2, 2, 2
FLOPS_PER_SAMPLE_STAGE = 2 * 3 * (IN * HIDDEN + HIDDEN * IN)  # forward + backward, both Linears
PEAK_FLOPS = 1e11  # what the test states as this CPU's peak (any positive figure will do)


def full_weights():
    """Both stages' full matrices and the head, identical on every rank (one seed)."""
    g = torch.Generator().manual_seed(1234)
    w = {}
    for stage in range(PP):
        w[stage] = (torch.randn(HIDDEN, IN, generator=g) * 0.2,
                    torch.randn(IN, HIDDEN, generator=g) * 0.2)
    w["head"] = torch.randn(OUT, IN, generator=g) * 0.2
    return w


def batch(step, replica, mb, size):
    """The inputs and labels of one microbatch of one replica, identical on every rank."""
    g = torch.Generator().manual_seed(100000 + step * 1000 + replica * 100 + mb)
    return torch.randn(size, IN, generator=g), torch.randint(0, OUT, (size,), generator=g)


def reference(args):
    """The same training unsharded, in one process: the whole batch (every replica's every
    microbatch) through both stages and the head, mean loss, the same SGD."""
    w = full_weights()
    params = [p.clone().requires_grad_(True) for s in range(PP) for p in w[s]]
    head = w["head"].clone().requires_grad_(True)
    opt = torch.optim.SGD(params + [head], lr=0.1)
    loss = None
    for step in range(args.steps):
        xs, ys = zip(*[batch(step, d, m, args.batch) for d in range(DP)
                       for m in range(args.microbatches)])
        h = torch.cat(xs)
        for s in range(PP):
            h = F.linear(F.relu(F.linear(h, params[2 * s])), params[2 * s + 1])
        loss = F.cross_entropy(F.linear(h, head), torch.cat(ys))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("reference: done, loss %.6f" % loss.item(), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--microbatches", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--reference", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.reference:
        reference(args)
        return

    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    import trainscope  # pylint: disable=import-outside-toplevel
    import trainscope.torch as tst  # pylint: disable=import-outside-toplevel

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if dist.get_world_size() != TP * PP * DP:
        raise SystemExit("par3d_train.py needs WORLD_SIZE=%d" % (TP * PP * DP))
    pp, dp, tp = rank // 4, (rank // 2) % 2, rank % 2
    # This rank's share of the model's math per step, and a stated peak: MFU/HFU inputs.
    flops = FLOPS_PER_SAMPLE_STAGE / TP * args.batch * args.microbatches
    trainscope.init(flops_per_step=flops, peak_flops=PEAK_FLOPS)

    # Every rank creates every group, in the same order (torch.distributed's rule); each is
    # declared with its kind by the ranks it holds.
    def ranks_of(kind, i, j):
        if kind == "tp":
            return [i * 4 + j * 2 + t for t in range(TP)]      # i = pp, j = dp
        if kind == "dp":
            return [i * 4 + d * 2 + j for d in range(DP)]      # i = pp, j = tp
        return [s * 4 + i * 2 + j for s in range(PP)]          # i = dp, j = tp; stage order
    kinds = {}
    for kind in ("tp", "dp", "pp"):
        for i in range(2):
            for j in range(2):
                kinds[tuple(ranks_of(kind, i, j))] = kind
    tst.watch_new_groups(lambda ranks: kinds.get(tuple(ranks)))
    tst.trace_p2p()
    groups = {}
    for members, kind in kinds.items():
        g = dist.new_group(list(members))
        if rank in members:
            groups[kind] = g
    tp_group, dp_group, pp_group = groups["tp"], groups["dp"], groups["pp"]
    tp_name, dp_name = tst.group_name(tp_group), tst.group_name(dp_group)

    def all_reduce(t, group, name):
        with trainscope.collective("all_reduce", t.numel() * t.element_size(), group=name):
            dist.all_reduce(t, group=group)

    class CopyToTp(torch.autograd.Function):
        """Identity forward; the gradient summed over the tp group (Megatron's f)."""
        @staticmethod
        def forward(ctx, x):  # pylint: disable=arguments-differ
            return x

        @staticmethod
        def backward(ctx, g):  # pylint: disable=arguments-differ
            g = g.clone()
            all_reduce(g, tp_group, tp_name)
            return g

    class ReduceFromTp(torch.autograd.Function):
        """The partial outputs summed over the tp group; identity backward (Megatron's g)."""
        @staticmethod
        def forward(ctx, x):  # pylint: disable=arguments-differ
            x = x.clone()
            all_reduce(x, tp_group, tp_name)
            return x

        @staticmethod
        def backward(ctx, g):  # pylint: disable=arguments-differ
            return g

    w = full_weights()
    shard = HIDDEN // TP
    w1 = w[pp][0][tp * shard:(tp + 1) * shard].clone().requires_grad_(True)     # column-parallel
    w2 = w[pp][1][:, tp * shard:(tp + 1) * shard].clone().requires_grad_(True)  # row-parallel
    params = [w1, w2]
    if pp == 1:
        params.append(w["head"].clone().requires_grad_(True))
    opt = torch.optim.SGD(params, lr=0.1)

    def block(x):
        return ReduceFromTp.apply(F.linear(F.relu(F.linear(CopyToTp.apply(x), w1)), w2))

    peer = rank + 4 if pp == 0 else rank - 4
    M = args.microbatches
    loss_value = 0.0
    for step in range(args.steps):
        with trainscope.step():
            opt.zero_grad()
            if pp == 0:
                acts, sends = [], []
                for m in range(M):
                    x, _ = batch(step, dp, m, args.batch)
                    with trainscope.range("forward", kind="compute"):
                        a = block(x)
                    acts.append(a)
                    sends.append(dist.isend(a.detach(), peer, group=pp_group))
                for m in range(M):
                    grad = torch.empty(args.batch, IN)
                    dist.recv(grad, peer, group=pp_group)
                    with trainscope.range("backward", kind="compute"):
                        acts[m].backward(grad)
                for s in sends:
                    s.wait()
            else:
                losses = []
                for m in range(M):
                    a = torch.empty(args.batch, IN)
                    dist.recv(a, peer, group=pp_group)
                    a.requires_grad_(True)
                    _, y = batch(step, dp, m, args.batch)
                    with trainscope.range("forward", kind="compute"):
                        loss = F.cross_entropy(F.linear(block(a), params[2]), y) / M
                    with trainscope.range("backward", kind="compute"):
                        loss.backward()
                    losses.append(loss.item())
                    dist.isend(a.grad, peer, group=pp_group).wait()
                loss_value = sum(losses)
            # Data parallel: the gradients averaged over the replicas.
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            all_reduce(flat, dp_group, dp_name)
            flat /= DP
            offset = 0
            for p in params:
                p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
            opt.step()

    # The replica's loss averaged over the data-parallel group, as the reference computes it.
    total = torch.tensor([loss_value])
    dist.all_reduce(total, group=dp_group)
    print("rank %d: done, loss %.6f" % (rank, total.item() / DP), flush=True)
    trainscope.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
