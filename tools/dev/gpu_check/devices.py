"""The device a check script trains on, shared by ddp_gpu_train.py and fsdp_train.py."""
import os
import sys

import torch


def pick(kind):
    """(device, synchronize) for "cuda" (this rank's GPU: LOCAL_RANK, else RANK, modulo the
    GPUs there are) or "cpu". When CUDA is asked for and this torch has none, says so and
    exits 77 (skipped)."""
    if kind == "cuda" and not torch.cuda.is_available():
        print("skip: CUDA is not available to this torch", flush=True)
        sys.exit(77)
    if kind != "cuda":
        return torch.device("cpu"), (lambda: None)
    local_rank = int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0")))
    dev = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    return dev, torch.cuda.synchronize
