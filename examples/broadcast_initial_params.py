"""Start every replica from rank 0's parameters: broadcast.

Ranks initialise their models independently (here: with different seeds, as happens when
initialisation is random and unseeded); broadcasting every parameter and buffer from rank 0
makes the replicas identical before training starts (DDP does the same in its constructor).

    build/bin/braid-run -n 4 .venv/bin/python examples/broadcast_initial_params.py
"""

import torch
import torch.distributed as dist
import torch.nn as nn

from _common import log, setup


def main():
    rank, world = setup()
    torch.manual_seed(rank)  # deliberately different on every rank
    model = nn.Sequential(nn.Linear(10, 32), nn.BatchNorm1d(32), nn.Linear(32, 2))
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            dist.broadcast(t, src=0)
    # Check: everyone now holds rank 0's values.
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        ref = t.detach().clone()
        dist.broadcast(ref, src=0)
        assert torch.equal(t.detach(), ref), f"{name} differs from rank 0"
    n = sum(p.numel() for p in model.parameters())
    log(f"{world} replicas start from rank 0's {n} parameters")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
