"""ZeRO-2-style gradient and optimizer-state sharding: reduce_scatter, then all_gather.

Every rank keeps the full parameters (for forward and backward) but owns the optimizer state of
only 1/N of them. After backward, reduce_scatter_tensor(AVG) hands each rank the averaged
gradient of its shard; Adam updates that shard; all_gather_into_tensor rebuilds the full,
updated parameter vector everywhere. Adam's moment buffers are never replicated.

Checked against Adam on one process over the global batch.

    build/bin/braid-run -n 4 .venv/bin/python examples/zero2_reduce_scatter_grads.py
"""

import copy

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from _common import log, setup

STEPS, BATCH = 10, 8


def batch(step, world):
    g = torch.Generator().manual_seed(50 + step)
    x = torch.randn(world * BATCH, 12, generator=g)
    return x, x[:, :2] * 2 - 1


def main():
    rank, world = setup()
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(12, 40), nn.ReLU(), nn.Linear(40, 2))
    reference = copy.deepcopy(model)
    ref_opt = torch.optim.Adam(reference.parameters(), lr=1e-2)

    n = sum(p.numel() for p in model.parameters())
    shard_len = -(-n // world)
    params = torch.zeros(shard_len * world)
    params[:n] = parameters_to_vector(model.parameters()).detach()
    # This rank's shard as an optimizer parameter: Adam's state exists for it alone.
    mine = nn.Parameter(params[rank * shard_len:(rank + 1) * shard_len].clone())
    opt = torch.optim.Adam([mine], lr=1e-2)

    for step in range(STEPS):
        x, y = batch(step, world)
        model.zero_grad()
        nn.functional.mse_loss(model(x[rank * BATCH:(rank + 1) * BATCH]),
                               y[rank * BATCH:(rank + 1) * BATCH]).backward()
        grads = torch.zeros(shard_len * world)
        grads[:n] = parameters_to_vector(p.grad for p in model.parameters())
        mine.grad = torch.empty(shard_len)
        dist.reduce_scatter_tensor(mine.grad, grads, op=dist.ReduceOp.AVG)
        opt.step()
        dist.all_gather_into_tensor(params, mine.detach())
        vector_to_parameters(params[:n], model.parameters())

        ref_opt.zero_grad()
        nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()

    torch.testing.assert_close(parameters_to_vector(model.parameters()),
                               parameters_to_vector(reference.parameters()), rtol=1e-4, atol=1e-5)
    log(f"ZeRO-2 over {world} ranks: Adam state for {shard_len} of {n} parameters per rank; "
        f"result matches single-process Adam")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
