"""trainscope helpers for PyTorch 1.13: a DDP communication hook that records the gradient
all_reduce as a collective, and compute ranges for forward, backward and the optimizer.

    import trainscope, trainscope.torch as tst
    model = DDP(net)
    model.register_comm_hook(None, tst.allreduce_hook)   # state None: the default group
    tst.instrument_module(model)         # forward -> compute range
    tst.instrument_optimizer(opt)        # opt.step() -> compute range
    for batch in loader:
        with trainscope.step():
            loss = loss_fn(model(batch))
            tst.backward(loss)           # loss.backward() -> compute range

The hook runs where DDP calls it (the autograd thread); completion is recorded from the
future's callback, on whichever thread completes it. Both are safe: the probe keeps one ring
per thread and a collective with both times is a single record.
"""

import contextlib

import torch  # noqa: F401 - fail early without torch
import torch.distributed as dist

import trainscope

__all__ = ["allreduce_hook", "group_name", "compute", "backward", "instrument_module",
           "instrument_optimizer"]


def group_name(process_group):
    """A stable name for a process group: its c10d name, 'world' for the default group."""
    if process_group is None or process_group is dist.group.WORLD:
        return "world"
    try:
        name = dist.distributed_c10d._pg_names.get(process_group)  # private in 1.13
        if name:
            return str(name)
    except Exception:  # noqa: BLE001 - naming must never break training
        pass
    return "pg%d" % id(process_group)


def allreduce_hook(state, bucket):
    """DDP communication hook: averages the bucket like DDP's default and records the
    all_reduce (arrival = hook call, completion = future done, bytes = bucket buffer size).
    `state` is the process group to use, or None for the default group."""
    group = state if state is not None else dist.group.WORLD
    tensor = bucket.buffer()
    nbytes = tensor.numel() * tensor.element_size()
    name = group_name(group)
    arrive = trainscope.now_ns()
    tensor.div_(group.size() if hasattr(group, "size") else dist.get_world_size(group))
    fut = dist.all_reduce(tensor, group=group, async_op=True).get_future()

    def done(f):
        try:
            trainscope.record_collective("all_reduce", nbytes, arrive, trainscope.now_ns(),
                                         group=name)
        except Exception:  # noqa: BLE001 - telemetry must never fail the step
            pass
        return f.value()[0]

    return fut.then(done)


@contextlib.contextmanager
def compute(name):
    """A compute range: counted as compute time in the step report."""
    with trainscope.range(name, "compute"):
        yield


def backward(loss, *args, **kwargs):
    """loss.backward(...) inside a 'backward' compute range."""
    with trainscope.range("backward", "compute"):
        loss.backward(*args, **kwargs)


def instrument_module(module, name="forward"):
    """Marks every forward of `module` as a compute range. Returns the hook handles."""
    lib = trainscope._get_lib()  # noqa: SLF001 - same package
    nid = trainscope.intern(name)

    def pre(_mod, _inputs):
        lib.ts_range_push(trainscope._probe(), nid, trainscope.RANGE_COMPUTE, 0)

    def post(_mod, _inputs, _output):
        lib.ts_range_pop(trainscope._probe(), 0)

    return [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]


def instrument_optimizer(optimizer, name="optimizer"):
    """Wraps optimizer.step so each call is a compute range. Idempotent."""
    if getattr(optimizer, "_trainscope_wrapped", False):
        return optimizer
    inner = optimizer.step

    def step(*args, **kwargs):
        with trainscope.range(name, "compute"):
            return inner(*args, **kwargs)

    optimizer.step = step
    optimizer._trainscope_wrapped = True
    return optimizer

