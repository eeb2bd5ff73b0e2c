"""ZeRO-3-style parameter sharding: all_gather the parameters, reduce_scatter the gradients.

Each rank permanently stores only 1/N of the (flattened) parameters and of the optimizer state.
Before the forward pass it gathers the full parameter vector with all_gather_into_tensor; after
backward it reduce_scatters the gradient vector (AVG) so that each rank receives the averaged
gradient of exactly the shard it owns, and updates only that shard.

The result equals plain data-parallel training (checked here against a model trained in one
process on the global batch).

    build/bin/braid-run -n 4 .venv/bin/python examples/zero3_allgather_params.py
"""

import copy

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from _common import log, setup

STEPS, BATCH, LR = 10, 8, 0.05


def batch(step, world):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(world * BATCH, 16, generator=g)
    return x, torch.sin(x[:, :3])


def main():
    rank, world = setup()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 48), nn.GELU(), nn.Linear(48, 3))
    reference = copy.deepcopy(model)

    full = parameters_to_vector(model.parameters()).detach()
    shard_len = -(-full.numel() // world)  # ceil: pad so that every rank owns an equal shard
    padded = torch.zeros(shard_len * world)
    padded[:full.numel()] = full
    shard = padded[rank * shard_len:(rank + 1) * shard_len].clone()  # all this rank keeps
    del full, padded

    gathered = torch.empty(shard_len * world)
    for step in range(STEPS):
        # 1. Materialise the full parameters from everyone's shards.
        dist.all_gather_into_tensor(gathered, shard)
        vector_to_parameters(gathered[:sum(p.numel() for p in model.parameters())],
                             model.parameters())
        # 2. Forward and backward on this rank's part of the batch.
        x, y = batch(step, world)
        model.zero_grad()
        nn.functional.mse_loss(model(x[rank * BATCH:(rank + 1) * BATCH]),
                               y[rank * BATCH:(rank + 1) * BATCH]).backward()
        grads = torch.zeros(shard_len * world)
        flat = parameters_to_vector(p.grad for p in model.parameters())
        grads[:flat.numel()] = flat
        # 3. Each rank gets the averaged gradient of its own shard only.
        grad_shard = torch.empty(shard_len)
        dist.reduce_scatter_tensor(grad_shard, grads, op=dist.ReduceOp.AVG)
        shard -= LR * grad_shard  # the optimizer touches 1/N of the state
        # (the full parameters may now be freed until the next step)

        # Reference: one process, whole global batch, same SGD.
        reference.zero_grad()
        nn.functional.mse_loss(reference(x), y).backward()
        with torch.no_grad():
            for p in reference.parameters():
                p -= LR * p.grad

    dist.all_gather_into_tensor(gathered, shard)
    ref = parameters_to_vector(reference.parameters()).detach()
    torch.testing.assert_close(gathered[:ref.numel()], ref, rtol=1e-4, atol=1e-5)
    log(f"ZeRO-3 over {world} ranks: each stores {shard_len} of {ref.numel()} parameters; "
        f"result matches single-process training")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
