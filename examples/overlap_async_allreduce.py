"""Overlap communication with computation: chunked async all_reduce during a simulated backward.

Backward produces gradients layer by layer, last layer first. Launching each layer's all_reduce
with async_op=True as soon as its gradient exists lets the network work while the next layer's
gradient is computed; one wait() per chunk at the end collects them. Compared with computing
everything first and reducing afterwards (serial), the overlapped version hides communication
behind compute when there are cores to spare for both.

    build/bin/braid-run -n 2 .venv/bin/python examples/overlap_async_allreduce.py
"""

import time

import torch
import torch.distributed as dist

from _common import log, setup

LAYERS, WIDTH, CHUNK = 8, 256, 1 << 18  # 8 gradients of 1 MiB each


def layer_gradient(layer, rank):
    """Stands in for one layer's backward: some compute, then a gradient tensor."""
    a = torch.full((WIDTH, WIDTH), 1.0 / WIDTH)
    for _ in range(4):
        a = a @ a
    return torch.full((CHUNK,), float(rank + layer)) + a[0, 0] * 0


def backward(rank, overlap):
    grads, works = [], []
    for layer in reversed(range(LAYERS)):
        g = layer_gradient(layer, rank)
        grads.append((layer, g))
        if overlap:
            works.append(dist.all_reduce(g, op=dist.ReduceOp.AVG, async_op=True))
    if overlap:
        for w in works:
            w.wait()
    else:
        for _, g in grads:
            dist.all_reduce(g, op=dist.ReduceOp.AVG)
    return grads


def main():
    rank, world = setup()
    results = {}
    for overlap in (False, True, False, True):
        dist.barrier()
        t0 = time.perf_counter()
        grads = backward(rank, overlap)
        results.setdefault(overlap, []).append(time.perf_counter() - t0)
        for layer, g in grads:
            expected = sum(r + layer for r in range(world)) / world
            assert torch.all(g == expected), f"layer {layer}: {g[0].item()} != {expected}"
    log(f"backward + allreduce of {LAYERS} x {CHUNK * 4 >> 20} MiB on {world} ranks: "
        f"serial {min(results[False]) * 1e3:.1f} ms, overlapped {min(results[True]) * 1e3:.1f} ms")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
