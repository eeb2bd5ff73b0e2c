"""Data parallelism by hand: average gradients with all_reduce.

Every rank holds a full replica and computes gradients on its own part of the batch; one
all_reduce(AVG) over a flat bucket of all gradients makes every replica apply the same update.
This is what DistributedDataParallel does for you (with buckets overlapping backward).

    build/bin/braid-run -n 4 .venv/bin/python examples/allreduce_gradients.py
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from _common import log, setup


def main():
    rank, world = setup()
    torch.manual_seed(0)  # same initial replica everywhere
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(100 + rank)  # each rank its own samples
    for step in range(20):
        x = torch.randn(16, 20, generator=data)
        y = x.sum(1, keepdim=True)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        grads = [p.grad for p in model.parameters()]
        bucket = _flatten_dense_tensors(grads)  # one collective instead of one per tensor
        dist.all_reduce(bucket, op=dist.ReduceOp.AVG)
        for g, avg in zip(grads, _unflatten_dense_tensors(bucket, grads)):
            g.copy_(avg)
        opt.step()
        if step % 5 == 0:
            mean_loss = loss.detach().clone()
            dist.all_reduce(mean_loss, op=dist.ReduceOp.AVG)
            log(f"step {step:2d}  loss {mean_loss.item():.4f}")
    # Every replica applied the same averaged gradients: they are identical.
    flat = _flatten_dense_tensors([p.detach() for p in model.parameters()])
    lo, hi = flat.clone(), flat.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    assert torch.equal(lo, hi), "replicas diverged"
    log(f"{world} replicas identical after 20 steps")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
