"""Shared by the examples: import braid_torch from the source tree when it is not installed, and
join the job the launcher started (braid-run or torchrun set RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT; env:// reads them)."""

import os
import sys
from pathlib import Path

try:
    import braid_torch  # noqa: F401  (registers backend "braid")
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import braid_torch  # noqa: F401

import torch
import torch.distributed as dist


def setup(backend=None):
    """init_process_group with backend "braid" (BACKEND=gloo to compare); returns rank, size."""
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group(backend or os.environ.get("BACKEND", "braid"))
    return dist.get_rank(), dist.get_world_size()


def log(*args):
    """Prints on rank 0 only."""
    if dist.get_rank() == 0:
        print(*args, flush=True)
